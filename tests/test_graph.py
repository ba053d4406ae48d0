"""The graph: the tutorial's walk-through, failure safety, chunking and the reply stream."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.memory import InMemorySaver

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.threads.runner import blocking, blocking_iter
from tests.helpers import worth_folding
from tests.scripted import ScriptedChatModel, chat_calls, summary_calls

TUTORIAL_TURNS = [
    "hi! I'm Lance",
    "what's my name?",
    "i like the 49ers!",
    "i like Nick Bosa, isn't he the highest paid defensive player?",
]


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "model": "offline",
        "summary_trigger": "messages:6",
        "summary_keep": "messages:2",
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def config(thread: str = "1") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def say(graph: Any, text: str, thread: str = "1", **kwargs: Any) -> dict[str, Any]:
    return blocking(graph.ainvoke({"messages": [HumanMessage(text)]}, config(thread), **kwargs))


@pytest.fixture
def chat() -> ScriptedChatModel:
    return ScriptedChatModel()


@pytest.fixture
def summarizer() -> ScriptedChatModel:
    return ScriptedChatModel(default="Lance likes the 49ers and Nick Bosa.")


def test_graph_has_the_tutorial_shape_with_a_guard_in_front(chat: ScriptedChatModel) -> None:
    graph = build_graph(chat, settings=settings())
    drawn = graph.get_graph()
    assert set(drawn.nodes) == {
        "__start__",
        "conversation",
        "summarize_conversation",
        "recall",
        "__end__",
    }
    edges = {(e.source, e.target, e.conditional) for e in drawn.edges}
    assert edges == {
        # fold_first: answer at once, fold first, or (nothing pending) end
        ("__start__", "conversation", True),
        ("__start__", "summarize_conversation", True),
        ("__start__", "__end__", True),
        # should_continue: the tutorial's edge, and the recall tool's round
        ("conversation", "summarize_conversation", True),
        ("conversation", "recall", True),
        ("conversation", "__end__", True),
        ("recall", "conversation", False),
        # after_summary: a message still waiting for its reply is answered
        ("summarize_conversation", "conversation", True),
        ("summarize_conversation", "__end__", True),
    }


def test_input_is_what_a_user_gives_and_output_is_the_whole_state(chat: ScriptedChatModel) -> None:
    graph = build_graph(chat, settings=settings())
    inputs = graph.get_input_jsonschema()
    assert set(inputs["properties"]) == {"messages", "summary", "system_prompt"}
    assert inputs["required"] == ["messages"]
    outputs = graph.get_output_jsonschema()["properties"]
    assert set(outputs) == {
        "messages",
        "summary",
        "context_overflow",
        "folded",
        "system_prompt",
        "system_role",
        "usage",
    }


def test_a_fresh_thread_can_be_edited_before_its_first_run(chat: ScriptedChatModel) -> None:
    """``update_state`` with no checkpoint yet runs ``fold_first`` as from START, without a
    runtime: the message then waits for its reply."""
    graph = build_graph(chat, settings=settings(), checkpointer=InMemorySaver())
    graph.update_state(config(), {"messages": [HumanMessage("typed in Studio")]})
    assert graph.get_state(config()).next == ("conversation",)
    state = blocking(graph.ainvoke(None, config()))
    assert [m.text for m in state["messages"]] == ["typed in Studio", "reply 1"]


def test_tutorial_walkthrough_summarizes_after_the_fourth_turn(
    chat: ScriptedChatModel, summarizer: ScriptedChatModel
) -> None:
    graph = build_graph(chat, summarizer, settings(), InMemorySaver())
    for turn in TUTORIAL_TURNS[:3]:
        state = say(graph, turn)
        assert not state.get("summary")
    assert len(state["messages"]) == 6
    assert summarizer.calls == []

    state = say(graph, TUTORIAL_TURNS[3])

    assert state["summary"] == "Lance likes the 49ers and Nick Bosa."
    assert [m.text for m in state["messages"]] == [TUTORIAL_TURNS[3], "reply 4"]
    (request,) = summarizer.calls
    assert request[-1].text.endswith("Create a summary of the conversation above:")
    for folded in TUTORIAL_TURNS[:3]:
        assert folded.replace("'", "&#x27;") in request[-1].text or folded in request[-1].text
    assert "Nick Bosa, isn" not in request[-1].text, "kept messages must not be summarized"


def test_second_summary_extends_the_first_with_only_the_new_messages(
    chat: ScriptedChatModel,
) -> None:
    summarizer = ScriptedChatModel(script=["FIRST SUMMARY", "SECOND SUMMARY"])
    graph = build_graph(chat, summarizer, settings(), InMemorySaver())
    for turn in TUTORIAL_TURNS:
        say(graph, turn)
    for turn in ["turn five", "turn six", "turn seven"]:
        state = say(graph, turn)

    assert state["summary"] == "SECOND SUMMARY"
    assert len(state["messages"]) == 2
    second = summarizer.calls[1][-1].text
    assert "This is summary of the conversation to date: FIRST SUMMARY" in second
    assert second.endswith("Extend the summary by taking into account the new messages above:")
    assert "turn five" in second and "turn six" in second
    assert "hi! I" not in second, "already-summarized messages are not sent again"
    assert "turn seven" not in second, "the kept window is not sent to the summarizer"


def test_summary_reaches_the_model_as_a_system_message_after_the_system_prompt(
    chat: ScriptedChatModel, summarizer: ScriptedChatModel
) -> None:
    graph = build_graph(chat, summarizer, settings(system_prompt="Be brief."), InMemorySaver())
    for turn in TUTORIAL_TURNS:
        say(graph, turn)
    say(graph, "what do I like?")

    sent = chat_calls(chat)[-1]
    assert isinstance(sent[0], SystemMessage) and sent[0].text == "Be brief."
    assert isinstance(sent[1], SystemMessage)
    assert sent[1].text == "Summary of conversation earlier: Lance likes the 49ers and Nick Bosa."
    assert [m.text for m in sent[2:]] == [TUTORIAL_TURNS[3], "reply 4", "what do I like?"]
    state = graph.get_state(config()).values
    assert not any(isinstance(m, SystemMessage) for m in state["messages"])


def test_chinese_prompts_are_used_when_language_is_zh(
    chat: ScriptedChatModel, summarizer: ScriptedChatModel
) -> None:
    graph = build_graph(chat, summarizer, settings(language="zh"), InMemorySaver())
    for turn in TUTORIAL_TURNS:
        say(graph, turn)
    say(graph, "我喜欢什么?")
    assert summarizer.calls[0][-1].text.endswith("请为以上对话生成摘要：")
    assert chat_calls(chat)[-1][0].text.startswith("此前对话的摘要：")


@pytest.mark.parametrize(
    "failure",
    [RuntimeError("provider exploded"), TimeoutError("read timed out"), "", "   "],
    ids=["raises", "times-out", "empty", "blank"],
)
def test_failed_summary_keeps_every_message_and_the_next_turn_retries(
    chat: ScriptedChatModel, failure: Any
) -> None:
    summarizer = ScriptedChatModel(script=[failure], default="RECOVERED SUMMARY")
    graph = build_graph(chat, summarizer, settings(), InMemorySaver())
    for turn in TUTORIAL_TURNS[:3]:
        say(graph, turn)

    events = []
    for mode, payload in blocking_iter(
        graph.astream(
            {"messages": [HumanMessage(TUTORIAL_TURNS[3])]},
            config(),
            stream_mode=["custom", "values"],
        )
    ):
        if mode == "custom":
            events.append(payload)
    state = graph.get_state(config()).values

    assert len(state["messages"]) == 8, "no message may be removed when the summary fails"
    assert not state.get("summary"), "an error is never stored as the summary"
    assert [e["event"] for e in events] == ["folding", "summary_failed"], "announced, then failed"
    assert graph.get_state(config()).next == (), "the run finished cleanly"

    # The trigger still held before the next message: the fold is made before answering.
    state = say(graph, "turn five")
    assert state["summary"] == "RECOVERED SUMMARY"
    assert [m.text for m in state["messages"]] == ["reply 4", "turn five", "reply 5"]
    folded = summary_calls(summarizer)[-1][-1].text
    assert "hi! I" in folded and "turn five" not in folded
    sent = chat_calls(chat)[-1]
    assert sent[0].text == "Summary of conversation earlier: RECOVERED SUMMARY"


def test_failed_extension_keeps_the_previous_summary(chat: ScriptedChatModel) -> None:
    summarizer = ScriptedChatModel(script=["FIRST", RuntimeError("down")])
    graph = build_graph(chat, summarizer, settings(), InMemorySaver())
    for turn in [*TUTORIAL_TURNS, "five", "six", "seven"]:
        state = say(graph, turn)
    assert state["summary"] == "FIRST"
    assert len(state["messages"]) == 8


def test_oversized_history_is_summarized_in_chunks_with_nothing_dropped(
    chat: ScriptedChatModel,
) -> None:
    summarizer = ScriptedChatModel(script=[f"running summary {i}" for i in range(1, 50)])
    graph = build_graph(
        chat,
        summarizer,
        settings(summary_input_tokens=1200, max_summary_tokens=200),
        InMemorySaver(),
    )
    long_turns = [f"fact {i}: " + f"word{i} " * 300 for i in range(4)]
    for turn in long_turns:
        state = say(graph, turn)

    calls = summary_calls(summarizer)
    assert len(calls) > 1, "the history exceeds one call's budget, so it is chunked"
    assert state["summary"] == f"running summary {len(calls)}"
    sent = "".join(call[-1].text for call in calls)
    for i in range(3):
        assert sent.count(f"word{i}") == 300, f"every word of turn {i} reached the summarizer"
    assert calls[0][-1].text.endswith("Create a summary of the conversation above:")
    for number, call in enumerate(calls[1:], start=1):
        assert f"conversation to date: running summary {number}\n" in call[-1].text


def test_long_summary_is_asked_to_condense(chat: ScriptedChatModel) -> None:
    long_summary = "point " * 400
    summarizer = ScriptedChatModel(script=[long_summary, "short"])
    graph = build_graph(chat, summarizer, settings(max_summary_tokens=100), InMemorySaver())
    for turn in [*TUTORIAL_TURNS, "five", "six", "seven"]:
        say(graph, turn)
    assert "condensed to under 100 tokens" in summarizer.calls[1][-1].text
    assert "condensed" not in summarizer.calls[0][-1].text


def test_reply_stream_carries_no_summary_tokens() -> None:
    """One model for both roles (the default): only the reply's tokens reach the stream."""
    model = ScriptedChatModel(
        script=["first reply", "second reply", "third reply", "the fourth reply"],
        default="SECRET SUMMARY TOKENS",
    )
    graph = build_graph(model, settings=settings(), checkpointer=InMemorySaver())
    for turn in TUTORIAL_TURNS[:3]:
        say(graph, turn)
    streamed = []
    for chunk, metadata in blocking_iter(
        graph.astream(
            {"messages": [HumanMessage(TUTORIAL_TURNS[3])]}, config(), stream_mode="messages"
        )
    ):
        streamed.append((chunk.text, metadata["langgraph_node"]))
    text = "".join(piece for piece, _ in streamed)
    assert "the fourth reply" in text
    assert "SECRET" not in text and "SUMMARY" not in text
    assert graph.get_state(config()).values["summary"] == "SECRET SUMMARY TOKENS"


