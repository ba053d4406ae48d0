"""The interactive chat loop: reads lines, streams replies, runs slash commands.

The loop gets its console and its line reader injected, so it runs the same in a terminal
(prompt_toolkit + Rich) and in tests (a list of lines + a Rich console writing to a buffer).
Slash commands live in :mod:`chatbot.commands`, which the caller hands in as ``dispatch``.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from rich.console import Console
from rich.markup import escape

from chatbot import prompts
from chatbot.backend import Backend
from chatbot.display import THINKING, ReplyView
from chatbot.errors import describe_error
from chatbot.runsettings import RunSettings
from chatbot.sanitize import sanitize
from chatbot.session import TurnStream
from chatbot.settings import Settings, SettingsError
from chatbot.timeline import Snapshot
from chatbot.tokens import TokenCounter, counter_for
from chatbot.turns import TurnRunner, session_runner

log = logging.getLogger("chatbot.repl")


class LineReader(Protocol):
    """Reads one line of input. Raises ``EOFError`` (Ctrl-D) or ``KeyboardInterrupt`` (Ctrl-C)."""

    def read(self, prompt: str, toolbar: Callable[[], str] | None = None) -> str: ...


class ScriptedReader:
    """A reader that replays given lines, then behaves like Ctrl-D. For tests and pipes."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines: Iterator[str] = iter(lines)

    def read(self, prompt: str, toolbar: Callable[[], str] | None = None) -> str:
        line = next(self._lines, None)
        if line is None:
            raise EOFError
        if isinstance(line, BaseException):
            raise line
        return line


Dispatch = Callable[["Repl", str], "str | None"]
"""Runs one slash-command line on a REPL; ``"exit"`` ends the loop. The REPL is given its
commands (``chatbot.commands.dispatch``) and knows nothing about them."""


