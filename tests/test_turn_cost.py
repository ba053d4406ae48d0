"""What a turn costs (issue 21): what it keeps between the routers and nodes of a run, and that
keeping it changes nothing a user sees. Behaviour only: no timings here (``benchmarks/turns.py``
measures them)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from langchain_core.messages import HumanMessage

from chatbot.models import OfflineChatModel
from chatbot.settings import Settings


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"model": "offline", "summary_trigger": "messages:6"}
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


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
