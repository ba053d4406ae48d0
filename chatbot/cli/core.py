"""The ``chatbot`` CLI's core, without Typer: the consoles, one-line errors, the state the
global options set up (settings, database, models, graph, made on demand) and what the
commands share."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, TypeVar

from chatbot.errors import describe_error, redact, remember_secret, within_reach
from chatbot.sanitize import escape_json_controls, sanitize
from chatbot.sanitize import valid_text as valid_unicode

if TYPE_CHECKING:  # the rest is imported on demand: `--help`, `--version` and reading stay fast
    from rich.console import Console

    from chatbot.config.reader import PlaceSettings
    from chatbot.config.settings import Settings
    from chatbot.engine.models import Models
    from chatbot.store.base import SqlStore
    from chatbot.terminal.repl import HeldKeys, LineReader
    from chatbot.threads.backend import Backend
    from chatbot.threads.reading import LocalReader


class _LazyConsole:
    """A Rich console made on first use: reading commands that print JSON never import Rich."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)

    # Python looks special methods up on the type, past __getattr__; Rich's Live uses these.
    def __enter__(self) -> Console:
        return self.__getattr__("__enter__")()

    def __exit__(self, *exc: object) -> None:
        self.__getattr__("__exit__")(*exc)


def escape(text: str) -> str:
    """Rich's ``escape``: text shown as written, never read as markup."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


err: Console = _LazyConsole(stderr=True, highlight=False, soft_wrap=True)  # type: ignore[assignment]
out: Console = _LazyConsole(highlight=False, soft_wrap=True)  # type: ignore[assignment]


def valid_text(text: str) -> str:
    """Text as valid Unicode: bytes that are not UTF-8 reach Python as lone surrogates, which
    SQLite cannot store; they become U+FFFD, as a decoder's "replace" would make them."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a lone surrogate that never was a byte
        return valid_unicode(text)


def valid_text_option(value: str | None) -> str | None:
    """Typer callback: a text argument as valid Unicode (see :func:`valid_text`)."""
    return None if value is None else valid_text(value)


def given_option(value: str | None) -> str | None:
    """Typer callback: an option's value as valid Unicode, refused when blank (``--model ""``
    from a variable left empty is a mistake, not a request for the default)."""
    if value is not None and not value.strip():
        import typer

        raise typer.BadParameter("it is blank: give a value, or leave the option out")
    return valid_text_option(value)


