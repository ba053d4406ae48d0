"""A chat turn as a stream of events. Knows nothing about terminals.

The CLI and the REPL render these events; tests read them directly. ``events_from_stream``
turns LangGraph's ``stream_mode=["messages", "custom", "updates"]`` output into events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage

from chatbot.engine.stream import (
    SUMMARY_TAG,
    Folding,
    NothingToFold,
    Recalling,
    RecallOff,
    Retrying,
    Summarized,
    SummaryFailed,
    from_payload,
)
from chatbot.sanitize import valid_text

if TYPE_CHECKING:  # langgraph.types pulls in LangGraph's runtime: not needed to read threads
    from langgraph.types import StreamMode

    from chatbot.history.snapshots import Snapshot

TITLE_CHARS = 80
STREAM_MODES: list[StreamMode] = ["messages", "custom", "updates"]


@dataclass(frozen=True)
class Token:
    """A piece of the reply as the model streams it."""

    text: str


@dataclass(frozen=True)
class Reply:
    """The finished reply."""

    message: AIMessage


@dataclass(frozen=True)
class Waiting:
    """Another window or process is taking a turn on this thread; this one waits, then runs."""

    thread_id: str

    @property
    def words(self) -> str:
        return f"thread {self.thread_id} is answering in another window — waiting, Ctrl-C to stop"


@dataclass(frozen=True)
class Unanswered:
    """The thread's last message never got its reply and stays before this turn's message
    (said once the turn holds the thread: never of one another window still answers)."""

    thread_id: str

    @property
    def words(self) -> str:
        return "the previous turn in this thread never got a reply; it stays in the conversation"


Event = (
    Token
    | Reply
    | Folding
    | Summarized
    | SummaryFailed
    | NothingToFold
    | Recalling
    | RecallOff
    | Retrying
    | Waiting
    | Unanswered
)


class Kept(NamedTuple):
    """What the thread holds of a turn that failed or was stopped: its message, its reply."""

    message: bool
    reply: bool


def kept_of(after: Snapshot | None, message_id: str, started_from: str | None) -> Kept:
    """What ``after`` (the thread's latest checkpoint) holds of the message ``message_id`` and
    its reply; ``started_from``: the checkpoint the turn started from, if it started."""
    if after is None:
        return Kept(message=False, reply=False)
    if any(message.id == message_id for message in after.state.pending):
        return Kept(message=True, reply=False)  # (saved; the run stopped before taking it in)
    messages = after.messages
    for at, message in enumerate(messages):
        if message.id == message_id:
            replied = any(
                isinstance(m, AIMessage) and not m.tool_calls for m in messages[at + 1 :]
            )  # (a recall round is not the reply)
            return Kept(message=True, reply=replied)
    # Not among the messages: never written, or written with its reply and then folded into
    # the summary (only a message that has its reply is ever folded).
    written = started_from is not None and after.checkpoint_id != started_from
    return Kept(message=written, reply=written)


class TurnStream:
    """A turn's events: ``async for`` them in a task, which Ctrl-C cancels; a plain ``for``
    runs the same on this thread's loop (scripts, tests).

    A turn that sends a message knows its id and the checkpoint it started from, so that
    :meth:`kept` can say what the thread holds of a failed or stopped turn; :attr:`after` is
    the state after it, when known, so that nothing reads it again."""

    def __init__(
        self,
        events: Callable[[], AsyncIterator[Event]],
        *,
        message_id: str | None = None,
        current: Callable[[], Snapshot | None] | None = None,
    ) -> None:
        self._events = events
        self.message_id = message_id
        self._current = current
        self.started_from: str | None = None
        """The thread's latest checkpoint when the turn began to run."""
        self.after: Snapshot | None = None
        """The thread's state once the turn ended well, when the turn knows it."""

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    def __iter__(self) -> Iterator[Event]:
        from chatbot.threads.runner import blocking_iter

        return blocking_iter(self._events())

    def kept(self) -> Kept | None:
        """What the thread holds of this turn's message and reply (``None``: not known)."""
        if self.message_id is None or self._current is None:
            return None
        try:
            after = self.after if self.after is not None else self._current()
        except Exception:  # (the store that just failed may fail again: then nothing is said)
            return None
        return kept_of(after, self.message_id, self.started_from)


def just(*events: Event) -> TurnStream:
    """A turn that runs nothing and says ``events`` (a compaction with nothing to fold)."""

    async def said() -> AsyncIterator[Event]:
        for event in events:
            yield event

    return TurnStream(said)


def snapshot_of_checkpoint(part: dict[str, Any]) -> Snapshot:
    """The snapshot of a ``stream_mode="checkpoints"`` part, as ``get_state`` would read it."""
    from chatbot.history.snapshots import snapshot_from_parts

    parent = (part.get("parent_config") or {}).get("configurable") or {}
    return snapshot_from_parts(
        checkpoint_id=str(part["config"]["configurable"]["checkpoint_id"]),
        parent_id=parent.get("checkpoint_id"),
        metadata=part.get("metadata"),
        values=part.get("values"),
        next_nodes=part.get("next") or (),
    )


def make_title(text: Any) -> str:
    """A thread's title: its first user message (text or content list) on one line, shortened."""
    from chatbot.parts import describe

    line = " ".join(describe(text).replace("\x00", "\ufffd").split())  # (NUL: see searchable)
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"


def thread_title(messages: Iterable[BaseMessage], hint: Any = "") -> str:
    """The title a thread is listed with, local or remote: ``hint`` when given, else its first
    user message among ``messages`` (read only as far as that one)."""
    if not hint:
        first = next((m for m in messages if isinstance(m, HumanMessage)), None)
        hint = first.content if first is not None else ""
    return make_title(hint)


def is_reply_chunk(message: Any, metadata: dict[str, Any]) -> bool:
    """True for a streamed piece of the conversation node's reply (never the summary's)."""
    if not isinstance(message, AIMessageChunk | AIMessage):
        return False
    if SUMMARY_TAG in (metadata.get("tags") or []):
        return False
    return metadata.get("langgraph_node") == "conversation"


def custom_event(payload: Any) -> Event | None:
    """The event a ``stream_mode="custom"`` payload of a node stands for."""
    return from_payload(payload)


def events_from_stream(stream: Iterable[Any]) -> Iterator[Event]:
    """Translate a local graph stream into events, in order."""
    for mode, payload in stream:
        if mode == "messages":
            message, metadata = payload
            if is_reply_chunk(message, metadata) and message.text:
                yield Token(valid_text(message.text))  # as the stored reply is (folding.ask)
        elif mode == "custom":
            event = custom_event(payload)
            if event is not None:
                yield event
        elif mode == "updates" and isinstance(payload, dict) and "conversation" in payload:
            update = payload.get("conversation") or {}
            replies = [
                m
                for m in update.get("messages", [])
                if isinstance(m, AIMessage) and not m.tool_calls  # (a recall round: no reply)
            ]
            if replies:
                yield Reply(replies[-1])
