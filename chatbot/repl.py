"""The interactive chat loop: reads lines, streams replies, runs slash commands.

The loop gets its console and its line reader injected, so it runs the same in a terminal
(prompt_toolkit + Rich) and in tests (a list of lines + a Rich console writing to a buffer).
Slash commands live in :mod:`chatbot.commands`.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import queue
import secrets
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tracers.context import register_configure_hook
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.markup import escape
from rich.segment import Segment

from chatbot import policy, prompts
from chatbot.backend import Backend
from chatbot.errors import describe_error, redact
from chatbot.render import describe_summary
from chatbot.session import Event, Reply, Summarized, SummaryFailed, Token
from chatbot.settings import Settings
from chatbot.timeline import Snapshot

log = logging.getLogger("chatbot.repl")

MAX_THREAD_ID = 100


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


class ReplyStopped(Exception):
    """Ends a model call that is still streaming after the user pressed Ctrl-C."""


class StopOnInterrupt(BaseCallbackHandler):
    """Makes the model calls of a turn give up at their next token once ``stop`` is set.

    LangGraph runs a node in a worker thread while the main thread relays its stream, and
    Ctrl-C only interrupts the main thread, which then waits for the node to finish: without
    this the whole reply would still be generated (and saved) after Ctrl-C. With it the
    model call fails at once, the turn stays unfinished and ``/retry`` regenerates it.
    """

    raise_error = True

    def __init__(self) -> None:
        self.stop = threading.Event()

    def _check(self) -> None:
        if self.stop.is_set():
            raise ReplyStopped("the reply was stopped with Ctrl-C")

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        self._check()

    def on_llm_start(self, *args: Any, **kwargs: Any) -> None:
        self._check()

    def on_llm_new_token(self, *args: Any, **kwargs: Any) -> None:
        self._check()

    def on_llm_end(self, *args: Any, **kwargs: Any) -> None:
        self._check()  # a reply that arrives whole after Ctrl-C is not saved either


_turn_stopper: ContextVar[StopOnInterrupt | None] = ContextVar("chatbot_turn_stopper", default=None)
register_configure_hook(_turn_stopper, inheritable=True)  # every model call of the turn sees it


class Relay:
    """Runs a turn's events in a worker thread and hands them to the caller's thread.

    The caller (the REPL, on the main thread) waits with a short timeout, so Ctrl-C reaches it
    at once even while the model has not sent its first token; the stopped turn then ends in
    the background, at its next token, and :meth:`finish` waits for that before the next turn.
    """

    _DONE = object()

    def __init__(self, events: Iterator[Event], context: contextvars.Context) -> None:
        self._events = events
        self._queue: queue.Queue[Any] = queue.Queue()
        self.stopped = threading.Event()
        self._thread = threading.Thread(
            target=context.run, args=(self._pump,), name="chatbot-turn", daemon=True
        )
        self._thread.start()

    def _pump(self) -> None:
        try:
            for event in self._events:
                self._queue.put(event)
                if self.stopped.is_set():
                    break
        except BaseException as error:  # handed to the caller's thread
            self._queue.put(error)
        finally:
            close = getattr(self._events, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()
            self._queue.put(self._DONE)

    def __iter__(self) -> Iterator[Event]:
        while True:
            try:
                item = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is self._DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def stop(self) -> None:
        """Ask the turn to end; it does so at its next model callback."""
        self.stopped.set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def finish(self, timeout: float | None = None) -> bool:
        """Wait for the worker to end; True if it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()


class Tail:
    """Render only the last ``max_lines`` lines of a renderable (a streaming reply's tail)."""

    def __init__(self, renderable: RenderableType, max_lines: int) -> None:
        self.renderable = renderable
        self.max_lines = max(1, max_lines)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # Word-wrap even on a soft-wrapping console: Live would crop each line at the edge.
        options = options.update(no_wrap=False, overflow="fold")
        lines = console.render_lines(self.renderable, options, pad=False)
        for line in lines[-self.max_lines :]:
            yield from line
            yield Segment.line()


