"""Rich renderables for threads, histories, summaries and states. Rendering only: no I/O."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from langchain_core.messages import AIMessage, BaseMessage
from markdown_it import MarkdownIt
from rich.cells import cell_len
from rich.console import (
    Console,
    ConsoleOptions,
    Group,
    JustifyMethod,
    RenderableType,
    RenderResult,
)
from rich.markdown import Markdown as RichMarkdown
from rich.padding import Padding
from rich.panel import Panel
from rich.style import Style
from rich.table import Table
from rich.text import Text

from chatbot.history.lineage import short_id
from chatbot.history.records import ROLE_NAMES
from chatbot.history.snapshots import Snapshot
from chatbot.history.summary import SummaryChange
from chatbot.history.turns import HistoryRow, TurnEntry
from chatbot.parts import readable_text
from chatbot.plural import counted
from chatbot.sanitize import sanitize
from chatbot.store.base import ThreadInfo

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from chatbot.store.search import Hit
    from chatbot.threads.events import Kept, NothingToFold, Summarized
    from chatbot.threads.operations import ContextWindow


class Markdown(RichMarkdown):
    """Rich's Markdown with raw HTML off: ``<T>`` or ``#include <stdio.h>`` stay visible text.
    Escape sequences and control characters in the text are removed (:func:`sanitize`), and
    links show their address.

    Rich drops inline HTML it does not know; a chat about code is full of angle brackets.
    """

    def __init__(
        self,
        markup: str,
        code_theme: str = "monokai",
        justify: JustifyMethod | None = None,
        style: str | Style = "none",
        hyperlinks: bool = False,  # "text (url)": a link never hides its address
        inline_code_lexer: str | None = None,
        inline_code_theme: str | None = None,
    ) -> None:
        # Rich's __init__ sets these and parses with a parser it makes each time (HTML on):
        # making one takes as long as parsing a short reply, and a thread shows dozens.
        self.markup = sanitize(markup)
        self.parsed = _markdown_parser().parse(self.markup)
        self.code_theme = code_theme
        self.justify = justify
        self.style = style
        self.hyperlinks = hyperlinks
        self.inline_code_lexer = inline_code_lexer
        self.inline_code_theme = inline_code_theme or code_theme


@functools.cache
def _markdown_parser() -> MarkdownIt:
    """CommonMark without raw HTML, with tables and strikethrough as Rich's: made once, as
    making one takes as long as parsing a short reply."""
    return MarkdownIt("commonmark", {"html": False}).enable("strikethrough").enable("table")


class Wrapped:
    """A renderable word-wrapped at the console's width, long words folded onto the next line:
    nothing is ever cut at the edge, whatever the console's defaults.

    The CLI's console soft-wraps (a plain line is left for the terminal to break), and under
    soft wrap Rich crops whatever sits in a panel or a table cell at its edge.
    """

    def __init__(self, *renderables: RenderableType) -> None:
        self.renderable = Group(*renderables)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from console.render(self.renderable, options.update(no_wrap=False, overflow="fold"))


ROLE_STYLES = {"human": "bold cyan", "ai": "bold green", "tool": "bold magenta", "system": "bold"}


def plain(text: str, style: str = "") -> Text:
    """Text from a model, a file or a user, shown as it is (no markup) and made safe to print."""
    return Text(sanitize(text), style=style)


def when(moment: datetime | None, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    """A timestamp in local time, to the second; '-' when unknown."""
    if moment is None:
        return "-"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone().strftime(fmt)


def describe_summary(event: Summarized) -> str:
    """The one dim line shown when messages are folded into the summary."""
    steps = f" in {event.calls} steps" if event.calls > 1 else ""
    messages = counted(event.messages, "message")
    folded = f"{messages} ({event.tokens_in:,} tokens) into {event.tokens_out:,} tokens{steps}"
    context = (
        f"; context {event.context_before:,} → {event.context_after:,} tokens"
        if event.context_before
        else ""
    )
    if event.reason == "fit":
        return f"folded {folded} before answering, so the request fits the model{context}"
    if event.reason == "overflow":
        return f"the model said the context was too long: folded {folded}, trying again{context}"
    if event.reason == "compact":
        return f"compacted: folded {folded}{context}"
    return f"summarized {folded}"


def describe_nothing_to_fold(event: NothingToFold) -> str:
    """The line shown when a compaction finds nothing safe to fold."""
    return (
        f"nothing to fold: the kept window holds the whole conversation "
        f"({event.context:,} tokens); CHATBOT_SUMMARY_KEEP sets its size"
    )


def failed_turn(problem: str, kept: Kept | None, shown: bool, again: str) -> str:
    """The line a failed or stopped turn ends with: ``problem``, then exactly what the thread
    holds of the turn (``kept``; ``None``: it could not be read, so nothing is claimed).
    ``shown``: a whole reply was on the screen; ``again``: how to ask again, said when the
    message is kept (``" in thread 't1': ..."``, ``"; /retry tries again"``)."""
    if kept is None:
        return problem
    if kept.message and kept.reply:
        return f"{problem} - your message and the reply are saved"
    if kept.message:
        lost = "this reply was not saved; " if shown else ""
        return f"{problem} - {lost}your message is kept{again}"
    if shown:
        return f"{problem} - your message and this reply were not saved"
    return f"{problem} - your message was not saved"


PIPED_WIDTH = 100_000
"""The width a listing is laid out in when it goes to a pipe or a file: no row is wrapped."""
TABLE_GAP = 2
"""The space between two columns of a listing's table (no box, padding 1 on each side)."""


