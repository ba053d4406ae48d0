"""Line editing for the REPL with prompt_toolkit: history across runs, multi-line input,
completion of slash commands, thread ids and checkpoint ids."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

from chatbot.store import make_private_dirs


class SlashCompleter(Completer):
    """Completes ``/commands``, then thread ids or checkpoint ids where a command takes one."""

    THREAD_ARGS = ("thread", "delete")
    CHECKPOINT_ARGS = ("show", "fork")

    def __init__(
        self,
        commands: Callable[[], Iterable[str]],
        thread_ids: Callable[[], Iterable[str]],
        checkpoint_ids: Callable[[], Iterable[str]],
    ) -> None:
        self.commands = commands
        self.thread_ids = thread_ids
        self.checkpoint_ids = checkpoint_ids

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/") or "\n" in text:
            return
        name, space, arg = text[1:].partition(" ")
        if not space:
            for command in sorted(self.commands()):
                if command.startswith(name):
                    yield Completion(command, start_position=-len(name))
            return
        if name in self.THREAD_ARGS:
            candidates: Iterable[str] = self.thread_ids()
        elif name in self.CHECKPOINT_ARGS:
            candidates = self.checkpoint_ids()
        elif name == "summary":
            candidates = ["history"]
        else:
            return
        for candidate in candidates:
            if candidate.startswith(arg):
                yield Completion(candidate, start_position=-len(arg))


def _key_bindings() -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        """Alt-Enter (or Esc then Enter) inserts a newline instead of sending."""
        event.current_buffer.insert_text("\n")

    return bindings


def _continuation(width: int, line_number: int, is_soft_wrap: int) -> str:
    """Dots before a line that Alt-Enter started; blanks where a long line merely wraps."""
    return " " * width if is_soft_wrap else "." * (width - 1) + " "


def private_history_file(path: Path) -> Path:
    """Create the input-history file 0600 (it holds what the user typed)."""
    make_private_dirs(path.parent)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    return path


class PromptToolkitReader:
    """Reads lines in a real terminal: Enter sends, Alt-Enter adds a line, pastes stay whole."""

    def __init__(self, history_path: Path, completer: Completer) -> None:
        self.session: PromptSession[str] = PromptSession(
            history=FileHistory(str(private_history_file(history_path))),
            completer=completer,
            complete_while_typing=False,
            key_bindings=_key_bindings(),
            multiline=False,
            enable_history_search=False,
            prompt_continuation=_continuation,
        )

    def read(self, prompt: str, toolbar: Callable[[], str] | None = None) -> str:
        """One message; raises ``EOFError`` on Ctrl-D and ``KeyboardInterrupt`` on Ctrl-C."""
        return self.session.prompt(prompt, bottom_toolbar=toolbar)
