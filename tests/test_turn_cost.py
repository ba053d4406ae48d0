"""What a turn costs (issue 21): what it keeps between the routers and nodes of a run, and that
keeping it changes nothing a user sees. Behaviour only: no timings here (``benchmarks/turns.py``
measures them)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver

from chatbot.graph import build_graph
from chatbot.models import OfflineChatModel
from chatbot.settings import Settings
from tests.scripted import ScriptedChatModel


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"model": "offline", "summary_trigger": "messages:6"}
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


# --- a node is one run --------------------------------------------------------------------


class ChainStarts(BaseCallbackHandler):
    def __init__(self) -> None:
        self.names: list[str] = []

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.names.append(str(kwargs.get("name")))


def test_a_node_appears_once_in_a_trace_and_still_gets_the_runs_context() -> None:
    chat = ScriptedChatModel()
    graph = build_graph(chat, ScriptedChatModel(), settings(), InMemorySaver())
    starts = ChainStarts()
    graph.invoke(
        {"messages": [HumanMessage("hello")]},
        {"configurable": {"thread_id": "t"}, "callbacks": [starts]},
        context={"system_prompt": "speak like a pirate"},
    )
    assert starts.names.count("conversation") == 1
    assert chat.calls[-1][0] == SystemMessage("speak like a pirate")


# --- the offline model streams on the event loop -------------------------------------------


def test_the_offline_model_streams_asynchronously_without_a_thread() -> None:
    model = OfflineChatModel()
    said = [HumanMessage("hello there")]
    blocking = [chunk.text for chunk in model.stream(said)]

    async def streamed() -> tuple[list[str], int]:
        before = threading.active_count()
        pieces = [chunk.text async for chunk in model.astream(said)]
        return pieces, threading.active_count() - before

    pieces, threads = asyncio.run(streamed())
    assert pieces == blocking
    assert "".join(pieces) == model.invoke(said).text
    assert threads == 0, "each piece of the reply went through a worker thread"
