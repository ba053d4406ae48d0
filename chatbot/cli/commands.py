"""The ``chatbot`` command: the Typer app's commands about threads and turns. The CLI is the only
part of chatbot that reads the environment and prints (its frame: :mod:`chatbot.cli.app`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from chatbot.cli import completion
from chatbot.errors import describe_error, redact
from chatbot.sanitize import StreamSanitizer, sanitize

if TYPE_CHECKING:  # the rest is imported on demand: `--help`, `--version` and reading stay fast
    from chatbot.cli.stdout import OutputFailed
    from chatbot.terminal.display import WaitSpinner
    from chatbot.threads.attachments import Attachment, Content
    from chatbot.threads.backend import Backend
    from chatbot.threads.events import Event, Kept, TurnStream
    from chatbot.threads.runner import Display, TurnOutcome


from chatbot.cli.app import (
    AppState,
    CliError,
    Command,
    DbOption,
    JsonOption,
    ThreadArgument,
    UrlOption,
    app,
    app_state,
    err,
    escape,
    exit_after,
    fail,
    given_option,
    guarded,
    open_thread,
    out,
    print_json,
    read_text,
    set_up_process,
    show_notice,
    show_version,
    valid_text_option,
)
from chatbot.cli.config import config_app, models  # noqa: F401  (`chatbot config`, `models`)
from chatbot.cli.db import db_app, prune  # noqa: F401  (registers `chatbot db` and `prune`)
from chatbot.cli.search import search  # noqa: F401  (registers `chatbot search`)


@app.callback()
def main_options(
    ctx: typer.Context,
    db: DbOption = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Chat model (default: CHATBOT_MODEL).",
            autocompletion=completion.model_names,
            callback=given_option,
        ),
    ] = None,
    env_file: Annotated[
        str | None,
        typer.Option(
            "--env-file", help="Read settings from this file, not ./.env.", callback=given_option
        ),
    ] = None,
    url: UrlOption = None,
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread",
            "-t",
            help="Without a command: chat in this thread.",
            callback=given_option,
            autocompletion=completion.thread_ids,
        ),
    ] = None,
    new: Annotated[
        bool, typer.Option("--new", help="Without a command: chat in a fresh thread.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=show_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Chat with an LLM in the terminal; threads live in SQLite."""
    if ctx.invoked_subcommand not in (None, "chat"):
        from chatbot.cli.core import started

        started()  # (main turned collecting off for the REPL's start)
    ctx.obj = AppState(env_file=env_file or ".env", db=db, model=model, url=url)
    from chatbot.cli.core import leading_note

    leading_note(ctx.obj)
    ctx.call_on_close(ctx.obj.close)
    if ctx.invoked_subcommand is None:
        ctx.invoke(chat, ctx=ctx, thread=thread, new=new)
    elif thread or new:
        err.print(
            f"[red]error:[/] --thread and --new go after the command: "
            f"chatbot {ctx.invoked_subcommand} --thread ID"
        )
        raise typer.Exit(2)


# --- chatting ---------------------------------------------------------------------------------


