"""Rich renderables for threads, histories, summaries and states. Rendering only: no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from markdown_it import MarkdownIt
from rich.console import Group, RenderableType
from rich.markdown import Markdown as RichMarkdown
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from chatbot.sanitize import sanitize
from chatbot.session import Summarized
from chatbot.store import ThreadInfo
from chatbot.timeline import HistoryRow, Snapshot, SummaryChange, short_id


class Markdown(RichMarkdown):
    """Rich's Markdown with raw HTML off: ``<T>`` or ``#include <stdio.h>`` stay visible text.
    Escape sequences and control characters in the text are removed (:func:`sanitize`), and
    links show their address.

    Rich drops inline HTML it does not know; a chat about code is full of angle brackets.
    """

    def __init__(self, markup: str, **kwargs: Any) -> None:
        markup = sanitize(markup)
        kwargs.setdefault("hyperlinks", False)  # "text (url)": a link never hides its address
        super().__init__(markup, **kwargs)
        parser = MarkdownIt("commonmark", {"html": False}).enable("strikethrough").enable("table")
        self.parsed = parser.parse(markup)


ROLE_STYLES = {"human": "bold cyan", "ai": "bold green", "tool": "bold magenta", "system": "bold"}
ROLE_NAMES = {"human": "you", "ai": "assistant", "tool": "tool", "system": "system"}


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
    messages = "1 message" if event.messages == 1 else f"{event.messages} messages"
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


def threads_table(threads: Sequence[ThreadInfo], current: str | None = None) -> Table:
    """/threads and ``chatbot threads``."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("thread", "messages", "summary", "last active", "title"):
        table.add_column(column, overflow="fold" if column == "title" else "ellipsis")
    for info in threads:
        marker = "* " if info.thread_id == current else "  "
        table.add_row(
            plain(marker + info.thread_id),
            "-" if info.message_count is None else str(info.message_count),
            {True: "yes", False: "no", None: "-"}[info.has_summary],
            when(info.last_active),
            plain(info.title or ""),
        )
    return table


def history_table(rows: Sequence[HistoryRow]) -> Table:
    """/history and ``chatbot history``: one row per checkpoint, newest first."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("checkpoint", "step", "node", "next", "msgs", "summary", "time"):
        table.add_column(
            column,
            justify="right" if column in ("step", "msgs") else "left",
            no_wrap=column != "next",
            min_width=12 if column == "next" else None,
            overflow="fold",
        )
    today = datetime.now().astimezone().date()
    for row in rows:
        moment = row.created_at.astimezone() if row.created_at else None
        same_day = moment is not None and moment.date() == today
        table.add_row(
            short_id(row.checkpoint_id),
            str(row.step),
            plain(row.node),
            plain(", ".join(row.next) or "-"),
            str(row.messages),
            f"{row.summary_chars} ch" if row.summary_chars else "-",
            when(row.created_at, "%H:%M:%S" if same_day else "%Y-%m-%d %H:%M"),
        )
    return table


def summary_timeline_view(changes: Sequence[SummaryChange]) -> RenderableType:
    """/summary history: each checkpoint where the summary changed, with that version."""
    parts: list[RenderableType] = []
    for number, change in enumerate(changes, start=1):
        title = (
            f"#{number} step {change.step} · {when(change.created_at)} · folded "
            f"{change.folded} messages ({change.folded_tokens:,} tokens) · checkpoint "
            f"{short_id(change.checkpoint_id)}"
        )
        parts.append(
            Panel(plain(change.summary), title=title, title_align="left", border_style="dim")
        )
    return Group(*parts)


def message_view(message: BaseMessage) -> RenderableType:
    """One message, with its role."""
    role = message.type
    label = Text(ROLE_NAMES.get(role, role), style=ROLE_STYLES.get(role, "bold"))
    body: RenderableType
    if isinstance(message, AIMessage) and message.tool_calls:
        calls = ", ".join(f"{c['name']}({c.get('args', {})})" for c in message.tool_calls)
        body = Group(Markdown(message.text) if message.text else Text(""), plain(f"-> {calls}"))
    elif isinstance(message, ToolMessage):
        body = plain(message.text)
    else:
        body = Markdown(message.text) if message.text else Text("(no text)", style="dim")
    return Group(label, body)


def state_view(
    snapshot: Snapshot, *, folded: Sequence[BaseMessage] = (), title: str = ""
) -> RenderableType:
    """A full state: summary, then (optionally) messages already folded, then live messages."""
    parts: list[RenderableType] = []
    if title:
        parts.append(plain(title, style="bold"))
    if snapshot.summary:
        parts.append(Panel(Markdown(snapshot.summary), title="summary", border_style="dim"))
    if folded:
        parts.append(Text(f"folded into the summary ({len(folded)} messages):", style="dim"))
        parts.extend(message_view(m) for m in folded)
        parts.append(Text("live messages:", style="dim"))
    if not snapshot.messages:
        parts.append(Text("(no messages)", style="dim"))
    parts.extend(message_view(m) for m in snapshot.messages)
    return Group(*parts)


def message_record(message: BaseMessage) -> dict[str, Any]:
    """A message as JSON: its type, text and id (plus tool calls when there are any)."""
    record: dict[str, Any] = {"type": message.type, "content": message.content, "id": message.id}
    if isinstance(message, AIMessage) and message.tool_calls:
        record["tool_calls"] = message.tool_calls
    if isinstance(message, ToolMessage):
        record["tool_call_id"] = message.tool_call_id
    return record


def thread_record(info: ThreadInfo) -> dict[str, Any]:
    """A thread listing row as JSON."""
    return {
        "thread_id": info.thread_id,
        "messages": info.message_count,
        "has_summary": info.has_summary,
        "checkpoints": info.checkpoints,
        "last_active": info.last_active.isoformat() if info.last_active else None,
        "title": info.title,
        "origin": (
            {"thread_id": info.origin_thread, "checkpoint_id": info.origin_checkpoint}
            if info.origin_thread
            else None
        ),
    }


def history_record(row: HistoryRow) -> dict[str, Any]:
    """A history row as JSON."""
    return {
        "checkpoint_id": row.checkpoint_id,
        "step": row.step,
        "node": row.node,
        "next": list(row.next),
        "messages": row.messages,
        "summary_chars": row.summary_chars,
        "time": row.created_at.isoformat() if row.created_at else None,
    }
