"""Recall: once messages are folded, the chat model can read them again word for word."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from chatbot.config.settings import Settings
from chatbot.engine.graph import DURABILITY, build_graph
from chatbot.engine.recalling import history_search
from chatbot.memory import recall
from chatbot.memory.recall import NOTE, TOOL_NAME
from chatbot.memory.tokens import counter_for
from chatbot.store.postgres import open_store
from chatbot.store.search import recaller
from chatbot.threads.runner import blocking
from tests.fake_openai import FakeOpenAI, Reply, completion
from tests.helpers import Cli, chat_requests, is_summary_request, ok, worth_folding
from tests.scripted import ScriptedChatModel, chat_calls

FACT = "My parking spot is B-42 on level 3, next to the blue pillar."


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "model": "offline",
        "summary_trigger": "messages:4",
        "summary_keep": "messages:2",
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def config(thread: str = "t1") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def recalling_model(query: str) -> Any:
    """A scripted chat model's behaviour: asked about the parking spot with the tool offered
    (the summary's message says so), it calls recall(query); given the tool's answer, it
    answers with what came back."""

    def reply(messages: list[BaseMessage]) -> AIMessage | str:
        last = messages[-1]
        offered = any(NOTE["en"] in m.text for m in messages)
        if isinstance(last, ToolMessage):
            return f"From what you said before: {last.text}"
        if isinstance(last, HumanMessage) and "where did I park" in last.text and offered:
            call = {"name": TOOL_NAME, "args": {"query": query}, "id": f"call_{len(messages)}"}
            return AIMessage(content="", tool_calls=[call])
        return f"noted: {last.text}"

    return reply


def chat_with(store: Any, model: ScriptedChatModel, **overrides: Any) -> Any:
    summary = ScriptedChatModel(default="The user talked about their day.")
    return build_graph(model, summary, settings(**overrides), store.saver, recaller(store))


def say(graph: Any, text: str, thread: str = "t1") -> dict[str, Any]:
    said = {"messages": [HumanMessage(text)]}
    return blocking(graph.ainvoke(said, config(thread), durability=DURABILITY))


def test_a_fact_folded_out_of_the_window_is_answered_from_recall(any_db: str) -> None:
    model = ScriptedChatModel(default=recalling_model("parking spot"))
    with open_store(any_db) as store:
        graph = chat_with(store, model)
        say(graph, FACT)
        for n in range(4):
            say(graph, f"small talk {n}")
        state = graph.get_state(config()).values
        assert state["summary"] and all(m.text != FACT for m in state["messages"]), "folded"
        offered_before = list(model.offered)
        state = say(graph, "where did I park?")
    assert not any(offered_before[:1]), "no summary yet: no tool offered"
    reply = state["messages"][-1]
    assert isinstance(reply, AIMessage) and not reply.tool_calls
    assert FACT in reply.text, "the answer quotes the folded message verbatim"
    tool_answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert tool_answers and FACT in tool_answers[-1].text
    assert "checkpoint 1" in tool_answers[-1].text and "[user " in tool_answers[-1].text
    # The call with the tool carried the note; the answer after it came in the same turn.
    asked = chat_calls(model)[-2]
    assert any(NOTE["en"] in m.text for m in asked) and model.offered[-2] == [TOOL_NAME]


def test_without_a_summary_there_is_no_tool_and_no_extra_token(tmp_path: Path) -> None:
    model = ScriptedChatModel(default=recalling_model("parking spot"))
    with open_store(str(tmp_path / "t.sqlite")) as store:
        graph = chat_with(store, model, summary_trigger="messages:50")
        say(graph, FACT)
        say(graph, "where did I park?")
    assert model.offered == [[], []]
    assert all(NOTE["en"] not in m.text for call in model.calls for m in call)


def test_recall_off_offers_no_tool(tmp_path: Path) -> None:
    model = ScriptedChatModel()
    with open_store(str(tmp_path / "t.sqlite")) as store:
        graph = chat_with(store, model, recall="off")
        for n in range(6):
            say(graph, f"message {n}")
        assert graph.get_state(config()).values["summary"]
        blocking(
            graph.ainvoke(
                {"messages": [HumanMessage("and now?")]},
                config(),
                context={"recall": "auto"},
            )
        )
    assert model.offered[:-1] == [[]] * 6 and model.offered[-1] == [TOOL_NAME], (
        "the run's context turns it on"
    )


def test_recall_never_returns_a_message_from_another_thread(tmp_path: Path) -> None:
    model = ScriptedChatModel(default=recalling_model("parking spot"))
    with open_store(str(tmp_path / "t.sqlite")) as store:
        graph = chat_with(store, model)
        say(graph, "My parking spot is A-1 at work.", thread="other")
        say(graph, "Note this for later: nothing about cars.", thread="t1")
        for n in range(4):
            say(graph, f"small talk {n}", thread="other")
            say(graph, f"small talk {n}", thread="t1")
        state = say(graph, "where did I park?", thread="t1")
    (answer,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert "A-1" not in answer.text
    assert "No folded message holds 'parking spot'" in answer.text


class GraphHistory:
    """What a server's ``history_search`` asks of langgraph-sdk's client,
    ``threads.get_history``, answered from the graph's own state history as the server answers
    it (the states as JSON: messages as dicts), newest first, a page at a time."""

    def __init__(self) -> None:
        self.threads = self
        self.graph: Any = None
        self.pages = 0

    async def get_history(
        self,
        thread_id: str,
        *,
        limit: int = 10,
        before: str | None = None,
        checkpoint: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        self.pages += 1
        where = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": "", **(checkpoint or {})}
        }
        after = {"configurable": {"checkpoint_id": before}} if before else None
        states = []
        async for snapshot in self.graph.aget_state_history(where, limit=limit, before=after):
            parent = (snapshot.parent_config or {}).get("configurable", {})
            messages = snapshot.values.get("messages", [])
            states.append(
                {
                    "values": {"messages": [m.model_dump() for m in messages]},
                    "checkpoint": {
                        "checkpoint_id": snapshot.config["configurable"]["checkpoint_id"]
                    },
                    "parent_checkpoint": {"checkpoint_id": parent["checkpoint_id"]}
                    if parent
                    else None,
                    "created_at": snapshot.created_at,
                }
            )
        return states


@pytest.mark.parametrize("searcher", ["index", "checkpoints"])
def test_recall_reads_only_this_line_of_history(tmp_path: Path, searcher: str) -> None:
    """A fork from before a later message (as /undo, /retry and /fork make): recall does not
    bring back what was said on the branch left behind, newer though it is. The same with
    the search a server's graph uses (the thread's history through the server's API, awaited)."""
    model = ScriptedChatModel(default=recalling_model("parking spot"))
    history = GraphHistory()
    with open_store(str(tmp_path / "t.sqlite")) as store:
        summary = ScriptedChatModel(default="The user talked about their day.")
        search: Any = recaller(store)
        if searcher == "checkpoints":
            search = functools.partial(history_search, client=history)
        graph: Any = build_graph(model, summary, settings(), store.saver, search)
        history.graph = graph

        def run(given: Any, where: Any) -> Any:  # (each step saved before the next, as a
            # turn runs: the store's searcher finds the checkpoint the run is at)
            return blocking(graph.ainvoke(given, where, durability=DURABILITY))

        run({"messages": [HumanMessage(FACT)]}, config())
        for n in range(4):
            run({"messages": [HumanMessage(f"small talk {n}")]}, config())
        before = graph.get_state(config()).config
        run({"messages": [HumanMessage("My parking spot is now Z-9 in the basement.")]}, config())
        for n in range(4):
            run({"messages": [HumanMessage(f"more small talk {n}")]}, config())
        state = run({"messages": [HumanMessage("where did I park?")]}, before)
    (answer,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert FACT in answer.text and "Z-9" not in answer.text, answer.text
    assert searcher == "index" or history.pages >= 2, "its checkpoint first, then the history"


@pytest.mark.parametrize(
    "query",
    ['"parking  spot"', "PARKING spot", '"spot is\tB-42"', "blue zeppelin pillar", "ſpot"],
)
def test_a_servers_history_and_the_index_find_the_same_messages(tmp_path: Path, query: str) -> None:
    """One rule decides what a search finds, whether the recall tool reads chatbot's index or
    a LangGraph server's history: the same messages, in the same order, for phrases with any
    whitespace, any case, a partial match."""
    model = ScriptedChatModel(default=recalling_model("nothing asked"))
    history = GraphHistory()
    with open_store(str(tmp_path / "t.sqlite")) as store:
        graph = chat_with(store, model)
        history.graph = graph
        say(graph, FACT)
        say(graph, "Remember: my parking\nspot at work is A-1, by the blue door.")
        for n in range(4):
            say(graph, f"small talk {n}")
        index = recaller(store)("t1", query, 10, (), None)
        server = blocking(history_search("t1", query, 10, (), None, client=history))
    assert index, "the index finds some"
    assert [(m.role, m.text, m.message_id) for m in server] == [
        (m.role, m.text, m.message_id) for m in index
    ]


def test_recall_reads_the_checkpoints_an_index_lost(tmp_path: Path) -> None:
    """A database whose index lost its rows (turns killed before their thread was indexed):
    the tool reads the checkpoints the index lacks and still finds the fact."""
    model = ScriptedChatModel(default=recalling_model("parking spot"))
    with open_store(str(tmp_path / "t.sqlite")) as store:
        graph = chat_with(store, model)
        say(graph, FACT)
        for n in range(4):
            say(graph, f"small talk {n}")
        store.write(("DELETE FROM chatbot_messages", ()), ("DELETE FROM chatbot_indexed", ()))
        state = say(graph, "where did I park?")
    (answer,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert "B-42" in answer.text, answer.text


def test_recall_of_what_was_never_said_says_so(tmp_path: Path) -> None:
    """Nothing folded holds the query: the tool says it found nothing, and the model still
    answers."""
    model = ScriptedChatModel(default=recalling_model("zeppelin hangar"))
    with open_store(str(tmp_path / "t.sqlite")) as store:
        graph = chat_with(store, model)
        say(graph, FACT)
        for n in range(4):
            say(graph, f"small talk {n}")
        state = say(graph, "where did I park?")
    (answer,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert answer.text.startswith("No folded message holds 'zeppelin hangar'")
    assert state["messages"][-1].text.startswith("From what you said before: No folded")


@pytest.mark.parametrize(
    ("trigger", "keep"), [(t, k) for t in (3, 4, 6) for k in range(1, t)], ids=str
)
def test_a_fold_never_splits_a_tool_call_from_its_answer(
    tmp_path: Path, trigger: int, keep: int
) -> None:
    model = ScriptedChatModel(default=recalling_model("spot"))
    with open_store(str(tmp_path / "t.sqlite")) as store:
        graph = chat_with(
            store, model, summary_trigger=f"messages:{trigger}", summary_keep=f"messages:{keep}"
        )
        for turn in range(10):
            text = "where did I park?" if turn % 2 else f"{FACT} ({turn})"
            state = say(graph, text)
            messages = state["messages"]
            calls = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
            answers = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
            assert calls == answers, (turn, [m.type for m in messages])
    assert any(call == [TOOL_NAME] for call in model.offered), "recall was used"


def test_the_summarizer_reads_a_recall_round_compactly(tmp_path: Path) -> None:
    model = ScriptedChatModel(default=recalling_model("parking spot"))
    summary = ScriptedChatModel(default="The user asked where they parked.")
    with open_store(str(tmp_path / "t.sqlite")) as store:
        graph = build_graph(model, summary, settings(), store.saver, recaller(store))
        say(graph, FACT)
        for n in range(4):
            say(graph, f"small talk {n}")
        say(graph, "where did I park?")
        for n in range(4):
            say(graph, f"more talk {n}")
    folded_round = [
        call[-1].text for call in summary.calls if "[recall 'parking spot']" in call[-1].text
    ]
    assert folded_round, "the round was folded"
    assert "<tool>[recall: 2 earlier message(s) holding 'parking spot'" in folded_round[0]
    (tool,) = re.findall(r"<tool>.*?</tool>", folded_round[0], re.DOTALL)
    assert FACT not in tool and "checkpoint" not in tool, "the recalled words are not read again"


def test_the_offline_model_recalls_a_folded_fact_in_the_cli(cli: Cli) -> None:
    env = {
        "CHATBOT_MODEL": "offline",
        "CHATBOT_SUMMARY_TRIGGER": "messages:4",
        "CHATBOT_SUMMARY_KEEP": "messages:2",
    }
    ok(cli.ask(FACT, **env))
    for n in range(3):
        ok(cli.ask(f"the weather today, part {n}", **env))
    result = ok(cli.ask("What was my parking spot?", **env))
    assert 'recalling "parking spot"… 2 messages' in result.stderr  # (its echo holds it too)
    assert "B-42 on level 3" in result.stdout
    ok(cli.ask("回忆 停车位", **env))  # (nothing holds it: the model says so, nothing fails)
    shown = cli.show()
    kinds = [m["type"] for m in shown["messages"]]
    assert "tool" in kinds or shown["summary"], kinds


def test_the_offline_model_recalls_in_chinese(cli: Cli) -> None:
    env = {
        "CHATBOT_MODEL": "offline",
        "CHATBOT_SUMMARY_TRIGGER": "messages:4",
        "CHATBOT_SUMMARY_KEEP": "messages:2",
        "CHATBOT_LANGUAGE": "zh",
    }
    ok(cli.ask("我的停车位是B-42，在三层。", **env))
    for n in range(3):
        ok(cli.ask(f"今天天气不错，第{n}句", **env))
    result = ok(cli.ask("你还记得我的停车位吗？", **env))
    assert 'recalling "停车 车位"… 2 messages' in result.stderr  # (pairs of characters)
    assert "B-42" in result.stdout


def refuse_tools(body: dict[str, Any]) -> Reply:
    if "tools" in body:
        return Reply(status=400, error_message="this model does not support tools")
    return Reply(text="the summary" if is_summary_request(body) else "a plain answer")


def test_a_provider_refusing_tools_gets_the_turn_again_without_them(cli: Cli) -> None:
    cli.server.responder = refuse_tools
    env = {"CHATBOT_SUMMARY_TRIGGER": "messages:2", "CHATBOT_SUMMARY_KEEP": "messages:1"}
    ok(cli.ask(worth_folding("first"), **env))
    ok(cli.ask("second", **env))
    result = ok(cli.ask("third", **env))
    assert result.stdout.strip() == "a plain answer"
    notes = [line for line in result.stderr.splitlines() if "recall is off" in line]
    assert len(notes) == 1 and "it refused tools" in notes[0], result.stderr
    tooled = [r for r in chat_requests(cli.server) if "tools" in r.body]
    assert len(tooled) == 1, "asked with the tool once, then again without it"
    assert [m["content"] for m in cli.show()["messages"]][-1] == "a plain answer"

    # The same model name on another server is offered the tool: it may take tools.
    with FakeOpenAI() as other:
        other.responder = lambda body: "the summary" if is_summary_request(body) else "fine"
        env["OPENAI_BASE_URL"] = other.base_url
        for text in (worth_folding("one"), "two", "three"):
            ok(cli.ask(text, thread="elsewhere", **env))
        assert any("tools" in r.body for r in chat_requests(other)), "offered there"


@pytest.mark.slow
def test_kill_9_during_a_tool_round_loses_no_completed_message(cli: Cli, tmp_path: Path) -> None:
    """The model asks for recall; the call after the tool's answer hangs and the process is
    killed: the message, the tool call and its answer are all in the thread, and the next
    turn works (the provider is never sent a call without its answer)."""
    calls: list[dict[str, Any]] = []

    def respond(body: dict[str, Any]) -> Any:
        calls.append(body)
        if is_summary_request(body):
            return Reply(text="The user told me where they parked.")
        last = body["messages"][-1]
        if "tools" in body and last["role"] == "user" and "park" in str(last["content"]):
            message = {
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "recall", "arguments": '{"query": "parking"}'},
                    }
                ],
            }
            return completion(message, finish="tool_calls")(body)
        if last["role"] == "tool" and not os.environ.get("NO_HANG_MARK"):
            return Reply(text="never sent", delay=60)
        return Reply(text="ok")

    cli.server.responder = respond
    env = {"CHATBOT_SUMMARY_TRIGGER": "messages:2", "CHATBOT_SUMMARY_KEEP": "messages:1"}
    ok(cli.ask(worth_folding("My parking is on level 3."), **env))
    ok(cli.ask("hello", **env))
    full_env = {
        **os.environ,
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": cli.server.base_url,
        "CHATBOT_MODEL": "gpt-4o-mini",
        "CHATBOT_MAX_RETRIES": "0",
        **env,
    }
    command = [sys.executable, "-m", "chatbot", "ask", "where is my parking?", "-t", "t1"]
    process = subprocess.Popen(
        [*command, "--db", str(cli.db)],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
        m.get("role") == "tool" for c in calls for m in c["messages"]
    ):
        time.sleep(0.05)
    time.sleep(0.3)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    kinds = [(m["type"], m["content"]) for m in cli.show()["messages"]]
    assert ("human", "where is my parking?") in kinds
    assert any(kind == "tool" and "level 3" in str(text) for kind, text in kinds), kinds
    os.environ["NO_HANG_MARK"] = "1"
    try:
        ok(cli.ask("and now?", **env))
    finally:
        del os.environ["NO_HANG_MARK"]
    last_request = [c for c in calls if not is_summary_request(c)][-1]
    asked_ids = {call["id"] for m in last_request["messages"] for call in m.get("tool_calls") or []}
    answered = {m.get("tool_call_id") for m in last_request["messages"] if m["role"] == "tool"}
    assert asked_ids <= answered, json.dumps(last_request["messages"], indent=1)[:2000]


def test_a_round_cut_short_before_its_answer_never_reaches_the_provider_half_made(
    tmp_path: Path,
) -> None:
    """Ctrl-C while recall searches: the reply that called the tool is saved, its answer is
    not; the next turn sends the call with an answer saying it was stopped (providers refuse
    a call without one)."""
    model = ScriptedChatModel(default=recalling_model("parking spot"))
    stopped = [True]
    with open_store(str(tmp_path / "t.sqlite")) as store:
        search = recaller(store)

        def interrupted_once(thread_id: str, query: str, limit: int, *rest: Any) -> Any:
            if stopped.pop() if stopped else False:
                raise KeyboardInterrupt
            return search(thread_id, query, limit, *rest)

        summary = ScriptedChatModel(default="The user talked about their day.")
        graph = build_graph(model, summary, settings(), store.saver, interrupted_once)
        say(graph, FACT)
        for n in range(4):
            say(graph, f"small talk {n}")
        with pytest.raises(KeyboardInterrupt):
            say(graph, "where did I park?")
        saved = graph.get_state(config()).values["messages"]
        assert isinstance(saved[-1], AIMessage) and saved[-1].tool_calls, "the call is kept"
        state = say(graph, "where did I park? (again)")
    sent = chat_calls(model)[-2]
    calls = {c["id"] for m in sent if isinstance(m, AIMessage) for c in m.tool_calls}
    answers = {m.tool_call_id: m.text for m in sent if isinstance(m, ToolMessage)}
    assert calls <= set(answers), "every call sent has its answer"
    assert any("stopped" in text for text in answers.values())
    assert FACT in state["messages"][-1].text


def test_the_tools_tokens_count_once_there_is_a_summary(tmp_path: Path) -> None:
    """What the next call would send, as the status line, /tokens, /context and the triggers
    count it: with recall on, the tool's definition and note once there is a summary."""
    from chatbot.threads.backend import LocalBackend

    with open_store(str(tmp_path / "t.sqlite")) as store:
        graph = chat_with(store, ScriptedChatModel())
        backend = LocalBackend(graph, store)
        off = {"recall": "off"}
        list(backend.send("t1", FACT))
        early = backend.current("t1")
        assert early is not None and not early.summary
        assert backend.context_tokens(early) == backend.context_tokens(early, off)
        for n in range(4):
            list(backend.send("t1", f"small talk {n}"))
        later = backend.current("t1")
        assert later is not None and later.summary
        extra = backend.context_tokens(later) - backend.context_tokens(later, off)
        assert 40 <= extra <= 80, extra
        window = backend.context_window(later).sent
        without = backend.context_window(later, off).sent
        assert window.summary == without.summary, "the summary's text is the same"
        assert window.recall_tool == recall.definition_tokens(counter_for("scripted"))
        assert window.summary_message - without.summary_message == extra - window.recall_tool
        assert without.recall_tool == 0