@dataclass
class Repl:
    """One interactive session: a current thread, a chat model name, and the screen."""

    backend: Backend
    console: Console
    reader: LineReader
    settings: Settings
    thread_id: str
    model_name: str
    dispatch: Dispatch
    notice: str = ""
    context: dict[str, Any] = field(default_factory=dict)
    err: Console | None = None
    _context_tokens: int = 0
    _message_count: int = 0
    runner: TurnRunner = field(default_factory=session_runner)

    # --- output helpers ------------------------------------------------------------------

    def print(self, *objects: Any) -> None:
        """Print; on a terminal Rich wraps at word boundaries (a soft-wrapping console leaves
        long lines to the terminal, which breaks them in the middle of words)."""
        self.console.print(*objects, soft_wrap=False if self.console.is_terminal else None)

    def say(self, text: str, style: str = "") -> None:
        """One line of feedback (escaped and sanitized: user text never becomes markup or
        reaches the terminal as control codes)."""
        text = escape(sanitize(text))
        self.print(f"[{style}]{text}[/]" if style else text)

    def problem(self, text: str) -> None:
        """One line saying what is wrong and how to fix it."""
        self.print(f"[red]error:[/] {escape(sanitize(text))}")

    # --- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        """Chat until /exit or Ctrl-D. Returns the exit code."""
        self.greet()
        while True:
            try:
                line = self.reader.read(self.prompt(), self.toolbar)
            except KeyboardInterrupt:
                continue  # Ctrl-C at the prompt clears the line
            except EOFError:
                self.console.print()
                break
            if not line.strip():
                continue
            if line.lstrip().startswith("/"):
                if self.dispatch(self, line.strip()) == "exit":
                    break
            else:
                self.chat(line)
        return 0

    def prompt(self) -> str:
        """The input prompt: the current thread."""
        return f"{self.thread_id}> "

    def toolbar(self) -> str:
        """The status line: thread, model, context size against the trigger."""
        return (
            f" {self.thread_id} · {self.model_name} · {self.context_meter()} · "
            "/help · Alt-Enter: newline "
        )

    @property
    def remote(self) -> bool:
        """True when the threads live on a LangGraph server (whose own .env sets the policy)."""
        return bool(self.backend.local_only_note)

    def run_settings(self) -> RunSettings | None:
        """What the next run in this session uses: the graph's own resolver applied to the
        session's context (a /model switch included). ``None`` on a server, which resolves
        its runs with its own settings, or when the context does not resolve."""
        try:
            return self.backend.run_settings(self.context)
        except SettingsError:
            return None

    def counter(self) -> TokenCounter:
        """The token counter the graph counts with (on a server: this side's best guess)."""
        run = self.run_settings()
        return run.counter if run else counter_for("", self.settings.tokenizer)

    def context_meter(self) -> str:
        """``context 1,234/12,000 tokens`` or ``5/6 messages``, against the trigger."""
        run = self.run_settings()
        if run is None:
            return f"context {self._context_tokens:,} tokens"
        if not run.policy.automatic:
            return f"context {self._context_tokens:,} tokens · auto-fold off"
        threshold = run.policy.trigger_tokens()
        if threshold is not None:
            return f"context {self._context_tokens:,}/{threshold:,} tokens"
        first = run.policy.trigger[0]  # with no token threshold, every limit counts messages
        return f"{self._message_count}/{int(first.value)} messages"

    def measure(self, snapshot: Snapshot | None) -> int:
        """Refresh the context size from a snapshot: what the graph would send now, counted as
        the graph counts it (on a server, whose system prompt is its own: an estimate of the
        messages and the summary). Returns the tokens."""
        if snapshot is None:
            self._context_tokens = self._message_count = 0
            return 0
        run = self.run_settings()
        sent = prompts.conversation_input(
            list(snapshot.messages),
            snapshot.summary,
            run.system_prompt if run else "",
            run.language if run else "en",
        )
        self._context_tokens = (run.counter if run else self.counter()).messages(sent)
        self._message_count = len(snapshot.messages)
        return self._context_tokens

    # --- threads ---------------------------------------------------------------------------

    def greet(self) -> None:
        """The opening lines: version, where threads live, the model; any notice."""
        from chatbot import __version__

        self.print(
            f"[bold]chatbot {__version__}[/] · model [bold]{escape(sanitize(self.model_name))}[/]"
            f" · threads in {escape(sanitize(self.backend.location))} · /help for commands, "
            "Ctrl-D to leave"
        )
        if self.notice:
            self.print(f"[yellow]note:[/] {escape(sanitize(self.notice))}")
        self.open_thread(self.thread_id)

    def open_thread(self, thread_id: str) -> None:
        """Make a thread current and say what is in it."""
        self.thread_id = thread_id
        snapshot = self.backend.current(thread_id)
        self.measure(snapshot)
        if snapshot is None:
            self.say(f"new thread {thread_id}", "dim")
            return
        summary = "with a summary" if snapshot.summary else "no summary yet"
        self.say(f"thread {thread_id}: {len(snapshot.messages)} messages, {summary}", "dim")
        if snapshot.awaiting_reply:
            self.print(
                "[yellow]The last turn in this thread did not finish (interrupted or failed)."
                "[/] /retry resumes it."
            )
        elif snapshot.unfinished:  # the reply is saved; only the fold after it was cut short
            self.print(
                "[dim]The summary after the last reply did not finish; /retry finishes it "
                "(or the next turn does).[/]"
            )

    # --- a turn ----------------------------------------------------------------------------

    def chat(self, text: str) -> None:
        """Send a message and stream the reply."""
        self.stream(self.backend.send(self.thread_id, text, self.context))

    def stream(self, turn: TurnStream, waiting_for: str = THINKING) -> None:
        """Run a turn: a spinner while waiting, the reply as Markdown while it streams, then
        notes about the summary. Ctrl-C stops the turn at once (see :mod:`chatbot.turns`)."""
        view = ReplyView(self.console, live=self.console.is_terminal)
        view.start(waiting_for)
        with _keys_not_echoed() if view.live else contextlib.nullcontext():
            try:
                outcome = self.runner.run(turn, view)
            finally:
                view.finish()
        if outcome.interrupted:
            self.print(
                "[yellow]interrupted[/] [dim]- the reply is saved; the summary is made next turn[/]"
                if view.replied
                else "[yellow]interrupted[/] "
                "[dim]- your message is kept; /retry regenerates the reply[/]"
            )
        elif outcome.error is not None:  # a provider error: one line, the thread stays whole
            log.debug("turn failed", exc_info=outcome.error)
            self.problem(
                f"{describe_error(outcome.error)} - your message is kept; /retry tries again"
            )
        else:
            for note in view.notes:
                self.print(note)
        self.measure(self._safe_current())

    def _safe_current(self) -> Snapshot | None:
        try:
            return self.backend.current(self.thread_id)
        except Exception:  # measuring is best effort after a failure
            return None


@contextlib.contextmanager
def _keys_not_echoed() -> Iterator[None]:
    """While a reply streams, the terminal does not echo keys into the live display.

    An echoed ``^C`` or typed-ahead text moves the cursor, so the live display could no longer
    erase itself and a copy of its first line stayed on the screen. Typed-ahead text still
    reaches the next prompt; Ctrl-C still interrupts.
    """
    saved: list[Any] | None = None
    try:
        import termios

        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
    except Exception:  # not POSIX, or stdin is not a terminal
        pass
    if saved is None:
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~termios.ECHO  # the local modes
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)