@app.command(cls=Command, rich_help_panel="Chat")
@guarded
def chat(
    ctx: typer.Context,
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread",
            "-t",
            help="Thread to open (default: the most recent).",
            callback=given_option,
            autocompletion=completion.thread_ids,
        ),
    ] = None,
    new: Annotated[bool, typer.Option("--new", help="Start a fresh thread.")] = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Chat interactively (the default command). /help inside lists the slash commands."""
    from chatbot.cli.chat import run_chat

    raise typer.Exit(run_chat(app_state(ctx, db, url), thread, new))


@app.command(cls=Command, rich_help_panel="Chat")
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
            callback=valid_text_option,
            autocompletion=completion.thread_ids,
        ),
    ] = "default",
    system: Annotated[
        str | None,
        typer.Option(
            "--system",
            "-s",
            help="Set the thread's system prompt first (kept with the thread, as /system).",
            callback=valid_text_option,
        ),
    ] = None,
    role: Annotated[
        str | None,
        typer.Option(
            "--role",
            "-r",
            help="Set the thread's system prompt from a role first (see 'chatbot roles').",
            callback=valid_text_option,
        ),
    ] = None,
    db: DbOption = None,
    url: UrlOption = None,
    files: Annotated[
        list[str] | None,
        typer.Option(
            "--file",
            "-f",
            help="Attach a file (repeatable): text inline with its name, or an image "
            "(PNG, JPEG, GIF, WebP) for models that take them.",
        ),
    ] = None,
) -> None:
    """Send one message to a thread and print the reply."""
    from chatbot.config.settings import SettingsError
    from chatbot.store.errors import StoreError
    from chatbot.terminal.render import failed_turn
    from chatbot.threadids import check_thread_id

    try:
        thread = check_thread_id(thread)
    except ValueError as error:
        fail(str(error), 2)
    prompt = _prompt_option(system, role)
    state = app_state(ctx, db, url)
    message = read_text(text) if not files else _text_with_files(text)
    spinner = _spinner("connecting to the server…" if state.remote else None)
    try:
        backend = state.backend(runs=True)
        show_notice(state)
        content = _attach(message, files or [], backend)
        if prompt is not None:
            _check_prompt_fits(prompt[0], backend)
            backend.set_system_prompt(thread, *prompt)
        view = _AskView(interactive=out.is_terminal, spinner=spinner)
        turn = backend.send(thread, content)
        outcome = _run_turn(turn, view)
    finally:
        if spinner is not None:
            spinner.stop()
    if view.streamed:
        out.print(view.safe.flush(), markup=False)
    for warning in outcome.warnings:
        err.print(f"[yellow]warning:[/] {escape(sanitize(warning))}")
    if outcome.interrupted:
        _leaving_after_ctrl_c()
        fail(_interrupted(thread, turn.kept()), 130)
    failure = outcome.error
    again = f" in thread {thread!r}: 'chatbot chat -t {thread}' then /retry asks again"
    if failure is not None:
        if isinstance(failure, CliError | SettingsError | StoreError):
            raise failure  # (a damaged database met mid-turn: one line, as when opening it)
        fail(failed_turn(describe_error(failure), turn.kept(), view.replied, again), 1)
    if view.unprinted is not None:
        kept = turn.kept()
        line = failed_turn(str(view.unprinted), kept, False, again)
        fail(f"{line} ('chatbot show {thread}' prints it)" if kept and kept.reply else line, 1)


def _spinner(words: str | None) -> WaitSpinner | None:
    """On a terminal, the REPL's spinner while ``ask`` loads the model (or ``words``) and waits
    for the reply (on stderr, erased before the reply); none when the reply goes to a pipe or
    a file."""
    if not (out.is_terminal and err.is_terminal):
        return None
    from chatbot.terminal.display import LOADING, WaitSpinner

    spinner = WaitSpinner(err, words or LOADING)
    spinner.start()
    return spinner


def _interrupted(thread: str, kept: Kept | None) -> str:
    """What ``ask`` stopped with Ctrl-C says, with what the thread holds of the turn."""
    if kept is None:
        return "interrupted"
    if kept.reply:
        return "interrupted: your message and the reply are saved"
    if kept.message:
        return f"interrupted: your message stays in thread {thread!r} without a reply"
    return "interrupted: your message was not saved"


def _text_with_files(text: str | None) -> str:
    """The text sent with ``--file``: as without, except that none at all is fine."""
    from chatbot.cli.app import valid_stdin, valid_text

    if text is None:
        return "" if sys.stdin.isatty() else valid_text(valid_stdin().read())
    return read_text(text) if text.strip() or not sys.stdin.isatty() else ""


def _attach(text: str, files: list[str], backend: Backend) -> Content:
    """The message's content with the files attached (one error line, exit 2, for a file that
    cannot be)."""
    from chatbot.threads.attachments import (
        AlreadyAttached,
        AttachmentError,
        limits_for,
        load,
        message_content,
    )

    if not files:
        return text
    limits = limits_for(backend.run_settings(None))
    attached: list[Attachment] = []
    for path in files:
        try:
            attached.append(load(path, limits, attached))
        except AlreadyAttached:  # -f a -f a: attached once
            continue
        except AttachmentError as error:
            fail(str(error), 2)
    return message_content(text, attached)


def _run_turn(turn: TurnStream, view: Display) -> TurnOutcome:
    """Run one turn on the session's event loop (Ctrl-C cancels it and closes the request)."""
    from chatbot.threads.runner import session_runner

    return session_runner().run(turn, view)