class Listing:
    """A listing (threads, history, search hits, models) laid out for where it goes.

    On a terminal: ``wide`` (a table) where the screen has ``needs`` columns, else ``narrow``
    (lines a row); word-wrapped, so that an id, a checkpoint id or a number is never broken
    (only one longer than the screen is folded). Elsewhere (a pipe, a file): ``wide``, each row
    on one line however long, so that ``chatbot threads | grep fork1`` finds the row whole; a
    console that crops at its width (``soft_wrap`` off) gets the terminal's layout instead.
    """

    def __init__(
        self, wide: RenderableType, narrow: RenderableType | None = None, needs: int = 0
    ) -> None:
        self.wide, self.narrow, self.needs = wide, narrow, needs

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not console.is_terminal and console.soft_wrap:
            yield from console.render(self.wide, options.update(width=PIPED_WIDTH))
            return
        layout = self.wide
        if self.narrow is not None and options.max_width < self.needs:
            layout = self.narrow
        yield from console.render(layout, options.update(no_wrap=False, overflow="fold"))


def _indented(renderable: RenderableType) -> RenderableType:
    """A line of a listing's stacked layout under its heading (no spaces after its end)."""
    return Padding(renderable, (0, 0, 0, 2), expand=False)


def _columns_need(headers: Sequence[str], rows: Sequence[Sequence[str]], flexible: int) -> int:
    """The width a table needs with none of these columns (each its header, then the rows'
    cells, in order) broken, and ``flexible`` columns left for the one column that wraps."""
    widths = [
        max([cell_len(header), *(cell_len(row[at]) for row in rows)])
        for at, header in enumerate(headers)
    ]
    return sum(widths) + flexible + TABLE_GAP * len(widths)


