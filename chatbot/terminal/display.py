"""How a turn looks while it runs: a spinner with words while waiting, then the reply, as
Markdown (the REPL) or as plain text (``chatbot ask``).

The Markdown reply is cut into blocks at blank lines outside code fences: a finished block is
printed once, above the live area, which holds only the block being written, redrawn at the
runner's tick. So long replies scroll like any output and a redraw does not grow with the reply.
Markdown and events are imported when first needed: this spinner shows while models load.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.markup import escape
from rich.segment import Segment
from rich.spinner import Spinner
from rich.text import Text

from chatbot.errors import FriendlyError, redact
from chatbot.plural import counted
from chatbot.sanitize import StreamSanitizer, sanitize

if TYPE_CHECKING:  # imported when a turn runs: the spinner alone needs only Rich
    from chatbot.threads.events import (
        Event,
        NothingToFold,
        Recalling,
        RecallOff,
        Retrying,
        Summarized,
        SummaryFailed,
    )


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


THINKING = "thinking…"


def seconds_text(elapsed: float) -> str:
    """A wait's length as the spinner says it: ``12s``, ``1m 12s``."""
    seconds = int(elapsed)
    return f"{seconds}s" if seconds < 60 else f"{seconds // 60}m {seconds % 60:02d}s"


RETRY_TOLD_FROM = 2.0
"""A wait before a model call is asked again is told from this many seconds on."""

_WHY = {
    "rate_limited": "rate limited by the server",
    "timeout": "the server did not answer in time",
    "connection": "cannot reach the server",
}


def retry_words(event: Retrying, seconds: int) -> str:
    """What a wait before a retry says, ``seconds`` before it ends: ``rate limited by the
    server, retrying the reply in 58 s (retry 1 of 2; Ctrl-C stops)``."""
    if event.reason == "server_failed":
        why = f"the server failed with {event.status}"
    elif event.reason == "status":
        why = f"the server answered {event.status}"
    else:
        why = _WHY.get(event.reason, "the call failed")
    what = "the summary" if event.call == "summary" else "the reply"
    return (
        f"{why}, retrying {what} in {seconds} s "
        f"(retry {event.retry} of {event.retries}; Ctrl-C stops)"
    )


def retry_note(event: Retrying) -> str | None:
    """The line for a wait before a retry where nothing counts it down; None if too short."""
    if event.seconds < RETRY_TOLD_FROM:
        return None
    return f"[dim]{escape(retry_words(event, math.ceil(event.seconds)))}[/]"


@dataclass(frozen=True)
class Countdown:
    """A wait before a retry, counted down to ``until`` (``time.monotonic()``'s clock)."""

    event: Retrying
    until: float

    def words(self, now: float) -> str:
        return retry_words(self.event, max(1, math.ceil(self.until - now)))

    def over(self, now: float) -> bool:
        return now >= self.until


_FENCES = ("```", "~~~")


def stable_prefix(text: str, start: int = 0) -> int:
    """Where the finished blocks of ``text[start:]`` end (``start`` when none has).

    A block is finished once a blank line outside a code fence is followed by a line that is
    not indented (an indented one may still belong to a list item). ``start`` must be such a
    boundary (or 0).
    """
    boundary = start
    offset = start
    fence = ""
    blank_before = False
    lines = text[start:].split("\n")
    for number, line in enumerate(lines):
        complete = number < len(lines) - 1
        stripped = line.strip()
        if not fence and blank_before and stripped and not line[:1].isspace():
            boundary = offset
        if not complete:
            break
        if fence:
            if stripped.startswith(fence):
                fence = ""
        elif stripped.startswith(_FENCES):
            fence = stripped[:3]
        blank_before = not fence and not stripped
        offset += len(line) + 1
    return boundary


