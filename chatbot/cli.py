"""The ``chatbot`` command: Typer app. The only module that reads the environment and prints."""

from __future__ import annotations

import functools
import io
import json
import logging
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TextIO

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from chatbot import __version__
from chatbot.errors import describe_error, redact, remember_secret
from chatbot.sanitize import StreamSanitizer, escape_json_controls, sanitize

if TYPE_CHECKING:  # the rest is imported on demand: `--help`, `--version` and reading stay fast
    from rich.console import Console

    from chatbot.backend import Backend
    from chatbot.models import Models
    from chatbot.places import Places
    from chatbot.repl import LineReader, Repl
    from chatbot.session import Event, TurnStream
    from chatbot.settings import Settings
    from chatbot.store import SqlStore
    from chatbot.turns import Display, TurnOutcome


def _flags_take_no_value(params: Sequence[Any]) -> None:
    """Typer 0.29's help lists a flag with a type, ``--json <bool>``, as if it took a value; an
    empty metavar lists it alone, ``--json``."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag:
            param.metavar = ""


class Command(TyperCommand):
    """A ``chatbot`` command: its help lists flags as flags."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _flags_take_no_value(self.get_params(ctx))
        super().format_help(ctx, formatter)


class OneLineErrors(TyperGroup):
    """The ``chatbot`` group: Click's errors, usage errors first, as one line on stderr.

    Typer prints a usage error as the usage, a hint and a boxed panel. Click's way to handle
    errors yourself is ``standalone_mode=False``: ``main`` then raises them (and returns the
    code of an ``Exit``) instead of printing; this class does the printing and exiting. Its
    help lists flags as flags, as :class:`Command`'s does.
    """

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _flags_take_no_value(self.get_params(ctx))
        super().format_help(ctx, formatter)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        run = functools.partial(
            super().main, args, prog_name, complete_var, False, windows_expand_args, **extra
        )
        if not standalone_mode:
            return run()
        try:
            code = run()
        except typer.TyperException as error:  # Click's exceptions: exit code 2 for usage
            _error_line(usage_error_line(error))
            sys.exit(error.exit_code)
        except typer.Abort:
            err.print("aborted")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def usage_error_line(error: typer.TyperException) -> str:
    """``no such option: --foo (see 'chatbot ask --help')``: Click's message, in one line."""
    message = " ".join(error.format_message().split()).rstrip(".")
    if message[1:2].islower():
        message = message[0].lower() + message[1:]
    ctx = getattr(error, "ctx", None)  # a usage error knows the command it is about
    if ctx is not None:
        message += f" (see '{ctx.command_path} --help')"
    return message


app = typer.Typer(
    name="chatbot",
    cls=OneLineErrors,
    help="A terminal chatbot whose memory never overflows: older turns fold into a running "
    "summary, every turn is checkpointed in SQLite under a thread id. Run without a command "
    "to chat.",
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    invoke_without_command=True,
)


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

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """Text as valid Unicode, so that a turn is never stored half broken.

    Bytes that are not UTF-8 reach Python as lone surrogates (in arguments, and in stdin or a
    terminal under some locales); SQLite cannot store those. They become U+FFFD, as a
    decoder's "replace" would have made them.
    """
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a lone surrogate that never was a byte
        return _SURROGATE.sub("\ufffd", text)


def _valid_text_option(value: str | None) -> str | None:
    """Typer callback: a text argument as valid Unicode (see :func:`valid_text`)."""
    return None if value is None else valid_text(value)


