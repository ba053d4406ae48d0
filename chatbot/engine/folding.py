"""Folding older messages into the summary: why, which ones, and the summary calls.

The graph decides *where* to fold (before the call, after the reply, after an overflow);
this module decides *whether*, *what* and does it. Four reasons, in order of precedence:

- ``overflow``: the provider refused the pending message's request as too long; fold so the
  retry fits (the provider's limit, when its error says it, else the configured one, else half).
- ``fit``: what the chat model would be sent passes the input budget (a margin below its max
  input tokens); fold before the call so it fits, never folding the pending message.
- ``compact``: the run asks for it (``/compact``); the usual keep window stays.
- ``trigger``: the summary trigger holds (after a reply; before a call, when it already held
  before the new message — a resumed thread, or a summary that failed last turn).

A fold also condenses a summary grown far past ``CHATBOT_MAX_SUMMARY_TOKENS``: its text is
folded in like the oldest message. A new summary without usable text, or far past the limit
even after asking once to condense it, is a failed summary.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable
from langchain_core.runnables.config import ensure_config, merge_configs
from langgraph.config import get_stream_writer
from langgraph.constants import TAG_NOSTREAM

from chatbot.engine import windows
from chatbot.engine.retries import ReplyBegan, wait_before_retry
from chatbot.engine.runsettings import RunSettings
from chatbot.engine.stream import SUMMARY_TAG, NothingToFold, Retrying, as_payload
from chatbot.errors import (
    SUMMARY_MODEL_SETTING,
    context_overflow,
    describe_error,
    empty_answer,
)
from chatbot.history.snapshots import FOLDED_KEY
from chatbot.history.summary import extend_fold_record
from chatbot.memory import facts, finish, policy, prompts
from chatbot.memory.sent import Sent, after_fold, sent_tokens
from chatbot.memory.tokens import ESTIMATE, TokenCounter, model_name, tokenizer_for
from chatbot.sanitize import valid_data

FoldReason = Literal["overflow", "fit", "compact", "trigger"]
MIN_CHUNK_TOKENS = 256
_MAX_HALVINGS = 3


Ask = Callable[[Runnable[Any, Any], list[BaseMessage]], Awaitable[AIMessage]]
""":func:`ask`, or a caller of it that notes each reply (what a fold's calls cost)."""


async def ask(
    model: Runnable[Any, Any],
    request: list[BaseMessage],
    *,
    retries: int = 0,
    call: Literal["reply", "summary"] = "reply",
) -> AIMessage:
    """The model's reply to ``request``, awaited, with its text made valid (:func:`valid_reply`).

    A failure that may pass (:mod:`chatbot.engine.retries`) is asked again up to ``retries``
    times; each wait is streamed as a :class:`~chatbot.engine.stream.Retrying` naming ``call``."""
    taken = 0
    while True:
        began = ReplyBegan()
        config = merge_configs(ensure_config(), {"callbacks": [began]}) if retries else None
        try:
            return valid_reply(await model.ainvoke(request, config))
        except Exception as error:
            wait = None if began.began or taken >= retries else wait_before_retry(error, taken)
            if wait is None:
                raise
            taken += 1
            told = Retrying(wait.seconds, wait.reason, wait.status, taken, retries, call)
            get_stream_writer()(as_payload(told))
        await asyncio.sleep(wait.seconds)


def valid_reply(reply: AIMessage) -> AIMessage:
    """The reply with its text valid (:func:`chatbot.sanitize.valid_data`): every model call
    goes through :func:`ask`, so this is where a provider's text enters chatbot."""
    fields = ("content", "additional_kwargs", "response_metadata", "tool_calls")
    changed = {}
    for name in fields:
        value = getattr(reply, name, None)
        valid = valid_data(value)
        if valid is not value:
            changed[name] = valid
    return reply.model_copy(update=changed) if changed else reply


class SummaryError(RuntimeError):
    """The summary model failed or gave no usable summary; the state was left untouched."""


def pending_reply(messages: Sequence[BaseMessage]) -> bool:
    """True when the latest message still waits for the assistant's reply."""
    return bool(messages) and not isinstance(messages[-1], AIMessage)


def request_tokens(
    messages: Sequence[BaseMessage], summary: str, run: RunSettings, offered: bool | None = None
) -> Sent:
    """What the chat model would be sent, part by part (:mod:`chatbot.memory.sent`); the recall
    tool when ``offered`` (by default when recall is on for the run)."""
    on = run.recall if offered is None else offered
    shape = (run.system_prompt, run.language, on)
    return sent_tokens(run.counter, messages, summary, *shape, memories=run.memories)


def context_tokens(messages: Sequence[BaseMessage], summary: str, run: RunSettings) -> int:
    """Tokens the chat model would be sent: the whole of :func:`request_tokens`."""
    return request_tokens(messages, summary, run).total


def overflow_of(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """The provider's refusal recorded for the pending message (None if it is not this one's)."""
    messages = state["messages"]
    flag = state.get("context_overflow") or {}
    if pending_reply(messages) and flag.get("message_id") == messages[-1].id:
        return flag
    return None


def fold_reason(state: Mapping[str, Any], run: RunSettings, *, compact: bool) -> FoldReason | None:
    """Why the messages should be folded now, if they should (see the module docstring)."""
    messages = state["messages"]
    summary = state.get("summary", "")
    if pending_reply(messages):
        if overflow_of(state) is not None:
            return "overflow"
        budget = run.policy.input_budget()
        if budget is not None and context_tokens(messages, summary, run) > budget:
            return "fit"
        if compact:
            return "compact"
        return "trigger" if _trigger_holds(messages[:-1], summary, run) else None
    if compact:
        return "compact"
    return "trigger" if _trigger_holds(messages, summary, run) else None


def fold_before_answer(state: Mapping[str, Any], run: RunSettings) -> bool:
    """True when a run should fold before its chat call (see :func:`fold_reason`); a compact or
    an overflow always goes to the fold, which explains when there is nothing to fold."""
    reason = fold_reason(state, run, compact=run.compact)
    if reason in ("compact", "overflow"):
        return True
    return reason is not None and worth_folding(state, run, reason)


def _trigger_holds(messages: Sequence[BaseMessage], summary: str, run: RunSettings) -> bool:
    """True when the automatic trigger holds (tokens counted only for a token trigger)."""
    if not run.policy.automatic:
        return False
    counted = run.policy.trigger_tokens() is not None
    tokens = context_tokens(messages, summary, run) if counted else 0
    return policy.trigger_fired(run.policy, len(messages), tokens)


def summary_limit(run: RunSettings) -> int:
    """The most tokens a summary may hold (``SUMMARY_SLACK`` times the setting)."""
    return run.max_summary_tokens * policy.SUMMARY_SLACK


def summary_oversized(summary: str, run: RunSettings) -> bool:
    """True for a summary past :func:`summary_limit`: the next fold condenses it."""
    return bool(summary) and run.summary_counter.text(summary) > summary_limit(run)


def worth_folding(state: Mapping[str, Any], run: RunSettings, reason: FoldReason) -> bool:
    """True when a fold for ``reason`` would leave a smaller request: the summary is too big to
    keep, or folding what is safe to fold shrinks it (:func:`~chatbot.memory.policy.fold_shrinks`;
    by :data:`~chatbot.memory.policy.MIN_SHRINK` at least for ``fit``)."""
    summary = state.get("summary", "")
    if summary_oversized(summary, run):
        return True
    plan = plan_fold(state, run, reason)
    if not plan:
        return False
    messages = state["messages"]
    limit = run.policy.max_input_tokens
    if reason == "fit" and limit and context_tokens(messages[-1:], summary, run) > limit:
        return False  # (the message cannot fit whatever is folded: the call says so)
    shape = (run.system_prompt, run.language, run.recall)
    after = after_fold(
        run.counter, messages, plan.kept(messages), summary, *shape, memories=run.memories
    )
    least = policy.MIN_SHRINK if reason == "fit" else 0.0
    return policy.fold_shrinks(request_tokens(messages, summary, run), after, least)


def nothing_to_fold(
    state: Mapping[str, Any], run: RunSettings, reason: FoldReason
) -> NothingToFold | None:
    """Why a fold for ``reason`` is not made (:func:`worth_folding`); None when it is."""
    if worth_folding(state, run, reason):
        return None
    plan = plan_fold(state, run, reason)
    context = context_tokens(state["messages"], state.get("summary", ""), run)
    return NothingToFold(context=context, reason=reason, messages=len(plan.fold))


def _fixed_head(summary: str, run: RunSettings) -> int:
    """Tokens besides the kept messages once folded: system prompt, memories, summary, tool."""
    if summary_oversized(summary, run):  # the fold condenses it: only the new one's room counts
        summary = ""
    shape = (run.system_prompt, run.language, run.recall)
    head = after_fold(run.counter, [], [], summary, *shape, memories=run.memories)
    allowance = max(head.summary + head.summary_message, run.max_summary_tokens)
    return head.system + head.memories + allowance + head.recall_tool


def plan_fold(state: Mapping[str, Any], run: RunSettings, reason: FoldReason) -> policy.SummaryPlan:
    """The messages to fold for ``reason`` (may be empty: nothing safe to fold)."""
    messages = state["messages"]
    counts = run.counter.per_message(messages)
    if reason in ("trigger", "compact"):
        return policy.plan_summary(messages, run.policy, counts)
    summary = state.get("summary", "")
    if reason == "fit":
        room = run.policy.input_budget() or context_tokens(messages, summary, run)
    else:
        flag = overflow_of(state) or {}
        limit, most = flag.get("limit"), run.policy.max_input_tokens
        if limit and most:  # (a server's window holds the reply too: the request, less)
            limit = min(limit, most)
        room = policy.overflow_room(
            int(flag.get("counted") or context_tokens(messages, summary, run)),
            limit,
            flag.get("requested"),
            most,
        )
    kept_room = max(1, room - _fixed_head(summary, run))
    return policy.plan_summary(messages, run.policy, counts, max_kept_tokens=kept_room)


def refused_tokens(state: Mapping[str, Any], run: RunSettings) -> int:
    """Our count of the request the provider refused as too long (or of the context now)."""
    flag = overflow_of(state) or {}
    counted = flag.get("counted")
    if isinstance(counted, int) and counted > 0:
        return counted
    return context_tokens(state["messages"], state.get("summary", ""), run)


def fits_now(state: Mapping[str, Any], run: RunSettings) -> bool:
    """After a refusal of a request sent with ``max_tokens``: True when the refused request
    fits the input budget the refusal taught, so only the reply's room did not fit (vLLM
    refuses a prompt plus ``max_tokens`` past its window) and asking again needs no fold."""
    flag = overflow_of(state) or {}
    budget = run.policy.input_budget()
    if not flag.get("reply") or budget is None:
        return False
    requested = flag.get("requested")
    size = requested if isinstance(requested, int) and requested > 0 else None
    return (size or refused_tokens(state, run)) <= budget


def could_shrink(state: Mapping[str, Any], run: RunSettings, plan: policy.SummaryPlan) -> bool:
    """After an overflow: False when folding ``plan`` cannot shrink the refused request by
    :data:`~chatbot.memory.policy.MIN_SHRINK` even if the summary came out empty."""
    counts = run.counter.per_message(state["messages"])
    folded = sum(counts[i] for i in plan.fold)
    summary = state.get("summary", "")
    if summary_oversized(summary, run):  # condensed by the fold: most of it goes too
        folded += run.counter.text(summary)
    return folded > 0 and folded >= refused_tokens(state, run) * policy.MIN_SHRINK


@dataclass(frozen=True)
class Fold:
    """A finished fold: the new summary and what went into it."""

    summary: str
    folded: list[BaseMessage]
    folded_tokens: int
    calls: int
    noted: list[facts.Noted] = field(default_factory=list)
    """The facts about the user the summary calls noted (when asked: ``known`` given)."""


Progress = Callable[[int, int], None]
"""Told ``(part, parts)`` before each summary call of a fold (parts can grow: a chunk the
model refused as too long is cut smaller)."""


async def fold(
    state: Mapping[str, Any],
    run: RunSettings,
    plan: policy.SummaryPlan,
    progress: Progress | None = None,
    call: Ask = ask,
    known: Sequence[facts.Memory] | None = None,
) -> Fold:
    """Fold the planned messages into the summary, making the summary calls it needs with
    ``call`` (asking for the user's facts too when ``known`` is given); raises
    :class:`SummaryError`."""
    messages = state["messages"]
    folded = [messages[i] for i in plan.fold]
    focus = run.compact_focus if run.compact else ""
    summary, calls, noted = await summarize(
        folded,
        state.get("summary", ""),
        run,
        focus=focus,
        progress=progress,
        call=call,
        known=known,
    )
    return Fold(summary, folded, run.counter.part(folded, messages), calls, noted)


def fold_record(
    state: Mapping[str, Any], folded: Sequence[BaseMessage], counter: TokenCounter
) -> dict[str, Any] | None:
    """The state's ``folded`` once ``folded`` is folded in
    (:func:`~chatbot.history.summary.extend_fold_record`), counted with the tokenizers the record
    already counts with (a new summary: the run's and the estimate)."""
    summary = state.get("summary", "")
    previous = state.get(FOLDED_KEY)
    names = {counter.name, ESTIMATE.name}
    if summary and isinstance(previous, Mapping) and isinstance(previous.get("tokens"), Mapping):
        names = set(previous["tokens"])
    counters = {}
    for name in names:
        tokenizer = counter.tokenizer if name == counter.name else tokenizer_for("", name)
        if tokenizer.name == name:  # (a vocabulary that cannot be loaded here is dropped)
            counters[name] = TokenCounter(tokenizer)
    return extend_fold_record(previous, summary, folded, counters)


async def summarize(
    folded: Sequence[BaseMessage],
    summary: str,
    run: RunSettings,
    *,
    focus: str = "",
    progress: Progress | None = None,
    call: Ask = ask,
    known: Sequence[facts.Memory] | None = None,
) -> tuple[str, int, list[facts.Noted]]:
    """Fold messages into the summary chunk by chunk, each extending the running summary: the
    new summary, its calls, and (with ``known``) the facts each call noted. A chunk refused as
    too long makes the rest chunked at half the size (up to three times), an empty answer is
    asked once more without streaming. :class:`SummaryError` if a call fails or gives none."""
    counter = run.summary_counter
    if summary_oversized(summary, run):
        folded = [prompts.summary_context_message(summary, run.language), *folded]
        summary = ""
    asked = "" if known is None else facts.facts_request(known, run.language)
    noted: list[facts.Noted] = []
    overhead = _instructions_tokens(counter, run.language, focus, asked) + 200
    summary_room = max(counter.text(summary), run.max_summary_tokens)
    budget = max(
        MIN_CHUNK_TOKENS,
        run.summary_input_tokens - overhead - summary_room - run.max_summary_tokens,
    )
    chunks = policy.chunk_for_summary(folded, budget, counter)
    model = summary_runnable(run, "summarize")
    done = calls = halvings = 0
    unstreamed = False
    while done < len(chunks):
        if progress is not None and not unstreamed:
            progress(done + 1, len(chunks))
        request = prompts.summary_request(
            chunks[done],
            summary,
            language=run.language,
            max_summary_tokens=run.max_summary_tokens,
            summary_tokens=counter.text(summary),
            create_prompt=run.create_prompt,
            extend_prompt=run.extend_prompt,
            focus=focus,
            facts=asked,
        )
        try:
            response = await call(model.bind(stream=False) if unstreamed else model, request)
        except Exception as error:  # any provider error: the state must stay as it was
            if empty_answer(error) and not unstreamed:
                unstreamed = True  # asked again without streaming: servers then say why
                continue
            unstreamed = False
            overflow = context_overflow(error)
            if overflow is not None:
                windows.BOOK.learn_refusal(
                    run.endpoint,
                    model_name(run.summary_model),
                    overflow.limit,
                    overflow.requested or counter.raw(request),
                )
            if overflow and halvings < _MAX_HALVINGS and budget > MIN_CHUNK_TOKENS:
                halvings += 1
                smaller = budget // 2
                if overflow.limit:  # the model said how much it takes: fit under that
                    room = int(overflow.limit * policy.INPUT_HEADROOM) - overhead - summary_room
                    smaller = min(smaller, room)
                budget = max(MIN_CHUNK_TOKENS, smaller)
                rest = [message for chunk in chunks[done:] for message in chunk]
                chunks = chunks[:done] + policy.chunk_for_summary(rest, budget, counter)
                continue
            raise SummaryError(describe_error(error, SUMMARY_MODEL_SETTING)) from error
        unstreamed = False
        calls += 1
        text = summary_text(response)
        if asked:
            text, found = facts.split_facts(text)
            noted += found
            if not text:
                raise SummaryError("the summary came back with no summary in it, only facts")
        summary, condensing = await _kept_to_limit(text, run, model, call)
        calls += condensing
        done += 1
    return summary, calls, noted


def summary_runnable(run: RunSettings, name: str) -> Runnable[Any, Any]:
    """The summary model bound for its calls (``max_tokens``), tagged so streams leave it out."""
    bound = run.summary_model.bind(**run.summary_call) if run.summary_call else run.summary_model
    return bound.with_config(tags=[TAG_NOSTREAM, SUMMARY_TAG], run_name=name)


@functools.lru_cache(maxsize=32)
def _instructions_tokens(
    counter: TokenCounter, language: prompts.Language, focus: str, asked: str = ""
) -> int:
    """Tokens of a summary request with no messages and no summary: what every chunk carries."""
    request = prompts.summary_request([], "", language=language, focus=focus, facts=asked)
    return counter.raw(request)


def summary_text(response: AIMessage) -> str:
    """The reply's usable text (:func:`~chatbot.memory.finish.usable_text`); raises
    :class:`SummaryError` when it did not finish or holds none, the rule a chat reply meets."""
    ending = finish.finish_of(response)
    if ending == "empty":
        raise SummaryError(finish.without_text(response, "summary"))
    if ending != "complete":  # a cut-off summary must never replace the real one
        raise SummaryError(finish.incomplete(ending, "summary"))
    return finish.usable_text(response)


async def _kept_to_limit(
    summary: str, run: RunSettings, model: Runnable[Any, Any], call: Ask
) -> tuple[str, int]:
    """The summary within :func:`summary_limit`, condensed by one more call if need be, and the
    calls made; :class:`SummaryError` when it cannot be condensed to fit."""
    counter = run.summary_counter
    tokens = counter.text(summary)
    limit = summary_limit(run)
    if tokens <= limit:
        return summary, 0
    refusal = (
        f"the summary came back at about {tokens:,} tokens, far past "
        f"CHATBOT_MAX_SUMMARY_TOKENS ({run.max_summary_tokens:,})"
    )
    request = prompts.summary_request(
        [],
        summary,
        language=run.language,
        max_summary_tokens=run.max_summary_tokens,
        summary_tokens=tokens,
        extend_prompt=run.extend_prompt,
    )
    if counter.raw(request) + run.max_summary_tokens > run.summary_input_tokens:
        raise SummaryError(f"{refusal}; it was not stored")
    try:
        response = await call(model, request)
    except Exception as error:
        raise SummaryError(
            f"{refusal}, and condensing it failed: {describe_error(error, SUMMARY_MODEL_SETTING)}"
        ) from error
    condensed = summary_text(response)
    if counter.text(condensed) > limit:
        raise SummaryError(f"{refusal}, and still {counter.text(condensed):,} condensed")
    return condensed, 1
