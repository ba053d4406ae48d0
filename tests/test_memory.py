"""Memory that never overflows: fold before the call, recover from overflow, /compact, off,
and a summary that does not drift.

The chat model is a scripted fake that behaves like a provider with a context limit: it
counts what it is sent with OpenAI's own tokenizer, reports that as usage, and refuses a
request over its limit with the context-length error langchain-openai raises.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.engine.models import OfflineChatModel
from chatbot.errors import ContextTooLong
from chatbot.memory.tokens import ESTIMATE, USAGE_KEY
from chatbot.threads.runner import blocking, blocking_iter
from tests import reference_tokenizer
from tests.scripted import ScriptedChatModel, chat_calls, summary_calls

ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}

ZH_TURNS = [
    f"第{i}天：我今天在上海参加了一个关于大语言模型的会议，讨论了上下文窗口、摘要和检索增强生成。"
    f"会上有人提到，长对话的成本会随着轮数增加而增长，所以需要定期把旧消息压缩成摘要。编号{i * 7}。"
    for i in range(1, 41)
]


def sent_tokens(messages: list[BaseMessage]) -> int:
    """What a provider counts for a request (OpenAI's cookbook rules, o200k_base)."""
    return reference_tokenizer.count_chat(
        [{"role": ROLES.get(m.type, m.type), "content": m.text} for m in messages]
    )


class Provider:
    """A chat model's behaviour: refuse requests over ``limit`` tokens, else reply with usage."""

    def __init__(self, limit: int | None, reply: Callable[[list[BaseMessage]], str]) -> None:
        self.limit = limit
        self.reply = reply
        self.sizes: list[int] = []
        self.refused: list[int] = []

    def __call__(self, messages: list[BaseMessage]) -> AIMessage:
        requested = sent_tokens(messages)
        self.sizes.append(requested)
        if self.limit is not None and requested > self.limit:
            self.refused.append(requested)
            raise ContextOverflowError(
                f"This model's maximum context length is {self.limit} tokens. However, your "
                f"messages resulted in {requested} tokens. Please reduce the length of the "
                "messages."
            )
        text = self.reply(messages)
        return AIMessage(
            text,
            usage_metadata={
                "input_tokens": requested,
                "output_tokens": reference_tokenizer.count(text),
                "total_tokens": requested + reference_tokenizer.count(text),
            },
        )


def provider_model(provider: Provider) -> ScriptedChatModel:
    return ScriptedChatModel(default=provider)


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"model": "offline"}
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def config(thread: str = "1") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def run(graph: Any, text: str | None, thread: str = "1", **kwargs: Any) -> list[dict[str, Any]]:
    """One run; returns the custom events (summaries) it streamed, without the "folding"
    announcements (one for each summary call of a fold, parts counted from 1, right before
    the fold they announce)."""
    payload = {"messages": [HumanMessage(text)]} if text is not None else {"messages": []}
    events = [
        part
        for mode, part in blocking_iter(
            graph.astream(payload, config(thread), stream_mode=["custom", "values"], **kwargs)
        )
        if mode == "custom"
    ]
    for index, event in enumerate(events):
        if event["event"] == "folding":
            after = events[index + 1] if index + 1 < len(events) else {}
            if after.get("event") == "folding":  # (a refused part is asked again, smaller)
                assert after["part"] in (event["part"], event["part"] + 1), events
                assert after["part"] <= after["parts"], events
                continue
            assert after.get("event") in ("summarized", "summary_failed"), events
            assert event["part"] == event["parts"], "the last part is the fold's end"
            if after.get("event") == "summarized":
                assert after["messages"] == event["messages"]
    return [event for event in events if event["event"] != "folding"]


def state_of(graph: Any, thread: str = "1") -> dict[str, Any]:
    return graph.get_state(config(thread)).values


def zh_reply(messages: list[BaseMessage]) -> str:
    return "好的，我记下了。" + "这个会议听起来很有意思，关于上下文窗口的讨论尤其重要。" * 2


# --- counting fires the trigger in time ----------------------------------------------------------


def test_a_chinese_conversation_with_a_fraction_trigger_is_summarized_before_it_overflows() -> None:
    """The issue's case: 2,000-token model, fraction:0.8. Counted as characters / 4, the
    trigger fired far too late and the provider refused every turn; now it never does."""
    provider = Provider(limit=2000, reply=zh_reply)
    graph = build_graph(
        provider_model(provider),
        OfflineChatModel(role="summary", max_summary_tokens=300),
        settings(
            max_input_tokens=2000,
            summary_trigger="fraction:0.8",
            summary_keep="fraction:0.3",
            max_summary_tokens=300,
            language="zh",
        ),
        InMemorySaver(),
    )
    folds = []
    for turn in ZH_TURNS:
        folds += [e for e in run(graph, turn) if e["event"] == "summarized"]

    assert provider.refused == [], "no request ever passed the model's context"
    assert max(provider.sizes) <= 2000
    assert len(folds) >= 3
    state = state_of(graph)
    assert state["summary"] and len(state["messages"]) < len(ZH_TURNS)
    assert state["messages"][-1].text == zh_reply([])


