"""Faults around the summary and the graph: the rows of "Summaries and the graph" in
docs/reliability.md. Each test failed before its fix, but the guards of cases that already
held (an empty, whitespace or ``reasoning_content``-only summary reply over HTTP, an empty
condensing reply).

Over HTTP (``chatbot ask`` in-process against the local fake OpenAI server) where the user
meets the fault; in-process on the graph where the caller is a program (Studio's state
editor, LangGraph's server deleting a thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import InvalidUpdateError

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.engine.models import make_model
from chatbot.store.postgres import open_store
from chatbot.store.search import catch_up, search
from chatbot.threads.backend import LocalBackend
from chatbot.threads.runner import blocking, blocking_iter
from tests.fake_openai import RecordedRequest, Reply, completion
from tests.helpers import (
    Cli,
    is_summary_request,
    ok,
    summarizing,
    summary_requests,
    worth_folding,
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


TOOL_CALL = completion(
    {
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "save_summary", "arguments": '{"text": "x"}'},
            }
        ],
    },
    finish="tool_calls",
)
REASONING_ONLY = completion({"content": "", "reasoning_content": "Let me think about it."})

NO_TEXT = {
    "tool call": (TOOL_CALL, "the model answered the summary request with a tool call, no text"),
    "empty": (Reply(text=""), "the model returned an empty summary"),
    "whitespace": (Reply(text=" \n\t "), "the model returned an empty summary"),
    "invisible": (Reply(text="\u200b\u3000\ufeff"), "the model returned an empty summary"),
    "reasoning only": (REASONING_ONLY, "the model returned an empty summary"),
    "think block only": (
        Reply(text="<think>The user counted.</think>\n"),
        "the model returned only its reasoning, no summary",
    ),
}


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
        result = ok(cli.ask(worth_folding(f"turn {n}"), **summarizing()))
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
        ok(cli.ask(worth_folding(f"turn {n}"), **env))
        made.append(len(summary_requests(cli.server)) - before)
    assert made == [0, 1, 1, 1, 1], "the system prompt alone passes 500 tokens: one fold a turn"
    assert cli.show()["summary"] == GOOD


# --- a summary reply with no text ----------------------------------------------------------------


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("fault", list(NO_TEXT), ids=list(NO_TEXT))
def test_a_summary_reply_without_text_changes_nothing_and_says_so(
    cli: Cli, fault: str, language: str
) -> None:
    reply, reason = NO_TEXT[fault]
    cli.server.responder = summaries(reply)
    env = summarizing(CHATBOT_LANGUAGE=language)
    ok(cli.ask(worth_folding("one"), **env))
    before = cli.show()

    result = ok(cli.ask("two", **env))

    assert "echo: two" in result.stdout
    assert failed_lines(result.stderr) == [SUMMARY_FAILED + reason], result.stderr
    after = cli.show()
    assert after["summary"] == before["summary"] == "", "no empty summary is stored"
    assert texts(after) == [*texts(before), "two", "echo: two"], "no message was removed"

    ok(cli.ask("three", **env))  # the next turn tries again, and folds
    final = cli.show()
    assert final["summary"] == GOOD and texts(final) == ["three", "echo: three"]


@pytest.mark.parametrize(
    "reply",
    [
        AIMessage(content=[{"type": "reasoning", "reasoning": "The user counted."}]),
        AIMessage(content="", additional_kwargs={"reasoning_content": "The user counted."}),
    ],
    ids=["reasoning block", "reasoning_content"],
)
def test_a_summary_of_reasoning_alone_is_a_failed_summary(reply: AIMessage) -> None:
    """As a provider's integration hands reasoning over (a content block, or a field)."""
    graph = build_graph(
        ScriptedChatModel(),
        ScriptedChatModel(script=[reply], default=GOOD),
        Settings(
            _env_file=None, model="offline", summary_trigger="messages:2", summary_keep="messages:1"
        ),  # type: ignore[call-arg]
        InMemorySaver(),
    )
    blocking(graph.ainvoke({"messages": [HumanMessage("one")]}, CONFIG))
    events = [
        payload
        for mode, payload in blocking_iter(
            graph.astream(
                {"messages": [HumanMessage("two")]}, CONFIG, stream_mode=["custom", "values"]
            )
        )
        if mode == "custom"
    ]
    assert events[-1] == {
        "event": "summary_failed",
        "error": "the model returned only its reasoning, no summary",
        "reason": "trigger",
    }
    state = graph.get_state(CONFIG).values
    assert len(state["messages"]) == 4 and not state.get("summary")