DbOption = Annotated[
    str | None, typer.Option("--db", help="SQLite file for threads (default: CHATBOT_DB).")
]
UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url", help="Use the threads of a LangGraph server, e.g. http://127.0.0.1:2024."
    ),
]
ThreadArgument = Annotated[
    str, typer.Argument(metavar="THREAD", help="Thread id.", callback=_valid_text_option)
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


class CliError(Exception):
    """An error to show as one line and exit with ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class AppState:
    """What the global options set up; the heavy parts (models, graph, DB) are made on demand."""

    env_file: str | None = ".env"
    db: str | None = None
    model: str | None = None
    url: str | None = None
    _settings: Settings | None = None
    _places: Places | None = None
    _store: SqlStore | None = None
    _models: Models | None = None
    _graph: Any = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from chatbot.settings import load_settings

            overrides: dict[str, Any] = {}
            if self.db:
                overrides["db"] = self.db
            if self.model:
                overrides["model"] = self.model
            if self.url:
                overrides["url"] = self.url
            self._settings = load_settings(self.env_file, **overrides)
            if self._settings.openai_api_key:
                remember_secret(self._settings.openai_api_key.get_secret_value())
        return self._settings

    @property
    def places(self) -> Places:
        """The database and the server, read without the full settings (fast)."""
        if self._places is None:
            from chatbot.places import Places, prepare_threshold, read_places

            if self._settings is not None:
                self._places = Places(
                    db=self._settings.db,
                    url=self._settings.url,
                    pg_prepare_threshold=prepare_threshold(self._settings.pg_prepare_threshold),
                )
            else:
                self._places = read_places(self.env_file, db=self.db or None, url=self.url or None)
        return self._places

    @property
    def store(self) -> SqlStore:
        """The database: a SQLite file, or PostgreSQL when CHATBOT_DB is a postgresql:// URL."""
        if self._store is None:
            from chatbot.pgstore import open_store

            self._store = open_store(self.places.db, self.places.pg_prepare_threshold)
        return self._store

    @property
    def models(self) -> Models:
        if self._models is None:
            from chatbot.models import max_input_tokens, resolve_models

            self._models = resolve_models(self.settings)
            self.settings.policy(max_input_tokens(self._models.chat))  # a bad policy fails now
        return self._models

    @property
    def graph(self) -> Any:
        if self._graph is None:
            from chatbot.graph import build_graph

            models = self.models
            self._graph = build_graph(models.chat, models.summary, self.settings, self.store.saver)
        return self._graph

    @property
    def remote(self) -> bool:
        return bool(self.places.url)

    @property
    def where(self) -> str:
        """Where threads live: the server, the database file or URL (never with a password)."""
        from chatbot.pgstore import redact_url

        return self.places.url or redact_url(self.places.db)

    @property
    def db_missing(self) -> bool:
        """True when the local database file does not exist yet (reading must not create it)."""
        from chatbot.store import is_postgres_url

        db = self.places.db
        if self.remote or db == ":memory:" or is_postgres_url(db):
            return False
        return not Path(db).expanduser().exists()

    def backend(self, runs: bool = False) -> Backend:
        """The threads' backend. Locally its graph (and the models) is built at the first run:
        reading commands never build it. A command that ``runs`` the graph checks the settings
        and makes the models first, so a bad setting stops it before any file is created."""
        if runs and not self.places.url:
            _ = self.models
        if self.places.url:
            from chatbot.remote import RemoteBackend

            return RemoteBackend(self.places.url)
        from chatbot.backend import LocalBackend

        return LocalBackend(self._graph, self.store, build=lambda: self.graph)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def fail(message: str, code: int = 1) -> NoReturn:
    """Stop with one clear line on stderr."""
    raise CliError(message, code)


def guarded(command: Callable[..., None]) -> Callable[..., None]:
    """Turn every error a command meets into one line on stderr and a non-zero exit code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        from chatbot.errors import FriendlyError
        from chatbot.places import SettingsError
        from chatbot.store import StoreError

        try:
            command(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except CliError as error:
            _error_line(str(error))
            raise typer.Exit(error.code) from None
        except (SettingsError, StoreError) as error:
            _error_line(str(error))
            raise typer.Exit(2) from None
        except (FriendlyError, LookupError) as error:
            _error_line(str(error))
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err.print("[dim]interrupted[/]")
            raise typer.Exit(130) from None
        except Exception as error:  # a model or network error: one line, never a traceback
            logging.getLogger("chatbot").debug("command failed", exc_info=True)
            _error_line(describe_error(error))
            raise typer.Exit(1) from None

    return wrapper


def _error_line(message: str) -> None:
    err.print(f"[red]error:[/] {escape(sanitize(redact(message)))}")


def _print_json(data: Any) -> None:
    """Data as JSON, written with the standard library. DEL and C1 characters stay escaped
    (U+009B is a CSI to a terminal); C0 ones json.dumps escapes itself."""
    sys.stdout.write(escape_json_controls(json.dumps(data, ensure_ascii=False, indent=2)) + "\n")
    sys.stdout.flush()


def _state(ctx: typer.Context, db: str | None = None, url: str | None = None) -> AppState:
    state = ctx.find_root().obj
    assert isinstance(state, AppState)
    if db:
        state.db = db
    if url:
        state.url = url
    return state


def _version(value: bool) -> None:
    if value:
        out.print(f"chatbot {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    db: DbOption = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Chat model (default: CHATBOT_MODEL).")
    ] = None,
    env_file: Annotated[
        str | None, typer.Option("--env-file", help="Read settings from this file, not ./.env.")
    ] = None,
    url: UrlOption = None,
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread",
            "-t",
            help="Without a command: chat in this thread.",
            callback=_valid_text_option,
        ),
    ] = None,
    new: Annotated[
        bool, typer.Option("--new", help="Without a command: chat in a fresh thread.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Chat with an LLM in the terminal; threads live in SQLite."""
    if ctx.invoked_subcommand not in (None, "chat"):
        import gc

        gc.enable()  # (main turned it off for the REPL's start)
    ctx.obj = AppState(env_file=env_file or ".env", db=db, model=model, url=url)
    ctx.call_on_close(ctx.obj.close)
    if ctx.invoked_subcommand is None:
        ctx.invoke(chat, ctx=ctx, thread=thread, new=new)
    elif thread or new:
        err.print(
            f"[red]error:[/] --thread and --new go after the command: "
            f"chatbot {ctx.invoked_subcommand} --thread ID"
        )
        raise typer.Exit(2)


def _show_notice(state: AppState) -> None:
    if not state.remote and state.models.notice:
        err.print(f"[yellow]note:[/] {escape(state.models.notice)}")


def _stdin() -> TextIO:
    """stdin, reading bytes that are not valid text as U+FFFD instead of failing."""
    if isinstance(sys.stdin, io.TextIOWrapper):
        sys.stdin.reconfigure(errors="replace")
    return sys.stdin


@dataclass
class ValidTextReader:
    """A line reader whose lines are always valid Unicode (see :func:`valid_text`)."""

    reader: LineReader

    def read(self, prompt: str, toolbar: Callable[[], str] | None = None) -> str:
        return valid_text(self.reader.read(prompt, toolbar))


def _read_text(text: str | None) -> str:
    """The message ``ask`` sends: TEXT, what is piped in, or both. Both is the piped input,
    then TEXT after a blank line (``git diff | chatbot ask "review this"``), in the order llm
    puts them. ``-`` reads stdin alone."""
    if text is None or text == "-":
        if text is None and sys.stdin.isatty():
            fail("no message: give TEXT, or pipe it in (or pass '-' to read stdin)", 2)
        text = _stdin().read()
    elif not sys.stdin.isatty():
        piped = _stdin().read().rstrip("\n")
        if piped.strip():
            text = f"{piped}\n\n{text}" if text.strip() else piped
    text = valid_text(text)
    if not text.strip():
        fail("the message is empty: give some text to send", 2)
    return text


def _open_thread(
    ctx: typer.Context,
    thread_id: str,
    db: str | None,
    url: str | None = None,
    *,
    local_only: str = "",
    runs: bool = False,
) -> Backend:
    """The backend for a command about one existing thread (one error line if it is missing).

    ``local_only`` names a command only local threads allow: on a server it is refused first.
    """
    state = _state(ctx, db, url)
    if state.db_missing:
        fail(f"no thread {thread_id!r}: {state.places.db} does not exist yet")
    backend = state.backend(runs)
    if local_only and backend.local_only_note:
        fail(f"{local_only} works on local threads only ({backend.local_only_note})", 2)
    if not backend.thread_exists(thread_id):
        where = state.where
        fail(f"no thread {thread_id!r} in {where} ('chatbot threads' lists them)")
    return backend


# --- chatting ---------------------------------------------------------------------------------


@app.command(cls=Command)
@guarded
def chat(
    ctx: typer.Context,
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread",
            "-t",
            help="Thread to open (default: the most recent).",
            callback=_valid_text_option,
        ),
    ] = None,
    new: Annotated[bool, typer.Option("--new", help="Start a fresh thread.")] = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Chat interactively (the default command). /help inside lists the slash commands."""
    from chatbot.threadids import check_thread_id

    if thread and new:
        fail("give --thread or --new, not both", 2)
    if thread:  # checked before the database is opened (or created)
        try:
            thread = check_thread_id(thread)
        except ValueError as error:
            fail(str(error), 2)
    state = _state(ctx, db, url)
    terminal = sys.stdin.isatty() and out.is_terminal
    if terminal and _loads_behind_the_prompt(state):
        repl = _repl_loading_behind_the_prompt(state, thread, new)
    else:
        import gc

        gc.enable()
        repl = _repl_loaded(state, thread, new)
        if terminal:
            repl.reader = _terminal_reader(repl)
    code = repl.run()
    if terminal:
        _leave_at_once(state, code)
    raise typer.Exit(code)


def _loads_behind_the_prompt(state: AppState) -> bool:
    """A REPL on a SQLite file starts before its models and graph: the thread list is plain
    SQL. On a server or PostgreSQL, everything is made before the prompt."""
    from chatbot.store import is_postgres_url

    return not state.remote and not is_postgres_url(state.places.db)


def _first_thread(thread: str | None, new: bool, newest: Callable[[], str | None]) -> str:
    """The thread a REPL opens: the one given, a fresh one, or the most recently active."""
    from chatbot.threadids import new_thread_id

    if new or thread:
        return thread or new_thread_id()
    return newest() or new_thread_id()


def _repl_loaded(state: AppState, thread: str | None, new: bool) -> Repl:
    """A REPL whose backend, settings and models are made before it starts."""
    from chatbot.commands import dispatch
    from chatbot.repl import Repl, ScriptedReader

    backend = state.backend(runs=True)
    return Repl(
        backend=backend,
        console=out,
        reader=ValidTextReader(ScriptedReader(line.rstrip("\n") for line in _stdin())),
        settings=state.settings,
        thread_id=_first_thread(
            thread, new, lambda: next((t.thread_id for t in backend.threads()), None)
        ),
        model_name="(the server's model)" if state.remote else state.models.chat_name,
        dispatch=dispatch,
        notice="" if state.remote else state.models.notice,
    )


def _repl_loading_behind_the_prompt(state: AppState, thread: str | None, new: bool) -> Repl:
    """A REPL in a terminal that shows its prompt first: before it, only the database file
    is opened (plain SQL, no LangGraph) to choose the thread and say what is in it; behind it,
    a daemon thread checks the settings, opens the backend and makes the models and the graph
    (see :class:`chatbot.repl.LoadingBackend`)."""
    import gc

    # Start-up allocates much and frees little: collecting garbage meanwhile only costs time
    # (a tenth of the time to the prompt). Collecting resumes once loading has ended.
    gc.disable()
    from chatbot.repl import Loaded, LoadingBackend, Opened, Repl, ScriptedReader

    store = None if state.db_missing else state.store  # a new file waits for valid settings
    thread_id = _first_thread(thread, new, store.newest_thread if store else lambda: None)

    def open_backend() -> Opened:
        try:
            settings = state.settings  # a bad setting ends the REPL here, before any file is made
            import chatbot.commands  # noqa: F401  (here, not at the prompt: it imports LangGraph)

            return Opened(state.backend(), settings)
        except BaseException:
            gc.enable()
            raise

    def load_models(opened: Opened) -> Loaded:
        try:
            models = state.models  # a bad summary policy ends the REPL here
            opened.backend.run_settings(None)  # builds the graph; its resolver makes the tokenizer
            return Loaded(models.chat_name, models.notice)
        finally:
            gc.enable()

    location = store.path if store else str(Path(state.places.db).expanduser())
    loading = LoadingBackend(location, store, open_backend, load_models)
    repl = Repl(
        backend=loading.as_backend(),
        console=out,
        reader=ValidTextReader(ScriptedReader(())),
        settings=None,
        thread_id=thread_id,
        model_name="(still loading)",
        dispatch=_dispatch_while_loading,
    )
    repl.reader = _terminal_reader(repl, shown=repl.prompt_shown)
    return repl


_LEAVING = ("/exit", "/quit", "/q")
"""The slash commands that leave (``/exit`` and its aliases in chatbot.commands)."""


def _dispatch_while_loading(repl: Repl, line: str) -> str | None:
    """Slash commands in a REPL started before loading: leaving never waits; the others wait
    until threads can be read (importing the commands imports LangGraph's checkpoint code, so
    it happens on the loading thread)."""
    if line.lower() in _LEAVING:
        return "exit"
    repl.ready(reading=True)
    from chatbot.commands import dispatch

    return dispatch(repl, line)


def _terminal_reader(repl: Repl, shown: Callable[[], None] | None = None) -> LineReader:
    """prompt_toolkit's line editing, completing commands and ids (never waiting for them:
    before threads can be read there is nothing to complete but thread ids)."""
    from platformdirs import user_data_path

    from chatbot.lineinput import PromptToolkitReader, SlashCompleter

    def commands() -> list[str]:
        if not repl.can_read():
            return []
        from chatbot.commands import COMMANDS

        return list(COMMANDS)

    def checkpoint_ids() -> list[str]:
        if not repl.can_read():
            return []
        from chatbot.timeline import short_id

        # the newest 50: completing reads ids only, never a whole long history
        return [short_id(i) for i in repl.backend.recent_checkpoint_ids(repl.thread_id, 50)]

    reader = PromptToolkitReader(
        user_data_path("chatbot", appauthor=False) / "input_history",
        SlashCompleter(
            commands=commands,
            thread_ids=lambda: [t.thread_id for t in repl.backend.threads()],
            checkpoint_ids=checkpoint_ids,
        ),
        shown=shown,
    )
    repl.interject = reader.interject
    return ValidTextReader(reader)


def _leave_at_once(state: AppState, code: int) -> NoReturn:
    """End the process when the REPL ends, without the interpreter's teardown.

    Tearing down the modules of LangGraph, langchain-core and an OpenAI client takes 0.2 to
    0.4 s (and the loading thread may still be importing them). What leaving needs is done
    first: the database closed, the exit handlers run (the turns' event loop, logging), the
    output flushed. (The input history is written line by line.) The loading thread is not
    waited for: it only reads, or creates a database whose set-up SQLite makes atomic.
    """
    import atexit
    import os

    state.close()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


@app.command(cls=Command)
@guarded
def ask(
    ctx: typer.Context,
    text: Annotated[
        str | None,
        typer.Argument(
            help="The message; '-' reads stdin. Piped input with TEXT: the input, then TEXT."
        ),
    ] = None,
    thread: Annotated[
        str,
        typer.Option(
            "--thread",
            "-t",
            help="Thread id to continue or create.",
            callback=_valid_text_option,
        ),
    ] = "default",
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Send one message to a thread and print the reply."""
    from chatbot.settings import SettingsError
    from chatbot.threadids import check_thread_id

    try:
        thread = check_thread_id(thread)
    except ValueError as error:
        fail(str(error), 2)
    state = _state(ctx, db, url)
    message = _read_text(text)
    backend = state.backend(runs=True)
    _show_notice(state)
    current = backend.current(thread)
    if current is not None and current.awaiting_reply:
        err.print(
            "[yellow]note:[/] the previous turn in this thread never got a reply; "
            "it stays in the conversation"
        )
    view = _AskView(interactive=out.is_terminal)
    outcome = _run_turn(backend.send(thread, message), view)
    if view.streamed:
        out.print(view.safe.flush(), markup=False)
    if outcome.interrupted:
        _leaving_after_ctrl_c()
        fail(f"interrupted: your message stays in thread {thread!r} without a reply", 130)
    failure = outcome.error
    if failure is not None:
        if isinstance(failure, CliError | SettingsError):
            raise failure
        try:
            kept = backend.current(thread)
        except Exception:
            kept = None
        if kept is None or not kept.awaiting_reply:
            raise failure
        fail(
            f"{describe_error(failure)} - your message is kept in thread {thread!r}: "
            f"'chatbot chat -t {thread}' then /retry asks again",
            1,
        )


def _run_turn(turn: TurnStream, view: Display) -> TurnOutcome:
    """Run one turn on the session's event loop (Ctrl-C cancels it and closes the request)."""
    from chatbot.turns import session_runner

    return session_runner().run(turn, view)


def _leaving_after_ctrl_c() -> None:
    """The turn is stopped and nothing more will be written: an impatient second Ctrl-C
    must not turn the clean exit (code 130) into a death by signal."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _AskView:
    """``chatbot ask``: the reply as plain text, streamed on a terminal, whole otherwise;
    summary notes on stderr."""

    def __init__(self, interactive: bool) -> None:
        self.interactive = interactive
        self.streamed = ""
        self.safe = StreamSanitizer()  # an escape code split across two tokens never gets through

    def show(self, event: Event) -> None:
        from chatbot.render import describe_summary
        from chatbot.session import Reply, Summarized, SummaryFailed, Token, Waiting

        if isinstance(event, Waiting):
            err.print(f"[dim]{escape(sanitize(event.words))}[/]")
        elif isinstance(event, Token) and self.interactive:
            out.print(self.safe.feed(event.text), end="", markup=False)
            self.streamed += event.text
        elif isinstance(event, Reply) and not self.streamed:
            out.print(sanitize(event.message.text), markup=False)
        elif isinstance(event, Reply) and event.message.text.startswith(self.streamed):
            rest = event.message.text[len(self.streamed) :]
            out.print(self.safe.feed(rest), end="", markup=False)
            self.streamed = event.message.text
        elif isinstance(event, Summarized):
            err.print(f"[dim]{describe_summary(event)}[/]")
        elif isinstance(event, SummaryFailed):
            err.print(
                "[yellow]summary failed, nothing was removed (the next turn retries):[/] "
                f"{escape(sanitize(redact(event.error)))}"
            )

    def tick(self) -> None:
        pass


@app.command(cls=Command)
@guarded
def compact(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    focus: Annotated[
        str | None,
        typer.Option(
            "--focus",
            help="What this summary should keep, e.g. 'every file name'.",
            callback=_valid_text_option,
        ),
    ] = None,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Fold a thread's older messages into its summary now (the usual keep window stays)."""
    from chatbot.timeline import compact_refusal

    backend = _open_thread(ctx, thread_id, db, url, runs=True)
    refusal = compact_refusal(backend.current(thread_id))
    if refusal:
        fail(refusal)
    view = _CompactView()
    outcome = _run_turn(backend.compact(thread_id, focus or ""), view)
    if outcome.interrupted:
        _leaving_after_ctrl_c()
        fail("interrupted: nothing was folded", 130)
    if outcome.error is not None:
        raise outcome.error
    failure = view.failure
    if failure:
        fail(f"the summary failed, nothing was folded: {failure}")


class _CompactView:
    """``chatbot compact``: what the fold did, on stdout."""

    def __init__(self) -> None:
        self.failure = ""

    def show(self, event: Event) -> None:
        from chatbot.render import describe_nothing_to_fold, describe_summary
        from chatbot.session import NothingToFold, Summarized, SummaryFailed

        if isinstance(event, Summarized):
            out.print(describe_summary(event), markup=False)
        elif isinstance(event, NothingToFold):
            out.print(describe_nothing_to_fold(event), markup=False)
        elif isinstance(event, SummaryFailed):
            self.failure = event.error

    def tick(self) -> None:
        pass


# --- reading threads --------------------------------------------------------------------------


@app.command(cls=Command)
@guarded
def threads(
    ctx: typer.Context, as_json: JsonOption = False, db: DbOption = None, url: UrlOption = None
) -> None:
    """List threads: id, messages, summary, last active, title."""
    state = _state(ctx, db, url)
    if state.db_missing:
        listing = []
    elif state.remote:
        listing = state.backend().threads()
    else:
        listing = state.store.list_threads()  # plain SQL: nothing of LangGraph is imported
    if as_json:
        from chatbot.store import thread_record

        _print_json([thread_record(t) for t in listing])
    elif listing:
        from chatbot.render import threads_table

        out.print(threads_table(listing))
    else:
        err.print(f"[dim]no threads in {escape(state.where)}[/]")


@app.command(cls=Command)
@guarded
def history(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, help="Newest N turns (checkpoints with --all).")
    ] = 50,
    every: Annotated[
        bool,
        typer.Option("--all", "-a", help="Every checkpoint, instead of one row per turn."),
    ] = False,
    as_json: JsonOption = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Show a thread's history: one row per turn (message, reply, summary change, the
    checkpoint it left), newest first; --all lists every checkpoint."""
    from chatbot.render import history_record, history_table, turn_record, turn_table
    from chatbot.timeline import history_rows, turn_entries

    backend = _open_thread(ctx, thread_id, db, url)
    history = backend.history(thread_id)  # the index: only the rows shown read their states
    if every:
        rows = history_rows(history, limit)
        if as_json:
            _print_json([history_record(r) for r in rows])
        else:
            out.print(history_table(rows))
        return
    entries = turn_entries(history, limit)
    if as_json:
        _print_json([turn_record(e) for e in entries])
    else:
        out.print(turn_table(entries))


@app.command(cls=Command)
@guarded
def show(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    checkpoint: Annotated[
        str | None, typer.Option("--checkpoint", "-c", help="A past checkpoint (see history).")
    ] = None,
    as_json: JsonOption = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Show a thread's summary and messages, now or at a past checkpoint."""
    from chatbot.render import checkpoint_heading, message_record, state_view
    from chatbot.timeline import find_checkpoint

    backend = _open_thread(ctx, thread_id, db, url)
    if checkpoint:
        snapshot = find_checkpoint(backend.history(thread_id), checkpoint)
    else:
        current = backend.current(thread_id)
        assert current is not None
        snapshot = current
    if as_json:
        document: dict[str, Any] = {
            "thread_id": thread_id,
            "summary": snapshot.summary,
            "messages": [message_record(m) for m in snapshot.messages],
        }
        if checkpoint:
            document["checkpoint_id"] = snapshot.checkpoint_id
        _print_json(document)
        return
    out.print(state_view(snapshot, title=checkpoint_heading(snapshot) if checkpoint else ""))