@dataclass
class ReplyView:
    """One turn on the screen. ``live``: the reply is drawn as it streams (a terminal);
    otherwise it is printed whole (a pipe, a test).

    The REPL's view is Markdown; notes after the reply wait in :attr:`notes` for the REPL.
    ``plain`` is ``chatbot ask``'s: plain text, every note at once on ``notes_to``.
    ``spinner``: a :class:`WaitSpinner` already running (``ask`` on a terminal), stopped as the
    reply starts. A long wait before a retry is counted down where the spinner is, else one line."""

    console: Console
    live: bool
    plain: bool = False
    notes_to: Console | None = None
    """Where notes go (default: ``console``)."""
    spinner: WaitSpinner | None = None
    text: str = ""
    replied: bool = False
    """The whole reply came (and, ``plain``, was printed)."""
    notes: list[str] = field(default_factory=list)
    status: str = ""
    unprinted: FriendlyError | None = None
    """Why a ``plain`` reply could not be printed (stdout closed or full): the turn goes on."""
    _status_since: float = 0.0
    _countdown: Countdown | None = None
    """A wait before a retry, said instead of :attr:`status` until it is over."""
    _printed: int = 0
    """How much of ``text`` has been printed (as finished blocks, or as plain text)."""
    _live: Live | None = None
    _drawn: tuple[int, int, str, int] = (-1, -1, "", -1)
    _safe: StreamSanitizer = field(default_factory=StreamSanitizer)
    """A plain reply's escape code split across two tokens never gets through."""

    # --- the runner's side ----------------------------------------------------------------

    def start(self, waiting_for: str = THINKING) -> None:
        """Show the spinner (saying ``waiting_for``) until the first event."""
        self._set_status(waiting_for)
        if self.live and not self.plain and self.spinner is None:
            self._live = Live(console=self.console, auto_refresh=False, transient=True)
            self._live.start()

    def show(self, event: Event) -> None:
        from chatbot.threads import events

        if isinstance(event, events.Token | events.Reply) and self.spinner is not None:
            self.spinner.stop()  # (the reply goes to stdout: the spinner goes first)
        if isinstance(event, events.Token):
            self.status = ""
            if self.plain:
                if self.live:
                    self._write(event.text)
                return
            self.text += event.text
        elif isinstance(event, events.Reply):
            self.status = ""
            if self.plain:
                self._plain_reply(event.message.text)
                return
            self.replied = True
            final = event.message.text  # the whole reply, notes included
            if final and final.startswith(self.text[: self._printed]):
                self.text = final  # (what is printed already stays as it was)
        elif isinstance(event, events.Waiting):
            if self.plain:
                self._print_note(f"[dim]{escape(sanitize(event.words))}[/]")
            self._set_status(event.words)
        elif isinstance(event, events.Unanswered):
            if self.plain:  # (the REPL says it as it opens the thread)
                self._print_note(f"[yellow]note:[/] {escape(event.words)}")
        elif isinstance(event, events.Folding):  # (the seconds count from the fold's first part)
            self._set_status(event.words, restart=event.part == 1)
        elif isinstance(event, events.Retrying):
            self._retrying(event)
        elif isinstance(event, events.Recalling | events.RecallOff):
            self._print_note(recall_note(event))  # (before the reply it leads to)
            self._set_status(THINKING)
        elif isinstance(event, events.Summarized | events.SummaryFailed | events.NothingToFold):
            if (self.text or self.replied) and not self.plain:
                self.notes.append(note_for(event))  # (after the reply: told after it)
                self._set_status("")
                return
            # Before the reply (a fold so that the request fits): told now, above the reply.
            self._print_note(note_for(event))
            replying = not (self.text or self.replied) and event.reason != "compact"
            self._set_status(THINKING if replying else "")

    def tick(self) -> None:
        now = time.monotonic()
        if self._countdown is not None and self._countdown.over(now):
            self._set_status(self.status or THINKING)  # (asked again: its words, from 0 s)
        if self._live is None:
            return
        self._print_finished_blocks()
        rest = self.text[self._printed :]
        elapsed = now - self._status_since
        waiting = bool(self.status) or self._countdown is not None
        frame = int(elapsed * 10) if waiting else 0
        drawn = (len(self.text), self._printed, self.status, frame)
        if drawn == self._drawn:
            return  # nothing new: no redraw (a redraw is where the time goes)
        self._drawn = drawn
        height = max(3, self.console.size.height - 2)
        parts: list[RenderableType] = []
        if rest:
            from chatbot.terminal.markdown import Markdown

            parts.append(Tail(Markdown(rest), height - (1 if waiting else 0)))
        if self._countdown is not None:
            words = Text(self._countdown.words(now), style="dim")
            parts.append(Spinner("dots", text=words, style="dim"))
        elif self.status:
            words = Text(f"{self.status} {seconds_text(elapsed)}", style="dim")
            parts.append(Spinner("dots", text=words, style="dim"))
        self._live.update(Group(*parts), refresh=True)

    # --- the end --------------------------------------------------------------------------

    def finish(self) -> None:
        """Stop drawing and print what has not been printed yet."""
        if self.spinner is not None:
            self.spinner.stop()
        if self._live is not None:
            self._live.update(Group(), refresh=True)
            self._live.stop()
            self._live = None
        if self.plain:
            if self.text:
                self.console.print(self._safe.flush(), markup=False)
            return
        rest = self.text[self._printed :]
        if rest.strip():
            from chatbot.terminal.markdown import Markdown

            if self._printed:
                self.console.print()
            self.console.print(Markdown(rest), soft_wrap=self._soft_wrap)
        self._printed = len(self.text)

    def _write(self, text: str) -> None:
        """Plain text, as it streams."""
        self.console.print(self._safe.feed(text), end="", markup=False)
        self.text += text
        self._printed = len(self.text)

    def _plain_reply(self, final: str) -> None:
        """The whole reply came: the rest of it after what streamed, or all of it (a console
        that cannot take it: :attr:`unprinted`)."""
        if self.text:
            if final.startswith(self.text):
                self._write(final[len(self.text) :])
            self.replied = True
            return
        try:
            self.console.print(sanitize(final), markup=False)
            self.console.file.flush()
        except FriendlyError as error:
            self.unprinted = error
            return
        self.replied = True

    def _print_note(self, note: str) -> None:
        """A line printed at once: above the live area on a terminal, in its place otherwise."""
        if self.notes_to is not None:
            console = self.notes_to
        else:
            console = self._live.console if self._live is not None else self.console
        console.print(note, soft_wrap=False if console.is_terminal else None)  # (at words)
        self._drawn = (-1, -1, "", -1)  # (the live area is drawn again below it)

    def _print_finished_blocks(self) -> None:
        boundary = stable_prefix(self.text, self._printed)
        if boundary <= self._printed:
            return
        assert self._live is not None
        from chatbot.terminal.markdown import Markdown

        if self._printed:
            self._live.console.print()
        self._live.console.print(
            Markdown(self.text[self._printed : boundary]), soft_wrap=self._soft_wrap
        )
        self._printed = boundary

    @property
    def _soft_wrap(self) -> bool | None:
        """On a terminal Rich wraps the reply at word boundaries, not the terminal mid-word."""
        return False if self.live else None

    def _set_status(self, status: str, restart: bool = True) -> None:
        self.status = status
        self._countdown = None
        if restart:
            self._status_since = time.monotonic()
        if self.spinner is not None and status:
            self.spinner.say(status, restart)

    def _retrying(self, event: Retrying) -> None:
        """A wait before a retry: counted down where a spinner is drawn, else one line."""
        note = retry_note(event)
        if note is None:
            return
        if self._live is None and self.spinner is None:
            self._print_note(note)
            return
        self._countdown = Countdown(event, time.monotonic() + event.seconds)
        if self.spinner is not None:
            self.spinner.count_down(self._countdown)