def test_the_reply_records_our_count_and_the_providers_usage_corrects_the_next_count() -> None:
    provider = Provider(limit=None, reply=lambda m: "ok")
    graph = build_graph(provider_model(provider), settings=settings(), checkpointer=InMemorySaver())
    run(graph, ZH_TURNS[0])
    reply = state_of(graph)["messages"][-1]
    recorded = reply.response_metadata[USAGE_KEY]
    assert recorded["tokenizer"] == "estimate"
    assert reply.usage_metadata["input_tokens"] == provider.sizes[-1]
    assert recorded["tokens"] == pytest.approx(provider.sizes[-1], rel=0.15)


# --- fold before the call ------------------------------------------------------------------------


def long_text(words: int, tag: str = "doc") -> str:
    return " ".join(f"{tag}{i}" for i in range(words))


def test_a_huge_message_is_answered_with_the_older_history_folded_first() -> None:
    provider = Provider(limit=2000, reply=lambda m: "noted")
    summarizer = ScriptedChatModel(default="the user sent a few greetings")
    graph = build_graph(
        provider_model(provider),
        summarizer,
        settings(max_input_tokens=2000, summary_trigger="off", summary_keep="messages:4"),
        InMemorySaver(),
    )
    for turn in ["hello " * 120, "again " * 120, "more " * 120]:
        run(graph, turn)
    assert summarizer.calls == []

    events = run(graph, long_text(700))

    (fold,) = events
    assert fold["event"] == "summarized" and fold["reason"] == "fit"
    assert fold["context_after"] < fold["context_before"]
    assert provider.refused == []
    assert len(provider.sizes) == 4, "answered in the same run, in one call"
    state = state_of(graph)
    assert state["summary"] == "the user sent a few greetings"
    assert [m.text for m in state["messages"]][-2:] == [long_text(700), "noted"]
    folded = summary_calls(summarizer)[0][-1].text
    assert "hello" in folded and "doc1 " not in folded, "the new message is never folded"


def test_a_message_too_big_for_the_model_is_refused_in_one_line_and_kept() -> None:
    provider = Provider(limit=2000, reply=lambda m: "short answer")
    summarizer = ScriptedChatModel(default="summary of the big document")
    graph = build_graph(
        provider_model(provider),
        summarizer,
        settings(max_input_tokens=2000, summary_trigger="tokens:1500", summary_keep="messages:2"),
        InMemorySaver(),
    )
    run(graph, "hi")
    with pytest.raises(
        ContextTooLong,
        match=r"your message( \(with the summary\))? is about [0-9,]+ tokens but the model "
        r"takes at most 2,000",
    ):
        run(graph, long_text(2500))
    assert len(provider.sizes) == 1, "the oversized request was never sent"
    assert state_of(graph)["messages"][-1].text == long_text(2500), "nothing lost"

    # Not stuck: the next message folds the big one (in chunks) and is answered.
    run(graph, "what was in that document?")
    state = state_of(graph)
    assert state["summary"] == "summary of the big document"
    assert [m.text for m in state["messages"]][-2:] == [
        "what was in that document?",
        "short answer",
    ]
    assert provider.refused == []
    folded = "".join(call[-1].text for call in summary_calls(summarizer))
    assert all(f"doc{i} " in folded for i in range(0, 2499, 97)), "every part was summarized"


# --- recover from overflow -----------------------------------------------------------------------


def test_a_context_length_error_folds_the_history_and_retries_once() -> None:
    """No context size is known here: the provider's error is what tells."""
    provider = Provider(limit=None, reply=lambda m: "fine")
    summarizer = ScriptedChatModel(default="we talked about the weather")
    graph = build_graph(
        provider_model(provider),
        summarizer,
        settings(summary_trigger="off", summary_keep="messages:2"),
        InMemorySaver(),
    )
    turns = [f"weather report {i}: " + "sunny and warm today " * 30 for i in range(6)]
    for turn in turns[:5]:
        run(graph, turn)
    provider.limit = provider.sizes[-1] + 50  # the next turn's request will not fit

    events = run(graph, turns[5])

    assert len(provider.refused) == 1
    assert provider.sizes[-1] <= provider.limit < provider.sizes[-2], "the retry fitted"
    (fold,) = events
    assert fold["reason"] == "overflow"
    state = state_of(graph)
    assert state["summary"] == "we talked about the weather"
    assert [m.text for m in state["messages"]][-2:] == [turns[5], "fine"]
    assert not state.get("context_overflow"), "the reply clears the overflow mark"
    assert graph.get_state(config()).next == ()


