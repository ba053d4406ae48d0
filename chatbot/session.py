"""One chat turn as a stream of events. Knows nothing about terminals.

The CLI and the REPL render these events; tests read them directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langgraph.graph.state import CompiledStateGraph

from chatbot.models import SUMMARY_TAG
from chatbot.store import Store, read_state, thread_config

TITLE_CHARS = 80


@dataclass(frozen=True)
class Token:
    """A piece of the reply as the model streams it."""

    text: str


@dataclass(frozen=True)
class Reply:
    """The finished reply."""

    message: AIMessage


@dataclass(frozen=True)
class Summarized:
    """Older messages were folded into the summary."""

    messages: int
    tokens_in: int
    tokens_out: int
    calls: int = 1
    extended: bool = False


@dataclass(frozen=True)
class SummaryFailed:
    """The summary call failed; nothing was removed and the next turn tries again."""

    error: str


Event = Token | Reply | Summarized | SummaryFailed


def make_title(text: str) -> str:
    """A thread's title: its first user message on one line, shortened."""
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"


def _is_reply_chunk(message: Any, metadata: dict[str, Any]) -> bool:
    if not isinstance(message, AIMessageChunk | AIMessage):
        return False
    if SUMMARY_TAG in (metadata.get("tags") or []):
        return False
    return metadata.get("langgraph_node") == "conversation"


@dataclass
class ChatSession:
    """Sends user messages to one thread of the graph and reports what happens as events."""

    graph: CompiledStateGraph
    store: Store | None
    thread_id: str
    context: dict[str, Any] = field(default_factory=dict)

    def send(self, text: str) -> Iterator[Event]:
        """Run one turn: stream the reply, then report a summary if one was made."""
        yield from self._run({"messages": [HumanMessage(content=text)]}, title_hint=text)

    def _run(self, graph_input: Any, title_hint: str = "") -> Iterator[Event]:
        config = thread_config(self.thread_id)
        final: AIMessage | None = None
        for mode, payload in self.graph.stream(
            graph_input,
            config,
            context=self.context or None,
            stream_mode=["messages", "custom", "updates"],
        ):
            if mode == "messages":
                message, metadata = payload
                if _is_reply_chunk(message, metadata) and message.text:
                    yield Token(message.text)
            elif mode == "custom" and isinstance(payload, dict):
                event = payload.get("event")
                if event == "summarized":
                    yield Summarized(
                        messages=payload["messages"],
                        tokens_in=payload["tokens_in"],
                        tokens_out=payload["tokens_out"],
                        calls=payload.get("calls", 1),
                        extended=payload.get("extended", False),
                    )
                elif event == "summary_failed":
                    yield SummaryFailed(error=payload["error"])
            elif mode == "updates" and isinstance(payload, dict):
                update = payload.get("conversation") or {}
                for message in update.get("messages", []):
                    if isinstance(message, AIMessage):
                        final = message
                if final is not None and "conversation" in payload:
                    yield Reply(final)
        self.record(title_hint)

    def messages(self) -> list[BaseMessage]:
        """The thread's live messages (those not yet folded into the summary)."""
        return list(read_state(self.graph, self.thread_id).values.get("messages", []))

    def summary(self) -> str:
        """The thread's running summary ('' until the first one)."""
        return read_state(self.graph, self.thread_id).values.get("summary", "")

    def record(self, title_hint: str = "") -> None:
        """Update the thread's listing row from its current state (the title is set once)."""
        if self.store is None:
            return
        values = read_state(self.graph, self.thread_id).values
        messages = values.get("messages", [])
        first = next((m for m in messages if isinstance(m, HumanMessage)), None)
        self.store.record_turn(
            self.thread_id,
            title=make_title(title_hint or (first.text if first else "")),
            message_count=len(messages),
            has_summary=bool(values.get("summary")),
        )