LOADING = "loading the model…"


class WaitSpinner:
    """The spinner for a wait the waiting thread cannot draw through (``chatbot ask`` loading
    the model): a thread of Rich's draws it; print only on ``console`` while it runs."""

    def __init__(self, console: Console, words: str) -> None:
        self.console = console
        self._spinner = Spinner("dots", style="dim")
        self.words, self._since = words, time.monotonic()
        self._countdown: Countdown | None = None
        self._live: Live | None = None

    def say(self, words: str, restart: bool = True) -> None:
        """Say ``words`` from now on (the seconds count from now, unless not ``restart``)."""
        self.words, self._countdown = words, None
        if restart:
            self._since = time.monotonic()

    def count_down(self, countdown: Countdown) -> None:
        """Say a wait before a retry, counted down, until :meth:`say` says something else."""
        self._countdown = countdown

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        now = time.monotonic()
        if self._countdown is not None:
            line = self._countdown.words(now)
        else:
            line = f"{self.words} {seconds_text(now - self._since)}"
        self._spinner.update(text=Text(line, style="dim"))
        yield self._spinner

    def start(self) -> None:
        self._live = Live(
            self,
            console=self.console,
            refresh_per_second=10,
            transient=True,
            redirect_stdout=False,  # (stdout is the reply's, written once the spinner is gone)
            redirect_stderr=False,
        )
        self._live.start(refresh=True)

    def stop(self) -> None:
        """Erase it (again: nothing)."""
        if self._live is not None:
            self._live.stop()
            self._live = None


def recall_note(event: Recalling | RecallOff) -> str:
    """The line shown as the model recalls folded messages, or refuses the tool (Rich markup)."""
    from chatbot.threads.events import Recalling

    if isinstance(event, Recalling):
        query = escape(json.dumps(sanitize(event.query), ensure_ascii=False))
        return f"[dim]recalling {query}… {counted(event.found, 'message')}[/]"
    return (
        f"[yellow]recall is off for {escape(sanitize(event.model))}:[/] it refused tools; "
        "the turn was sent again without them"
    )


def note_for(event: Summarized | SummaryFailed | NothingToFold) -> str:
    """The line shown after a turn for what happened to the summary (Rich markup)."""
    from chatbot.terminal.render import describe_nothing_to_fold, describe_summary
    from chatbot.threads.events import Summarized, SummaryFailed

    if isinstance(event, Summarized):
        return f"[dim]{escape(describe_summary(event))}[/]"
    if isinstance(event, SummaryFailed):
        retry = "/compact again" if event.reason == "compact" else "the next turn retries"
        return (
            f"[yellow]summary failed, nothing was removed ({retry}):[/] "
            f"{escape(sanitize(redact(event.error)))}"
        )
    return f"[dim]{escape(describe_nothing_to_fold(event))}[/]"