def test_a_chunk_without_text_fails_the_whole_fold(cli: Cli) -> None:
    """Chunked: the first chunk's summary is good, the second's a tool call; nothing is kept
    of the first."""
    long = "the weather report says rain, then sun, then rain again " * 40
    cli.server.responder = summaries("SUMMARY of the first chunk", TOOL_CALL)
    env = summarizing(CHATBOT_SUMMARY_INPUT_TOKENS="1200", CHATBOT_MAX_SUMMARY_TOKENS="100")
    ok(cli.ask(f"one: {long}", **env))
    before = cli.show()

    result = ok(cli.ask(f"two: {long}", **env))

    assert len(summary_requests(cli.server)) == 2, "the fold needed two calls"
    assert failed_lines(result.stderr) == [SUMMARY_FAILED + NO_TEXT["tool call"][1]]
    after = cli.show()
    assert after["summary"] == "" and texts(after)[: len(texts(before))] == texts(before)
    assert len(after["messages"]) == 4


def test_a_condensing_summary_reply_without_text_keeps_the_old_summary(cli: Cli) -> None:
    """The condense path: the summary is past CHATBOT_MAX_SUMMARY_TOKENS, so the request
    asks to condense it; an empty answer keeps the old one."""
    old = "SUMMARY: " + "the user likes tea and biscuits; " * 12 + "and cake."  # ~100 tokens
    cli.server.responder = summaries(old, Reply(text="   "))
    env = summarizing(CHATBOT_MAX_SUMMARY_TOKENS="60")
    ok(cli.ask(worth_folding("one"), **env))
    ok(cli.ask("two", **env))
    before = cli.show()
    assert before["summary"] == old

    result = ok(cli.ask("three", **env))

    request = summary_requests(cli.server)[-1]
    assert "rewrite it condensed" in request.last_user_text, "the condense prompt was sent"
    assert failed_lines(result.stderr) == [SUMMARY_FAILED + "the model returned an empty summary"]
    after = cli.show()
    assert after["summary"] == old
    assert texts(after)[: len(texts(before))] == texts(before)


# --- a summary far past its limit ----------------------------------------------------------------


def test_a_five_megabyte_summary_is_refused_and_the_thread_goes_on(cli: Cli) -> None:
    huge = "word " * 1_000_000  # 5 MB, finish_reason stop (sent in one piece)
    cli.server.responder = summaries(completion({"content": huge}))
    env = summarizing(CHATBOT_MAX_INPUT_TOKENS="8000")
    ok(cli.ask(worth_folding("one"), **env))
    before = cli.show()

    result = ok(cli.ask("two", **env))

    (line,) = failed_lines(result.stderr)
    assert line == (
        SUMMARY_FAILED + "the summary came back at about 1,000,000 tokens, far past "
        "CHATBOT_MAX_SUMMARY_TOKENS (1,000); it was not stored"
    )
    assert len(summary_requests(cli.server)) == 1, "too big to send back to be condensed"
    after = cli.show()
    assert after["summary"] == "" and texts(after) == [*texts(before), "two", "echo: two"]
    for text in ("three", "four"):
        asked = ok(cli.ask(text, **env))
        assert f"echo: {text}" in asked.stdout
    assert cli.show()["summary"] == GOOD


def test_a_summary_a_few_times_too_long_is_condensed_once(cli: Cli) -> None:
    long = "SUMMARY: " + "the user likes green tea in the morning. " * 40  # ~330 tokens
    cli.server.responder = summaries(long, "SUMMARY: likes green tea.")
    env = summarizing(CHATBOT_MAX_SUMMARY_TOKENS="100")
    ok(cli.ask(worth_folding("one"), **env))
    result = ok(cli.ask("two", **env))

    assert not failed_lines(result.stderr)
    _, second = summary_requests(cli.server)
    assert "rewrite it condensed to under 100 tokens" in second.last_user_text
    assert "the user likes green tea in the morning." in second.last_user_text
    assert cli.show()["summary"] == "SUMMARY: likes green tea."