def test_nothing_is_summarized_when_the_only_safe_cutoff_folds_nothing() -> None:
    """A kept window that would start inside a tool-call group moves back to its start."""
    model = ScriptedChatModel(default="done")
    summarizer = ScriptedChatModel(default="SUMMARY")
    graph = build_graph(
        model, summarizer, settings(summary_trigger="messages:3", summary_keep="messages:3")
    )
    call = {"name": "lookup", "args": {}, "id": "call-1"}
    history = [
        AIMessage("", tool_calls=[call]),
        ToolMessage("result 1", tool_call_id="call-1"),
        ToolMessage("orphan", tool_call_id="call-x"),
        HumanMessage("and now?"),
    ]
    state = blocking(graph.ainvoke({"messages": history}))
    assert summarizer.calls == []
    assert len(state["messages"]) == 5


def test_per_run_context_overrides_the_trigger(
    chat: ScriptedChatModel, summarizer: ScriptedChatModel
) -> None:
    graph = build_graph(chat, summarizer, settings(), InMemorySaver())
    tight = {"summary_trigger": "messages:1", "summary_keep": "messages:1"}
    state = say(graph, worth_folding("hello"), context=tight)
    assert state["summary"] == "Lance likes the 49ers and Nick Bosa."
    assert [m.text for m in state["messages"]] == ["reply 1"]