def _leaving_after_ctrl_c() -> None:
    """The turn is stopped and nothing more will be written: an impatient second Ctrl-C
    must not turn the clean exit (code 130) into a death by signal."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _AskView:
    """``chatbot ask``: the reply as plain text, streamed on a terminal, whole otherwise;
    summary notes on stderr; the ``spinner`` (on a terminal) says what the turn waits for until
    the reply comes."""

    def __init__(self, interactive: bool, spinner: WaitSpinner | None = None) -> None:
        self.interactive = interactive
        self.spinner = spinner
        if spinner is not None:
            from chatbot.terminal.display import THINKING

            spinner.say(THINKING)
        self.streamed = ""
        self.replied = False  # a whole reply was shown
        self.safe = StreamSanitizer()  # an escape code split across two tokens never gets through
        self.unprinted: OutputFailed | None = None
        """Why the whole reply could not be printed (a closed or full stdout): the turn goes on,
        so that the reply is saved, and the command says so after it."""

    def show(self, event: Event) -> None:
        from chatbot.terminal.display import recall_note
        from chatbot.terminal.render import describe_summary
        from chatbot.threads.events import (
            Folding,
            Recalling,
            RecallOff,
            Reply,
            Summarized,
            SummaryFailed,
            Token,
            Unanswered,
            Waiting,
        )

        if self.spinner is not None:
            if isinstance(event, Folding):
                self.spinner.say(event.words, restart=event.part == 1)
            elif isinstance(event, Token | Reply):
                self.spinner.stop()  # (the reply is written to stdout: the spinner goes first)
        if isinstance(event, Reply) and not self.streamed:
            self._print_whole(event.message.text)
            return
        if isinstance(event, Reply):
            self.replied = True
        if isinstance(event, Waiting):
            err.print(f"[dim]{escape(sanitize(event.words))}[/]")
        elif isinstance(event, Unanswered):
            err.print(f"[yellow]note:[/] {escape(event.words)}")
        elif isinstance(event, Token) and self.interactive:
            out.print(self.safe.feed(event.text), end="", markup=False)
            self.streamed += event.text
        elif isinstance(event, Reply) and event.message.text.startswith(self.streamed):
            rest = event.message.text[len(self.streamed) :]
            out.print(self.safe.feed(rest), end="", markup=False)
            self.streamed = event.message.text
        elif isinstance(event, Summarized):
            err.print(f"[dim]{describe_summary(event)}[/]")
        elif isinstance(event, Recalling | RecallOff):
            err.print(recall_note(event))
        elif isinstance(event, SummaryFailed):
            err.print(
                "[yellow]summary failed, nothing was removed (the next turn retries):[/] "
                f"{escape(sanitize(redact(event.error)))}"
            )

    def _print_whole(self, text: str) -> None:
        """The reply, whole; a stdout that cannot take it (closed, full) does not stop the
        turn: the reply is saved, and :attr:`unprinted` says why it was not printed."""
        from chatbot.cli.stdout import OutputFailed

        try:
            out.print(sanitize(text), markup=False)
            out.file.flush()
        except OutputFailed as error:
            self.unprinted = error
            return
        self.replied = True

    def tick(self) -> None:
        pass


@app.command(cls=Command, rich_help_panel="Threads")
@guarded
def compact(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    focus: Annotated[
        str | None,
        typer.Option(
            "--focus",
            help="What this summary should keep, e.g. 'every file name'.",
            callback=valid_text_option,
        ),
    ] = None,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Fold a thread's older messages into its summary now: the usual keep window stays."""
    from chatbot.history.summary import compact_refusal

    backend = open_thread(ctx, thread_id, db, url, runs=True)
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
        from chatbot.terminal.render import describe_nothing_to_fold, describe_summary
        from chatbot.threads.events import NothingToFold, Summarized, SummaryFailed

        if isinstance(event, Summarized):
            out.print(describe_summary(event), markup=False)
        elif isinstance(event, NothingToFold):
            out.print(describe_nothing_to_fold(event), markup=False)
        elif isinstance(event, SummaryFailed):
            self.failure = event.error

    def tick(self) -> None:
        pass