@app.command(cls=Command)
@guarded
def export(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here (default: stdout).")
    ] = None,
    fmt: Annotated[
        str | None, typer.Option("--format", "-f", help="md or json (default: by extension).")
    ] = None,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Export a thread: summary, messages folded into it, live messages."""
    from chatbot.export import (
        ExportError,
        export_document,
        export_format,
        render,
        write_private,
    )

    backend = _open_thread(ctx, thread_id, db, url)
    try:
        chosen = export_format(output, fmt)
    except ExportError as error:
        fail(str(error) + ("" if fmt else " (or give --format md|json)"), 2)
    text = render(export_document(thread_id, backend.history(thread_id)), chosen)
    if output is None:
        sys.stdout.write(text)
        return
    written = write_private(output, text)
    err.print(f"exported {escape(sanitize(thread_id))} to {escape(sanitize(str(written)))}")


# --- changing threads -------------------------------------------------------------------------


@app.command(cls=Command)
@guarded
def fork(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    checkpoint: Annotated[
        str | None, typer.Option("--checkpoint", "-c", help="Branch from this checkpoint.")
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="Id of the new thread (default: THREAD-fork1, or the next free number).",
            callback=_valid_text_option,
        ),
    ] = None,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Branch a new thread from a thread's checkpoint (default: its latest). Prints the new id."""
    from chatbot.threadids import check_thread_id, next_fork_id
    from chatbot.timeline import find_checkpoint

    backend = _open_thread(ctx, thread_id, db, url)
    checkpoint_id = (
        find_checkpoint(backend.history(thread_id), checkpoint).checkpoint_id
        if (checkpoint)
        else None
    )
    try:
        new_id = check_thread_id(to) if to else next_fork_id(thread_id, backend.thread_exists)
    except ValueError as error:
        fail(str(error), 2)
    backend.fork(thread_id, checkpoint_id, new_id)
    out.print(new_id, markup=False)


