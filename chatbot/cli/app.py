"""The ``chatbot`` CLI's frame: the Typer app, its one-line errors and the shared options;
:mod:`chatbot.cli.commands` registers the commands on it."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from chatbot import __version__
from chatbot.cli import completion
from chatbot.cli.core import (  # noqa: F401  (the commands import these from here too)
    AppState,
    CliError,
    ValidTextReader,
    _error_line,
    _existing_thread,
    checked_thread_id,
    err,
    escape,
    exit_after,
    exit_code,
    fail,
    given_option,
    out,
    print_json,
    read_text,
    set_up_process,
    thread_reader,
    valid_stdin,
    valid_text,
    valid_text_option,
    write_output,
)

if TYPE_CHECKING:
    from chatbot.threads.backend import Backend


HELP_PANELS: dict[str, tuple[str, ...]] = {
    "Chat": ("chat", "ask"),
    "Threads": ("threads", "history", "show", "fork", "compact", "delete", "memory"),
    "Search and export": ("search", "export", "import"),
    "Settings": ("config", "models", "roles"),
    "Database": ("db", "prune"),
}
"""``chatbot --help``'s groups of commands, in order (the README's cheat sheet's too)."""
_COMMAND_ORDER = [name for names in HELP_PANELS.values() for name in names]


def headline(help: str) -> str:
    """A help text's first sentence up to its first ``:`` or ``;`` outside brackets, on one
    line: what a list of commands shows."""
    help = " ".join(help.split("\n\n")[0].split())
    depth = 0
    for at, char in enumerate(help):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char in ":;." and depth == 0 and help[at + 1 : at + 2] in (" ", ""):
            return help[:at]
    return help


class _Help:
    """A command whose help lists a flag alone (Typer lists ``--json <bool>``, as if it took
    a value), and which its group's help lists by its :func:`headline`, on one line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        command: Any = self
        if command.short_help is None and command.help:
            command.short_help = headline(command.help)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        command: Any = self
        for param in command.get_params(ctx):
            if isinstance(param, TyperOption) and param.is_flag:
                param.metavar = ""
        super().format_help(ctx, formatter)  # type: ignore[misc]


class Command(_Help, TyperCommand):
    """A ``chatbot`` command (see :class:`_Help`)."""


class OneLineErrors(_Help, TyperGroup):
    """The ``chatbot`` group: Click's errors, usage errors first, as one line on stderr
    (Typer prints a usage, a hint and a boxed panel), its commands in :data:`HELP_PANELS`'
    order."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        known = [name for name in _COMMAND_ORDER if name in names]
        return known + [name for name in names if name not in known]

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        return _one_line(lambda: super(OneLineErrors, self).make_context(*args, **kwargs))

    def invoke(self, ctx: Any) -> Any:
        return _one_line(lambda: super(OneLineErrors, self).invoke(ctx))

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


def _one_line(
    step: Callable[[], Any],
    passing: tuple[type[BaseException], ...] = (typer.Exit, typer.Abort, typer.TyperException),
) -> Any:
    """Run ``step`` (parsing the command line, the group's callback, a command): an error
    other than ``passing`` is one line on stderr, never a traceback, and Ctrl-C says
    ``interrupted`` (Typer would end with code 130 in silence)."""
    try:
        return step()
    except passing:
        raise
    except BaseException as error:
        code = exit_code(error)
        if code is None:
            raise
        raise typer.Exit(code) from None


_BEFORE_THE_COMMAND = {"--model": "NAME", "-m": "NAME", "--env-file": "FILE"}
"""The options only the main command takes (``chatbot --model NAME ask ...``)."""