# --- system prompts and roles ----------------------------------------------------------------


def _prompt_option(system: str | None, role: str | None) -> tuple[str, str] | None:
    """``ask --system``/``--role`` as the thread's (prompt, role), checked before anything
    runs; ``None`` when neither is given (the thread keeps its own)."""
    from chatbot.config.roles import load_role

    if system is not None and role is not None:
        fail("give --system or --role, not both", 2)
    if role is not None:
        found = load_role(role)  # a missing role: one line naming the folder, exit 2
        return found.prompt, found.name
    if system is not None:
        if not system.strip():
            fail("--system needs the prompt's text (/system clear in the REPL removes it)", 2)
        return system.strip(), ""
    return None


def _check_prompt_fits(prompt: str, backend: Backend) -> None:
    """``--system``/``--role`` the model's input cannot hold: one line, exit 2, nothing sent."""
    from chatbot.config.roles import check_prompt_fits
    from chatbot.threads.attachments import limits_for

    run = backend.run_settings(None, prompt)
    if run is not None:
        model = limits_for(run).model
        check_prompt_fits(prompt, run.counter.text(prompt), run.policy.max_input_tokens, model)


@app.command(cls=Command, rich_help_panel="Settings")
@guarded
def roles(as_json: JsonOption = False) -> None:
    """List the roles (saved system prompts): name and first line; ask --role NAME uses one."""
    from chatbot.config.roles import how_to_add, list_roles

    found = list_roles()
    if as_json:
        print_json(
            [
                {"name": r.name, "path": str(r.path), "prompt": r.prompt, "problem": r.problem}
                for r in found
            ]
        )
        return
    if not found:
        err.print(f"[dim]no roles yet: {escape(how_to_add())}[/]")
        return
    from rich.table import Table

    from chatbot.terminal.render import preview

    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("role", no_wrap=True)
    table.add_column("first line", overflow="fold")
    for item in found:  # (a one-line prompt of 5 MB stays one row)
        table.add_row(escape(item.name), escape(sanitize(preview(item.first_line))))
    from chatbot.terminal.listings import Listing

    out.print(Listing(table))  # (piped: a role a line)


# --- reading threads --------------------------------------------------------------------------


@app.command(cls=Command, rich_help_panel="Threads")
@guarded
def threads(
    ctx: typer.Context, as_json: JsonOption = False, db: DbOption = None, url: UrlOption = None
) -> None:
    """List threads: id, messages, summary, last active, title."""
    from chatbot.cli.read import run_threads

    run_threads(app_state(ctx, db, url), as_json)


@app.command(cls=Command, rich_help_panel="Threads")
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
    from chatbot.cli.read import run_history

    run_history(app_state(ctx, db, url), thread_id, limit, every, as_json)


