"""Rich renderables for what the REPL and the CLI show of a thread: messages and past states,
the summary, the context window, and the lines about a turn's summary or failure. Rendering
only, no I/O; Markdown and LangChain's messages are imported by the views that draw them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from chatbot.parts import readable_text
from chatbot.plural import counted
from chatbot.sanitize import sanitize

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

    from chatbot.history.snapshots import Snapshot
    from chatbot.history.summary import SummaryChange
    from chatbot.threads.events import Kept, NothingToFold, Summarized
    from chatbot.threads.operations import ContextWindow


class Wrapped:
    """A renderable word-wrapped at the console's width, long words folded: under the CLI's
    soft wrap Rich would crop what sits in a panel or a table cell at its edge."""

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
    """The line shown when a fold is not made."""
    if event.messages:
        folding = counted(event.messages, "message")
        return f"nothing to fold: folding {folding} would not make the context smaller"
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


def name_table(rows: Iterable[tuple[RenderableType, RenderableType]]) -> Table:
    """Rows of a name (bold) and its value, with no border, header or edge padding."""
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for name, value in rows:
        table.add_row(name, value)
    return table


PREVIEW_CHARS = 60


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """The start of a message on one line: whitespace runs become one space, cut with '…'."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def summary_view(summary: str, tokens: int) -> RenderableType:
    """/summary: the current summary, as Markdown (a model writes it in Markdown sections)."""
    from chatbot.terminal.markdown import Markdown

    return Wrapped(Panel(Markdown(summary), title=f"summary ({tokens:,} tokens)"))


def summary_timeline_view(changes: Sequence[SummaryChange]) -> RenderableType:
    """/summary history: each checkpoint where the summary changed, with that version. The
    heading (the full checkpoint id) is a line of its own: a panel title is cut at its edge."""
    from chatbot.terminal.markdown import Markdown

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
    """One message, with its role. A model's text is Markdown, as it streamed; what people
    wrote and tool output is plain text, shown exactly as the model was sent it."""
    from langchain_core.messages import AIMessage

    from chatbot.history.records import ROLE_NAMES
    from chatbot.terminal.markdown import Markdown

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
    from chatbot.terminal.markdown import Markdown

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
    ("▚", "blue", "memories"),
    ("▓", "yellow", "summary"),
    ("▞", "yellow", "summary message"),
    ("░", "green", "recall tool"),
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
    for (glyph, style, _), tokens in zip(CONTEXT_PARTS, _parts(window), strict=True):
        count = round(tokens / span * width)
        cells += [(glyph, style)] * (max(1, count) if tokens else 0)
    cells = cells[:width] + [FREE] * (width - len(cells))
    if window.trigger_tokens and window.trigger_tokens <= span:  # (past it: no place to mark)
        cells[min(width - 1, round(window.trigger_tokens / span * width))] = TRIGGER_MARK
    return Text.assemble(*cells)


def _parts(window: ContextWindow) -> tuple[int, ...]:
    """The figures of :data:`CONTEXT_PARTS`, in order."""
    sent = window.sent
    return (
        sent.system,
        sent.memories,
        sent.summary,
        sent.summary_message,
        sent.recall_tool,
        sent.messages,
    )


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
    """/context: the context window as a bar, the figures of each part, the next fold."""
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

    for (glyph, style, name), tokens in zip(CONTEXT_PARTS, _parts(window), strict=True):
        note = ""
        if name in ("memories", "summary message", "recall tool") and not tokens:
            continue  # (no memories, no summary, or recall off: nothing of them is sent)
        if name == "summary" and not tokens:
            note = "no summary yet"
        elif name == "memories":
            note = "the user's memories across threads"
        elif name == "summary message":
            note = "its heading and the recall note" if window.sent.recall_tool else "its heading"
        elif name == "recall tool":
            note = "its definition, offered once there is a summary"
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