def usage_error_line(error: typer.TyperException) -> str:
    """``no such option: --foo (see 'chatbot ask --help')``: Click's message, in one line."""
    message = " ".join(error.format_message().split()).rstrip(".")
    ctx = getattr(error, "ctx", None)  # a usage error knows the command it is about
    if not message and ctx is not None:  # (a group given no command: Click printed its help)
        return f"'{ctx.command_path}' needs a command: one of those above"
    if message[1:2].islower():
        message = message[0].lower() + message[1:]
    if ctx is None:
        return message
    option = str(getattr(error, "option_name", ""))
    no_such = type(error).__name__ == "NoSuchOption"
    if no_such and option in _BEFORE_THE_COMMAND and ctx.parent is not None:
        value = _BEFORE_THE_COMMAND[option]
        root, _, command = ctx.command_path.partition(" ")
        return (
            f"{option} goes before the command: {root} {option} {value} {command} ... "
            f"(see '{root} --help')"
        )
    takes_thread = any(getattr(p, "metavar", None) == "THREAD" for p in ctx.command.params)
    if (  # (a thread id that looks like an option: it goes after '--'; --jsno is a typo)
        takes_thread
        and no_such
        and not option.startswith("--")
        and not getattr(error, "possibilities", None)
    ):
        return (
            f"{message} (see '{ctx.command_path} --help'; a thread id starting with '-' goes "
            f"after '--': {ctx.command_path} -- ID)"
        )
    return f"{message} (see '{ctx.command_path} --help')"


app = typer.Typer(
    name="chatbot",
    cls=OneLineErrors,
    help="A terminal chatbot whose memory never overflows: older turns fold into a running "
    "summary, every turn is checkpointed in SQLite under a thread id. Run without a command "
    "to chat.",
    add_completion=True,  # --install-completion / --show-completion (see chatbot.cli.completion)
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    invoke_without_command=True,
)


def command(
    name: str | None = None, *, group: typer.Typer = app, panel: str | None = None
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a ``chatbot`` command (a :class:`Command`, :func:`guarded`) on ``group``,
    listed in ``panel`` of the help."""
    options: dict[str, Any] = {} if panel is None else {"rich_help_panel": panel}

    def register(function: Callable[..., None]) -> Callable[..., None]:
        return group.command(name, cls=Command, **options)(guarded(function))

    return register


def command_group(name: str, help: str, panel: str, **options: Any) -> typer.Typer:
    """A command with subcommands (``chatbot db stats``), listed in ``panel`` of the help."""
    group = typer.Typer(
        name=name,
        cls=OneLineErrors,
        help=help,
        add_completion=False,
        rich_markup_mode="rich",
        **options,
    )
    app.add_typer(group, rich_help_panel=panel)
    return group


DbOption = Annotated[
    str | None,
    typer.Option(
        "--db", help="SQLite file or postgresql:// URL for threads (default: CHATBOT_DB)."
    ),
]
UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="Use the threads of a LangGraph server, e.g. http://127.0.0.1:2024.",
        callback=given_option,
    ),
]
ThreadArgument = Annotated[
    str,
    typer.Argument(
        metavar="THREAD",
        help="Thread id.",
        callback=valid_text_option,
        autocompletion=completion.thread_ids,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
OutputOption = Annotated[
    Path | None, typer.Option("--output", "-o", help="Write here (default: stdout).")
]
ForceOption = Annotated[
    bool, typer.Option("--force", help="Replace the --output file if it exists.")
]


def guarded(command: Callable[..., None]) -> Callable[..., None]:
    """Turn every error a command meets into one line on stderr and a non-zero exit code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        _one_line(lambda: command(*args, **kwargs), (typer.Exit, typer.Abort))

    return wrapper


def app_state(ctx: typer.Context, db: str | None = None, url: str | None = None) -> AppState:
    state = ctx.find_root().obj
    assert isinstance(state, AppState)
    return state.narrow(db, url)


def show_version(value: bool) -> None:
    if value:
        out.print(f"chatbot {__version__}")
        raise typer.Exit()


def open_thread(
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
    state = app_state(ctx, db, url)
    return _existing_thread(state, thread_id, lambda: state.backend(runs), local_only)