class CliError(Exception):
    """An error to show as one line and exit with ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class AppState:
    """What the global options set up; the heavy parts (models, graph, DB) are made on demand."""

    def __init__(self, env_file: str, db: str | None, model: str | None, url: str | None) -> None:
        self.env_file = env_file
        self.db = db
        self.model = model
        self.url = url
        self._settings: Settings | None = None
        self._places: PlaceSettings | None = None
        self._store: SqlStore | None = None
        self._models: Models | None = None
        self._graph: Any = None
        self._empty = False
        self.read_only = False  # a reading command writes nothing, not even to a damaged file

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from chatbot.config.settings import load_settings

            given = (("db", self.db), ("model", self.model or None), ("url", self.url or None))
            overrides = {name: value for name, value in given if value is not None}
            self._settings = load_settings(self.env_file, **overrides)
            for secret in self._settings.secrets():
                remember_secret(secret)
        return self._settings

    @property
    def places(self) -> PlaceSettings:
        """The database and the server: the settings' own once read, else read alone (fast)."""
        if self._places is None:
            if self._settings is not None:
                self._places = self._settings
            else:
                from chatbot.config.reader import read_places

                self._places = read_places(self.env_file, db=self.db, url=self.url or None)
        return self._places

    @property
    def store(self) -> SqlStore:
        """The database: a SQLite file, or PostgreSQL when CHATBOT_DB is a postgresql:// URL."""
        if self._store is None:
            from chatbot.store.postgres import open_store

            self._store = open_store(
                self.places.db, self.places.pg_prepare_threshold, read_only=self.read_only
            )
            if self._store.notice:
                err.print(f"[yellow]note:[/] {escape(self._store.notice)}")
        return self._store

    @property
    def models(self) -> Models:
        if self._models is None:
            from chatbot.engine.models import max_input_tokens, resolve_models

            self._models = resolve_models(self.settings)
            told = self.settings.max_input_tokens  # a bad policy fails now
            self.settings.policy(told or max_input_tokens(self._models.chat))
        return self._models

    @property
    def graph(self) -> Any:
        if self._graph is None:
            from chatbot.engine.graph import build_graph
            from chatbot.store.search import recaller

            models, store = self.models, self.store
            self._graph = build_graph(
                models.chat,
                models.summary,
                self.settings,
                store.saver,
                recaller(store),
                store=store.memory_store,
            )
        return self._graph

    @property
    def remote(self) -> bool:
        return bool(self.places.url)

    @property
    def where(self) -> str:
        """Where threads live: the server, the database file or URL (never with a password)."""
        from chatbot.config.sources import without_password

        return without_password(self.places.url or self.places.db)

    @property
    def threads_hint(self) -> str:
        """The command that lists the threads meant: with the --db or --url given here."""
        from chatbot.config.sources import without_password

        if self.url:
            return f"'chatbot threads --url {without_password(self.url)}' lists them"
        if self.db:
            return f"'chatbot threads --db {without_password(self.db)}' lists them"
        return "'chatbot threads' lists them"

    @property
    def db_missing(self) -> bool:
        """True when there is no local database to read: no file yet, or (for a command that
        only reads, which creates neither file nor table) an empty one."""
        from chatbot.store.schema import EmptyDatabase

        if self.remote or self.places.db == ":memory:":
            return False
        if self._no_file() or self._empty:
            return True
        if not self.read_only:
            return False
        try:
            _ = self.store
        except EmptyDatabase:
            self._empty = True
        return self._empty

    def nothing_to_read(self) -> bool:
        """:attr:`db_missing`, for a command that makes no database; a path other than the
        default with no file there is mistyped: one line, exit 1."""
        from chatbot.config.sources import default_db_path

        missing, default = self.db_missing, default_db_path()
        if missing and self._no_file() and Path(self.places.db).expanduser().absolute() != default:
            option = "--db" if self.db is not None else "CHATBOT_DB"
            fail(
                f"there is no database at {self.places.db!r}: check {option} (the default "
                f"database is {default}); 'chatbot chat' or 'chatbot ask' makes a new one"
            )
        return missing

    @property
    def missing_said(self) -> str:
        """Why :attr:`db_missing` holds: ``X does not exist yet``, ``X is empty``."""
        if self._no_file():
            return f"{self.places.db} does not exist yet"
        return f"{self.where} is empty"

    def _no_file(self) -> bool:
        from chatbot.store.base import is_postgres_url

        db = self.places.db
        return not is_postgres_url(db) and not Path(db).expanduser().exists()

    def local_reader(self) -> LocalReader:
        """The local threads' reading door (listing, search): plain SQL, no LangGraph."""
        from chatbot.threads.reading import LocalReader

        return LocalReader(self.store)

    def reader(self) -> LocalReader | Backend:
        """What lists and reads threads: the server's backend, else :meth:`local_reader`."""
        return self.backend() if self.places.url else self.local_reader()

    def backend(self, runs: bool = False) -> Backend:
        """The threads' backend; locally its graph is built at the first run. A command that
        ``runs`` the graph makes the models first: a bad setting stops it before any file is
        created."""
        if runs and not self.places.url:
            _ = self.models
        if self.places.url:
            from chatbot.threads.reaching import check_connects

            check_connects(self.places.url)  # (before a second of importing the client)
            from chatbot.threads.remote import RemoteBackend

            return RemoteBackend(self.places.url)
        from chatbot.threads.backend import LocalBackend

        return LocalBackend(self._graph, self.store, build=lambda: self.graph)

    def narrow(self, db: str | None, url: str | None) -> AppState:
        """The state with a command's own ``--db`` / ``--url``, which beat the global ones."""
        if db is not None:
            self.db = db
        if url:
            self.url = url
        return self

    def close(self, wait: float | None = None) -> None:
        """Close the database (``wait``: at most that long for another thread's statement)."""
        if self._store is not None:
            self._store.close(wait)


