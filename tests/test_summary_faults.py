"""Faults around the summary and the graph: each test is a row of "Summaries and the graph" in
docs/reliability.md, and failed before its fix.

Over HTTP (``chatbot ask`` in-process against the local fake OpenAI server) where the user
meets the fault; in-process on the graph where the caller is a program (Studio's state
editor, LangGraph's server deleting a thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from chatbot.backend import LocalBackend
from chatbot.graph import build_graph
from chatbot.pgstore import open_store
from chatbot.search import search
from chatbot.settings import Settings
from tests.fake_openai import RecordedRequest, Reply
from tests.helpers import (
    Cli,
    is_summary_request,
    ok,
    summarizing,
    summary_requests,
)
from tests.scripted import ScriptedChatModel, chat_calls

SUMMARY_FAILED = "summary failed, nothing was removed (the next turn retries): "
GOOD = "SUMMARY: the user counted one, two, three."
CONFIG = {"configurable": {"thread_id": "t"}}


def echo(body: dict[str, Any]) -> str:
    return "echo: " + RecordedRequest("", None, body).last_user_text


def summaries(*replies: str | Reply | Callable[[dict[str, Any]], Reply]) -> Any:
    """A responder: chat calls echo; summary calls take ``replies`` in order, then ``GOOD``."""
    queue = list(replies)

    def respond(body: dict[str, Any]) -> str | Reply:
        if not is_summary_request(body):
            return echo(body)
        if not queue:
            return GOOD
        reply = queue.pop(0)
        return reply(body) if callable(reply) else reply

    return respond


def failed_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "summary failed" in line]


def texts(state: dict[str, Any]) -> list[str]:
    return [m["content"] for m in state["messages"]]


# --- one fold a turn -----------------------------------------------------------------------------


def test_a_failing_summarizer_is_tried_once_a_turn(cli: Cli) -> None:
    cli.server.responder = summaries(
        *(Reply(status=500, error_message="summary backend down") for _ in range(20))
    )
    made = []
    for n in range(1, 6):
        before = len(summary_requests(cli.server))
        result = ok(cli.ask(f"turn {n}", **summarizing()))
        made.append(len(summary_requests(cli.server)) - before)
        assert f"echo: turn {n}" in result.stdout
        assert len(failed_lines(result.stderr)) == (1 if n > 1 else 0), result.stderr
    assert made == [0, 1, 1, 1, 1], "one attempt a turn, from the turn the trigger first held"
    state = cli.show()
    assert len(state["messages"]) == 10 and state["summary"] == "", "nothing was removed"


def test_a_trigger_that_stays_over_its_limit_makes_one_summary_call_a_turn(cli: Cli) -> None:
    cli.server.responder = summaries()
    env = {
        "CHATBOT_SYSTEM_PROMPT": "You are a helpful assistant. " * 150,
        "CHATBOT_SUMMARY_TRIGGER": "tokens:500",
        "CHATBOT_SUMMARY_KEEP": "messages:2",
    }
    made = []
    for n in range(1, 6):
        before = len(summary_requests(cli.server))
        ok(cli.ask(f"turn {n}", **env))
        made.append(len(summary_requests(cli.server)) - before)
    assert made == [0, 1, 1, 1, 1], "the system prompt alone passes 500 tokens: one fold a turn"
    assert cli.show()["summary"] == GOOD


# --- Studio edits the state ----------------------------------------------------------------------


def _graph(**settings: Any) -> tuple[Any, ScriptedChatModel]:
    chat = ScriptedChatModel()
    values = {"model": "offline", "summary_trigger": "messages:6", "summary_keep": "messages:2"}
    graph = build_graph(
        chat,
        ScriptedChatModel(default="SUMMARY"),
        Settings(_env_file=None, **{**values, **settings}),  # type: ignore[arg-type]
        InMemorySaver(),
    )
    return graph, chat


def test_state_edits_without_as_node_work_after_a_turn() -> None:
    graph, chat = _graph()
    graph.invoke({"messages": [HumanMessage("hi, I'm Ada")]}, CONFIG)

    graph.update_state(CONFIG, {"summary": "The user is called Grace."})  # Studio's editor
    first = graph.get_state(CONFIG).values["messages"][0]
    graph.update_state(CONFIG, {"messages": [HumanMessage("hi, I'm Grace", id=first.id)]})

    state = graph.get_state(CONFIG)
    assert state.next == ()
    assert state.values["summary"] == "The user is called Grace."
    assert [m.text for m in state.values["messages"]] == ["hi, I'm Grace", "reply 1"]
    graph.invoke({"messages": [HumanMessage("who am I?")]}, CONFIG)
    sent = chat_calls(chat)[-1]
    assert sent[0].text.endswith("The user is called Grace.")
    assert [m.text for m in sent[1:]] == ["hi, I'm Grace", "reply 1", "who am I?"]


def test_state_edits_without_as_node_work_while_paused() -> None:
    graph, chat = _graph()
    graph.invoke({"messages": [HumanMessage("first")]}, CONFIG, interrupt_before=["conversation"])
    assert graph.get_state(CONFIG).next == ("conversation",)

    graph.update_state(CONFIG, {"summary": "Edited while paused."})

    assert graph.get_state(CONFIG).next == ("conversation",), "still waits for its reply"
    state = graph.invoke(None, CONFIG)
    assert [m.text for m in state["messages"]] == ["first", "reply 1"]
    assert chat_calls(chat)[-1][0].text.endswith("Edited while paused.")


def test_state_edits_without_as_node_fork_from_an_old_checkpoint() -> None:
    graph, _ = _graph()
    for text in ("one", "two"):
        graph.invoke({"messages": [HumanMessage(text)]}, CONFIG)
    old = next(s for s in graph.get_state_history(CONFIG) if len(s.values.get("messages", [])) == 2)

    forked = graph.update_state(old.config, {"summary": "a fork"})

    state = graph.get_state(forked)
    assert state.values["summary"] == "a fork"
    assert [m.text for m in state.values["messages"]] == ["one", "reply 1"]
    assert (
        state.parent_config["configurable"]["checkpoint_id"]
        == old.config["configurable"]["checkpoint_id"]
    )
    after = graph.invoke({"messages": [HumanMessage("three")]}, forked)
    assert [m.text for m in after["messages"]] == ["one", "reply 1", "three", "reply 3"]


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
