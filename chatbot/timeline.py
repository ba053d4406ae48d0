"""A thread's checkpoints as plain data, and what can be read from them.

Pure functions over :class:`Snapshot` lists, the same for a local SQLite thread and a thread on
a LangGraph server: the summary's timeline, the history table, the messages folded into the
summary (for export), where the last turn started (for /undo and /retry), tokens saved.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from langchain_core.messages import BaseMessage, convert_to_messages

from chatbot.tokens import TokenCounter

ACTION_KEY = "chatbot_action"
"""Checkpoint metadata naming what wrote an ``update`` checkpoint: fork, undo, rename."""


@dataclass(frozen=True)
class Snapshot:
    """One checkpoint of a thread."""

    checkpoint_id: str
    parent_id: str | None
    step: int
    source: str
    messages: tuple[BaseMessage, ...]
    summary: str
    next: tuple[str, ...] = ()
    created_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def unfinished(self) -> bool:
        """True when a run stopped before finishing (interrupted, failed, killed)."""
        return bool(self.next)

    @property
    def awaiting_reply(self) -> bool:
        """True when a run stopped before the last message got its reply (not, say, while
        folding after a saved reply)."""
        return self.unfinished and bool(self.messages) and self.messages[-1].type != "ai"


def snapshot_from_parts(
    *,
    checkpoint_id: str,
    parent_id: str | None,
    metadata: dict[str, Any] | None,
    values: dict[str, Any] | None,
    next_nodes: Sequence[str] = (),
    created_at: str | datetime | None = None,
) -> Snapshot:
    """Build a snapshot from what LangGraph (or its server's API) reports for a checkpoint."""
    metadata = dict(metadata or {})
    values = values or {}
    raw_messages = values.get("messages") or []
    messages = tuple(convert_to_messages(raw_messages)) if raw_messages else ()
    when: datetime | None
    if isinstance(created_at, str):
        try:
            when = datetime.fromisoformat(created_at)
        except ValueError:
            when = None
    else:
        when = created_at
    return Snapshot(
        checkpoint_id=checkpoint_id,
        parent_id=parent_id,
        step=int(metadata.get("step", -1)),
        source=str(metadata.get("source", "")),
        messages=messages,
        summary=str(values.get("summary") or ""),
        next=tuple(next_nodes),
        created_at=when,
        metadata=metadata,
    )


def by_id(history: Sequence[Snapshot]) -> dict[str, Snapshot]:
    """Index a history by checkpoint id."""
    return {snapshot.checkpoint_id: snapshot for snapshot in history}


def lineage(history: Sequence[Snapshot], head: Snapshot | None = None) -> list[Snapshot]:
    """The checkpoints that led to ``head`` (default: the newest), oldest first.

    A thread's history can branch (retry, undo and time travel write new checkpoints whose
    parent is an older one); the lineage follows parents, so abandoned branches are skipped.
    """
    if not history:
        return []
    index = by_id(history)
    current: Snapshot | None = head or max(history, key=lambda s: s.checkpoint_id)
    chain: list[Snapshot] = []
    while current is not None:
        chain.append(current)
        current = index.get(current.parent_id) if current.parent_id else None
    return list(reversed(chain))


def node_of(snapshot: Snapshot, parent: Snapshot | None) -> str:
    """What wrote a checkpoint: ``input``, a node name, or an action such as ``undo``."""
    if snapshot.source == "input":
        return "input"
    if snapshot.source in ("update", "fork"):
        # LangGraph writes a "fork" checkpoint when a run starts from an older one (/retry).
        default = "replay" if snapshot.source == "fork" else "update"
        return str(snapshot.metadata.get(ACTION_KEY) or default)
    if parent is not None and parent.next:
        return parent.next[0]
    return snapshot.source or "?"


@dataclass(frozen=True)
class HistoryRow:
    """One line of /history."""

    checkpoint_id: str
    step: int
    node: str
    messages: int
    summary_chars: int
    created_at: datetime | None
    next: tuple[str, ...]


def history_rows(history: Sequence[Snapshot]) -> list[HistoryRow]:
    """The current lineage as history rows, newest first."""
    chain = lineage(history)
    rows = []
    for position, snapshot in enumerate(chain):
        parent = chain[position - 1] if position else None
        rows.append(
            HistoryRow(
                checkpoint_id=snapshot.checkpoint_id,
                step=snapshot.step,
                node=node_of(snapshot, parent),
                messages=len(snapshot.messages),
                summary_chars=len(snapshot.summary),
                created_at=snapshot.created_at,
                next=snapshot.next,
            )
        )
    return list(reversed(rows))


@dataclass(frozen=True)
class SummaryChange:
    """A checkpoint where the summary changed: one entry of /summary history."""

    checkpoint_id: str
    step: int
    created_at: datetime | None
    folded: int
    folded_tokens: int
    summary: str


def summary_timeline(
    history: Sequence[Snapshot], counter: TokenCounter | None = None
) -> list[SummaryChange]:
    """Every checkpoint in the lineage where the summary changed, oldest first.

    ``folded`` counts the messages that left ``messages`` in that step (folded into the summary).
    """
    counter = counter or TokenCounter()
    chain = lineage(history)
    changes = []
    for previous, snapshot in itertools.pairwise(chain):
        if snapshot.summary == previous.summary:
            continue
        kept = {m.id for m in snapshot.messages}
        gone = [m for m in previous.messages if m.id not in kept]
        changes.append(
            SummaryChange(
                checkpoint_id=snapshot.checkpoint_id,
                step=snapshot.step,
                created_at=snapshot.created_at,
                folded=len(gone),
                folded_tokens=sum(counter.per_message(gone)) if gone else 0,
                summary=snapshot.summary,
            )
        )
    return changes


def folded_messages(history: Sequence[Snapshot]) -> list[BaseMessage]:
    """Messages of the lineage that are no longer live: the ones folded into the summary.

    In the order they first appeared; each once.
    """
    chain = lineage(history)
    if not chain:
        return []
    live = {m.id for m in chain[-1].messages}
    seen: dict[str, BaseMessage] = {}
    for snapshot in chain:
        for message in snapshot.messages:
            if message.id and message.id not in live and message.id not in seen:
                seen[message.id] = message
    return list(seen.values())


def tokens_saved(history: Sequence[Snapshot], counter: TokenCounter | None = None) -> int:
    """Tokens the summaries save on every call: folded messages minus the summary's size."""
    counter = counter or TokenCounter()
    chain = lineage(history)
    if not chain:
        return 0
    folded = folded_messages(history)
    if not folded:
        return 0
    return max(0, counter.messages(folded) - counter.text(chain[-1].summary))


@dataclass(frozen=True)
class TurnPoints:
    """Where the latest turn of a lineage started."""

    before: Snapshot | None
    """The state before the user's message arrived (what /undo restores); ``None`` for the
    thread's first turn, which has no earlier checkpoint to restore."""
    after_input: Snapshot | None
    """The state with the user's message added, before the reply (where /retry resumes)."""
    compacted: bool = False
    """A compaction ran after this turn: regenerating from ``after_input`` would undo it."""


def last_turn(history: Sequence[Snapshot], head: Snapshot | None = None) -> TurnPoints | None:
    """Find the latest turn's start by walking back from ``head`` to its ``input`` checkpoint.

    An undo checkpoint's parent is the state it restored, so walking on from it reaches the
    turn before: repeated /undo keeps rewinding. A compaction's run is not a turn. The
    thread's first turn counts too (it can be retried, not undone). ``None`` when there is
    no turn at all.
    """
    chain = lineage(history, head)
    for position in range(len(chain) - 1, -1, -1):
        snapshot = chain[position]
        if snapshot.source == "input" and snapshot.metadata.get(ACTION_KEY) != "compact":
            after = chain[position + 1] if position + 1 < len(chain) else None
            if after is not None and not after.next:
                after = None  # the input checkpoint is the run's last: nothing to resume from
            before = chain[position - 1] if position else None
            compacted = any(s.metadata.get(ACTION_KEY) == "compact" for s in chain[position:])
            return TurnPoints(before=before, after_input=after, compacted=compacted)
    return None


def find_checkpoint(history: Sequence[Snapshot], fragment: str) -> Snapshot:
    """The checkpoint whose id equals, starts with or ends with ``fragment`` (unique).

    Raises ``LookupError`` with a one-line explanation otherwise.
    """
    wanted = fragment.strip().lower()
    if not wanted:
        raise LookupError("give a checkpoint id (the thread's history lists them)")
    exact = [s for s in history if s.checkpoint_id.lower() == wanted]
    if exact:
        return exact[0]
    matches = [
        s
        for s in history
        if s.checkpoint_id.lower().startswith(wanted) or s.checkpoint_id.lower().endswith(wanted)
    ]
    if not matches:
        raise LookupError(f"no checkpoint {fragment!r} in this thread (its history lists them)")
    if len(matches) > 1:
        raise LookupError(f"{fragment!r} matches {len(matches)} checkpoints: give more of the id")
    return matches[0]


def short_id(checkpoint_id: str) -> str:
    """The part of a checkpoint id people type: its last 8 characters (unique in practice)."""
    return checkpoint_id[-8:]


def compact_refusal(snapshot: Snapshot | None) -> str | None:
    """Why a thread cannot be compacted now (one line), or None when it can."""
    if snapshot is None or not snapshot.messages:
        return "nothing to compact: this thread has no messages yet"
    if snapshot.messages[-1].type != "ai":  # (a fold cut short after the reply is fine)
        return "the last turn has no reply yet: retry it first (/retry in the REPL), then compact"
    return None