def fail(message: str, code: int = 1) -> NoReturn:
    """Stop with one clear line on stderr."""
    raise CliError(message, code)


def checked_thread_id(thread: str) -> str:
    """A thread id given on the command line, checked (one line, exit 2, for a bad one)."""
    from chatbot.threadids import check_thread_id

    try:
        return check_thread_id(thread)
    except ValueError as error:
        fail(str(error), 2)


def write_output(output: Path, text: str, force: bool) -> str:
    """Write ``--output`` whole (:func:`~chatbot.history.export.write_private`); its path as
    a message shows it. A file there is replaced only with ``--force``."""
    from chatbot.history.export import FileExists, write_private

    try:
        written = write_private(output, text, replace=force)
    except FileExists as error:
        fail(f"{error.shown} exists: add --force to replace it (nothing was written)")
    return escape(sanitize(str(written)))


def _error_line(message: str) -> None:
    """Every error line the CLI prints: secrets removed, control characters made visible, a
    long value echoed in it cut short."""
    err.print(f"[red]error:[/] {escape(within_reach(sanitize(redact(message))))}")


def print_json(data: Any) -> None:
    """Data as JSON, with DEL and C1 characters escaped (U+009B is a CSI to a terminal)."""
    text = escape_json_controls(json.dumps(data, ensure_ascii=False, indent=2)) + "\n"
    if sys.stdout is not None:
        sys.stdout.write(text)
        sys.stdout.flush()


def set_up_process() -> None:
    """What every command's process needs first: stdout behind :mod:`chatbot.cli.stdout`; a
    closed stdin read as an empty one; a ``COLUMNS`` or ``LINES`` that is no size as unset
    (Rich takes ``0`` as zero columns and prints nothing)."""
    import os

    from chatbot.cli import stdout

    stdout.install()
    for name in ("COLUMNS", "LINES"):
        value = os.environ.get(name)
        if value is not None and not (value.isascii() and value.isdigit() and int(value) > 0):
            del os.environ[name]
    if sys.stdin is None:  # (`chatbot <&-`): as `< /dev/null`
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 (the process's stdin)


def started() -> None:
    """Start-up is over: collect garbage again, among the objects made from now on only (those
    made so far live as long as the process)."""
    import gc

    if gc.isenabled():  # (not started by an entry point: the Typer app under a test, say)
        return
    gc.freeze()
    gc.enable()


def exit_after(command: Callable[[], int | str | None]) -> NoReturn:
    """Run a whole command line, write what stdout still holds, and exit with the command's
    code, or 1 and one line (none for a reader gone) when stdout failed unsaid."""
    from chatbot.cli import stdout

    try:
        code = command()
    except SystemExit as leaving:
        code = leaving.code
    except (stdout.OutputFailed, stdout.OutputClosed) as error:  # (Click's help, --version)
        code = exit_code(error)
    failure = stdout.flush()
    if failure is not None and not code:
        code = exit_code(stdout.failure_error(failure))
    sys.exit(code)


def configure_logging() -> None:
    """Libraries' logs as one line, errors only."""
    import logging

    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")


def valid_stdin() -> TextIO:
    """stdin, reading bytes that are not valid text as U+FFFD instead of failing."""
    if isinstance(sys.stdin, io.TextIOWrapper):
        sys.stdin.reconfigure(errors="replace")
    return sys.stdin


class ValidTextReader:
    """A line reader whose lines are always valid Unicode (see :func:`valid_text`)."""

    def __init__(self, reader: LineReader) -> None:
        self.reader = reader

    def read(self, prompt: str, toolbar: Callable[[], str] | None = None) -> str:
        return valid_text(self.reader.read(prompt, toolbar))

    def hold_keys(self) -> AbstractContextManager[HeldKeys]:
        """The reader's own (see :class:`chatbot.terminal.repl.HoldsKeys`), if it has one."""
        from chatbot.terminal.repl import HeldKeys, HoldsKeys

        if isinstance(self.reader, HoldsKeys):
            return self.reader.hold_keys()
        return contextlib.nullcontext(HeldKeys())

    def echo(self, prompt: str, text: str) -> None:
        """The reader's own (see :class:`chatbot.terminal.repl.EchoesLines`), if it has one."""
        from chatbot.terminal.repl import EchoesLines

        if isinstance(self.reader, EchoesLines):
            self.reader.echo(prompt, text)


def read_text(text: str | None) -> str:
    """The message ``ask`` sends: TEXT, what is piped in, or both: the piped input, then TEXT
    after a blank line (``git diff | chatbot ask "review this"``). ``-`` reads stdin alone."""
    if text is None or text == "-":
        if text is None and sys.stdin.isatty():
            fail("no message: give TEXT, or pipe it in (or pass '-' to read stdin)", 2)
        text = valid_stdin().read()
    elif not sys.stdin.isatty():
        piped = valid_stdin().read().rstrip("\n")
        if piped.strip():
            text = f"{piped}\n\n{text}" if text.strip() else piped
    text = valid_text(text)
    if not text.strip():
        fail("the message is empty: give some text to send", 2)
    return text


_interruption_said = False


def say_interrupted() -> None:
    """Say ``interrupted``, once, and ignore any further Ctrl-C: the process is leaving."""
    global _interruption_said
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a second Ctrl-C: already leaving)
    if not _interruption_said:
        err.print("[dim]interrupted[/]")
        _interruption_said = True  # (after: a Ctrl-C landing in the print leaves it to say)


