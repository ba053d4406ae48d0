"""A fold is made only when it makes the context smaller, and every view gives one figure for
each word: the fold's own line, /summary history, /context, /tokens and /summary.

The words (:mod:`chatbot.memory.sent`): *summary* is the summary's text, *summary message*
what its message adds to it, *recall tool* the tool's definition, *context* all that is sent.
The REPL runs in-process (``tests.test_repl``'s world), with the recall tool as the app has it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from chatbot.engine import stream
from chatbot.engine.graph import DURABILITY
from chatbot.memory import policy, recall
from chatbot.memory.sent import after_fold, sent_tokens
from chatbot.memory.tokens import TokenCounter, counter_for
from chatbot.store.base import thread_config
from chatbot.threads.runner import blocking_iter
from tests.scripted import ScriptedChatModel
from tests.test_repl import World, errors, flat, row, tokens_in
from tests.test_repl import make_world as make_world  # the fixture

NOT_SMALLER = "nothing to fold: folding {} would not make the context smaller"
LONG = [f"{word} " + "and a long story about it " * 40 for word in ("one", "two", "three")]


def number(text: str) -> int:
    return int(text.replace(",", ""))


def fold_line(transcript: str) -> re.Match[str]:
    found = re.search(
        r"(?:folded|summarized) (\d+) messages \(([\d,]+) tokens\) into ([\d,]+) tokens"
        r"(?:; context ([\d,]+) → ([\d,]+) tokens)?",
        flat(transcript),
    )
    assert found, transcript
    return found


def context_total(transcript: str) -> int:
    found = re.findall(r"context of thread \S+: ([\d,]+)", transcript)
    assert found, transcript
    return number(found[-1])


def test_a_compaction_that_would_not_make_the_context_smaller_folds_nothing(
    make_world: Callable[..., World],
) -> None:
    world = make_world(summary_trigger="off", searching=True)
    transcript = world.run(["hi", "thanks", "/context"])
    checkpoints = len(world.history())
    before = context_total(transcript)

    transcript = world.run(["/compact", "/context"])
    assert errors(transcript) == []
    assert NOT_SMALLER.format("2 messages") in flat(transcript)
    assert "compacted" not in transcript
    assert world.values().get("summary", "") == ""
    assert world.texts() == ["hi", "reply 1", "thanks", "reply 2"]
    assert len(world.history()) == checkpoints, "nothing was run: no checkpoint was written"
    assert context_total(transcript) == before


def test_the_recall_tool_a_first_summary_brings_is_part_of_what_a_fold_costs(
    make_world: Callable[..., World],
) -> None:
    # A short question and an answer of some 50 tokens: folding them into a summary's message
    # shrinks the context, unless the summary also brings the recall tool's definition to
    # every call.
    def answer(messages: list[BaseMessage]) -> str:
        return "sure, " + "here is a longer answer with a few details " * 5

    without = make_world(ScriptedChatModel(default=answer), summary_trigger="off")
    transcript = without.run(["hi there", "ok", "/compact"])
    line = fold_line(transcript)
    assert number(line.group(5)) < number(line.group(4))

    searching = make_world(ScriptedChatModel(default=answer), summary_trigger="off", searching=True)
    transcript = searching.run(["hi there", "ok", "/compact"])
    assert NOT_SMALLER.format("2 messages") in flat(transcript)
    assert searching.values().get("summary", "") == ""


def test_an_automatic_fold_that_would_not_make_the_context_smaller_is_not_made(
    make_world: Callable[..., World],
) -> None:
    world = make_world(summary_trigger="messages:2", summary_keep="messages:2", searching=True)
    transcript = world.run(["hi", "thanks", "ok"])
    assert errors(transcript) == []
    assert "summarized" not in transcript and "nothing to fold" not in transcript
    assert world.values().get("summary", "") == ""
    assert len(world.texts()) == 6
    assert not any("<conversation>" in call[-1].text for call in world.chat_model.calls)

    transcript = world.run([LONG[0], "more"])  # (now the long story is folded too)
    line = fold_line(transcript)
    assert line.group(1) == "7"  # (before the answer: the trigger held already)
    assert world.values()["summary"]


def test_the_context_a_fold_prints_is_what_the_next_call_is_sent(
    make_world: Callable[..., World],
) -> None:
    world = make_world(summary_trigger="off", searching=True)
    transcript = world.run([*LONG[:2], "/compact", "/context", "next"])
    line = fold_line(transcript)
    before, after = number(line.group(4)), number(line.group(5))
    assert after < before
    assert context_total(transcript) == after, "/context says what the fold line said"
    sent = world.chat_model.calls[-1]
    assert world.chat_model.offered[-1] == [recall.TOOL_NAME]
    counter = counter_for("scripted")
    # (the next call: the context after the fold, and the new message)
    assert after + counter.raw(sent[-1:]) == counter.raw(sent) + recall.definition_tokens(counter)


def reporting(messages: list[BaseMessage]) -> AIMessage:
    """A reply whose usage counts the request otherwise than chatbot does, by a rule that
    changes from call to call: every count is scaled by the newest one."""
    reported = sum(len(message.text) for message in messages) // 3 + 7 * len(messages)
    usage = {"input_tokens": reported, "output_tokens": 2, "total_tokens": reported + 2}
    return AIMessage(f"reply to {len(messages)}", usage_metadata=usage)  # type: ignore[arg-type]


def test_after_a_fold_every_view_gives_the_same_figure_for_the_same_word(
    make_world: Callable[..., World],
) -> None:
    chat = ScriptedChatModel(default=reporting, disable_streaming=True)
    world = make_world(chat, summary_trigger="off", searching=True)
    world.run(LONG)
    counter = counter_for("scripted")
    assert counter.scale(world.values()["messages"]) != 1.0, "the provider's usage scales"

    transcript = world.run(["/compact", "/summary history", "/context", "/tokens", "/summary"])
    assert errors(transcript) == []
    line = fold_line(transcript)
    folded, summary, after = number(line.group(2)), number(line.group(3)), number(line.group(5))

    history = re.findall(r"folded (\d+) messages \(([\d,]+) tokens\) · checkpoint", transcript)
    assert history == [(line.group(1), line.group(2))], "/summary history: the same fold"
    assert tokens_in(transcript, "▓ summary") == summary, "/context"
    assert row(transcript, "summary")[1:] == [f"{summary:,}", "tokens"], "/tokens"
    assert re.search(rf"summary \({summary:,} tokens\)", transcript), "/summary"
    wrapper = tokens_in(transcript, "▞ summary message")
    tool = tokens_in(transcript, "░ recall tool")
    assert wrapper > 0 and tool > 0
    assert context_total(transcript) == after == number(row(transcript, "context now")[2])
    messages = tokens_in(transcript, "▒ messages")
    assert summary + wrapper + tool + messages == after, "the parts add up to the context"
    saved = number(row(transcript, "saved")[1])
    assert saved == folded - (summary + wrapper + tool)


def test_the_memories_a_request_carries_are_counted_by_every_view(
    make_world: Callable[..., World],
) -> None:
    """*memories*, the block of the user's memories each request carries, is a part of the
    context: /context shows it, and the status line, /context and /tokens count what the next
    call is sent."""
    world = make_world(summary_trigger="off", remembering=True)
    world.backend.memory_book().add("Writes Rust in the evenings", "elsewhere")
    transcript = world.run(["hi", "/context", "/tokens"])
    assert errors(transcript) == []
    memories = tokens_in(transcript, "▚ memories")
    assert memories > 0
    context = context_total(transcript)
    parts = ("█ system prompt", "▚ memories", "▓ summary", "▒ messages")
    assert sum(tokens_in(transcript, part) for part in parts) == context, "the parts add up"
    assert world.repl.context_meter() == f"context {context:,} tokens · auto-fold off"
    assert number(row(transcript, "context now")[2]) == context, "/tokens"

    world.run(["next"])
    sent = world.chat_model.calls[-1]
    assert any("Writes Rust in the evenings" in message.text for message in sent)
    counter = counter_for("scripted")
    # (the next call: the context shown, and the new message)
    assert context + counter.raw(sent[-1:]) == counter.raw(sent)


def test_a_reply_to_a_request_with_the_recall_tool_is_scaled_by_all_it_was_sent(
    make_world: Callable[..., World],
) -> None:
    """A provider counts the tools it was offered: the count a reply's usage is set against
    holds the tool's definition too, so a provider that counts as chatbot does scales
    nothing."""

    def counts_as_chatbot(messages: list[BaseMessage]) -> AIMessage:
        counter = TokenCounter()
        offered = any(recall.NOTE["en"] in message.text for message in messages)
        reported = counter.raw(messages) + (recall.definition_tokens(counter) if offered else 0)
        usage = {"input_tokens": reported, "output_tokens": 1, "total_tokens": reported + 1}
        return AIMessage("ok", usage_metadata=usage)  # type: ignore[arg-type]

    chat = ScriptedChatModel(default=counts_as_chatbot, disable_streaming=True)
    world = make_world(chat, summary_trigger="off", searching=True)
    world.run([*LONG[:2], "/compact", "next"])
    assert world.chat_model.offered[-1] == [recall.TOOL_NAME]
    messages = world.values()["messages"]
    assert TokenCounter().scale(messages) == 1.0


def test_the_graph_refuses_a_compaction_that_would_not_shrink_as_the_backend_does(
    make_world: Callable[..., World],
) -> None:
    """The fold node itself (what a server's graph runs, and a compaction probe reads)."""
    world = make_world(summary_trigger="off", searching=True)
    world.run(["hi", "thanks"])
    run = world.graph.astream(
        {"messages": []},
        thread_config("t1"),
        context={"compact": True},
        stream_mode="custom",
        durability=DURABILITY,
    )
    events = [stream.from_payload(part) for part in blocking_iter(run)]
    assert events == [stream.NothingToFold(context=events[0].context, messages=2)]  # type: ignore[union-attr]
    assert world.values().get("summary", "") == ""
    assert world.texts() == ["hi", "reply 1", "thanks", "reply 2"]


# --- the rule, pure ---------------------------------------------------------------------------


def test_a_fold_is_made_only_when_the_request_it_leaves_is_smaller() -> None:
    counter = TokenCounter()
    older: list[BaseMessage] = [
        HumanMessage("my locker code is 4512, and the spare key is in the blue drawer", id="1"),
        AIMessage("noted: locker 4512, spare key in the blue drawer", id="2"),
    ]
    latest: list[BaseMessage] = [HumanMessage("thanks", id="3"), AIMessage("welcome", id="4")]
    messages = [*older, *latest]
    folded = counter.raw(older)
    for on in (False, True):
        now = sent_tokens(counter, messages, "", "Be brief.", "en", on)
        after = after_fold(counter, messages, latest, "", "Be brief.", "en", on)
        assert after.summary == 1 and after.summary_message > 0
        assert after.recall_tool == (recall.definition_tokens(counter) if on else 0)
        assert now.total - after.total == folded - after.summary_cost
        assert policy.fold_shrinks(now, after) == (folded > after.summary_cost)
    assert policy.fold_shrinks(
        sent_tokens(counter, messages), after_fold(counter, messages, latest, "")
    )
    now = sent_tokens(counter, messages, "", "", "en", True)
    assert not policy.fold_shrinks(now, after_fold(counter, messages, latest, "", "", "en", True))
    # An extension keeps the summary and its tool: what it costs is the summary's growth.
    summary = "The user keeps a spare key in a drawer."
    now = sent_tokens(counter, messages, summary, "", "en", True)
    after = after_fold(counter, messages, latest, summary, "", "en", True)
    assert now.total - after.total == folded
    assert policy.fold_shrinks(now, after)
    assert not policy.fold_shrinks(now, after, least=0.99)