def threads_table(threads: Sequence[ThreadInfo], current: str | None = None) -> RenderableType:
    """/threads and ``chatbot threads``: a table where it fits (the title wraps), else each
    thread as lines: its id and when it was last active, its messages and summary, its title."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    headers = ("thread", "messages", "summary", "last active")
    for column in headers:
        table.add_column(column, no_wrap=True)
    table.add_column("title", overflow="fold")
    cells: list[tuple[str, str, str, str]] = []
    lines: list[RenderableType] = []
    for info in threads:
        marker = "* " if info.thread_id == current else "  "
        count = "-" if info.message_count is None else str(info.message_count)
        summary = {True: "yes", False: "no", None: "-"}[info.has_summary]
        active = when(info.last_active)
        cells.append((marker + sanitize(info.thread_id), count, summary, active))
        title = plain(info.title or "")
        table.add_row(plain(marker + info.thread_id), count, summary, active, title)
        facts = [
            counted(info.message_count, "message") if info.message_count is not None else "",
            {True: "summary", False: "no summary", None: ""}[info.has_summary],
        ]
        heading = plain(("* " if marker.strip() else "") + info.thread_id, style="bold")
        if info.last_active:
            heading.append(f"  {active}")
        lines.append(heading)
        if any(facts):
            lines.append(_indented(Text(" · ".join(fact for fact in facts if fact))))
        if info.title:
            lines.append(_indented(title))
    needs = _columns_need(headers, cells, 20)
    return Listing(table, Group(*lines), needs)


def _short_time(moment: datetime | None) -> str:
    """The time of day for today, the date and minute before."""
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    same_day = moment is not None and moment.astimezone().date() == datetime.now().date()
    return when(moment, "%H:%M:%S" if same_day else "%Y-%m-%d %H:%M")


def history_table(rows: Sequence[HistoryRow]) -> RenderableType:
    """/history all and ``chatbot history --all``: one row per checkpoint, newest first; where
    the table does not fit, each checkpoint as lines: its id, step and time; the node that
    wrote it → the nodes next; its messages and summary."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    headers = ("checkpoint", "step", "node", "msgs", "summary", "time")
    for column in ("checkpoint", "step", "node", "next", "msgs", "summary", "time"):
        table.add_column(
            column,
            justify="right" if column in ("step", "msgs") else "left",
            no_wrap=column != "next",  # (the next nodes wrap between names)
        )
    cells: list[tuple[str, ...]] = []
    lines: list[RenderableType] = []
    for row in rows:
        summary = f"{row.summary_chars} ch" if row.summary_chars else "-"
        fixed = (
            short_id(row.checkpoint_id),
            str(row.step),
            sanitize(row.node),
            str(row.messages),
            summary,
            _short_time(row.created_at),
        )
        cells.append(fixed)
        checkpoint, step, node, messages, _, time = fixed
        following = plain(", ".join(row.next) or "-")
        table.add_row(checkpoint, step, plain(node), following, messages, summary, time)
        lines.append(Text.assemble((checkpoint, "bold"), f"  step {step}  {time}"))
        lines.append(_indented(plain(f"{node} → {', '.join(row.next) or '-'}")))
        facts = counted(row.messages, "message") + (
            f" · summary {summary}" if row.summary_chars else ""
        )
        lines.append(_indented(Text(facts)))
    names = [name for row in rows for name in row.next] or ["-"]
    widest_next = max(cell_len(sanitize(name)) + 1 for name in names)  # (a name and its comma)
    needs = _columns_need(headers, cells, max(4, widest_next))
    return Listing(table, Group(*lines), needs)