def interruption_said() -> bool:
    """True once :func:`say_interrupted` said it."""
    return _interruption_said


def exit_code(error: BaseException) -> int | None:
    """The exit code of a command that failed with ``error``, its line printed on stderr; None
    for what is not a command's failure."""
    from chatbot.cli.stdout import OutputClosed
    from chatbot.config.sources import SettingsError
    from chatbot.errors import FriendlyError
    from chatbot.store.errors import StoreError

    if isinstance(error, OutputClosed):  # (`| head` has read enough: quiet, as Rich's console)
        return 1
    if isinstance(error, CliError):
        _error_line(str(error))
        return error.code
    if isinstance(error, SettingsError | StoreError):
        _error_line(str(error))
        return 2
    if isinstance(error, FriendlyError | LookupError):
        _error_line(str(error))
        return 1
    from chatbot import interrupts

    if isinstance(error, KeyboardInterrupt) or (
        isinstance(error, Exception) and interrupts.pressed()  # what a library made of Ctrl-C
    ):
        say_interrupted()
        return 130
    if isinstance(error, Exception):  # a model or network error: one line, never a traceback
        from chatbot.logs import logger

        logger().debug("command failed", exc_info=True)
        _error_line(describe_error(error))
        return 1
    return None


_Door = TypeVar("_Door", bound="LocalReader | Backend")


def thread_reader(state: AppState, thread_id: str) -> LocalReader | Backend:
    """What a command that only reads one existing thread reads it through, the database
    opened read-only (one error line if the thread is missing): locally a ``LocalReader``,
    which imports nothing of what runs a turn; on a server its backend."""
    state.read_only = True
    return _existing_thread(state, thread_id, state.reader)


def _existing_thread(
    state: AppState, thread_id: str, door: Callable[[], _Door], local_only: str = ""
) -> _Door:
    from chatbot.threadids import quoted

    if state.nothing_to_read():
        fail(f"no thread {quoted(thread_id)}: {state.missing_said}")
    opened = door()
    if local_only and opened.local_only_note:
        fail(f"{local_only} works on local threads only ({opened.local_only_note})", 2)
    if not opened.thread_exists(thread_id):
        fail(f"no thread {quoted(thread_id)} in {state.where} ({state.threads_hint})")
    return opened


def leading_note(state: AppState) -> None:
    """What every command says first: a warning when the user's config file is readable by
    others, and one for each settings file with lines that cannot be read."""
    from chatbot.config.userfile import readable_key_warning, unreadable_lines_warnings

    for warning in [readable_key_warning(), *unreadable_lines_warnings(state.env_file)]:
        if warning:
            err.print(f"[yellow]warning:[/] {escape(warning)}")
