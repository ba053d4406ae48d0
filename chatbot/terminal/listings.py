"""Rich renderables for listings (threads, /history, search hits), laid out for where they go:
a table on a wide terminal, a few lines a row on a narrow one, a row a line into a pipe.
Rendering only, no I/O; the threads table needs Rich alone."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from chatbot.plural import counted
from chatbot.sanitize import sanitize
from chatbot.terminal.render import plain, preview, when

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from chatbot.history.turns import HistoryRow, TurnEntry
    from chatbot.store.base import ThreadInfo
    from chatbot.store.search import Hit

PIPED_WIDTH = 100_000
"""The width a listing is laid out in when it goes to a pipe or a file: no row is wrapped."""
TABLE_GAP = 2
"""The space between two columns of a listing's table (no box, padding 1 on each side)."""


class Listing:
    """A listing laid out for where it goes. On a terminal: ``wide`` where the screen has
    ``needs`` columns, else ``narrow``, word-wrapped so that no id is broken. Elsewhere:
    ``wide``, a row a line however long (``grep`` finds it whole), unless the console crops."""

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
    """/threads and ``chatbot threads``: a table where it fits, else each thread as lines."""
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
    """/history all and ``chatbot history --all``: one row per checkpoint, newest first."""
    from chatbot.history.lineage import short_id

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


FATES = {"undone": "undone by /undo", "retried": "replaced by /retry", "branch": "side branch"}


def describe_entry(entry: TurnEntry) -> Text:
    """What a history entry was, in a few words: the message, or the command that wrote it."""
    from chatbot.history.lineage import short_id

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


def turn_table(entries: Sequence[TurnEntry]) -> RenderableType:
    """/history and ``chatbot history``: one row per turn (and undo, retry, compaction),
    newest first, with its checkpoint; on a narrow screen, facts then the message below."""
    from chatbot.history.lineage import short_id

    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("checkpoint", no_wrap=True)
    table.add_column("time", no_wrap=True)
    table.add_column("message", overflow="fold")
    table.add_column("msgs", justify="right", no_wrap=True)
    table.add_column("summary", no_wrap=True)
    lines: list[RenderableType] = []
    cells: list[tuple[str, str, str, str]] = []
    for entry in entries:
        change = "changed" if entry.summary_changed else "-"
        fixed = (
            short_id(entry.checkpoint_id),
            _short_time(entry.created_at),
            f"{entry.messages_before}→{entry.messages_after}",
            f"folded {entry.folded}" if entry.folded else change,
        )
        cells.append(fixed)
        checkpoint, time, counts, change = fixed
        table.add_row(checkpoint, time, describe_entry(entry), counts, change)
        facts = Text.assemble(
            (checkpoint, "bold"),
            f"  {time}  {counts} msgs",
            "" if change == "-" else f"  summary {change}",
        )
        lines += [facts, _indented(describe_entry(entry))]
    headers = ("checkpoint", "time", "msgs", "summary")
    needs = _columns_need(headers, cells, 20)
    return Listing(table, Group(*lines), max(TURN_TABLE_MIN_WIDTH, needs))


# --- search ------------------------------------------------------------------------------------


def hits_view(hits: Sequence[Hit]) -> RenderableType:
    """Hits for the terminal: thread, time, role and checkpoint, the snippet highlighted under."""
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
