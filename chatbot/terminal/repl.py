"""The interactive chat loop: reads lines, streams replies, runs slash commands.

The loop gets its console, line reader and slash commands (``dispatch``) injected, so it runs
the same in a terminal and in tests. Given a :class:`LoadingBackend`, it shows the prompt at
once while the backend and models load; a line that needs them waits with the spinner, and what
needs them (the model's notice, an unfinished turn, the status line) is shown once loaded.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rich.console import Console
from rich.markup import escape

from chatbot import interrupts
from chatbot.config.sources import SettingsError
from chatbot.logs import logger
from chatbot.plural import counted
from chatbot.sanitize import sanitize
from chatbot.threads.loading import LoadFailed, LoadingBackend
from chatbot.threads.runner import TICK_SECONDS, TurnOutcome, session_runner

if TYPE_CHECKING:  # LangGraph, langchain-core and pydantic are imported behind the prompt
    from chatbot.config.settings import Settings
    from chatbot.engine.runsettings import RunSettings
    from chatbot.history.snapshots import Snapshot
    from chatbot.memory.tokens import TokenCounter
    from chatbot.terminal.display import ReplyView
    from chatbot.threads.attachments import Attachment
    from chatbot.threads.backend import Backend
    from chatbot.threads.events import Kept, TurnStream

log = logger("repl")

SERVERS_MODEL = "the server's model"
"""The chat model on a server that was not told one (``model_name`` is empty)."""


class LineReader(Protocol):
    """Reads one line of input. Raises ``EOFError`` (Ctrl-D) or ``KeyboardInterrupt`` (Ctrl-C)."""

    def read(self, prompt: str, toolbar: Callable[[], str] | None = None) -> str: ...


@dataclass
class HeldKeys:
    """What a reader did with the keys pressed while no prompt was up (:class:`HoldsKeys`)."""

    ctrl_d: bool = False
    """Ctrl-D was among them: dropped, and the REPL says so."""


@runtime_checkable
class HoldsKeys(Protocol):
    """A terminal's reader: keys pressed while the REPL is busy wait for the next prompt."""

    def hold_keys(self) -> contextlib.AbstractContextManager[HeldKeys]: ...


@runtime_checkable
class EchoesLines(Protocol):
    """A terminal's reader: it can show a line as its prompt shows one sent (``/edit``'s)."""

    def echo(self, prompt: str, text: str) -> None: ...


CTRL_D_IGNORED = "Ctrl-D does nothing while a reply streams: at an empty prompt it leaves"


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
"""Runs one line that starts with ``/`` on a REPL (a command, or a message it sends);
``"exit"`` ends the loop."""


# --- starting behind the prompt ---------------------------------------------------------------


class LoadingInterrupted(KeyboardInterrupt):
    """Ctrl-C while a line waited for loading: the line is dropped, the REPL goes on."""


def thread_line(thread_id: str, messages: int, summary: bool) -> str:
    """``thread t1: 2 messages, no summary yet``: what a thread holds."""
    told = "with a summary" if summary else "no summary yet"
    return f"thread {thread_id}: {counted(messages, 'message')}, {told}"


# --- the REPL --------------------------------------------------------------------------------


