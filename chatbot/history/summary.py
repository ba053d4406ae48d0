"""What a thread's summary holds, read from its checkpoints: how it changed (for /summary
history and export), the messages folded into it, the record a fold leaves in the state, the
tokens those messages would cost on every call, and whether the thread can be compacted now.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, TypeGuard

from langchain_core.messages import BaseMessage

from chatbot.history.lineage import RecentStates, lineage
from chatbot.history.snapshots import FOLD_NODE, CheckpointState, FoldRecord, Snapshot
from chatbot.memory.tokens import TokenCounter


def taken_out(previous: CheckpointState, state: CheckpointState) -> list[BaseMessage]:
    """The messages ``previous`` held that ``state`` no longer does (by id): what a step
    folded into the summary, or a reply a /retry removed."""
    kept = {m.id for m in state.messages}
    return [m for m in previous.messages if m.id not in kept]


def is_fold(snapshot: Snapshot, previous: CheckpointState, state: CheckpointState) -> bool:
    """True for a step that changed the summary: its text changed, or the fold node took
    messages out (a summary that came back word for word is a fold all the same)."""
    if state.summary != previous.summary:
        return True
    if snapshot.source != "loop" or FOLD_NODE not in previous.next:
        return False
    return bool(taken_out(previous, state))


class SummaryChange(NamedTuple):
    """A checkpoint where the summary changed: one entry of /summary history."""

    checkpoint_id: str
    step: int
    created_at: datetime | None
    folded: int
    folded_tokens: int
    """The folded messages' tokens, as the request before the fold counted them (what the
    fold's own line says: :meth:`~chatbot.memory.tokens.TokenCounter.part`)."""
    summary: str


def summary_story(
    history: Sequence[Snapshot], counter: TokenCounter | None = None
) -> tuple[list[SummaryChange], list[BaseMessage]]:
    """How the summary changed (:func:`summary_timeline`), and the lineage's messages that
    are no longer live (folded, or a reply /retry replaced), in the order they first
    appeared: one pass over the lineage, two states held at a time."""
    counter = counter or TokenCounter()
    chain = lineage(history)
    if not chain:
        return [], []
    state_of = RecentStates(size=2)
    live = {m.id for m in state_of(chain[-1]).messages}
    changes = []
    gone: dict[str, BaseMessage] = {}  # in the order they first appeared
    previous: CheckpointState | None = None
    for snapshot in chain:
        state = state_of(snapshot)
        for message in state.messages:
            if message.id and message.id not in live:
                gone.setdefault(message.id, message)
        if previous is not None and is_fold(snapshot, previous, state):
            left = taken_out(previous, state)
            changes.append(
                SummaryChange(
                    checkpoint_id=snapshot.checkpoint_id,
                    step=snapshot.step,
                    created_at=state.created_at,
                    folded=len(left),
                    folded_tokens=counter.part(left, previous.messages),
                    summary=state.summary,
                )
            )
        previous = state
    return changes, list(gone.values())


def summary_timeline(
    history: Sequence[Snapshot], counter: TokenCounter | None = None
) -> list[SummaryChange]:
    """Every checkpoint in the lineage where the summary changed, oldest first."""
    return summary_story(history, counter)[0]


# --- what the summary saves -------------------------------------------------------------------


def _valid_record(record: FoldRecord | None) -> TypeGuard[FoldRecord]:
    return (
        isinstance(record, Mapping)
        and isinstance(record.get("messages"), int)
        and isinstance(record.get("tokens"), Mapping)
    )


def extend_fold_record(
    previous: FoldRecord | None,
    summary_before: str,
    folded: Sequence[BaseMessage],
    counters: Mapping[str, TokenCounter],
) -> dict[str, Any] | None:
    """The record a fold leaves in the state (:data:`FOLDED_KEY`): the messages it folded
    added to what the summary held before, with their raw tokens by tokenizer name. A first
    summary starts a record counted with ``counters``; an extended one keeps its record's
    tokenizers; one without a record gets none (``None``)."""
    if not summary_before:
        base: FoldRecord = {"messages": 0, "tokens": dict.fromkeys(counters, 0)}
    elif previous is not None and _valid_record(previous):
        base = previous
    else:
        return None
    tokens = {
        name: int(total) + counters[name].raw(folded)
        for name, total in base["tokens"].items()
        if name in counters
    }
    return {"messages": int(base["messages"]) + len(folded), "tokens": tokens}


def summary_folds(history: Sequence[Snapshot], head: Snapshot | None = None) -> list[BaseMessage]:
    """The messages the summary at ``head`` (default: the newest) holds, read from the
    checkpoints: those its lineage's folds took out since the summary was last empty, each
    once, in order. A fold is the fold node's step, or an update (/undo) that applied one's
    writes. (A fork's record also counts what was folded in the thread it came from.)"""
    chain = lineage(history, head)
    state_of = RecentStates(size=2)
    folded: dict[str, BaseMessage] = {}
    previous: CheckpointState | None = None
    for snapshot in chain:
        state = state_of(snapshot)
        if not state.summary:
            folded.clear()
        elif (
            previous is not None
            and FOLD_NODE in previous.next
            and (snapshot.source == "loop" or state.summary != previous.summary)
        ):
            for message in taken_out(previous, state):
                if message.id:
                    folded.setdefault(message.id, message)
        previous = state
    return list(folded.values())


class Savings(NamedTuple):
    """What the summary holds. What it saves on every call is ``folded`` less what it costs
    there: its text, its message and the recall tool (``Sent.summary_cost``)."""

    folded: int
    """The folded messages' tokens, usage-scaled as the live messages are: what they would
    cost on every call."""
    messages: int
    """How many messages the summary holds."""


def summary_savings(
    head: Snapshot | None,
    history: Callable[[], Sequence[Snapshot]],
    counter: TokenCounter | None = None,
    *,
    use_record: bool = True,
) -> Savings:
    """The tokens of the messages the summary at ``head`` holds, and how many they are: from
    the state's record of its folds when it has one counted with ``counter``'s tokenizer,
    else from the lineage's checkpoints (``history`` is called only then)."""
    counter = counter or TokenCounter()
    if head is None or not head.summary:
        return Savings(0, 0)
    record = head.fold_record if use_record else None
    raw = record["tokens"].get(counter.name) if _valid_record(record) else None
    if isinstance(raw, int) and record is not None:
        count = int(record["messages"])
    else:
        folded = summary_folds(history(), head)
        raw, count = counter.raw(folded), len(folded)
    if not count:
        return Savings(0, 0)
    return Savings(math.ceil(raw * counter.scale(head.messages)), count)


def compact_refusal(snapshot: Snapshot | None) -> str | None:
    """Why a thread cannot be compacted now (one line), or None when it can."""
    pending = snapshot is not None and bool(snapshot.state.pending)
    if snapshot is None or not (snapshot.messages or pending):
        return "nothing to compact: this thread has no messages yet"
    if pending or snapshot.messages[-1].type != "ai":  # (a fold cut short after the reply is fine)
        return "the last turn has no reply yet: retry it first (/retry in the REPL), then compact"
    return None