def _give_summary(db: str, summary: str) -> None:
    """Set a thread's summary as Studio's state editor does: ``update_state`` with no
    ``as_node`` (how a summary past the limit gets in, now that new ones are refused)."""
    settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    with open_store(db) as store:
        graph = build_graph(
            make_model("offline", settings, role="chat"),
            settings=settings,
            checkpointer=store.saver,
        )
        graph.update_state({"configurable": {"thread_id": "t1"}}, {"summary": summary})


def test_a_thread_whose_summary_is_too_big_compacts_and_answers(cli: Cli) -> None:
    """A summary past the limit (here edited in as Studio would) is condensed by ``compact``
    even with no message to fold, and before answering by ``ask``; the server refuses any
    request over 8,000 tokens, as a real one would."""
    cli.server.responder = summaries()
    cli.server.context_limit = 8000
    env = {
        "CHATBOT_MAX_INPUT_TOKENS": "8000",
        "CHATBOT_SUMMARY_INPUT_TOKENS": "6000",
        "CHATBOT_SUMMARY_KEEP": "messages:4",
        "CHATBOT_SUMMARY_TRIGGER": "off",
    }
    for text in ("one", "two"):
        ok(cli.ask(text, **env))
    huge = "SUMMARY: " + "the user said something long. " * 3_000  # ~18,000 tokens
    _give_summary(str(cli.db), huge)

    compacted = ok(cli.invoke("compact", "t1", "--db", str(cli.db), **env))

    assert compacted.stdout.startswith("compacted:"), compacted.output
    state = cli.show()
    assert state["summary"] == GOOD, "condensed into a new summary"
    assert texts(state) == ["one", "echo: one", "two", "echo: two"], "nothing else to fold"
    requests = summary_requests(cli.server)
    assert len(requests) >= 3, "the old summary's text was folded in, chunk by chunk"
    assert all("the user said something long." in r.last_user_text for r in requests)

    _give_summary(str(cli.db), huge)
    asked = ok(cli.ask("three", **env))
    assert "echo: three" in asked.stdout, "condensed first, then answered"
    assert cli.show()["summary"] == GOOD
    assert cli.server.refused == [], "no request passed the server's limit"


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
    blocking(graph.ainvoke({"messages": [HumanMessage("hi, I'm Ada")]}, CONFIG))

    graph.update_state(CONFIG, {"summary": "The user is called Grace."})  # Studio's editor
    first = graph.get_state(CONFIG).values["messages"][0]
    graph.update_state(CONFIG, {"messages": [HumanMessage("hi, I'm Grace", id=first.id)]})

    state = graph.get_state(CONFIG)
    assert state.next == ()
    assert state.values["summary"] == "The user is called Grace."
    assert [m.text for m in state.values["messages"]] == ["hi, I'm Grace", "reply 1"]
    blocking(graph.ainvoke({"messages": [HumanMessage("who am I?")]}, CONFIG))
    sent = chat_calls(chat)[-1]
    assert sent[0].text.endswith("The user is called Grace.")
    assert [m.text for m in sent[1:]] == ["hi, I'm Grace", "reply 1", "who am I?"]


def test_state_edits_without_as_node_work_while_paused() -> None:
    graph, chat = _graph()
    blocking(
        graph.ainvoke(
            {"messages": [HumanMessage("first")]}, CONFIG, interrupt_before=["conversation"]
        )
    )
    assert graph.get_state(CONFIG).next == ("conversation",)

    graph.update_state(CONFIG, {"summary": "Edited while paused."})

    assert graph.get_state(CONFIG).next == ("conversation",), "still waits for its reply"
    state = blocking(graph.ainvoke(None, CONFIG))
    assert [m.text for m in state["messages"]] == ["first", "reply 1"]
    assert chat_calls(chat)[-1][0].text.endswith("Edited while paused.")


