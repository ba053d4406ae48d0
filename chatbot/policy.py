"""The summarization policy: when to summarize, what to keep, how to chunk.

Pure functions over lists of messages. No I/O, no models, no LangGraph: everything here is
decided from the messages, their approximate token counts and a few numbers, so it can be
tested exhaustively.

Vocabulary:
- *trigger*: when the conversation is big enough to fold older messages into the summary.
- *keep*: how much of the latest conversation stays verbatim after a summary.
- *cutoff*: the index that splits ``messages`` into the folded part (``[:cutoff]``) and the
  kept window (``[cutoff:]``). A cutoff is *safe* when it does not separate an AIMessage that
  made tool calls from the ToolMessages answering it, and the kept window does not start
  with a ToolMessage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately

LimitKind = Literal["messages", "tokens", "fraction"]

VALID_FORMS = (
    "messages:N (N a whole number >= 1), tokens:N (N a whole number >= 1) "
    "or fraction:F (0 < F <= 1, a share of the model's max input tokens)"
)

CHARS_PER_TOKEN = 4.0
"""The approximate counter's ratio, also used to split a message too big to summarize whole."""

TokenCounter = Callable[[Sequence[BaseMessage]], int]


class PolicyError(ValueError):
    """A trigger or keep setting that cannot be understood or cannot be applied."""


@dataclass(frozen=True)
class Limit:
    """One ``kind:value`` amount, e.g. ``messages:6`` or ``fraction:0.8``."""

    kind: LimitKind
    value: float

    def __str__(self) -> str:
        value = int(self.value) if self.kind != "fraction" else self.value
        return f"{self.kind}:{value}"

    def as_tokens(self, max_input_tokens: int | None) -> int | None:
        """The limit in tokens (``None`` for a message-count limit)."""
        if self.kind == "tokens":
            return int(self.value)
        if self.kind == "fraction":
            if max_input_tokens is None:
                raise PolicyError(
                    f"{self} needs the model's max input tokens, which are unknown for this "
                    "model: set CHATBOT_MAX_INPUT_TOKENS or use tokens:N"
                )
            return max(1, int(max_input_tokens * self.value))
        return None


def parse_limit(text: str, setting: str = "value") -> Limit:
    """Parse one ``kind:value`` limit; raise :class:`PolicyError` naming the valid forms."""
    raw = text.strip()
    kind, sep, value_text = raw.partition(":")
    kind = kind.strip().lower()
    problem = f"{setting}={raw!r} is not valid: use {VALID_FORMS}"
    if not sep or kind not in ("messages", "tokens", "fraction"):
        raise PolicyError(problem)
    value_text = value_text.strip()
    try:
        value = float(value_text)
    except ValueError:
        raise PolicyError(problem) from None
    if kind == "fraction":
        if not (0 < value <= 1) or math.isnan(value):
            raise PolicyError(problem)
    elif not value_text.isdigit() or int(value_text) < 1:
        raise PolicyError(problem)
    return Limit(kind, value)  # type: ignore[arg-type]


def parse_trigger(text: str) -> tuple[Limit, ...]:
    """Parse ``CHATBOT_SUMMARY_TRIGGER``: one or more limits joined by commas (any fires)."""
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise PolicyError(f"CHATBOT_SUMMARY_TRIGGER is empty: use {VALID_FORMS}")
    return tuple(parse_limit(part, "CHATBOT_SUMMARY_TRIGGER") for part in parts)


def parse_keep(text: str) -> Limit:
    """Parse ``CHATBOT_SUMMARY_KEEP``: exactly one limit."""
    if "," in text:
        raise PolicyError(
            f"CHATBOT_SUMMARY_KEEP={text.strip()!r} is not valid: give one of {VALID_FORMS}"
        )
    return parse_limit(text, "CHATBOT_SUMMARY_KEEP")