def test_an_overflow_that_repeats_after_folding_stops_with_one_clear_error() -> None:
    provider = Provider(limit=None, reply=lambda m: "fine")
    summarizer = ScriptedChatModel(default="short summary")
    graph = build_graph(
        provider_model(provider),
        summarizer,
        settings(summary_trigger="off", summary_keep="messages:2"),
        InMemorySaver(),
    )
    for i in range(4):
        run(graph, f"message {i} " * 40)
    provider.limit = 10  # nothing fits any more

    with pytest.raises(ContextTooLong, match="too long again after folding"):
        run(graph, "one more")

    assert len(provider.refused) == 2, "one retry, no loop"
    assert len(summary_calls(summarizer)) == 1
    assert state_of(graph)["messages"][-1].text == "one more", "the message is kept"

    provider.limit = None  # the thread is not stuck
    run(graph, "and now?")
    assert state_of(graph)["messages"][-1].text == "fine"


def test_an_overflow_caused_by_the_message_alone_stops_without_a_summary_call() -> None:
    provider = Provider(limit=300, reply=lambda m: "fine")
    summarizer = ScriptedChatModel(default="summary")
    graph = build_graph(provider_model(provider), summarizer, settings(), InMemorySaver())
    with pytest.raises(ContextTooLong, match=r"your message is about [0-9,]+ tokens"):
        run(graph, long_text(600))
    assert summarizer.calls == []
    assert len(provider.refused) == 1
    assert state_of(graph)["messages"][-1].text == long_text(600)


def test_a_failed_summary_during_recovery_is_one_clear_error_and_changes_nothing() -> None:
    provider = Provider(limit=None, reply=lambda m: "fine")
    summarizer = ScriptedChatModel(default=RuntimeError("summary service down"))
    graph = build_graph(
        provider_model(provider), summarizer, settings(summary_trigger="off"), InMemorySaver()
    )
    for i in range(4):
        run(graph, f"message {i} " * 40)
    before = state_of(graph)
    provider.limit = 200
    with pytest.raises(ContextTooLong, match=r"folding the history failed: .*summary service down"):
        run(graph, "one more")
    after = state_of(graph)
    assert after["messages"][:-1] == before["messages"]
    assert after.get("summary", "") == ""


def test_the_summary_model_refusing_a_chunk_as_too_long_gets_smaller_chunks() -> None:
    chat = ScriptedChatModel(default="ok")
    summary_provider = Provider(limit=700, reply=lambda m: "- facts so far")
    graph = build_graph(
        chat,
        provider_model(summary_provider),
        settings(
            summary_trigger="messages:4", summary_keep="messages:1", summary_input_tokens=4000
        ),
        InMemorySaver(),
    )
    for i in range(3):
        run(graph, long_text(300, f"t{i}x"))
    state = state_of(graph)
    assert state["summary"] == "- facts so far"
    assert summary_provider.refused, "the first chunk was too long for it"
    assert max(s for s in summary_provider.sizes if s <= 700) <= 700


# --- /compact and off ----------------------------------------------------------------------------


def test_trigger_off_never_folds_on_its_own_but_a_compact_run_does() -> None:
    chat = ScriptedChatModel()
    summarizer = ScriptedChatModel(script=["COMPACTED", "LATER"])
    graph = build_graph(
        chat,
        summarizer,
        settings(summary_trigger="off", summary_keep="messages:2"),
        InMemorySaver(),
    )
    for i in range(8):
        run(graph, f"turn {i}")
    assert summarizer.calls == [] and len(state_of(graph)["messages"]) == 16

    events = run(graph, None, context={"compact": True, "compact_focus": "keep every file name"})

    (fold,) = events
    assert fold["reason"] == "compact" and fold["messages"] == 14
    assert fold["context_after"] < fold["context_before"]
    assert len(chat.calls) == 8, "compacting asks the chat model nothing"
    state = state_of(graph)
    assert state["summary"] == "COMPACTED"
    assert [m.text for m in state["messages"]] == ["turn 7", "reply 8"]
    request = summary_calls(summarizer)[0][-1].text
    assert request.endswith("pay special attention to: keep every file name")

    # The focus was for that fold only.
    blocking(graph.ainvoke(None, config(), context={"compact": True}))
    for i in range(8, 10):
        run(graph, f"turn {i}")
    run(graph, None, context={"compact": True})
    assert "special attention" not in summary_calls(summarizer)[-1][-1].text