def test_state_edits_without_as_node_fork_from_an_old_checkpoint() -> None:
    graph, _ = _graph()
    for text in ("one", "two"):
        blocking(graph.ainvoke({"messages": [HumanMessage(text)]}, CONFIG))
    old = next(s for s in graph.get_state_history(CONFIG) if len(s.values.get("messages", [])) == 2)

    forked = graph.update_state(old.config, {"summary": "a fork"})

    state = graph.get_state(forked)
    assert state.values["summary"] == "a fork"
    assert [m.text for m in state.values["messages"]] == ["one", "reply 1"]
    assert (
        state.parent_config["configurable"]["checkpoint_id"]
        == old.config["configurable"]["checkpoint_id"]
    )
    after = blocking(graph.ainvoke({"messages": [HumanMessage("three")]}, forked))
    assert [m.text for m in after["messages"]] == ["one", "reply 1", "three", "reply 3"]


BAD_EDITS = {
    "summary 42": ({"summary": 42}, "the state's 'summary' must be text (a string; '' for none)"),
    "summary None": ({"summary": None}, "the state's 'summary' must be text"),
    "messages None": (
        {"messages": None},
        "the state's 'messages' must be a list of messages, not None",
    ),
    "messages a number": ({"messages": [42]}, "the state's 'messages' must be a list of messages"),
    "system_prompt 3": ({"system_prompt": 3}, "the state's 'system_prompt' must be text"),
    "context_overflow text": (
        {"context_overflow": "x"},
        "the state's 'context_overflow' must be an object (a dict), not str 'x'",
    ),
}


@pytest.mark.parametrize("edit", list(BAD_EDITS), ids=list(BAD_EDITS))
def test_a_state_edit_of_the_wrong_type_is_refused_and_the_thread_goes_on(edit: str) -> None:
    """What Studio's editor or the SDK could send: it was stored, and a later turn failed on
    it (the summary's text counted, a refused request's record read)."""
    update, said = BAD_EDITS[edit]
    graph, _ = _graph(summary_trigger="messages:4", summary_keep="messages:2")
    blocking(graph.ainvoke({"messages": [HumanMessage("one")]}, CONFIG))
    before = graph.get_state(CONFIG)

    with pytest.raises(InvalidUpdateError) as refused:
        graph.update_state(CONFIG, update)

    assert str(refused.value).startswith(said), refused.value
    assert "nothing was changed" in str(refused.value)
    after = graph.get_state(CONFIG)
    assert after.config == before.config and after.values == before.values, "nothing stored"
    for text in ("two", "three"):
        blocking(graph.ainvoke({"messages": [HumanMessage(text)]}, CONFIG))
    state = graph.get_state(CONFIG).values
    assert state["summary"] == "SUMMARY", "the thread folds and answers as before"
    assert [m.text for m in state["messages"]][-2:] == ["three", "reply 3"]


def test_a_bare_string_as_the_messages_is_one_human_message_as_in_langgraph() -> None:
    """``{"messages": "hi"}``, LangGraph's idiom (``add_messages`` takes a string as one human
    message), as a run's input and as an edit: the type check does not refuse it."""
    graph, _ = _graph()
    state = blocking(graph.ainvoke({"messages": "hello"}, CONFIG))
    assert [(m.type, m.text) for m in state["messages"]] == [("human", "hello"), ("ai", "reply 1")]
    graph.update_state(CONFIG, {"messages": "typed in Studio"})
    last = graph.get_state(CONFIG).values["messages"][-1]
    assert (last.type, last.text) == ("human", "typed in Studio")


# --- deleting through the saver ------------------------------------------------------------------


@pytest.mark.parametrize("how", ["delete_thread", "adelete_thread"])
def test_a_thread_deleted_through_the_saver_is_not_found_and_its_rows_then_go(
    any_db: str, how: str
) -> None:
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

        assert [hit.thread_id for hit in search(store, "narwhal")] == ["kept"]
        catch_up(store)  # (what /search does first: the deleted thread's rows go)
        rows = store.query("SELECT thread_id FROM chatbot_messages ORDER BY 1")
        assert {row[0] for row in rows} == {"kept"}
        backend.fork("kept", None, "gone")  # the same messages, the deleted thread's id
        assert sorted(hit.thread_id for hit in search(store, "narwhal")) == ["gone", "kept"]