@dataclass
class Repl:
    """One interactive session: a current thread, a chat model name, and the screen. With a
    :class:`LoadingBackend` (``settings`` ``None``), it takes what loads into use once loaded."""

    backend: Backend
    console: Console
    reader: LineReader
    settings: Settings | None
    thread_id: str
    model_name: str
    """The chat model's name; empty on a server that chooses its own (:data:`SERVERS_MODEL`)."""
    dispatch: Dispatch
    notice: str = ""
    context: dict[str, Any] = field(default_factory=dict)
    interject: Callable[[Callable[[], None]], bool] | None = None
    """Runs output above a prompt being read, from any thread (a terminal reader's)."""
    _context_tokens: int = 0
    _message_count: int = 0
    _priced: Snapshot | None = None
    """The checkpoint the status line's cost is read from (its usage record)."""
    _untold: str | None = None
    """The thread whose state the greeting told only from its listing row (before loading)."""
    _counts_told: bool = True
    attachments: list[Attachment] = field(default_factory=list)
    """Files attached (``/file``) to the next message."""
    _ctrl_d_ignored: bool = False
    """Ctrl-D was pressed while the REPL was busy: said above the next prompt."""
    _spoken: set[str] = field(default_factory=set)
    """The threads this session sent a message in (read for memories when left)."""

    def __post_init__(self) -> None:
        loading = self._loading()
        if loading is not None:
            loading.waiting = self._wait_for
            loading.finished_hook = self._wake

    # --- output helpers ------------------------------------------------------------------

    def print(self, *objects: Any) -> None:
        """Print; on a terminal Rich wraps at word boundaries, not the terminal mid-word."""
        self.console.print(*objects, soft_wrap=False if self.console.is_terminal else None)

    def say(self, text: str, style: str = "") -> None:
        """One line of feedback, escaped and sanitized (never markup, never control codes)."""
        text = escape(sanitize(text))
        self.print(f"[{style}]{text}[/]" if style else text)

    def echo(self, text: str) -> None:
        """Show a message about to be sent that is not the line typed (``/edit``'s) as the
        prompt shows a line sent, so the scrollback holds what was sent (terminal readers)."""
        if isinstance(self.reader, EchoesLines):
            self.reader.echo(self.prompt(), text)

    def problem(self, text: str) -> None:
        """One line saying what is wrong and how to fix it."""
        self.print(f"[red]error:[/] {escape(sanitize(text))}")

    # --- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        """Chat until /exit or Ctrl-D. Returns the exit code; raises a failed loading's error."""
        try:
            self._loop()
        except LoadFailed as failed:
            raise failed.error from None
        return 0

    def _loop(self) -> None:
        self.greet()
        while True:
            interrupts.forget()  # (a Ctrl-C that stopped a command is handled)
            self._settle()
            if self._ctrl_d_ignored:
                self._ctrl_d_ignored = False
                self.say(CTRL_D_IGNORED, "dim")
            try:
                line = self.reader.read(self.prompt(), self.toolbar)
            except KeyboardInterrupt:
                continue  # Ctrl-C at the prompt clears the line
            except EOFError:
                self.console.print()
                self.leave_thread()
                return
            if not line.strip():
                continue
            try:
                if line.startswith("/"):  # (a command, or a message starting with "/")
                    if self.dispatch(self, line) == "exit":
                        self.leave_thread()
                        return
                else:
                    self.chat(line)
            except LoadingInterrupted:
                self.print("[yellow]interrupted[/] [dim]- still loading; nothing was done[/]")
            except KeyboardInterrupt:  # Ctrl-C stops a command, not the REPL
                self.print("[yellow]interrupted[/]")

    def prompt(self) -> str:
        """The input prompt: the current thread."""
        return f"{self.thread_id}> "

    def toolbar(self) -> str:
        """The status line: thread, model, context size against the trigger."""
        if self._loading() is not None:
            return f" {self.thread_id} · loading the model… · /help · Alt-Enter: newline "
        from chatbot.memory.pricing import status_meter

        cost = status_meter(self._priced)  # from the thread's usage record
        return (
            f" {self.thread_id} · {self.model_name or SERVERS_MODEL} · {self.context_meter()} · "
            f"{cost + ' · ' if cost else ''}/help · Alt-Enter: newline "
        )

    # --- loading ---------------------------------------------------------------------------

    def _loading(self) -> LoadingBackend | None:
        backend: object = self.backend
        return backend if isinstance(backend, LoadingBackend) else None

    def ready(self, *, reading: bool = False) -> None:
        """Wait, with the spinner, until turns can run (``reading``: threads can be read).
        Ctrl-C: :class:`LoadingInterrupted`; a failed loading: :class:`LoadFailed`."""
        loading = self._loading()
        if loading is not None:
            loading.wait(reading=reading)
            self._settle()

    def prompt_shown(self) -> None:
        """Called as each prompt is drawn: the first starts loading; then says what it made."""
        loading = self._loading()
        if loading is None:
            return
        if loading.finished:
            self._wake()
            return
        import chatbot.terminal.display  # noqa: F401  (the spinner's: imported before loading imports)

        loading.start()

    def can_read(self) -> bool:
        """True when threads can be read without waiting (for completion, which never waits)."""
        loading = self._loading()
        return loading is None or loading.is_open

    def _wait_for(self, done: threading.Event, words: str) -> None:
        """Wait for loading with the spinner saying ``words``; Ctrl-C stops waiting."""
        from chatbot.terminal.display import ReplyView

        view = ReplyView(self.console, live=self.console.is_terminal)
        view.start(words)
        try:
            with self._keys_held(view.live):
                view.tick()
                while not done.wait(TICK_SECONDS):
                    view.tick()
        except KeyboardInterrupt:
            raise LoadingInterrupted from None
        finally:
            view.finish()
        self._settle()

    def _wake(self) -> None:
        """Loading has ended (on the loading thread): say so above the prompt, if one is up."""
        if self.interject is not None:
            self.interject(self._settle)

    def _settle(self) -> None:
        """Once loading has finished, take what it made into use and say what needed it.
        Raises :class:`LoadFailed` if it failed. On the REPL's own thread only."""
        loading = self._loading()
        if loading is None or not loading.finished:
            return
        opened, loaded = loading.result()
        self.backend, self.settings = opened.backend, opened.settings
        self.model_name, self.notice = loaded.model_name, loaded.notice
        if self.notice:
            self.print(f"[yellow]note:[/] {escape(sanitize(self.notice))}")
        snapshot = self.backend.current(self.thread_id)
        if self._untold == self.thread_id:
            self._tell(self.thread_id, snapshot, counts=not self._counts_told)
        self._untold = None
        self.measure(snapshot)

    @property
    def remote(self) -> bool:
        """True when the threads live on a LangGraph server (whose own .env sets the policy)."""
        return bool(self.backend.local_only_note)

    def run_settings(self, thread_prompt: str = "") -> RunSettings | None:
        """What the next run in this session uses (its context, the thread's own prompt);
        ``None`` on a server, or when the context does not resolve."""
        try:
            return self.backend.run_settings(self.context, thread_prompt)
        except SettingsError:
            return None

    def counter(self) -> TokenCounter:
        """The token counter the graph counts with (on a server: this side's best guess)."""
        from chatbot.memory.tokens import counter_for

        run = self.run_settings()
        if run is not None:
            return run.counter
        return counter_for("", self.settings.tokenizer if self.settings else "auto")

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
        """Refresh the context size from a snapshot, as the graph counts; returns the tokens."""
        self._priced = snapshot
        if snapshot is None:
            self._context_tokens = self._message_count = 0
            return 0
        tokenizer = self.settings.tokenizer if self.settings else "auto"
        self._context_tokens = self.backend.context_tokens(
            snapshot, self.context, tokenizer, thread_id=self.thread_id
        )
        self._message_count = len(snapshot.messages)
        return self._context_tokens

    # --- threads ---------------------------------------------------------------------------

    def greet(self) -> None:
        """The opening lines: version, the model, where threads live; any notice; the thread."""
        from chatbot import __version__

        loading = self._loading()
        model = f"model [bold]{escape(sanitize(self.model_name))}[/]" if self.model_name else ""
        shown = "" if loading is not None else f" · {model or SERVERS_MODEL}"
        self.print(
            f"[bold]chatbot {__version__}[/]{shown} · threads in "
            f"{escape(sanitize(self.backend.location))} · /help for commands, Ctrl-D to leave"
        )
        if loading is not None:
            info = loading.thread_info(self.thread_id)
            if info is None:
                self.say(f"new thread {self.thread_id}", "dim")
                return
            self._untold = self.thread_id
            self._counts_told = info.message_count is not None and info.has_summary is not None
            if self._counts_told:
                line = thread_line(self.thread_id, info.message_count or 0, bool(info.has_summary))
                self.say(line, "dim")
            return
        if self.notice:
            self.print(f"[yellow]note:[/] {escape(sanitize(self.notice))}")
        self.open_thread(self.thread_id)

    def leave_thread(self) -> None:
        """The current thread is left: one this session spoke in is read for memories
        (``LocalBackend.leave``); Ctrl-C skips it."""
        if self.thread_id not in self._spoken:
            return
        self._spoken.discard(self.thread_id)
        try:
            added = self.backend.leave(self.thread_id, self.context)
        except KeyboardInterrupt:
            return
        except Exception as error:  # (leaving never fails for it: said, and gone on)
            from chatbot.errors import describe_error

            self.problem(f"the thread was not read for memories: {describe_error(error)}")
            return
        if added:
            noun = "fact" if added == 1 else "facts"
            self.say(f"remembered {added} {noun} about you from {self.thread_id} (/memory)", "dim")

    def open_thread(self, thread_id: str) -> None:
        """Make a thread current and say what is in it."""
        if thread_id != self.thread_id:
            self.leave_thread()
        self.thread_id = thread_id
        self._untold = None
        snapshot = self.backend.current(thread_id)
        if self._loading() is None:  # (while loading, it is measured once loaded)
            self.measure(snapshot)
        self._tell(thread_id, snapshot)
        if self.attachments:  # attached in the thread left: they go with this one's next message
            names = ", ".join(attachment.name for attachment in self.attachments)
            self.say(f"still attached to the next message: {names} (/file clear drops them)", "dim")

    def _tell(self, thread_id: str, snapshot: Snapshot | None, counts: bool = True) -> None:
        """What is in a thread: its messages and summary (``counts``), an unfinished turn."""
        if counts:
            if snapshot is None:
                self.say(f"new thread {thread_id}", "dim")
                return
            line = thread_line(thread_id, len(snapshot.messages), bool(snapshot.summary))
            self.say(line, "dim")
        if snapshot is None:
            return
        if snapshot.unfinished and self.backend.answering_elsewhere(thread_id):
            self.print(
                "[yellow]Another window or process is taking a turn in this thread now.[/] "
                "Its reply is saved when it ends: /thread shows it then."
            )
        elif snapshot.awaiting_reply:
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
        """Send a message with the attached files and stream the reply."""
        from chatbot.threads.attachments import message_content

        self.ready()
        content = message_content(text, self.attachments)
        self.attachments = []  # sent: the message (kept however the turn ends) holds them
        self._spoken.add(self.thread_id)
        self.stream(self.backend.send(self.thread_id, content, self.context))

    def stream(self, turn: TurnStream, waiting_for: str | None = None) -> None:
        """Run a turn: a spinner saying ``waiting_for``, the reply as Markdown while it streams,
        then notes about the summary. Ctrl-C stops the turn at once."""
        from chatbot.errors import describe_error
        from chatbot.terminal.display import THINKING, ReplyView
        from chatbot.terminal.render import failed_turn
        from chatbot.threads.events import Kept

        view = ReplyView(self.console, live=self.console.is_terminal)
        view.start(waiting_for or THINKING)
        started = False
        try:
            with self._keys_held(view.live):
                started = True
                try:
                    outcome = session_runner().run(turn, view)
                finally:
                    view.finish()
        except KeyboardInterrupt:
            if started:
                raise
            view.finish()  # Ctrl-C as the prompt ended (see _keys_held): the turn never began
            outcome = TurnOutcome(interrupted=True)
        for warning in outcome.warnings:
            self.print(f"[yellow]warning:[/] {escape(sanitize(warning))}")
        kept = turn.kept() if outcome.interrupted or outcome.error is not None else None
        if outcome.interrupted:
            self.print(f"[yellow]interrupted[/] [dim]- {escape(_after_ctrl_c(kept, view))}[/]")
        elif outcome.error is not None:  # one line, saying exactly what the thread holds
            log.debug("turn failed", exc_info=outcome.error)
            if kept is None:  # (a /retry, /compact: the message was saved before)
                kept = Kept(message=True, reply=False)
            again = "; /retry tries again"
            self.problem(failed_turn(describe_error(outcome.error), kept, view.replied, again))
        else:
            for note in view.notes:
                self.print(note)
        self.measure(turn.after or self._safe_current())  # (the state the turn ended with)

    @contextlib.contextmanager
    def _keys_held(self, live: bool) -> Iterator[None]:
        """While a live display is up, keys pressed wait for the next prompt
        (:class:`HoldsKeys`); Ctrl-C still interrupts, even as the block starts."""
        if not live or not isinstance(self.reader, HoldsKeys):
            yield
            return
        held = HeldKeys()
        try:
            with self.reader.hold_keys() as held:
                yield
        finally:
            self._ctrl_d_ignored = self._ctrl_d_ignored or held.ctrl_d

    def _safe_current(self) -> Snapshot | None:
        try:
            return self.backend.current(self.thread_id)
        except Exception:  # measuring is best effort after a failure
            return None


def _after_ctrl_c(kept: Kept | None, view: ReplyView) -> str:
    """What a turn stopped with Ctrl-C leaves (without a message of its own: the screen tells)."""
    from chatbot.threads.events import Kept

    if kept is None:
        kept = Kept(message=True, reply=view.replied)
    if kept.reply:
        return "the reply is saved; the summary is made next turn"
    if kept.message:
        return "your message is kept; /retry regenerates the reply"
    return "your message was not saved"
