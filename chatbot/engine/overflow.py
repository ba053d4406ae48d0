"""Context too long: every decision of the recovery, in the order a turn meets them.

1. Before the chat call (:func:`check_message_fits`): a request over the model's input limit
   whose message alone, with the summary, is over it too cannot be helped by folding: the turn
   fails at once with one line, and the message stays in the thread.
2. The provider refuses the request as too long (:func:`refusal_update`): the refusal is
   recorded for the pending message (``context_overflow``), the graph folds (reason
   ``overflow``) and asks again, once; a second refusal after that fold ends the turn.
3. The fold for it (:func:`check_fold_can_help`, :func:`fold_failed`, :func:`check_shrunk`):
   a fold that cannot shrink the refused request by
   :data:`~chatbot.memory.policy.MIN_SHRINK`, a failed summary, or a fold that did not shrink
   it enough, each end the turn with one line instead of a retry that would be refused again.

The graph (:mod:`chatbot.engine.graph`) calls these where the turn meets them; which messages
fold is :mod:`chatbot.engine.folding`'s business. Every error keeps the message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from chatbot.engine import folding
from chatbot.engine.runsettings import RunSettings
from chatbot.errors import ContextOverflow, ContextTooLong
from chatbot.logs import logger
from chatbot.memory import policy

log = logger("graph")


def too_long(tokens: int, limit: int | None, what: str) -> ContextTooLong:
    """The error for ``what`` being about ``tokens`` tokens against the model's ``limit``."""
    limit_text = f" but the model takes at most {limit:,}" if limit else ""
    return ContextTooLong(
        f"{what} is about {tokens:,} tokens{limit_text}: shorten it or split it "
        "(it stays in the thread; the next message folds it into the summary)"
    )


def check_message_fits(
    messages: Sequence[BaseMessage], summary: str, run: RunSettings, request_tokens: int
) -> None:
    """Before the call: raise :class:`ContextTooLong` when the request (``request_tokens``)
    is over the model's input limit and the pending message alone, with the summary, is too
    (counted only then: it is never more than the whole request)."""
    limit = run.policy.max_input_tokens
    if limit and request_tokens > limit and folding.pending_reply(messages):
        alone = folding.context_tokens(messages[-1:], summary, run)
        if alone > limit:
            raise too_long(alone, limit, "your message (with the summary)")


def refusal_update(
    state: Mapping[str, Any], overflow: ContextOverflow, counted: int
) -> dict[str, Any]:
    """The provider refused the pending message's request (``counted`` tokens by our count)
    as too long: the state update recording it, so that the graph folds and asks again; or
    :class:`ContextTooLong` when this message was refused and folded for once already."""
    if folding.overflow_of(state) is not None:
        raise ContextTooLong(
            f"the model refused the request as too long again after folding the "
            f"history (about {counted:,} tokens now): /compact, or lower "
            "CHATBOT_SUMMARY_KEEP; your message is kept"
        )
    log.info("context too long (%s tokens by our count): folding", counted)
    return {
        "context_overflow": {
            "message_id": state["messages"][-1].id,
            "counted": counted,
            "limit": overflow.limit,
            "requested": overflow.requested,
        }
    }


def check_fold_can_help(
    state: Mapping[str, Any], run: RunSettings, plan: policy.SummaryPlan
) -> None:
    """Before an overflow's fold: :class:`ContextTooLong` when folding ``plan`` could not
    shrink the refused request enough even if the summary came out empty."""
    if not folding.could_shrink(state, run, plan):
        summary = state.get("summary", "")
        alone = folding.context_tokens(state["messages"][-1:], summary, run)
        raise too_long(alone, run.policy.max_input_tokens, "your message")


def fold_failed(error: folding.SummaryError) -> ContextTooLong:
    """An overflow's fold whose summary failed: the turn ends (a retry would be refused)."""
    return ContextTooLong(
        f"the request is too long for the model and folding the history failed: "
        f"{error}; your message is kept, /retry tries again"
    )


def check_shrunk(state: Mapping[str, Any], run: RunSettings, after: int) -> None:
    """After an overflow's fold: :class:`ContextTooLong` when the request (``after`` tokens
    now) is not at least :data:`~chatbot.memory.policy.MIN_SHRINK` below the refused one."""
    refused = folding.refused_tokens(state, run)
    if after > refused * (1 - policy.MIN_SHRINK):
        raise ContextTooLong(
            f"the request is too long for the model and folding the history only brings "
            f"it from {refused:,} to {after:,} tokens: shorten your message, or lower "
            "CHATBOT_SUMMARY_KEEP or CHATBOT_MAX_SUMMARY_TOKENS; your message is kept"
        )
