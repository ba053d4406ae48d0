"""The REPL's slash commands, all of them: :data:`COMMANDS` whole, in /help's order, and
:func:`dispatch`, which reads a line as a command (or a message) and runs it. Importing the
command modules here is what fills the registry.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from chatbot.history.export import ExportError
from chatbot.terminal import (
    contextcommands,
    historycommands,
    lookupcommands,
    memorycommands,
    messagecommands,
    promptcommands,
    registry,
    threadcommands,
)
from chatbot.terminal.registry import (
    COMMANDS,
    CommandError,
    Outcome,
    known_command,
    nearest_command,
)
from chatbot.threads.backend import BackendError

if TYPE_CHECKING:
    from chatbot.terminal.repl import Repl

HELP_ORDER = (
    registry,
    threadcommands,
    historycommands,
    contextcommands,
    messagecommands,
    promptcommands,
    lookupcommands,
    memorycommands,
)
"""The command modules in the order /help lists their commands (not their import order)."""


def _in_help_order() -> None:
    rank = {module.__name__: at for at, module in enumerate(HELP_ORDER)}
    ordered = sorted(COMMANDS.values(), key=lambda item: rank[item.handler.__module__])
    COMMANDS.clear()
    COMMANDS.update((item.name, item) for item in ordered)


_in_help_order()

_COMMAND_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
"""What a command's name looks like: a word, with no ``/``, ``*``, ``.`` or ``^`` in it."""


def command_words(line: str) -> tuple[str, str] | None:
    """A line starting with ``/`` as a command's name and argument, or ``None`` for a message.

    A command is a known name, or a word that looks like one (``/hisotry``: said to be unknown).
    A path, code or a regex (``/usr/bin/env``, ``/* x */``) is a message, and so is a paste of
    several lines unless it starts with a command or a near miss; ``//`` starts a message.
    """
    found = re.match(r"/(\S*)\s*(.*)\Z", line, re.DOTALL)
    if found is None or line.startswith("//"):
        return None
    word, arg = found.group(1), found.group(2).strip()
    if known_command(word) is not None or (word == "" and not arg):
        return word, arg
    if _COMMAND_WORD.fullmatch(word) is None:
        return None
    if "\n" in line and nearest_command(word) is None:
        return None
    return word, arg


def dispatch(repl: Repl, line: str) -> Outcome:
    """Run a line that starts with ``/``; every problem becomes one clear line."""
    words = command_words(line)
    if words is None:
        repl.chat(line[1:] if line.startswith("//") else line)
        return None
    word, arg = words
    name = known_command(word)
    found = COMMANDS.get(name) if name else None
    if name is None or found is None:
        nearest = nearest_command(word)
        hint = f"did you mean /{nearest}?" if nearest else "/help lists the commands"
        repl.problem(f"unknown command /{word}: {hint} (//{word} sends it as a message)")
        return None
    if not found.remote and repl.backend.local_only_note:
        repl.problem(f"/{name} works on local threads only ({repl.backend.local_only_note})")
        return None
    try:
        return found.handler(repl, arg)
    except (CommandError, BackendError, ExportError, LookupError) as error:
        repl.problem(str(error))
    except Exception as error:  # never a traceback in the REPL
        from chatbot.errors import describe_error

        repl.problem(describe_error(error))
    return None
