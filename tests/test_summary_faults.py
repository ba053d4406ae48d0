"""Faults around the summary and the graph: each test is a row of "Summaries and the graph" in
docs/reliability.md, and failed before its fix.

Over HTTP (``chatbot ask`` in-process against the local fake OpenAI server) where the user
meets the fault; in-process on the graph where the caller is a program (Studio's state
editor, LangGraph's server deleting a thread).
"""

from __future__ import annotations

import asyncio

import pytest

from chatbot.backend import LocalBackend
from chatbot.graph import build_graph
from chatbot.pgstore import open_store
from chatbot.search import search
from chatbot.settings import Settings
from tests.scripted import ScriptedChatModel

# --- deleting through the saver ------------------------------------------------------------------


@pytest.mark.parametrize("how", ["delete_thread", "adelete_thread"])
def test_deleting_a_thread_through_the_saver_empties_its_search_rows(any_db: str, how: str) -> None:
    settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    with open_store(any_db) as store:
        graph = build_graph(ScriptedChatModel(), settings=settings, checkpointer=store.saver)
        backend = LocalBackend(graph, store)
        for thread in ("gone", "kept"):
            list(backend.send(thread, f"the narwhal of {thread}"))

        if how == "delete_thread":  # as LangGraph's server calls it
            store.saver.delete_thread("gone")
        else:
            asyncio.run(store.saver.adelete_thread("gone"))

        rows = store._query("SELECT thread_id FROM chatbot_messages ORDER BY 1")
        assert {row[0] for row in rows} == {"kept"}
        assert [hit.thread_id for hit in search(store, "narwhal")] == ["kept"]
        backend.fork("kept", None, "gone")  # the same messages, the deleted thread's id
        assert sorted(hit.thread_id for hit in search(store, "narwhal")) == ["gone", "kept"]
