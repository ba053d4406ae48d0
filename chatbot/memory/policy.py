"""The summarization policy: when to summarize, what to keep, how to chunk.

Pure functions over lists of messages. No I/O, no models, no LangGraph: everything here is
decided from the messages, their token counts (:mod:`chatbot.memory.tokens`) and a few numbers, so
it can be tested exhaustively.

Vocabulary:
- *trigger*: when the conversation is big enough to fold older messages into the summary
  (``off``: never on its own; ``/compact`` and the input guard still fold).
- *keep*: how much of the latest conversation stays verbatim after a summary.
- *cutoff*: the index that splits ``messages`` into the folded part (``[:cutoff]``) and the
  kept window (``[cutoff:]``). A cutoff is *safe* when it does not separate an AIMessage that
  made tool calls from the ToolMessages answering it, and the kept window does not start
  with a ToolMessage.
- *input budget*: what a request may hold, a margin below the model's max input tokens; the
  graph folds before a call that would pass it.
- *fit*: a fold that, beyond keep, leaves at most a given number of tokens in the kept window
  (never folding the latest message), so the next request fits the input budget.
- *shrinks*: a fold is made only when the request it leaves is smaller than the one sent now
  (:func:`fold_shrinks`); what it costs is the summary's text, its message and the recall tool
  it brings (:mod:`chatbot.memory.sent`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from chatbot.memory.prompts import text_only
from chatbot.memory.sent import Sent
from chatbot.memory.tokens import TokenCounter
from chatbot.parts import text_and_media

LimitKind = Literal["messages", "tokens", "fraction"]

VALID_FORMS = (
    "messages:N (N a whole number >= 1), tokens:N (N a whole number >= 1) "
    "or fraction:F (0 < F <= 1, a share of the model's max input tokens)"
)
TRIGGER_OFF = "off"

INPUT_HEADROOM = 0.9
"""A request may hold this share of the model's max input tokens: room for counting error."""
MIN_SHRINK = 0.1
"""A fold made to recover from an overflow must shrink the context by at least this share."""
FITTED_TRIGGER = 0.75
"""A trigger too big for the model's window is lowered to this share of its input budget."""
SUMMARY_SLACK = 2
"""A summary may run to this many times ``CHATBOT_MAX_SUMMARY_TOKENS`` (models keep to a
length loosely); past that it is too big to keep."""
SUMMARY_SHARE = 4
"""A summary holds at most one part in this many of what a request may hold."""


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
    forms = (
        f"{VALID_FORMS}, or {TRIGGER_OFF}" if setting == "CHATBOT_SUMMARY_TRIGGER" else VALID_FORMS
    )
    problem = f"{setting}={raw!r} is not valid: use {forms}"
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
    """Parse ``CHATBOT_SUMMARY_TRIGGER``: limits joined by commas (any fires), or ``off``."""
    if text.strip().lower() == TRIGGER_OFF:
        return ()
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise PolicyError(f"CHATBOT_SUMMARY_TRIGGER is empty: use {VALID_FORMS}, or {TRIGGER_OFF}")
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
    scaled_from: str = ""
    """The trigger and keep as set, when :func:`fitted_to_window` scaled them down."""

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

    @property
    def automatic(self) -> bool:
        """False when the trigger is ``off``: only /compact and the input guard fold."""
        return bool(self.trigger)

    def input_budget(self) -> int | None:
        """Tokens a request may hold (a margin below max input), or None when unknown."""
        if self.max_input_tokens is None:
            return None
        return max(1, int(self.max_input_tokens * INPUT_HEADROOM))

    def trigger_tokens(self) -> int | None:
        """The lowest token threshold among the triggers (``None`` if all count messages)."""
        values = [limit.as_tokens(self.max_input_tokens) for limit in self.trigger]
        tokens = [value for value in values if value is not None]
        return min(tokens) if tokens else None


