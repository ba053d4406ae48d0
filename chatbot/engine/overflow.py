"""Context too long: every decision of the recovery, in the order a turn meets them.

1. Before the chat call (:func:`check_message_fits`): a message that alone, with the summary,
   is over the model's input limit cannot be helped by folding: the turn fails at once.
2. The provider refuses the request as too long (:func:`refusal_update`): the refusal is
   recorded for the pending message, its window learned (:func:`learn`), and the graph folds
   and asks again, once. An empty answer near the window is a possible overflow
   (:func:`possible_overflow`; llama-cpp-python ends such a stream with no word); otherwise
   it is asked once more without streaming (:func:`empty_answer_failed` when that fails too).
3. The fold for it (:func:`check_fold_can_help`, :func:`fold_failed`, :func:`check_shrunk`):
   a fold that cannot shrink the request by :data:`~chatbot.memory.policy.MIN_SHRINK`, or
   fails, ends the turn with one line instead of a retry that would be refused again.

Every error keeps the message; which messages fold is :mod:`chatbot.engine.folding`'s business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from chatbot.engine import folding, windows
from chatbot.engine.runsettings import RunSettings
from chatbot.errors import (
    ContextOverflow,
    ContextTooLong,
    ModelCallFailed,
    describe_error,
    empty_answer,
)
from chatbot.logs import logger
from chatbot.memory import policy
from chatbot.memory.tokens import model_name

log = logger("graph")

NEAR_WINDOW = 0.75
"""A request holding this share of what the window lets a request hold is near it."""
CUTS_SILENTLY = ("Ollama",)
"""Servers that answer a request past their window after cutting it, without a word."""
CUT_SHARE = 0.6
"""A server that read less than this share of what chatbot counted may have cut the request."""
CUT_SMALLEST = 256
"""A request below this many tokens is never taken as cut: no server's window is that small,
and the counts of a short request differ most (each message's few tokens of framing)."""
GROWTH = 32
"""A request this many tokens longer than the one before (by chatbot's count) whose count by
the server grew by less than half of that may have been cut."""


def too_long(tokens: int, limit: int | None, what: str) -> ContextTooLong:
    """The error for ``what`` being about ``tokens`` tokens against the model's ``limit``."""
    limit_text = f" but the model takes at most {limit:,}" if limit else ""
    return ContextTooLong(
        f"{what} is about {tokens:,} tokens{limit_text}: shorten it or split it "
        "(the next message folds it into the summary)"
    )


def check_message_fits(
    messages: Sequence[BaseMessage], summary: str, run: RunSettings, request_tokens: int
) -> None:
    """Before the call: raise :class:`ContextTooLong` when the request is over the model's
    input limit and the pending message alone, with the summary, is too."""
    limit = run.policy.max_input_tokens
    if limit and request_tokens > limit and folding.pending_reply(messages):
        alone = folding.context_tokens(messages[-1:], summary, run)
        if alone > limit:
            raise _what_is_too_long(messages, summary, run, alone, limit)


def possible_overflow(run: RunSettings, counted: int) -> ContextOverflow | None:
    """An empty answer to a request of ``counted`` tokens near the window, taken as a refusal
    for size (as if the window were a quarter smaller than the request); else None."""
    limit = run.policy.max_input_tokens
    if not limit or counted < limit * NEAR_WINDOW:
        return None
    log.info("an empty answer to %s tokens, near the window: folding", counted)
    return ContextOverflow(limit=max(1, counted * 3 // 4))


def learn(run: RunSettings, model: Any, overflow: ContextOverflow, counted: int) -> None:
    """Keep what a refusal taught of ``model``'s window, so the next request folds first."""
    windows.BOOK.learn_refusal(
        run.endpoint, model_name(model), overflow.limit, overflow.requested or counted
    )


def after_reply(run: RunSettings, reply: AIMessage, sent: Sequence[BaseMessage], raw: int) -> bool:
    """What a reply to ``sent`` (``raw`` tokens by chatbot's count) tells of the window; True
    when its usage may not scale later counts. Ollama cuts a request past its ``num_ctx``
    silently, which only its usage shows (:func:`cut_by_the_server`): the server is asked again
    then, as it is for a window assumed until the model is loaded, or not known."""
    settings = run.settings
    if settings is None or not settings.openai_base_url:
        return False
    from chatbot.engine import servers

    name = model_name(run.chat_model)
    cuts = run.window is not None and run.window.server in CUTS_SILENTLY
    reported = reply.usage_metadata.get("input_tokens") if reply.usage_metadata else None
    if cuts and isinstance(reported, int) and cut_by_the_server(run, sent, raw, reported):
        log.info("the server read %s tokens of a longer request: asking its window", reported)
        servers.ask_again(settings, name)
        return True
    if (run.window is None or run.window.until_loaded) and not windows.BOOK.fresh(
        run.endpoint, name
    ):
        servers.ask_again(settings, name)  # (a server that said nothing is not asked again)
    return False


def cut_by_the_server(
    run: RunSettings, sent: Sequence[BaseMessage], raw: int, reported: int
) -> bool:
    """True when the server's count (``reported``) says it may have read only part of the
    request: below :data:`CUT_SHARE` of chatbot's scaled count, or grown by less than half of
    a :data:`GROWTH`-token growth since the same model's last reply."""
    from chatbot.memory.tokens import usage_counts

    expected = run.counter.scaled(raw, sent)
    if expected < CUT_SMALLEST:
        return False
    if reported < expected * CUT_SHARE:
        return True
    asked = model_name(run.chat_model)
    for message in reversed(sent):
        if not isinstance(message, AIMessage):
            continue
        counts = usage_counts(message, run.counter.name)
        if counts is None:
            continue
        answered = (message.response_metadata or {}).get("model_name")
        if answered and str(answered).split(":")[0] != asked.split(":")[0]:
            return False  # (another model's tokenizer: its counts do not compare)
        raw_before, reported_before = counts
        grew = raw - raw_before
        return (
            grew >= GROWTH
            and reported - reported_before < grew * (reported_before / raw_before) / 2
        )
    return False


def empty_answer_failed(
    state: Mapping[str, Any], streamed: BaseException, unstreamed: BaseException
) -> ModelCallFailed:
    """A chat call answered with nothing, streamed and then not: one line saying so (not
    sending the user to check an address that answered earlier turns)."""
    answered = any(isinstance(m, AIMessage) for m in state["messages"]) or state.get("summary")
    if not answered:
        return ModelCallFailed(describe_error(streamed))
    return ModelCallFailed(
        f"the model server sent no reply: {empty_answer(streamed)}, then, asked without "
        f"streaming, {empty_answer(unstreamed)} (its earlier answers in this thread came "
        "through, so the address is right): its log may say why; /retry asks again"
    )


def _what_is_too_long(
    messages: Sequence[BaseMessage], summary: str, run: RunSettings, alone: int, limit: int
) -> ContextTooLong:
    """The error naming what fills the window: the system prompt, or the message."""
    from chatbot.memory import prompts

    system = run.counter.messages(
        prompts.conversation_input([], "", run.system_prompt, run.language)
    )
    message = run.counter.messages(messages[-1:])
    if system > message:
        return ContextTooLong(
            f"the system prompt is about {system:,} tokens and your message {message:,}: the "
            f"request would be about {alone:,} tokens, and the model takes at most {limit:,}: "
            "shorten the system prompt (/system) or the message"
        )
    return too_long(alone, limit, "your message (with the summary)" if summary else "your message")


def refusal_update(
    state: Mapping[str, Any], overflow: ContextOverflow, counted: int, reply: int | None = None
) -> dict[str, Any]:
    """The state update recording a refusal of the pending message's request as too long
    (``counted`` by our count, ``reply`` tokens of room), so the graph folds and asks again;
    :class:`ContextTooLong` when this message was refused and folded for once already."""
    if folding.overflow_of(state) is not None:
        raise ContextTooLong(
            f"the model refused the request as too long again after folding the "
            f"history (about {counted:,} tokens now): /compact, or lower "
            "CHATBOT_SUMMARY_KEEP"
        )
    log.info("context too long (%s tokens by our count): folding", counted)
    return {
        "context_overflow": {
            "message_id": state["messages"][-1].id,
            "counted": counted,
            "limit": overflow.limit,
            "requested": overflow.requested,
            "reply": reply,
        }
    }


def check_fold_can_help(
    state: Mapping[str, Any], run: RunSettings, plan: policy.SummaryPlan
) -> None:
    """Before an overflow's fold: :class:`ContextTooLong` when ``plan`` cannot shrink it enough."""
    if not folding.could_shrink(state, run, plan):
        summary = state.get("summary", "")
        alone = folding.context_tokens(state["messages"][-1:], summary, run)
        raise too_long(alone, run.policy.max_input_tokens, "your message")


def fold_failed(error: folding.SummaryError) -> ContextTooLong:
    """An overflow's fold whose summary failed: the turn ends (a retry would be refused)."""
    return ContextTooLong(
        f"the request is too long for the model and folding the history failed: {error}"
    )


def check_shrunk(state: Mapping[str, Any], run: RunSettings, after: int) -> None:
    """After an overflow's fold: :class:`ContextTooLong` when the request (``after`` tokens) is
    not :data:`~chatbot.memory.policy.MIN_SHRINK` below the refused one."""
    refused = folding.refused_tokens(state, run)
    if after > refused * (1 - policy.MIN_SHRINK):
        raise ContextTooLong(
            f"the request is too long for the model and folding the history only brings "
            f"it from {refused:,} to {after:,} tokens: shorten your message, or lower "
            "CHATBOT_SUMMARY_KEEP or CHATBOT_MAX_SUMMARY_TOKENS"
        )