@app.command(cls=Command, rich_help_panel="Threads")
@guarded
def show(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    checkpoint: Annotated[
        str | None,
        typer.Option(
            "--checkpoint", "-c", help="A past checkpoint (see history).", callback=given_option
        ),
    ] = None,
    as_json: JsonOption = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Show a thread's summary and messages, now or at a past checkpoint."""
    from chatbot.cli.read import run_show

    run_show(app_state(ctx, db, url), thread_id, checkpoint, as_json)


@app.command(cls=Command, rich_help_panel="Search and export")
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
    force: Annotated[
        bool, typer.Option("--force", help="Replace the --output file if it exists.")
    ] = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Export a thread: summary, messages folded into it, live messages."""
    from chatbot.history.export import (
        ExportError,
        FileExists,
        export_document,
        export_format,
        render,
        write_private,
    )

    app_state(ctx).read_only = True
    backend = open_thread(ctx, thread_id, db, url)
    try:
        chosen = export_format(output, fmt)
    except ExportError as error:
        fail(str(error) + ("" if fmt else " (or give --format md|json)"), 2)
    text = render(export_document(thread_id, backend.history(thread_id)), chosen)
    if output is None:
        sys.stdout.write(text)
        return
    try:
        written = write_private(output, text, replace=force)
    except FileExists as error:
        fail(f"{error.shown} exists: add --force to replace it (nothing was written)")
    err.print(f"exported {escape(sanitize(thread_id))} to {escape(sanitize(str(written)))}")


_HOW_TO_IMPORT = "import the JSON file 'chatbot export THREAD -o FILE.json' writes"


@app.command("import", cls=Command, rich_help_panel="Search and export")
@guarded
def import_(
    ctx: typer.Context,
    file: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            help="A thread's JSON export ('chatbot export THREAD -o FILE.json'); '-' reads stdin.",
        ),
    ],
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread",
            "-t",
            help="Name of the new thread (default: the thread id in FILE).",
            callback=given_option,
        ),
    ] = None,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Bring a thread in from its JSON export: summary, messages folded into it, live messages
    (local threads only). A thread of that name already there is never written over."""
    from chatbot.plural import counted
    from chatbot.threadids import check_thread_id, quoted
    from chatbot.threads.backend import LocalBackend
    from chatbot.threads.operations import BackendError

    state = app_state(ctx, db, url)
    if state.remote:
        fail(
            f"import works on local threads only (this session uses the LangGraph server at "
            f"{state.where})",
            2,
        )
    if thread is not None:
        try:
            thread = check_thread_id(thread)
        except ValueError as error:
            fail(str(error), 2)
    stdin = str(file) == "-"
    shown = "stdin" if stdin else quoted(str(file), 300)
    found, contents = _read_export(_export_json(file, shown), shown)
    if thread is None:
        try:
            thread = check_thread_id(found)
        except ValueError as error:
            fail(f"{error} (the thread id in {shown}): name the new thread with --thread NAME", 2)
    taken = (
        f"thread {quoted(thread)} already exists in {state.where}: import it under another "
        "name with --thread NAME (nothing was written)"
    )
    backend = state.backend(runs=True)
    assert isinstance(backend, LocalBackend)  # (a server was refused above)
    if backend.thread_exists(thread):
        fail(taken)
    try:
        backend.import_thread(thread, **contents)
    except BackendError:
        if backend.thread_exists(thread):  # (made meanwhile, in another window)
            fail(taken)
        raise
    live = len(contents["messages"]) + len(contents["unanswered"])
    source = "stdin" if stdin else sanitize(str(file))
    err.print(
        f"imported {escape(sanitize(thread))} ({counted(live, 'message')}, "
        f"{len(contents['folded'])} folded) from {escape(source)}"
    )


def _export_json(file: Path, shown: str) -> object:
    """The JSON a file (``-``: stdin) holds; one line, exit 2, for a file that cannot be read
    or is not JSON."""
    import json

    if str(file) == "-":
        if sys.stdin.isatty():
            fail(f"'-' reads the export from stdin: pipe it in, or {_HOW_TO_IMPORT}", 2)
        data = sys.stdin.buffer.read()
    else:
        path = file.expanduser()
        try:
            if path.is_dir():
                fail(f"{shown} is a folder: {_HOW_TO_IMPORT}", 2)
            data = path.read_bytes()
        except FileNotFoundError:
            fail(f"{shown} does not exist: {_HOW_TO_IMPORT}", 2)
        except (OSError, ValueError) as error:  # (ValueError: a NUL in the name)
            reason = getattr(error, "strerror", None) or error
            fail(f"cannot read {shown}: {reason} (nothing was imported)", 2)
    if not data.strip():
        fail(f"{shown} is empty: {_HOW_TO_IMPORT}", 2)
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        fail(f"{shown} is not JSON: it is not UTF-8 text ({_HOW_TO_IMPORT})", 2)
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        fail(
            f"{shown} is not JSON ({error.msg.lower()} at {where}; a Markdown export cannot be "
            f"imported): {_HOW_TO_IMPORT}",
            2,
        )
    except RecursionError:
        fail(f"{shown} is not a chatbot export: it is nested too deeply ({_HOW_TO_IMPORT})", 2)


_EXPORT_TEXT = ("thread_id", "summary", "system_prompt", "system_role")
_EXPORT_LISTS = ("summary_history", "folded_messages", "messages", "unanswered")
_EXPORT_OPTIONAL = ("system_prompt", "system_role", "unanswered")
"""What an export made before threads had their own system prompt (or a saved, unanswered
message) lacks."""


def _read_export(document: object, shown: str) -> tuple[str, dict[str, Any]]:
    """The thread id an export names and what ``LocalBackend.import_thread`` takes from it
    (its messages read back: :func:`~chatbot.history.records.message_from_record`); one line,
    exit 2, saying what is wrong with a document that is not an export."""
    from chatbot.history.records import RecordError, json_kind, message_from_record
    from chatbot.sanitize import valid_data

    def wrong(what: str) -> NoReturn:
        fail(f"{shown} is not a chatbot export: {what} ({_HOW_TO_IMPORT})", 2)

    if not isinstance(document, dict):
        wrong(f"it holds {json_kind(document)}, not an object")
    export: dict[str, Any] = valid_data(document)  # (a lone surrogate, as an escape: U+FFFD)
    missing = [key for key in (*_EXPORT_TEXT, *_EXPORT_LISTS) if key not in export]
    missing = [key for key in missing if key not in _EXPORT_OPTIONAL]
    if missing:
        wrong(f"it has no {' and no '.join(map(repr, missing))}")
    for keys, kind, said in ((_EXPORT_TEXT, str, "text"), (_EXPORT_LISTS, list, "a list")):
        for key in keys:
            if key in export and not isinstance(export[key], kind):
                wrong(f"its {key!r} is {json_kind(export[key])}, not {said}")
    read: dict[str, list[Any]] = {}
    seen: set[str] = set()
    for key in ("folded_messages", "messages", "unanswered"):
        read[key] = []
        for number, record in enumerate(export.get(key, [])):
            try:
                message = message_from_record(record)
            except RecordError as error:
                wrong(f"{key}[{number}] {error}")
            if message.id in seen:
                wrong(f"{key}[{number}] has the id of an earlier message ({message.id!r:.60})")
            seen.add(str(message.id))
            read[key].append(message)
    contents = {
        "messages": read["messages"],
        "folded": read["folded_messages"],
        "unanswered": read["unanswered"],
        "summary": export["summary"],
        "system_prompt": export.get("system_prompt", ""),
        "system_role": export.get("system_role", ""),
    }
    return export["thread_id"], contents


# --- changing threads -------------------------------------------------------------------------


@app.command(cls=Command, rich_help_panel="Threads")
@guarded
def fork(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    checkpoint: Annotated[
        str | None,
        typer.Option(
            "--checkpoint", "-c", help="Branch from this checkpoint.", callback=given_option
        ),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="Id of the new thread (default: THREAD-fork1, or the next free number).",
            callback=given_option,
        ),
    ] = None,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Branch a new thread from a checkpoint (default: the latest). Prints the new id."""
    from chatbot.history.lineage import find_checkpoint
    from chatbot.threadids import check_thread_id, next_fork_id

    backend = open_thread(ctx, thread_id, db, url)
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


@app.command(cls=Command, rich_help_panel="Threads")
@guarded
def delete(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Delete a thread and its whole history (local threads only)."""
    backend = open_thread(ctx, thread_id, db, url, local_only="delete")
    if not yes:
        if not sys.stdin.isatty():
            fail("deleting needs confirmation: add --yes", 2)
        if not typer.confirm(f"Delete thread {thread_id} and all its history?", default=False):
            err.print(f"kept {escape(sanitize(thread_id))}")
            raise typer.Exit(1)
    backend.delete(thread_id)
    err.print(f"deleted {escape(sanitize(thread_id))}")


def main() -> None:
    """Console-script entry point."""
    import gc

    # Starting allocates much and frees little: collecting garbage meanwhile only costs time.
    # The REPL collects again once its loading has ended; every other command once its
    # arguments are parsed (see main_options).
    from chatbot import interrupts

    interrupts.install()  # (done already when called from chatbot.cli.main)
    gc.disable()
    set_up_process()
    # (`prog_name` also under `python -m chatbot`: completion calls `chatbot`)
    exit_after(lambda: app(prog_name="chatbot"))