def test_keep_first_message_never_folds_the_first_user_message(
    chat: ScriptedChatModel, summarizer: ScriptedChatModel
) -> None:
    graph = build_graph(chat, summarizer, settings(keep_first_message=True), InMemorySaver())
    for turn in [*TUTORIAL_TURNS, "five", "six", "seven"]:
        state = say(graph, turn)
    assert state["messages"][0].text == TUTORIAL_TURNS[0]
    assert all(TUTORIAL_TURNS[0] not in call[-1].text for call in summarizer.calls)


def test_failed_summary_never_logs_or_streams_the_api_key(
    chat: ScriptedChatModel, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-live-VERYSECRET123456"
    summarizer = ScriptedChatModel(script=[RuntimeError(f"Incorrect API key provided: {secret}")])
    graph = build_graph(
        chat,
        summarizer,
        settings(openai_api_key=secret, summary_trigger="messages:1", summary_keep="messages:1"),
    )
    with caplog.at_level("WARNING", logger="chatbot"):
        parts = list(
            blocking_iter(
                graph.astream(
                    {"messages": [HumanMessage(worth_folding("hi"))]},
                    stream_mode=["custom", "values"],
                )
            )
        )
    (failure,) = [p for mode, p in parts if mode == "custom" and p["event"] != "folding"]
    assert failure["event"] == "summary_failed" and "Incorrect API key" in failure["error"]
    assert secret not in failure["error"]
    assert caplog.records and all(secret not in r.getMessage() for r in caplog.records)


# Only a run that starts at START (a new message, /compact) folds before it answers. A run that
# resumes at ``conversation`` (/retry asking for a reply again, a turn left unanswered, a pause
# before ``conversation``) answers first, and folds after the reply if the trigger holds; and
# an edit while a turn waits to fold first leaves the message to be answered.

LOW_TRIGGER = {"summary_trigger": "messages:2", "summary_keep": "messages:1"}


def five_turns(chat: ScriptedChatModel, summarizer: ScriptedChatModel) -> Any:
    graph = build_graph(chat, summarizer, settings(summary_trigger="messages:100"), InMemorySaver())
    for number in range(1, 6):
        say(graph, f"message {number}")
    return graph


def test_a_reply_asked_for_again_comes_before_the_fold(
    chat: ScriptedChatModel, summarizer: ScriptedChatModel
) -> None:
    graph = five_turns(chat, summarizer)
    last = graph.get_state(config()).values["messages"][-1]
    graph.update_state(  # what /retry does to ask for the last reply again
        config(), {"messages": [RemoveMessage(id=str(last.id))]}, as_node="summarize_conversation"
    )
    assert graph.get_state(config()).next == ("conversation",)

    state = blocking(graph.ainvoke(None, config(), context=LOW_TRIGGER))

    assert [m.type for m in state["messages"]] == ["ai"]  # answered, then folded to the reply
    (request,) = summary_calls(summarizer)
    assert "message 5" in request[-1].text


def test_a_pause_before_conversation_comes_once_in_a_turn_that_folds_first(
    chat: ScriptedChatModel, summarizer: ScriptedChatModel
) -> None:
    graph = five_turns(chat, summarizer)
    sixth = {"messages": [HumanMessage("sixth")]}

    blocking(graph.ainvoke(sixth, config(), context=LOW_TRIGGER, interrupt_before=["conversation"]))
    paused = graph.get_state(config())
    assert paused.next == ("conversation",) and paused.values["summary"]  # folded, then paused
    state = blocking(
        graph.ainvoke(None, config(), context=LOW_TRIGGER, interrupt_before=["conversation"])
    )

    assert state["messages"][-1].type == "ai"  # answered at the first resume
    assert graph.get_state(config()).next == ()


def test_a_pause_before_conversation_with_a_failing_summarizer_still_answers(
    chat: ScriptedChatModel,
) -> None:
    summarizer = ScriptedChatModel(default=RuntimeError("summarizer down"))
    graph = five_turns(chat, summarizer)
    sixth = {"messages": [HumanMessage("sixth")]}

    blocking(graph.ainvoke(sixth, config(), context=LOW_TRIGGER, interrupt_before=["conversation"]))
    state = blocking(
        graph.ainvoke(None, config(), context=LOW_TRIGGER, interrupt_before=["conversation"])
    )

    assert state["messages"][-1].type == "ai" and state["messages"][-2].text == "sixth"
    assert len(summary_calls(summarizer)) == 2  # one a run: before the pause, after the reply


def test_an_edit_while_a_turn_waits_to_fold_first_leaves_it_to_be_answered(
    chat: ScriptedChatModel, summarizer: ScriptedChatModel
) -> None:
    graph = five_turns(chat, summarizer)
    sixth = {"messages": [HumanMessage("sixth")]}
    blocking(
        graph.ainvoke(
            sixth, config(), context=LOW_TRIGGER, interrupt_before=["summarize_conversation"]
        )
    )
    assert graph.get_state(config()).next == ("summarize_conversation",)

    graph.update_state(config(), {"summary": "Edited by hand."})  # Studio's editor: no as_node
    state = blocking(graph.ainvoke(None, config()))

    assert state["messages"][-1].type == "ai" and state["messages"][-2].text == "sixth"
    assert state["summary"] == "Edited by hand."
