"""The slash commands' registry: :data:`COMMANDS`, filled by :func:`command` in the command
modules (read it from :mod:`chatbot.terminal.commands`, where it is whole), what every command
shares (its one-line error, the checks of its argument), and /help, /exit, /clear.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rich.markup import escape

from chatbot.terminal import render
from chatbot.threadids import check_thread_id

if TYPE_CHECKING:
    from chatbot.history.snapshots import Snapshot
    from chatbot.terminal.repl import Repl

Outcome = Literal["exit"] | None
Handler = Callable[["Repl", str], Outcome]


class CommandError(ValueError):
    """Bad arguments or an impossible request: one line for the user."""


@dataclass(frozen=True)
class Command:
    """A slash command: its handler, usage and one-line help."""

    name: str
    handler: Handler
    usage: str
    help: str
    remote: bool = True
    writes: bool = False
    """Changes a thread: waits first for a turn stopped with Ctrl-C to end."""


COMMANDS: dict[str, Command] = {}


def command(
    name: str, usage: str, help: str, *, remote: bool = True, writes: bool = False
) -> Callable[[Handler], Handler]:
    """Register a slash command."""

    def register(handler: Handler) -> Handler:
        COMMANDS[name] = Command(name, handler, usage, help, remote, writes)
        return handler

    return register


ALIASES = {"quit": "exit", "q": "exit", "h": "help", "?": "help"}


def known_command(word: str) -> str | None:
    """The command a typed name (or alias) means, whatever its case."""
    name = ALIASES.get(word.lower(), word.lower())
    return name if name in COMMANDS else None


def nearest_command(word: str) -> str | None:
    """The command a mistyped name was most likely meant to be (``hisotry``: ``history``)."""
    close = difflib.get_close_matches(word.lower(), list(COMMANDS), n=1, cutoff=0.6)
    return close[0] if close else None


def no_argument(name: str, arg: str) -> None:
    """Refuse an argument given to a command that takes none."""
    if arg:
        raise CommandError(f"/{name} takes no argument: {COMMANDS[name].usage}")


def checked_thread_id(value: str) -> str:
    """A thread id as typed, checked (a bad one is a :class:`CommandError`)."""
    try:
        return check_thread_id(value)
    except ValueError as error:
        raise CommandError(str(error)) from None


def checkpoints_of(repl: Repl) -> list[Snapshot]:
    """The current thread's checkpoints; a thread with none yet is a :class:`CommandError`."""
    history = repl.backend.history(repl.thread_id)
    if not history:
        raise CommandError(f"thread {repl.thread_id} has no checkpoints yet: say something first")
    return history


def confirmed(repl: Repl, question: str) -> bool:
    """True when the user answers yes to ``question``; Ctrl-C, Ctrl-D or anything else is no."""
    try:
        answer = repl.reader.read(question)
    except (EOFError, KeyboardInterrupt):
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def _local_note(repl: Repl, found: Command) -> str:
    """`` (local only)`` after a command that works on local threads only, on a server."""
    return "" if found.remote or not repl.backend.local_only_note else " (local only)"


# --- help and leaving ----------------------------------------------------------------------------


@command("help", "/help [COMMAND]", "list the commands, or explain one")
def _help(repl: Repl, arg: str) -> None:
    if arg:
        name = ALIASES.get(arg.lstrip("/").lower(), arg.lstrip("/").lower())
        if name not in COMMANDS:
            nearest = nearest_command(name)
            hint = f"did you mean /help {nearest}?" if nearest else "/help lists them"
            raise CommandError(f"no command /{name}: {hint}")
        found = COMMANDS[name]
        repl.say(f"{found.usage}  {found.help}{_local_note(repl, found)}")
        return
    rows = [
        (escape(item.usage), escape(item.help + _local_note(repl, item)))
        for item in COMMANDS.values()
    ]
    repl.console.print(render.name_table(rows))
    repl.say(
        "Enter sends; Alt-Enter (or Esc then Enter) inserts a newline; a paste stays one "
        "message. Ctrl-C stops a reply or clears the line; Ctrl-D leaves. A message that "
        "starts with / goes as typed unless it starts with a command: //text sends /text.",
        "dim",
    )


@command("exit", "/exit", "leave (Ctrl-D does too)")
def _exit(repl: Repl, arg: str) -> Outcome:
    no_argument("exit", arg)
    return "exit"


@command("clear", "/clear", "clear the screen")
def _clear(repl: Repl, arg: str) -> None:
    no_argument("clear", arg)
    repl.console.clear()