def new_thread_id(now: datetime | None = None) -> str:
    """A fresh, readable thread id: date, time and a random suffix."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(2)}"


def check_thread_id(thread_id: str) -> str:
    """A thread id people can type: non-empty, no spaces, at most 100 characters."""
    value = thread_id.strip()
    if not value or any(c.isspace() for c in value) or len(value) > MAX_THREAD_ID:
        raise ValueError(
            f"{thread_id!r} is not a usable thread id: use 1-{MAX_THREAD_ID} characters "
            "without spaces"
        )
    return value


@dataclass
class Repl:
    """One interactive session: a current thread, a chat model name, and the screen."""

    backend: Backend
    console: Console
    reader: LineReader
    settings: Settings
    thread_id: str
    model_name: str
    max_input_tokens: int | None = None
    notice: str = ""
    context: dict[str, Any] = field(default_factory=dict)
    err: Console | None = None
    export_dir: Path | None = None
    _context_tokens: int = 0
    _message_count: int = 0
    _stopped_turn: Relay | None = None

    # --- output helpers ------------------------------------------------------------------

    def print(self, *objects: Any) -> None:
        """Print; on a terminal Rich wraps at word boundaries (a soft-wrapping console leaves
        long lines to the terminal, which breaks them in the middle of words)."""
        self.console.print(*objects, soft_wrap=False if self.console.is_terminal else None)

    def say(self, text: str, style: str = "") -> None:
        """One line of feedback (escaped: user text never becomes markup)."""
        self.print(f"[{style}]{escape(text)}[/]" if style else escape(text))

    def problem(self, text: str) -> None:
        """One line saying what is wrong and how to fix it."""
        self.print(f"[red]error:[/] {escape(text)}")

    # --- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        """Chat until /exit or Ctrl-D. Returns the exit code."""
        from chatbot.commands import dispatch

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
            self.settle()
            if line.lstrip().startswith("/"):
                if dispatch(self, line.strip()) == "exit":
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

    def policy_setting(self, name: str) -> str | None:
        """``summary_trigger`` or ``summary_keep`` in force; ``None`` when the server decides."""
        value = self.context.get(name)
        if value:
            return str(value)
        return None if self.remote else str(getattr(self.settings, name))

    def run_policy(self) -> policy.SummaryPolicy | None:
        """The policy in force (``None`` if unknown here or not resolvable for this model)."""
        trigger, keep = self.policy_setting("summary_trigger"), self.policy_setting("summary_keep")
        if trigger is None:
            return None
        try:
            return policy.SummaryPolicy.from_strings(
                trigger,
                keep or self.settings.summary_keep,
                keep_first_message=self.settings.keep_first_message,
                max_input_tokens=self.settings.max_input_tokens or self.max_input_tokens,
            )
        except policy.PolicyError:
            return None

    def context_meter(self) -> str:
        """``context 1,234/12,000 tokens`` or ``5/6 messages``, against the trigger."""
        run_policy = self.run_policy()
        threshold = run_policy.trigger_tokens() if run_policy else None
        if threshold is not None:
            return f"context {self._context_tokens:,}/{threshold:,} tokens"
        limits = [
            lim for lim in (run_policy.trigger if run_policy else ()) if lim.kind == "messages"
        ]
        if limits:
            return f"{self._message_count}/{int(limits[0].value)} messages"
        return f"context {self._context_tokens:,} tokens"

    def measure(self, snapshot: Snapshot | None) -> int:
        """Refresh the context size from a snapshot; returns the tokens."""
        if snapshot is None:
            self._context_tokens = self._message_count = 0
            return 0
        sent = prompts.conversation_input(
            list(snapshot.messages),
            snapshot.summary,
            self.context.get("system_prompt") or self.settings.system_prompt,
            self.settings.language,
        )
        self._context_tokens = policy.count_tokens(sent)
        self._message_count = len(snapshot.messages)
        return self._context_tokens

    # --- threads ---------------------------------------------------------------------------

    def greet(self) -> None:
        """The opening lines: version, where threads live, the model; any notice."""
        from chatbot import __version__

        self.print(
            f"[bold]chatbot {__version__}[/] · model [bold]{escape(self.model_name)}[/] · "
            f"threads in {escape(self.backend.location)} · /help for commands, Ctrl-D to leave"
        )
        if self.notice:
            self.print(f"[yellow]note:[/] {escape(self.notice)}")
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
        if snapshot.unfinished:
            self.print(
                "[yellow]The last turn in this thread did not finish (interrupted or failed)."
                "[/] /retry resumes it."
            )

    # --- a turn ----------------------------------------------------------------------------

    def chat(self, text: str) -> None:
        """Send a message and stream the reply."""
        self.stream(self.backend.send(self.thread_id, text, self.context))

    def settle(self) -> None:
        """Wait until a turn stopped with Ctrl-C has really ended (before touching threads)."""
        relay, self._stopped_turn = self._stopped_turn, None
        if relay is None or relay.finish(timeout=0.5):
            return
        self.say("waiting for the stopped reply to end (Ctrl-C to stop waiting)...", "dim")
        try:
            relay.finish()
        except KeyboardInterrupt:
            self._stopped_turn = relay

    def stream(self, events: Iterator[Event]) -> None:
        """Show a turn's events: the reply as Markdown while it streams, then summary notes."""
        text = ""
        notes: list[str] = []
        replied = False
        stopper = StopOnInterrupt()
        stopper_token = _turn_stopper.set(stopper)
        relay = Relay(events, contextvars.copy_context())  # the worker sees the stopper
        _turn_stopper.reset(stopper_token)
        previous_handler = _stop_on_sigint(stopper)
        try:
            if self.console.is_terminal:
                height = max(3, self.console.size.height - 2)
                with (
                    _keys_not_echoed(),
                    Live(
                        console=self.console,
                        refresh_per_second=12,
                        transient=True,
                        vertical_overflow="crop",
                    ) as live,
                ):
                    for event in relay:
                        replied = replied or isinstance(event, Reply)
                        text = self._apply(event, text, notes)
                        live.update(Tail(Markdown(text), height))
            else:
                for event in relay:
                    replied = replied or isinstance(event, Reply)
                    text = self._apply(event, text, notes)
        except KeyboardInterrupt:
            stopper.stop.set()
            relay.stop()
            if not relay.finish(timeout=1.0):
                self._stopped_turn = relay  # it ends at its next token; settle() waits for it
            self._show_reply(text)
            if replied:
                self.print(
                    "[yellow]interrupted[/] [dim]- the reply is saved; the summary is made "
                    "next turn[/]"
                )
            else:
                self.print(
                    "[yellow]interrupted[/] "
                    "[dim]- your message is kept; /retry regenerates the reply[/]"
                )
            return
        except Exception as error:  # a provider error: one line, the thread stays consistent
            log.debug("turn failed", exc_info=True)
            self._show_reply(text)
            self.problem(f"{describe_error(error)} - your message is kept; /retry tries again")
            return
        finally:
            if previous_handler is not None:
                signal.signal(signal.SIGINT, previous_handler)
            if not relay.running:
                self.measure(self._safe_current())
        self._show_reply(text)
        for note in notes:
            self.print(note)

    def _safe_current(self) -> Snapshot | None:
        try:
            return self.backend.current(self.thread_id)
        except Exception:  # measuring is best effort after a failure
            return None

    def _apply(self, event: Event, text: str, notes: list[str]) -> str:
        if isinstance(event, Token):
            return text + event.text
        if isinstance(event, Reply) and not text:
            return event.message.text
        if isinstance(event, Summarized):
            notes.append(f"[dim]{escape(describe_summary(event))}[/]")
        elif isinstance(event, SummaryFailed):
            notes.append(
                "[yellow]summary failed, nothing was removed (next turn retries):[/] "
                f"{escape(redact(event.error))}"
            )
        return text

    def _show_reply(self, text: str) -> None:
        if text:
            self.print(Markdown(text))


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


def _stop_on_sigint(stopper: StopOnInterrupt) -> Any:
    """While a turn streams, Ctrl-C also tells the turn's model calls to stop.

    Returns the handler to put back, or ``None`` when nothing was installed (not the main
    thread, or SIGINT is not Python's default handler).
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        return None

    def interrupt(signum: int, frame: Any) -> None:
        stopper.stop.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    return previous