def fitted_to_window(policy: SummaryPolicy) -> SummaryPolicy:
    """The policy scaled to a model whose window is too small for it: a token trigger above the
    input budget would never fire, so it is lowered to :data:`FITTED_TRIGGER` of the budget,
    and a token keep by the same proportion (folds stay a few turns apart)."""
    budget = policy.input_budget()
    lowest = policy.trigger_tokens()
    if budget is None or lowest is None or lowest <= budget:
        return policy
    target = max(1, int(budget * FITTED_TRIGGER))
    trigger = tuple(
        Limit("tokens", target)
        if (limit.as_tokens(policy.max_input_tokens) or 0) > budget
        else limit
        for limit in policy.trigger
    )
    keep = policy.keep
    keep_tokens = keep.as_tokens(policy.max_input_tokens)
    if keep_tokens is not None:
        keep = Limit("tokens", max(1, keep_tokens * target // lowest))
    was = f"trigger {','.join(str(limit) for limit in policy.trigger)}, keep {policy.keep}"
    return SummaryPolicy(trigger, keep, policy.keep_first_message, policy.max_input_tokens, was)


def summary_size(max_summary_tokens: int, max_input_tokens: int | None) -> int:
    """The summary's size limit: the setting, or a :data:`SUMMARY_SHARE` of what a request
    may hold when that is less (a summary rides along in every request)."""
    if not max_input_tokens:
        return max_summary_tokens
    return max(1, min(max_summary_tokens, max_input_tokens // SUMMARY_SHARE))


# --- trigger ----------------------------------------------------------------------------


def trigger_fired(policy: SummaryPolicy, message_count: int, context_tokens: int) -> bool:
    """True when any trigger holds: more than N messages, or N tokens in the whole request."""
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
    """Indices where cutting would split a tool-call group (an AIMessage with tool calls and
    every later ToolMessage answering one) or start the window on a tool result."""
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


def find_safe_cutoff_after(messages: Sequence[BaseMessage], target: int) -> int | None:
    """The smallest safe cutoff at or after ``target`` that still keeps the latest message."""
    unsafe = unsafe_cutoffs(messages)
    for cutoff in range(max(0, target), len(messages)):
        if cutoff not in unsafe:
            return cutoff
    return None


def keep_target(
    messages: Sequence[BaseMessage],
    keep: Limit,
    token_counts: Sequence[int],
    max_input_tokens: int | None,
) -> int:
    """Where the kept window would start to hold the ``keep`` amount, before safety; a token
    budget always keeps at least the last message, even one bigger than the budget."""
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

    def kept(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The messages that stay once the plan is folded (the pinned one among them)."""
        folded = set(self.fold)
        return [message for i, message in enumerate(messages) if i not in folded]


def fold_shrinks(now: Sent, after: Sent, least: float = 0.0) -> bool:
    """The rule every fold meets: it is made only when the request it leaves (``after``:
    :func:`chatbot.memory.sent.after_fold`) is smaller than the one sent now, by at least
    ``least`` of it (a first summary of a few short messages adds more than it takes away)."""
    saved = now.total - after.total
    return saved > 0 and saved >= now.total * least


def first_human_index(messages: Sequence[BaseMessage]) -> int | None:
    """Index of the first HumanMessage, if any."""
    return next((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), None)


def _window_start(
    messages: Sequence[BaseMessage],
    counts: Sequence[int],
    limit: Limit,
    pinned: int | None,
    max_input_tokens: int | None,
) -> int:
    """:func:`keep_target` with the pinned message neither folded nor counted."""
    if pinned is None:
        return keep_target(messages, limit, counts, max_input_tokens)
    rest = [m for i, m in enumerate(messages) if i != pinned]
    rest_counts = [c for i, c in enumerate(counts) if i != pinned]
    rest_target = keep_target(rest, limit, rest_counts, max_input_tokens)
    return rest_target if rest_target < pinned else rest_target + 1


def plan_summary(
    messages: Sequence[BaseMessage],
    policy: SummaryPolicy,
    token_counts: Sequence[int],
    *,
    max_kept_tokens: int | None = None,
) -> SummaryPlan:
    """Choose the older messages to fold, honouring keep, tool-call groups and the pinned
    message; with ``max_kept_tokens`` (a *fit*) the kept window is cut to at most that many
    tokens, never folding the latest message. The plan may be empty."""
    counts = list(token_counts)
    pinned = first_human_index(messages) if policy.keep_first_message else None
    target = _window_start(messages, counts, policy.keep, pinned, policy.max_input_tokens)
    if max_kept_tokens is not None:
        room = max(1, max_kept_tokens - (counts[pinned] if pinned is not None else 0))
        fit = _window_start(messages, counts, Limit("tokens", room), pinned, None)
        target = max(target, fit)
    cutoff = find_safe_cutoff(messages, target)
    if max_kept_tokens is not None and sum(counts[cutoff:]) > max_kept_tokens:
        forward = find_safe_cutoff_after(messages, target)
        if forward is not None:
            cutoff = forward
    fold = tuple(i for i in range(cutoff) if i != pinned)
    return SummaryPlan(fold=fold, cutoff=cutoff, pinned=pinned)


def overflow_room(
    counted: int, limit: int | None, requested: int | None, max_input_tokens: int | None
) -> int:
    """How many of our tokens the context may hold after a provider refused ``counted`` as
    too long: the input budget below its ``limit`` (else the configured one), in our units by
    its ``requested`` count; without a limit, half of what was refused."""
    limit = limit or max_input_tokens
    if limit is None:
        return max(1, counted // 2)
    scale = requested / counted if requested and counted else 1.0
    return max(1, int(limit * INPUT_HEADROOM / scale))


# --- chunking for a bounded summarizer input ----------------------------------------------

_BREAKS = (" ", "\n", "\t", "。", "，", "！", "？", "；", "、", ".", ",", ";")


def _part(message: BaseMessage, text: str, media: Sequence[Any], first: bool) -> BaseMessage:
    content: Any = [{"type": "text", "text": text}, *media] if media else text
    update: dict[str, Any] = {"content": content}
    if not first and isinstance(message, AIMessage):
        update["tool_calls"] = []
    return message.model_copy(update=update)


def _break_before(text: str, start: int, end: int) -> int:
    """A cut after a space, line break or punctuation in the second half of the piece."""
    if end >= len(text):
        return end
    best = max(text.rfind(mark, start, end) for mark in _BREAKS)
    return best + 1 if best >= start + (end - start) // 2 else end


def split_message(
    message: BaseMessage, max_tokens: int, counter: TokenCounter
) -> list[BaseMessage]:
    """Split one message bigger than ``max_tokens`` into consecutive parts labelled
    ``[part i/n]`` that together hold the whole text; media and tool calls go with the first.
    Parts end after a space, line break or punctuation mark when one is near.
    """
    if counter.raw_message(message) <= max_tokens:
        return [message]
    text, media = text_and_media(message.content)
    if not text:
        return [message]  # media only: nothing that can be split
    label = f"[part {len(text)}/{len(text)}] "
    overhead = {
        True: counter.raw_message(_part(message, label, media, True)),
        False: counter.raw_message(_part(message, label, [], False)),
    }
    chars_per_token = len(text) / max(1, counter.text(text))
    pieces: list[str] = []
    start = 0
    while start < len(text):
        first = not pieces
        room = max_tokens - overhead[first]
        carries = bool(media) or (isinstance(message, AIMessage) and bool(message.tool_calls))
        if room < 1 and first and carries:
            pieces.append("")  # the first part carries the media or tool calls alone
            continue
        room = max(1, room if room >= 1 else int(max_tokens * 0.9))
        size = max(1, int(room * chars_per_token))
        end = min(len(text), start + size)
        while end - start > 1 and counter.text(text[start:end]) > room:
            end = start + max(1, int((end - start) * 0.85))
        end = _break_before(text, start, end)
        pieces.append(text[start:end])
        start = end
    total = len(pieces)
    return [
        _part(
            message, f"[part {number}/{total}] {piece}", media if number == 1 else [], number == 1
        )
        for number, piece in enumerate(pieces, start=1)
    ]


def chunk_for_summary(
    messages: Sequence[BaseMessage], budget_tokens: int, counter: TokenCounter
) -> list[list[BaseMessage]]:
    """Split the messages to fold into consecutive chunks that each fit ``budget_tokens``,
    counted as the summarizer reads them (:func:`chatbot.memory.prompts.text_only`: media as
    markers); nothing is dropped, and a message bigger than the budget is split.
    """
    budget = max(1, budget_tokens)
    chunks: list[list[BaseMessage]] = []
    current: list[BaseMessage] = []
    used = 0
    for message in map(text_only, messages):
        cost = counter.raw_message(message)
        pieces = [message] if cost <= budget else split_message(message, budget, counter)
        for piece in pieces:
            piece_cost = cost if piece is message else counter.raw_message(piece)
            if current and used + piece_cost > budget:
                chunks.append(current)
                current, used = [], 0
            current.append(piece)
            used += piece_cost
    if current:
        chunks.append(current)
    return chunks
