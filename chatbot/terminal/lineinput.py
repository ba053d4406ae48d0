"""Line editing for the REPL with prompt_toolkit: history across runs, multi-line input,
completion of slash commands, thread ids and checkpoint ids; and output from another thread
shown above the prompt while a line is being typed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.application import run_in_terminal
from prompt_toolkit.application.current import set_app
from prompt_toolkit.completion import CompleteEvent, Completer, Completion, PathCompleter
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory
from prompt_toolkit.input.typeahead import get_typeahead, store_typeahead
from prompt_toolkit.input.vt100_parser import Vt100Parser
from prompt_toolkit.key_binding import KeyBindings, KeyPress, KeyPressEvent
from prompt_toolkit.keys import Keys
from prompt_toolkit.utils import get_cwidth

from chatbot.files import create_private_file
from chatbot.terminal.repl import HeldKeys


class SlashCompleter(Completer):
    """Completes ``/commands``, then thread ids or checkpoint ids where a command takes one."""

    THREAD_ARGS = ("thread", "delete")
    CHECKPOINT_ARGS = ("show", "fork")
    MODEL_ARGS = ("model", "retry")

    def __init__(
        self,
        commands: Callable[[], Iterable[str]],
        thread_ids: Callable[[], Iterable[str]],
        checkpoint_ids: Callable[[], Iterable[str]],
        model_names: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        self.commands = commands
        self.thread_ids = thread_ids
        self.checkpoint_ids = checkpoint_ids
        self.model_names = model_names
        """The endpoint's models (see chatbot.engine.modellist.ModelCatalog), for /model and
        /retry."""

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
        if name == "file":  # paths: the word being typed, quoted as /file reads it
            yield from _path_completions(arg, complete_event)
            return
        if name in self.THREAD_ARGS:
            candidates: Iterable[str] = self.thread_ids()
        elif name in self.CHECKPOINT_ARGS:
            candidates = self.checkpoint_ids()
        elif name in self.MODEL_ARGS:
            candidates = self.model_names()
        elif name == "summary":
            candidates = ["history"]
        else:
            return
        for candidate in candidates:
            if candidate.startswith(arg):
                yield Completion(candidate, start_position=-len(arg))


def last_word(line: str) -> tuple[int, str]:
    """Where the last shell word of ``line`` starts, and its text with quotes and backslashes
    taken out (``my\\ no`` and ``"my no`` are both ``my no``)."""
    start, word, quote, escaped = 0, "", "", False
    for index, char in enumerate(line):
        if escaped:
            word, escaped = word + char, False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            if char == quote:
                quote = ""
            else:
                word += char
        elif char in "'\"":
            quote = char
        elif char.isspace():
            start, word = index + 1, ""
        else:
            word += char
    return start, word


def _path_completions(arg: str, complete_event: CompleteEvent) -> Iterable[Completion]:
    """Paths for ``/file``, escaped so that the line still splits into the same paths."""
    start, word = last_word(arg)
    typed = len(arg) - start
    for found in PathCompleter(expanduser=True).get_completions(Document(word), complete_event):
        full = word + found.text
        quoted = "".join("\\" + c if c.isspace() or c in "\\'\"" else c for c in full)
        yield Completion(quoted, start_position=-typed, display=found.display)


_PASTE_ON, _PASTE_OFF = "\x1b[?2004h", "\x1b[?2004l"
"""Bracketed paste on and off: a paste comes between marks, so that its line breaks are not
Enter."""


def _write_terminal(sequence: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write(sequence)
        sys.stdout.flush()


def _pending(fd: int) -> bytes:
    """Everything the terminal has for ``fd`` now, without waiting."""
    import select

    chunks = []
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


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


def fit_line(text: str, columns: int) -> str:
    """``text`` as it fits ``columns`` cells: whole, or cut with '…' as its last cell."""
    if get_cwidth(text) <= columns:
        return text
    kept, used = [], 0
    for char in text:
        used += get_cwidth(char)
        if used > columns - 1:
            break
        kept.append(char)
    return "".join(kept).rstrip(" ·…") + "…"


def private_history_file(path: Path) -> Path:
    """Create the input-history file 0600 (it holds what the user typed)."""
    create_private_file(path)
    return path


class PrivateFileHistory(FileHistory):
    """The input history in a file created private when the first line is stored."""

    def store_string(self, string: str) -> None:
        private_history_file(Path(os.fsdecode(self.filename)))
        super().store_string(string)


class PromptToolkitReader:
    """Reads lines in a real terminal: Enter sends, Alt-Enter adds a line, pastes stay whole.
    ``shown`` is called once each prompt is on the screen."""

    def __init__(
        self,
        history_path: Path,
        completer: Completer,
        shown: Callable[[], None] | None = None,
    ) -> None:
        self.shown = shown
        self.session: PromptSession[str] = PromptSession(
            history=PrivateFileHistory(str(history_path)),
            completer=completer,
            complete_while_typing=False,
            key_bindings=_key_bindings(),
            multiline=False,
            enable_history_search=False,
            enable_open_in_editor=True,  # Ctrl-X Ctrl-E: $VISUAL / $EDITOR, then sent
            prompt_continuation=_continuation,
        )

    def read(self, prompt: str, toolbar: Callable[[], str] | None = None) -> str:
        """One message; ``EOFError`` on Ctrl-D, ``KeyboardInterrupt`` on Ctrl-C."""
        fitted = (
            None
            if toolbar is None
            else lambda: fit_line(toolbar(), self.session.app.output.get_size().columns)
        )
        return self.session.prompt(prompt, bottom_toolbar=fitted, pre_run=self._pre_run)

    def echo(self, prompt: str, text: str) -> None:
        """Show ``text`` as a line sent at ``prompt`` (kept in the input history)."""
        self.session.prompt(prompt, default=text, accept_default=True)

    @contextlib.contextmanager
    def hold_keys(self) -> Iterator[HeldKeys]:
        """While the REPL is busy: keys pressed are not echoed and wait for the next prompt,
        which takes them as if typed there; a Ctrl-D among them is dropped and reported in the
        :class:`HeldKeys`; Ctrl-C still interrupts.

        The terminal reads keys unechoed (an echo would move the cursor under the live
        display), signals on, its input kept at Ctrl-C (``NOFLSH``), bracketed paste on; what
        was typed goes to prompt_toolkit's type-ahead. Keys typed as the prompt ended are read
        as the block starts, and a Ctrl-C among them raises ``KeyboardInterrupt`` there.
        """
        held = HeldKeys()
        try:
            import termios

            fd = self.session.app.input.fileno()
            saved = termios.tcgetattr(fd)
        except Exception:  # not POSIX, or the input is not a terminal
            yield held
            return
        quiet = list(saved)
        quiet[0] &= ~(termios.ICRNL | termios.INLCR | termios.IGNCR | termios.IXON)
        quiet[3] &= ~(termios.ECHO | termios.ICANON | termios.IEXTEN)  # (ISIG stays: Ctrl-C)
        quiet[3] |= termios.NOFLSH
        quiet[6] = list(saved[6])
        quiet[6][termios.VMIN], quiet[6][termios.VTIME] = 1, 0
        termios.tcsetattr(fd, termios.TCSANOW, quiet)
        try:
            early = get_typeahead(self.session.app.input)  # (left by the prompt that ended)
            ctrl_c, held.ctrl_d = self._type_ahead(_pending(fd), early, Keys.ControlC)
        except BaseException:
            termios.tcsetattr(fd, termios.TCSANOW, saved)
            raise
        if ctrl_c:
            termios.tcsetattr(fd, termios.TCSANOW, saved)
            raise KeyboardInterrupt
        _write_terminal(_PASTE_ON)
        try:
            yield held
        finally:
            try:
                typed = _pending(fd)
            finally:
                _write_terminal(_PASTE_OFF)
                termios.tcsetattr(fd, termios.TCSANOW, saved)
            held.ctrl_d = self._type_ahead(typed)[1] or held.ctrl_d

    def _type_ahead(
        self, typed: bytes, before: Iterable[KeyPress] = (), *dropped: Keys
    ) -> tuple[bool, bool]:
        """Hand keys typed while no prompt was up (``before``, then ``typed``) to the next
        one, Ctrl-D and the ``dropped`` keys left out; whether there was one of the
        ``dropped`` keys, and whether there was a Ctrl-D."""
        keys: list[KeyPress] = list(before)
        parser = Vt100Parser(keys.append)
        parser.feed_and_flush(typed.decode("utf-8", errors="replace"))
        left_out = {Keys.ControlD, *dropped}
        store_typeahead(self.session.app.input, [k for k in keys if k.key not in left_out])
        found = {key.key for key in keys}
        return bool(found & set(dropped)), Keys.ControlD in found

    def _pre_run(self) -> None:
        if self.shown is not None:  # pre_run comes before the first drawing; this after it
            asyncio.get_running_loop().call_soon(self.shown)

    def interject(self, action: Callable[[], None]) -> bool:
        """Run ``action`` at the prompt being read, from any thread: what it prints appears
        above the prompt, drawn again after. If ``action`` raises, the read raises that. False
        when no line is being read (the caller then runs ``action`` itself)."""
        app = self.session.app
        loop = app.loop
        if loop is None or not app.is_running:
            return False

        async def in_terminal() -> None:
            try:
                await run_in_terminal(action)
            except asyncio.CancelledError:
                raise
            except BaseException as error:  # the read ends with it
                if not app.is_done:
                    app.exit(exception=error)

        def schedule() -> None:
            if app.is_running and not app.is_done:
                with set_app(app):  # run_in_terminal finds the prompt through the context
                    app.create_background_task(in_terminal())

        try:
            loop.call_soon_threadsafe(schedule)
        except RuntimeError:  # the prompt's loop closed meanwhile
            return False
        return True