@app.command(cls=Command)
@guarded
def delete(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Delete a thread and its whole history (local threads only)."""
    backend = _open_thread(ctx, thread_id, db, url, local_only="delete")
    if not yes:
        if not sys.stdin.isatty():
            fail("deleting needs confirmation: add --yes", 2)
        if not typer.confirm(f"Delete thread {thread_id} and all its history?", default=False):
            err.print("kept")
            raise typer.Exit(1)
    backend.delete(thread_id)
    err.print(f"deleted {escape(sanitize(thread_id))}")


# --- keeping the database small -----------------------------------------------------------

db_app = typer.Typer(
    name="db",
    cls=OneLineErrors,
    help="The database itself: what it holds, and giving deleted threads' space back.",
    add_completion=False,
    rich_markup_mode="rich",
    no_args_is_help=True,
)
app.add_typer(db_app)


def _local_store(ctx: typer.Context, db: str | None, what: str) -> SqlStore | None:
    """The local database for a maintenance command; ``None`` (said on stderr) if it does not
    exist yet. On a server the command is refused."""
    state = _state(ctx, db)
    if state.remote:
        fail(f"{what} works on local databases only (this session uses {state.places.url})", 2)
    if state.db_missing:
        err.print(f"[dim]{escape(state.places.db)} does not exist yet: nothing to do[/]")
        return None
    return state.store


def _size(count: int) -> str:
    """Bytes for people: ``412.3 MB``."""
    size = float(count)
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:,.0f} {unit}" if unit == "bytes" else f"{size:,.1f} {unit}"
        size /= 1000
    return f"{size:,.1f} GB"


@db_app.command("stats", cls=Command)
@guarded
def db_stats(ctx: typer.Context, as_json: JsonOption = False, db: DbOption = None) -> None:
    """Threads, checkpoints and bytes on disk of the database."""
    store = _local_store(ctx, db, "db stats")
    if store is None:
        return
    stats = store.stats()
    if as_json:
        _print_json(stats.record())
        return
    out.print(
        f"{escape(stats.location)}: {stats.threads:,} threads, {stats.checkpoints:,} "
        f"checkpoints, {stats.writes:,} pending writes, {_size(stats.bytes)} on disk"
        + (
            f" ({_size(stats.free_bytes)} of it free: 'chatbot db vacuum' gives it back)"
            if stats.free_bytes
            else ""
        )
    )


@db_app.command("vacuum", cls=Command)
@guarded
def db_vacuum(ctx: typer.Context, db: DbOption = None) -> None:
    """Give the space of deleted threads back to the file system (SQLite's VACUUM)."""
    store = _local_store(ctx, db, "db vacuum")
    if store is None:
        return
    before, after = store.vacuum()
    out.print(f"{escape(store.path)}: {_size(before)} -> {_size(after)}")


@db_app.command("copy", cls=Command)
@guarded
def db_copy(
    source: Annotated[str, typer.Argument(metavar="SRC", help="SQLite file or postgresql:// URL.")],
    target: Annotated[str, typer.Argument(metavar="DST", help="SQLite file or postgresql:// URL.")],
    threads: Annotated[
        list[str] | None,
        typer.Option("--thread", "-t", help="Copy this thread (repeat it; default: all)."),
    ] = None,
) -> None:
    """Copy threads with their whole history to another database: SQLite to PostgreSQL and
    back. Run it again to copy what is new; a thread that exists there with a different
    history is refused."""
    from chatbot.copying import plan_copy, run_copy
    from chatbot.pgstore import open_store
    from chatbot.store import is_postgres_url

    if not is_postgres_url(source) and not Path(source).expanduser().is_file():
        fail(f"no database {source!r}: give a SQLite file or a postgresql:// URL", 2)
    with open_store(source) as src, open_store(target) as dst:
        if src.path == dst.path:
            fail("SRC and DST are the same database: give two", 2)
        plan = plan_copy(src, dst, threads or [])
        total = plan.checkpoints
        if total:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            with Progress(
                TextColumn("copying"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("checkpoints"),
                console=err,
                transient=True,
                disable=not err.is_terminal or total < 200,
            ) as bar:
                task = bar.add_task("copy", total=total)
                run_copy(src, dst, plan, progress=lambda n: bar.advance(task, n))
        copied, same = len(plan.copy), len(plan.skipped)
        err.print(
            f"copied {copied} thread{'' if copied == 1 else 's'} ({total:,} checkpoints) from "
            f"{escape(src.path)} to {escape(dst.path)}"
            + (f"; {same} already there with the same history" if same else "")
        )


@app.command(cls=Command)
@guarded
def prune(
    ctx: typer.Context,
    inactive_days: Annotated[
        float,
        typer.Option(
            "--inactive-days", min=0, help="Delete threads with no activity for this many days."
        ),
    ],
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Delete them (else: only list).")
    ] = False,
    db: DbOption = None,
) -> None:
    """Delete whole threads not active for N days: lists them, and deletes them with --yes (or
    after asking). A thread is never thinned; forks of a deleted thread keep its id as text."""
    from chatbot.render import threads_table

    store = _local_store(ctx, db, "prune")
    if store is None:
        return
    stale = store.inactive_threads(inactive_days)
    days = f"{inactive_days:g} day{'' if inactive_days == 1 else 's'}"
    if not stale:
        err.print(f"no thread in {escape(store.path)} has been inactive for {days}")
        return
    out.print(threads_table(stale), soft_wrap=False)
    count = f"{len(stale)} thread{'' if len(stale) == 1 else 's'}"
    if not yes:
        if not sys.stdin.isatty():
            err.print(f"{count} inactive for {days}; nothing deleted: add --yes to delete them")
            return
        if not typer.confirm(f"Delete these {count} and all their history?", default=False):
            err.print("kept")
            raise typer.Exit(1)
    for info in stale:
        store.delete_thread(info.thread_id)
    err.print(f"deleted {count}; 'chatbot db vacuum' gives their space back to the disk")


def main() -> None:
    """Console-script entry point."""
    import gc

    # Starting allocates much and frees little: collecting garbage meanwhile only costs time.
    # The REPL collects again once its loading has ended; every other command once its
    # arguments are parsed (see main_options).
    gc.disable()
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    if isinstance(sys.stdout, io.TextIOWrapper):  # what the terminal cannot show becomes "?"
        sys.stdout.reconfigure(errors="replace")
    app()