@dataclass(frozen=True)
class SummaryPolicy:
    """What the graph needs to decide about summarizing, already parsed and validated."""

    trigger: tuple[Limit, ...]
    keep: Limit
    keep_first_message: bool = False
    max_input_tokens: int | None = None

    @classmethod
    def from_strings(
        cls,
        trigger: str,
        keep: str,
        *,
        keep_first_message: bool = False,
        max_input_tokens: int | None = None,
    ) -> SummaryPolicy:
        """Parse and validate; every problem is a :class:`PolicyError` with one clear line."""
        policy = cls(parse_trigger(trigger), parse_keep(keep), keep_first_message, max_input_tokens)
        policy.validate()
        return policy

    def validate(self) -> None:
        """Check that fractions can be resolved and that keeping does not defeat the trigger."""
        for limit in (*self.trigger, self.keep):
            limit.as_tokens(self.max_input_tokens)
        for limit in self.trigger:
            # The trigger fires above N messages, so keeping N still folds at least one.
            if limit.kind == self.keep.kind == "messages" and self.keep.value > limit.value:
                raise PolicyError(
                    f"CHATBOT_SUMMARY_KEEP={self.keep} keeps more messages than the trigger "
                    f"{limit} allows, so the trigger would fire with nothing to fold: keep fewer"
                )
            keep_tokens = self.keep.as_tokens(self.max_input_tokens)
            trigger_tokens = limit.as_tokens(self.max_input_tokens)
            if (
                keep_tokens is not None
                and trigger_tokens is not None
                and keep_tokens >= trigger_tokens
            ):
                raise PolicyError(
                    f"CHATBOT_SUMMARY_KEEP={self.keep} keeps {keep_tokens} tokens but the trigger "
                    f"{limit} fires at {trigger_tokens}: keep fewer tokens than the trigger"
                )

    def trigger_tokens(self) -> int | None:
        """The lowest token threshold among the triggers (``None`` if all count messages)."""
        values = [limit.as_tokens(self.max_input_tokens) for limit in self.trigger]
        tokens = [value for value in values if value is not None]
        return min(tokens) if tokens else None


# --- token counting ---------------------------------------------------------------------


def count_tokens(messages: Sequence[BaseMessage]) -> int:
    """Approximate tokens, scaled by the provider's reported usage when the messages carry it.

    langchain-core's approximate counter: no tokenizer download, no network.
    """
    if not messages:
        return 0
    return count_tokens_approximately(messages, use_usage_metadata_scaling=True)


def count_tokens_of_text(text: str) -> int:
    """Approximate tokens of a plain text (same ratio as the message counter)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def tokens_per_message(messages: Sequence[BaseMessage]) -> list[int]:
    """Each message's approximate token count, scaled like :func:`count_tokens` totals."""
    raw = [count_tokens_approximately([message]) for message in messages]
    total_raw = sum(raw)
    if not total_raw:
        return raw
    scaled_total = count_tokens(messages)
    if scaled_total == total_raw:
        return raw
    factor = scaled_total / total_raw
    return [max(1, round(count * factor)) for count in raw]


# --- trigger ----------------------------------------------------------------------------


def trigger_fired(policy: SummaryPolicy, message_count: int, context_tokens: int) -> bool:
    """True when any trigger holds: more than N messages, or more than N tokens in context.

    ``context_tokens`` counts everything sent to the model (system prompt and summary too).
    """
    for limit in policy.trigger:
        if limit.kind == "messages":
            if message_count > limit.value:
                return True
        else:
            threshold = limit.as_tokens(policy.max_input_tokens)
            if threshold is not None and context_tokens > threshold:
                return True
    return False


# --- safe cutoff ------------------------------------------------------------------------


def unsafe_cutoffs(messages: Sequence[BaseMessage]) -> set[int]:
    """Indices where cutting would split a tool-call group or start the window on a tool result.

    A group is an AIMessage with tool calls plus every later ToolMessage answering one of its
    calls (a repeated answer too); cutting after the AIMessage and up to its last answer
    separates them.
    """
    unsafe = {i for i, message in enumerate(messages) if isinstance(message, ToolMessage)}
    answers_at: dict[str, list[int]] = {}
    for i, message in enumerate(messages):
        if isinstance(message, ToolMessage) and message.tool_call_id:
            answers_at.setdefault(message.tool_call_id, []).append(i)
    for i, message in enumerate(messages):
        if isinstance(message, AIMessage) and message.tool_calls:
            answers = [
                j
                for call in message.tool_calls
                for j in answers_at.get(call.get("id") or "", ())
                if j > i
            ]
            if answers:
                unsafe.update(range(i + 1, max(answers) + 1))
    return unsafe


def find_safe_cutoff(messages: Sequence[BaseMessage], target: int) -> int:
    """The largest safe cutoff at or before ``target`` (keeping more rather than splitting)."""
    unsafe = unsafe_cutoffs(messages)
    cutoff = max(0, min(target, len(messages)))
    while cutoff > 0 and cutoff in unsafe:
        cutoff -= 1
    return cutoff


def keep_target(
    messages: Sequence[BaseMessage],
    keep: Limit,
    token_counts: Sequence[int],
    max_input_tokens: int | None,
) -> int:
    """Where the kept window would start to hold the ``keep`` amount, before safety.

    A token budget keeps the newest messages that fit, and always at least the last one, even
    when it alone is bigger than the budget: the model always sees the latest turn verbatim.
    """
    if keep.kind == "messages":
        return max(0, len(messages) - int(keep.value))
    budget = keep.as_tokens(max_input_tokens) or 0
    start = len(messages)
    used = 0
    while start > 0:
        cost = token_counts[start - 1]
        if used + cost > budget and start < len(messages):
            break
        used += cost
        start -= 1
    return start