PREVIEW_CHARS = 60
FATES = {"undone": "undone by /undo", "retried": "replaced by /retry", "branch": "side branch"}


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """The start of a message on one line: whitespace runs become one space, cut with '…'."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def describe_entry(entry: TurnEntry) -> Text:
    """What a history entry was, in a few words: the message, or the command that wrote it."""
    said = plain(preview(entry.text))
    if entry.kind == "turn":
        line = said if entry.text else Text("(no message)", style="dim")
    elif entry.kind == "retry":
        line = Text.assemble(("/retry ", "dim"), said)
    elif entry.kind == "fork" and entry.origin:
        thread, _, checkpoint = entry.origin.partition("@")
        line = Text.assemble(("/fork of ", "dim"), plain(thread), (" at ", "dim"))
        line.append(short_id(checkpoint))
    elif entry.kind == "system":
        line = Text.assemble(("/system ", "dim"), said) if entry.text else Text("/system clear")
    elif entry.kind in ("undo", "compact", "fork"):
        line = Text(f"/{entry.kind}", style="dim")
    else:
        line = Text(f"({entry.kind})", style="dim")
    if not entry.finished:
        line.append(" (unfinished: /retry)", style="yellow")
    elif entry.fold_left:  # the reply is saved; the next turn folds first
        line.append(" (summary left for the next turn)", style="dim")
    if entry.fate:
        line.append(f" ({FATES.get(entry.fate, entry.fate)})", style="yellow")
    return line


TURN_TABLE_MIN_WIDTH = 72
"""Narrower than this, /history shows each turn as two lines rather than a table row."""


def _summary_change(entry: TurnEntry) -> str:
    if entry.folded:
        return f"folded {entry.folded}"
    return "changed" if entry.summary_changed else "-"


def turn_table(entries: Sequence[TurnEntry]) -> RenderableType:
    """/history and ``chatbot history``: one row per turn (and per undo, retry, compaction),
    newest first, with the checkpoint to give /show and /fork. On a narrow screen each turn is
    a line of facts and, below it, the message (a table would squeeze the message to a sliver).
    """
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("checkpoint", no_wrap=True)
    table.add_column("time", no_wrap=True)
    table.add_column("message", overflow="fold")
    table.add_column("msgs", justify="right", no_wrap=True)
    table.add_column("summary", no_wrap=True)
    lines: list[RenderableType] = []
    cells: list[tuple[str, str, str, str]] = []
    for entry in entries:
        fixed = (
            short_id(entry.checkpoint_id),
            _short_time(entry.created_at),
            f"{entry.messages_before}→{entry.messages_after}",
            _summary_change(entry),
        )
        cells.append(fixed)
        table.add_row(fixed[0], fixed[1], describe_entry(entry), fixed[2], fixed[3])
        change = _summary_change(entry)
        facts = Text.assemble(
            (short_id(entry.checkpoint_id), "bold"),
            f"  {_short_time(entry.created_at)}  {entry.messages_before}→"
            f"{entry.messages_after} msgs",
            "" if change == "-" else f"  summary {change}",
        )
        lines += [facts, _indented(describe_entry(entry))]
    headers = ("checkpoint", "time", "msgs", "summary")
    needs = _columns_need(headers, cells, 20)
    return Listing(table, Group(*lines), max(TURN_TABLE_MIN_WIDTH, needs))


def summary_view(summary: str, tokens: int) -> RenderableType:
    """/summary: the current summary, as Markdown (a model writes it in Markdown sections)."""
    return Wrapped(Panel(Markdown(summary), title=f"summary ({tokens:,} tokens)"))


def summary_timeline_view(changes: Sequence[SummaryChange]) -> RenderableType:
    """/summary history: each checkpoint where the summary changed, with that version.

    The heading is a line of its own, not a panel title: a title is cut at the panel's edge,
    and the heading holds the full checkpoint id, to copy into /show or /fork.
    """
    parts: list[RenderableType] = []
    for number, change in enumerate(changes, start=1):
        heading = (
            f"#{number} step {change.step} · {when(change.created_at)} · folded "
            f"{change.folded} messages ({change.folded_tokens:,} tokens) · checkpoint "
            f"{change.checkpoint_id}"
        )
        parts.append(Text(heading, style="bold"))
        parts.append(Panel(Markdown(change.summary), border_style="dim"))
    return Wrapped(*parts)


def checkpoint_heading(snapshot: Snapshot) -> str:
    """The line above a past state: its full checkpoint id (to copy), step and time."""
    return (
        f"checkpoint {snapshot.checkpoint_id} · step {snapshot.step} · {when(snapshot.created_at)}"
    )


def message_view(message: BaseMessage) -> RenderableType:
    """One message, with its role.

    A model's text is Markdown, as its reply was shown while it streamed. What people wrote
    (the user's messages, a system prompt) and tool output is plain text, shown as written:
    its line breaks, indentation and ``*_#<>`` characters are what the model was sent, and
    Markdown would join the lines and eat them.
    """
    role = message.type
    label = Text(ROLE_NAMES.get(role, role), style=ROLE_STYLES.get(role, "bold"))
    body: RenderableType
    if not isinstance(message, AIMessage) and isinstance(message.content, list):
        readable = readable_text(message.content)  # files: text as written; [image: cat.png]
        return Group(label, plain(readable) if readable else Text("(no text)", style="dim"))
    if not message.text and not (isinstance(message, AIMessage) and message.tool_calls):
        body = Text("(no text)", style="dim")
    elif isinstance(message, AIMessage) and message.tool_calls:
        calls = ", ".join(f"{c['name']}({c.get('args', {})})" for c in message.tool_calls)
        body = Group(Markdown(message.text) if message.text else Text(""), plain(f"-> {calls}"))
    elif isinstance(message, AIMessage):
        body = Markdown(message.text)
    else:
        body = plain(message.text)
    return Group(label, body)


def state_view(
    snapshot: Snapshot, *, folded: Sequence[BaseMessage] = (), title: str = ""
) -> RenderableType:
    """A full state: summary, then (optionally) messages already folded, then live messages."""
    parts: list[RenderableType] = []
    if title:
        parts.append(plain(title, style="bold"))
    if snapshot.system_prompt:
        role = f" (role {snapshot.system_role})" if snapshot.system_role else ""
        parts.append(Panel(plain(snapshot.system_prompt), title=f"system prompt{role}"))
    if snapshot.summary:
        parts.append(Panel(Markdown(snapshot.summary), title="summary", border_style="dim"))
    if folded:
        parts.append(Text(f"folded into the summary ({len(folded)} messages):", style="dim"))
        parts.extend(message_view(m) for m in folded)
        parts.append(Text("live messages:", style="dim"))
    pending = snapshot.state.pending
    if not snapshot.messages and not pending:
        parts.append(Text("(no messages)", style="dim"))
    parts.extend(message_view(m) for m in snapshot.messages)
    if pending:  # (saved by a run stopped before it took them in)
        parts.append(Text("sent, not answered yet (/retry answers it):", style="dim"))
        parts.extend(message_view(m) for m in pending)
    return Wrapped(*parts)


# --- /context -------------------------------------------------------------------------------

CONTEXT_BAR_WIDTH = 64
"""The widest the /context bar gets (narrower on a narrow screen)."""
CONTEXT_PARTS = (
    ("█", "magenta", "system prompt"),
    ("▓", "yellow", "summary"),
    ("▒", "cyan", "messages"),
)
"""The bar's glyph and colour for each part of the context (the glyph tells them apart
without colour too)."""
FREE, TRIGGER_MARK = ("·", "dim"), ("|", "bold red")


def context_bar(window: ContextWindow, width: int) -> Text:
    """The context as a bar ``width`` cells wide: each part in proportion to the model's input
    (or, when that is unknown, to the trigger or the context), free space after, the trigger
    marked where it fires."""
    span = max(window.window or window.trigger_tokens or 0, window.total, 1)
    cells: list[tuple[str, str]] = []
    for (glyph, style, _), tokens in zip(
        CONTEXT_PARTS, (window.system, window.summary, window.messages), strict=True
    ):
        count = round(tokens / span * width)
        cells += [(glyph, style)] * (max(1, count) if tokens else 0)
    cells = cells[:width] + [FREE] * (width - len(cells))
    if window.trigger_tokens and window.trigger_tokens <= span:  # (past it: no place to mark)
        cells[min(width - 1, round(window.trigger_tokens / span * width))] = TRIGGER_MARK
    return Text.assemble(*cells)


class _ContextBar:
    def __init__(self, window: ContextWindow) -> None:
        self.window = window

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield context_bar(self.window, max(8, min(CONTEXT_BAR_WIDTH, options.max_width)))


def _next_fold(window: ContextWindow) -> str:
    """What the next fold takes, and when it comes."""
    if window.fold_messages is None:
        return "next fold: decided by the server's settings"
    if not window.fold_messages:
        if not window.message_count:
            return "next fold: nothing to fold, no messages yet"
        kept = counted(window.message_count, "message")
        verb = "is" if window.message_count == 1 else "are"
        return f"next fold: nothing to fold, the {kept} {verb} what keep ({window.keep}) keeps"
    stay = window.message_count - window.fold_messages
    when = "with /compact" if window.trigger == "off" else "at the trigger, or now with /compact"
    return (
        f"next fold: {counted(window.fold_messages, 'message')} ({window.fold_tokens:,} tokens) "
        f"into the summary, {stay} stay (keep {window.keep}); {when}"
    )


def context_view(window: ContextWindow, thread_id: str) -> RenderableType:
    """/context: the context window as a bar, and the figures of each part, the trigger, the
    free space and the next fold."""
    about = "about " if window.estimated else ""
    head = f"context of thread {thread_id}: {about}{window.total:,}"
    if window.window:
        head += f" of {window.window:,} tokens ({window.total / window.window:.0%})"
    elif window.estimated:
        head += " tokens (the server's model and settings are not known here)"
    else:
        head += " tokens; the model's input size is unknown: CHATBOT_MAX_INPUT_TOKENS sets it"
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    table.add_column(overflow="fold")

    def share(tokens: int) -> str:
        if not window.window:
            return ""
        part = tokens / window.window
        return "<1%" if 0 < part < 0.005 else f"{part:.0%}"

    parts = (window.system, window.summary, window.messages)
    for (glyph, style, name), tokens in zip(CONTEXT_PARTS, parts, strict=True):
        note = ""
        if name == "summary" and not tokens:
            note = "no summary yet"
        elif name == "messages":
            note = f"in {counted(window.message_count, 'message')}"
        label = Text.assemble((glyph, style), f" {name}")
        table.add_row(label, f"{tokens:,} tokens", share(tokens), note)
    mark = Text.assemble(TRIGGER_MARK, " trigger")
    if window.estimated:
        table.add_row(mark, "unknown", "", "(set by the server's settings)")
    elif window.trigger_tokens:
        tokens = window.trigger_tokens
        note = window.trigger
        if window.scaled_from:
            note += f": {window.scaled_from} scaled down to fit the model's window"
        elif window.window and tokens > window.window:  # it never fires: the limit does
            note += ", past the model's input: a request too big for the model folds first"
        table.add_row(mark, f"{tokens:,} tokens", share(tokens), f"({note})")
    elif window.trigger_messages:
        now = f"(now {counted(window.message_count, 'message')})"
        table.add_row(mark, window.trigger, "", now)
    else:
        table.add_row(mark, "off", "", "(only /compact folds, or a request too big for the model)")
    free = Text.assemble(FREE, " free")
    if window.window:
        room = max(0, window.window - window.total)
        table.add_row(free, f"{room:,} tokens", share(room), "")
    else:
        table.add_row(free, "unknown", "", "")
    counted_with = f"counted with the {window.counted_with} tokenizer"
    if window.estimated:
        counted_with += " (the thread's own system prompt; the server's default is not counted)"
    return Wrapped(
        plain(head, style="bold"),
        _ContextBar(window),
        table,
        Text(_next_fold(window)),
        *([Text(window_line(window), style="dim")] if window.window_from else []),
        Text(counted_with, style="dim"),
    )


def window_line(window: ContextWindow) -> str:
    """Where the model's window comes from, and what a request may hold of it."""
    if window.server_window:
        line = f"the model's window: {window.server_window:,} tokens, from {window.window_from}"
        if window.reply_room:
            line += (
                f"; {window.reply_room:,} kept for the reply ({window.reply_from}), so a "
                f"request holds at most {window.window or 0:,}"
            )
        return line
    line = f"the model's input: {window.window or 0:,} tokens, from {window.window_from}"
    if window.reply_room:
        line += f"; replies stop at {window.reply_room:,} tokens ({window.reply_from})"
    return line