def test_compact_with_nothing_to_fold_says_so_and_changes_nothing() -> None:
    chat = ScriptedChatModel()
    summarizer = ScriptedChatModel(default="S")
    graph = build_graph(
        chat,
        summarizer,
        settings(summary_trigger="off", summary_keep="messages:4"),
        InMemorySaver(),
    )
    run(graph, "only turn")
    before = state_of(graph)
    (event,) = run(graph, None, context={"compact": True})
    assert event["event"] == "nothing_to_fold" and event["context"] > 0
    assert summarizer.calls == []
    assert state_of(graph) == before


def test_a_run_with_no_message_and_no_compact_does_nothing() -> None:
    chat = ScriptedChatModel()
    graph = build_graph(chat, settings=settings(), checkpointer=InMemorySaver())
    run(graph, "hello")
    assert run(graph, None) == []
    assert len(chat.calls) == 1


# --- a summary that does not drift ---------------------------------------------------------------


def test_the_summary_prompts_ask_for_sections_and_extending_keeps_them() -> None:
    chat = ScriptedChatModel()
    summarizer = ScriptedChatModel(default="## User\n- Ada")
    graph = build_graph(
        chat,
        summarizer,
        settings(summary_trigger="messages:2", summary_keep="messages:1"),
        InMemorySaver(),
    )
    for turn in ["I'm Ada", "I live in Lyon", "I like tea"]:
        run(graph, turn)
    first, second = summary_calls(summarizer)[:2]
    for heading in ("## User", "## Facts", "## Decisions", "## Open tasks", "## Context"):
        assert heading in first[0].text
    assert "Keep earlier points" not in first[0].text
    assert "Keep earlier points; newer values win." in second[0].text


FACT = re.compile(r"my (\w+) is ([\w.-]+)", re.IGNORECASE)


def fact_keeper(messages: list[BaseMessage]) -> str:
    """A summarizer as a good LLM would act: keep every fact, the newest value wins."""
    request = messages[-1].text
    facts = dict(re.findall(r"^- (\w+): (\S+)$", request, re.M))
    conversation = request.split("<conversation>", 1)[1].split("</conversation>", 1)[0]
    for key, value in FACT.findall(conversation):
        facts[key.lower()] = value.rstrip(".")
    return "## Facts\n" + "\n".join(f"- {key}: {value}" for key, value in facts.items())


def test_planted_facts_survive_thirty_extensions_and_the_newest_value_wins() -> None:
    chat = ScriptedChatModel()
    summarizer = ScriptedChatModel(default=fact_keeper)
    graph = build_graph(
        chat,
        summarizer,
        settings(summary_trigger="messages:3", summary_keep="messages:1"),
        InMemorySaver(),
    )
    planted = {"name": "Ada", "city": "Lyon", "dog": "Biscuit", "pin": "4711"}
    turns = [f"my {key} is {value}" for key, value in planted.items()]
    turns += [f"filler message {i} about nothing in particular" for i in range(56)]
    turns.insert(30, "my city is Porto")  # a correction, later: the newest value wins
    for turn in turns:
        run(graph, turn)
    assert len(summary_calls(summarizer)) >= 30

    run(graph, "what do you know about me?")
    seen = chat_calls(chat)[-1][0].text
    assert isinstance(chat_calls(chat)[-1][0], SystemMessage)
    for key, value in {**planted, "city": "Porto"}.items():
        assert f"- {key}: {value}" in seen, key
    assert "Lyon" not in seen


def test_thirty_offline_extensions_stay_under_the_summary_limit_plus_one_extension() -> None:
    limit = 200
    graph = build_graph(
        OfflineChatModel(),
        OfflineChatModel(role="summary", max_summary_tokens=limit),
        settings(summary_trigger="messages:3", summary_keep="messages:1", max_summary_tokens=limit),
        InMemorySaver(),
    )
    sizes = []
    summary = ""
    for i in range(62):
        run(graph, f"statement number {i}: the weather in town {i} was fine and dry")
        new = state_of(graph).get("summary", "")
        if new != summary:
            sizes.append(ESTIMATE.count(new))
            summary = new
    assert len(sizes) >= 30
    one_extension = ESTIMATE.count("- statement number 61: the weather in town 61 was fine and dry")
    assert max(sizes) <= limit + one_extension
    assert "statement number 61" in summary, "the newest points are kept"
