"""The turn commands: ``chatbot ask`` (one message, its reply printed as it comes) and
``chatbot compact`` (fold a thread now), and ``chatbot roles`` (the saved system prompts
``ask --role`` uses)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from chatbot.cli import completion
from chatbot.cli.app import (
    CliError,
    DbOption,
    JsonOption,
    ThreadArgument,
    UrlOption,
    app_state,
    checked_thread_id,
    command,
    err,
    escape,
    fail,
    open_thread,
    out,
    print_json,
    read_text,
    valid_text_option,
)
from chatbot.errors import describe_error
from chatbot.sanitize import sanitize

if TYPE_CHECKING:  # the rest is imported on demand: `--help`, `--version` and reading stay fast
    from chatbot.terminal.display import WaitSpinner
    from chatbot.threads.attachments import Attachment, Content
    from chatbot.threads.backend import Backend
    from chatbot.threads.events import Event, Kept


@command(panel="Chat")
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
    from chatbot.terminal.display import ReplyView
    from chatbot.terminal.render import failed_turn
    from chatbot.threads.attachments import check_system_prompt
    from chatbot.threads.runner import session_runner

    thread = checked_thread_id(thread)
    prompt = _prompt_option(system, role)
    state = app_state(ctx, db, url)
    message = read_text(text) if not files else _text_with_files(text)
    spinner = _spinner("connecting to the server…" if state.remote else None)
    try:
        backend = state.backend(runs=True)
        if not state.remote and state.models.notice:
            err.print(f"[yellow]note:[/] {escape(state.models.notice)}")
        content = _attach(message, files or [], backend)
        if prompt is not None:
            check_system_prompt(prompt[0], backend.run_settings(None, prompt[0]))
            backend.set_system_prompt(thread, *prompt)
        view = ReplyView(out, live=out.is_terminal, plain=True, notes_to=err, spinner=spinner)
        view.start()
        turn = backend.send(thread, content)
        outcome = session_runner().run(turn, view)  # (Ctrl-C cancels it, closing the request)
    finally:
        if spinner is not None:
            spinner.stop()
    view.finish()
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
    """On a terminal, the REPL's spinner on stderr while ``ask`` loads the model (or
    ``words``) and waits for the reply; none when the reply goes to a pipe or a file."""
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
    """The message's content with the files attached (one line, exit 2, for one that cannot
    be)."""
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


def _leaving_after_ctrl_c() -> None:
    """A second Ctrl-C must not turn the clean exit (code 130) into a death by signal."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


@command(panel="Threads")
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
    from chatbot.threads.runner import session_runner

    backend = open_thread(ctx, thread_id, db, url, runs=True)
    refusal = compact_refusal(backend.current(thread_id))
    if refusal:
        fail(refusal)
    view = _CompactView()
    outcome = session_runner().run(backend.compact(thread_id, focus or ""), view)
    if outcome.interrupted:
        _leaving_after_ctrl_c()
        fail("interrupted: nothing was folded", 130)
    if outcome.error is not None:
        raise outcome.error
    failure = view.failure
    if failure:
        fail(f"the summary failed, nothing was folded: {failure}")


class _CompactView:
    """``chatbot compact``: what the fold did, on stdout; a wait before a summary call is
    asked again, on stderr."""

    def __init__(self) -> None:
        self.failure = ""

    def show(self, event: Event) -> None:
        from chatbot.terminal.display import retry_note
        from chatbot.terminal.render import describe_nothing_to_fold, describe_summary
        from chatbot.threads.events import NothingToFold, Retrying, Summarized, SummaryFailed

        if isinstance(event, Retrying):
            note = retry_note(event)
            if note is not None:
                err.print(note)
        elif isinstance(event, Summarized):
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
    runs; ``None`` when neither is given."""
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


@command(panel="Settings")
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