# --- search ------------------------------------------------------------------------------------


def hits_view(hits: Sequence[Hit]) -> RenderableType:
    """Hits for the terminal: thread, time, role and checkpoint on one line, the snippet with
    the terms highlighted under it. Word-wrapped at the screen's width even on a console that
    leaves long lines to the terminal (which would break a checkpoint id anywhere)."""
    lines: list[Text] = []
    for hit in hits:
        when = hit.time
        heading = Text(no_wrap=False, overflow="fold")
        heading.append(sanitize(hit.thread_id), style="bold cyan")
        if when is not None:
            heading.append("  " + when.astimezone().strftime("%Y-%m-%d %H:%M"), style="dim")
        heading.append(f"  {hit.role}", style="green" if hit.role == "user" else "magenta")
        heading.append(f"  checkpoint {hit.checkpoint_id}", style="dim")
        snippet = hit.snippet()
        body = Text("  " + snippet.text, no_wrap=False, overflow="fold")
        for start, end in snippet.spans:
            body.stylize("bold black on yellow", start + 2, end + 2)
        lines.extend((heading, body))
    return Group(*lines)


@contextlib.contextmanager
def indexing_bar(console: Console, least: int = 20) -> Iterator[Callable[[int, int], None]]:
    """A progress callback for indexing threads for search (``done``, ``of``): a transient
    bar on a terminal once there are ``least`` threads or more to index, else silence."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bar: Progress | None = None
    task = None

    def advance(done: int, of: int) -> None:
        nonlocal bar, task
        if bar is None:
            if of < least or not console.is_terminal:
                return
            bar = Progress(
                TextColumn("indexing past messages for search"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("threads"),
                console=console,
                transient=True,
            )
            bar.start()
            task = bar.add_task("index", total=of)
        assert task is not None
        bar.update(task, completed=done)

    try:
        yield advance
    finally:
        if bar is not None:
            bar.stop()
