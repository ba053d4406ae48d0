"""Did the model finish its answer, and with text? The one rule for replies and summaries.

An answer cut short (a closed connection, the output limit, a content filter) or without
readable text still arrives as a message; only one that finished with usable text
(:func:`usable_text`) may stand as an answer or as a summary.
"""

from __future__ import annotations

import re
from typing import Literal

from langchain_core.messages import AIMessage

Finish = Literal["complete", "length", "cut", "filtered", "empty"]

CUT_AT_LENGTH_NOTE = "(cut at the model's length limit)"
"""Appended to a reply the model stopped at its output limit, so every view shows it."""

_LENGTH = {"length", "max_tokens", "max_output_tokens"}
_FILTERED = {"content_filter", "safety", "recitation", "blocklist", "prohibited_content"}
_ALWAYS_SAYS_WHY = {"openai"}
"""Providers whose complete answers always carry a finish reason (its absence is a cut)."""


def finish_reason(message: AIMessage) -> str | None:
    """The provider's finish reason, in any of the common spellings, lower case."""
    metadata = message.response_metadata or {}
    for key in ("finish_reason", "stop_reason", "done_reason"):
        value = metadata.get(key)
        if isinstance(value, str) and value:
            return value.lower()
    return None


def finish_of(message: AIMessage) -> Finish:
    """How the reply ended: ``complete`` is the only ending that makes a good answer."""
    reason = finish_reason(message)
    if reason in _LENGTH:
        return "length"
    if reason in _FILTERED:
        return "filtered"
    if not usable_text(message):
        return "empty"
    if reason is None and (message.response_metadata or {}).get("model_provider") in (
        _ALWAYS_SAYS_WHY
    ):
        return "cut"
    return "complete"


_THINKING = re.compile(r"^\s*<think(?:ing)?>.*?</think(?:ing)?>", re.DOTALL | re.IGNORECASE)
"""Reasoning a model served as plain text puts before its answer."""
_REASONING_BLOCKS = {"reasoning", "thinking", "redacted_thinking"}


def usable_text(message: AIMessage) -> str:
    """A reply's text for people, stripped, without a leading ``<think>``; '' if nothing shows."""
    text = str(message.text)
    thinking = _THINKING.match(text)
    if thinking:
        text = text[thinking.end() :]
    text = text.strip()
    if any(char.isprintable() and not char.isspace() for char in text):
        return text
    return ""


def _has_reasoning(message: AIMessage) -> bool:
    if _THINKING.match(str(message.text)):
        return True
    if any(key in message.additional_kwargs for key in ("reasoning_content", "reasoning")):
        return True
    blocks = message.content if isinstance(message.content, list) else []
    return any(isinstance(b, dict) and b.get("type") in _REASONING_BLOCKS for b in blocks)


def without_text(message: AIMessage, what: str = "reply") -> str:
    """Why a reply that ended ``empty`` cannot be used, as part of one line."""
    if message.tool_calls or message.invalid_tool_calls:
        asked = "the summary request" if what == "summary" else "your message"
        return f"the model answered {asked} with a tool call, no text"
    if _has_reasoning(message):
        return f"the model returned only its reasoning, no {what}"
    return incomplete("empty", what)


def incomplete(finish: Finish, what: str = "reply") -> str:
    """Why a reply with this ending cannot be used, as part of one line."""
    return {
        "length": f"the {what} was cut at the model's length limit",
        "cut": f"the connection closed before the {what} was finished",
        "filtered": f"the provider's content filter stopped the {what}",
        "empty": f"the model returned an empty {what}",
        "complete": f"the {what} is complete",
    }[finish]


def with_length_note(message: AIMessage) -> AIMessage:
    """The reply with :data:`CUT_AT_LENGTH_NOTE` after its text."""
    note = f"\n\n{CUT_AT_LENGTH_NOTE}"
    if isinstance(message.content, str):
        content: str | list[str | dict] = message.content.rstrip() + note
    else:
        content = [*message.content, {"type": "text", "text": note}]
    return message.model_copy(update={"content": content})