@dataclass(frozen=True)
class SummaryPlan:
    """Which messages to fold into the summary (by index into ``messages``)."""

    fold: tuple[int, ...]
    cutoff: int
    pinned: int | None = None

    def __bool__(self) -> bool:
        return bool(self.fold)


def first_human_index(messages: Sequence[BaseMessage]) -> int | None:
    """Index of the first HumanMessage, if any."""
    return next((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), None)


def plan_summary(
    messages: Sequence[BaseMessage],
    policy: SummaryPolicy,
    token_counts: Sequence[int] | None = None,
) -> SummaryPlan:
    """Choose the older messages to fold, honouring keep, tool-call groups and the pinned message.

    The plan may be empty (nothing safe to fold); then no summary call should be made.
    """
    counts = list(token_counts) if token_counts is not None else tokens_per_message(messages)
    pinned = first_human_index(messages) if policy.keep_first_message else None
    if pinned is not None:
        # The pinned message is neither folded nor counted against the keep budget.
        rest = [m for i, m in enumerate(messages) if i != pinned]
        rest_counts = [c for i, c in enumerate(counts) if i != pinned]
        rest_target = keep_target(rest, policy.keep, rest_counts, policy.max_input_tokens)
        target = rest_target if rest_target < pinned else rest_target + 1
    else:
        target = keep_target(messages, policy.keep, counts, policy.max_input_tokens)
    cutoff = find_safe_cutoff(messages, target)
    fold = tuple(i for i in range(cutoff) if i != pinned)
    return SummaryPlan(fold=fold, cutoff=cutoff, pinned=pinned)


# --- chunking for a bounded summarizer input ----------------------------------------------


def split_message(message: BaseMessage, max_tokens: int) -> list[BaseMessage]:
    """Split one message bigger than ``max_tokens`` into consecutive parts.

    Nothing is cut away: the parts together hold the whole text, each labelled ``[part i/n]``.
    Parts end after a space or newline when one is near, so words are not cut in two. Each
    part fits ``max_tokens`` with its role, label and (first part only) tool calls, unless
    those alone are already bigger.
    """
    text = message.text if not isinstance(message.content, str) else message.content
    if not text or count_tokens_approximately([message]) <= max_tokens:
        return [message]
    longest_label = f"[part {len(text)}/{len(text)}] "

    def room(part: BaseMessage) -> int:
        """Characters of text that fit next to the part's fixed overhead."""
        empty = part.model_copy(update={"content": longest_label})
        return int((max_tokens - count_tokens_approximately([empty])) * CHARS_PER_TOKEN)

    later = (
        message.model_copy(update={"tool_calls": []}) if isinstance(message, AIMessage) else message
    )
    later_chars = room(later)
    if later_chars < 1:  # the budget cannot even hold an empty part: keep parts small
        later_chars = max(1, int(max_tokens * CHARS_PER_TOKEN * 0.9))
    size = max(0, min(room(message), later_chars))
    pieces: list[str] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):  # cut after a space or newline rather than inside a word
            space = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
            if space >= start + size // 2:
                end = space + 1
        pieces.append(text[start:end])
        start, size = end, later_chars
    total = len(pieces)
    parts: list[BaseMessage] = []
    for number, piece in enumerate(pieces, start=1):
        update: dict[str, object] = {"content": f"[part {number}/{total}] {piece}"}
        if number > 1 and isinstance(message, AIMessage):
            update["tool_calls"] = []
        parts.append(message.model_copy(update=update))
    return parts


def chunk_for_summary(
    messages: Sequence[BaseMessage],
    budget_tokens: int,
    token_counts: Sequence[int] | None = None,
) -> list[list[BaseMessage]]:
    """Split the messages to fold into consecutive chunks that each fit ``budget_tokens``.

    Order is preserved and nothing is dropped; a message bigger than the budget is split into
    parts (see :func:`split_message`). When everything fits, there is one chunk.
    """
    budget = max(1, budget_tokens)
    counts = list(token_counts) if token_counts is not None else tokens_per_message(messages)
    chunks: list[list[BaseMessage]] = []
    current: list[BaseMessage] = []
    used = 0
    for message, cost in zip(messages, counts, strict=True):
        pieces = [message] if cost <= budget else split_message(message, budget)
        for piece in pieces:
            piece_cost = cost if piece is message else count_tokens_approximately([piece])
            if current and used + piece_cost > budget:
                chunks.append(current)
                current, used = [], 0
            current.append(piece)
            used += piece_cost
    if current:
        chunks.append(current)
    return chunks
