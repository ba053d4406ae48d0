"""A thread's checkpoints as plain data, and what can be read from them.

Pure functions over :class:`Snapshot` lists, the same for a local SQLite thread and a thread on
a LangGraph server: the summary's timeline, the history (one entry per turn, or every
checkpoint), the messages folded into the summary (for export), where the last turn started
(for /undo and /retry), tokens saved.

Vocabulary:

- **lineage**: the checkpoints that led to the newest one, following parents. /undo, /retry and
  two turns at once leave other checkpoints off it, on side branches; the history still has them.
- **run**: the checkpoints one graph run wrote. It starts with an ``input`` checkpoint (a message
  was sent, or ``/compact``), a ``fork`` checkpoint (LangGraph's name for a run resumed from an
  older checkpoint: ``/retry``) or an ``update`` (``/undo``, ``/fork``, a regenerating
  ``/retry``), and goes on with ``loop`` checkpoints, each the child of the one before.
- **turn entry**: one run as people think of it: a message and its reply, a retry, an undo, a
  compaction, a fork. Its checkpoint is the run's last one: the state it left, for /show and
  /fork.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from langchain_core.messages import BaseMessage, convert_to_messages

from chatbot.tokens import TokenCounter

ACTION_KEY = "chatbot_action"
"""Checkpoint metadata naming what wrote an ``update`` checkpoint: fork, undo, rename."""
ORIGIN_KEY = "chatbot_origin"
"""Checkpoint metadata of a forked thread's first checkpoint: ``thread@checkpoint``."""


@dataclass(frozen=True)
class State:
    """What a checkpoint holds: its messages, its summary, what was left to run, when."""

    messages: tuple[BaseMessage, ...] = ()
    summary: str = ""
    next: tuple[str, ...] = ()
    created_at: datetime | None = None


class Snapshot:
    """One checkpoint of a thread.

    Its id, parent, step, source and metadata are always at hand. Its state (messages,
    summary, ``next``, time) is either given or read on first use through ``load``: a long
    thread's history is then listed from the checkpoint index alone, and only the checkpoints
    a command looks at are deserialised (once each).
    """

    __slots__ = ("_load", "_state", "checkpoint_id", "metadata", "parent_id", "source", "step")

    def __init__(
        self,
        checkpoint_id: str,
        parent_id: str | None,
        step: int,
        source: str,
        messages: Sequence[BaseMessage] = (),
        summary: str = "",
        next: Sequence[str] = (),
        created_at: datetime | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        load: Callable[[], State] | None = None,
    ) -> None:
        self.checkpoint_id = checkpoint_id
        self.parent_id = parent_id
        self.step = step
        self.source = source
        self.metadata: dict[str, Any] = metadata if metadata is not None else {}
        self._load = load
        self._state: State | None = (
            None if load else State(tuple(messages), summary, tuple(next), created_at)
        )

    @property
    def state(self) -> State:
        """The checkpoint's state, read now if it was not yet."""
        if self._state is None:
            assert self._load is not None
            self._state = self._load()
            self._load = None
        return self._state

    @property
    def messages(self) -> tuple[BaseMessage, ...]:
        return self.state.messages

    @property
    def summary(self) -> str:
        return self.state.summary

    @property
    def next(self) -> tuple[str, ...]:
        """The nodes left to run: empty when the run that wrote it finished here."""
        return self.state.next

    @property
    def created_at(self) -> datetime | None:
        return self.state.created_at

    @property
    def unfinished(self) -> bool:
        """True when a run stopped before finishing (interrupted, failed, killed)."""
        return bool(self.next)

    @property
    def awaiting_reply(self) -> bool:
        """True when a run stopped before the last message got its reply (not, say, while
        folding after a saved reply)."""
        return self.unfinished and bool(self.messages) and self.messages[-1].type != "ai"

    def _key(self) -> tuple[Any, ...]:
        return (self.checkpoint_id, self.parent_id, self.step, self.source, self.metadata)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return self._key() == other._key() and self.state == other.state

    def __hash__(self) -> int:
        return hash(self.checkpoint_id)

    def __repr__(self) -> str:
        return f"Snapshot({self.checkpoint_id!r}, step={self.step}, source={self.source!r})"


def parse_time(value: str | datetime | None) -> datetime | None:
    """A checkpoint's time as LangGraph (ISO text) or its server's API reports it."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return value


def state_from_values(
    values: dict[str, Any] | None,
    next_nodes: Sequence[str] = (),
    created_at: str | datetime | None = None,
) -> State:
    """A checkpoint's state from its channel values (messages may be dicts, as a server
    sends them)."""
    values = values or {}
    raw_messages = values.get("messages") or []
    return State(
        messages=tuple(convert_to_messages(raw_messages)) if raw_messages else (),
        summary=str(values.get("summary") or ""),
        next=tuple(next_nodes),
        created_at=parse_time(created_at),
    )


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
    state = state_from_values(values, next_nodes, created_at)
    return Snapshot(
        checkpoint_id=checkpoint_id,
        parent_id=parent_id,
        step=int(metadata.get("step", -1)),
        source=str(metadata.get("source", "")),
        messages=state.messages,
        summary=state.summary,
        next=state.next,
        created_at=state.created_at,
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
    """One line of /history all: one checkpoint."""

    checkpoint_id: str
    parent_id: str | None
    step: int
    node: str
    messages: int
    summary_chars: int
    created_at: datetime | None
    next: tuple[str, ...]


def history_rows(history: Sequence[Snapshot]) -> list[HistoryRow]:
    """Every checkpoint of the thread as a history row, side branches included, newest first."""
    index = by_id(history)
    rows = []
    for snapshot in sorted(history, key=lambda s: s.checkpoint_id, reverse=True):
        parent = index.get(snapshot.parent_id) if snapshot.parent_id else None
        rows.append(
            HistoryRow(
                checkpoint_id=snapshot.checkpoint_id,
                parent_id=snapshot.parent_id,
                step=snapshot.step,
                node=node_of(snapshot, parent),
                messages=len(snapshot.messages),
                summary_chars=len(snapshot.summary),
                created_at=snapshot.created_at,
                next=snapshot.next,
            )
        )
    return rows


TurnKind = Literal["turn", "retry", "undo", "compact", "fork", "update"]
Fate = Literal["", "undone", "retried", "branch"]


@dataclass(frozen=True)
class TurnEntry:
    """One entry of /history: a run as people think of it (see the module's vocabulary)."""

    kind: TurnKind | str
    """``turn`` (a message and its reply), ``retry``, ``undo``, ``compact``, ``fork``, or
    another action's name."""
    checkpoint_id: str
    """The run's last checkpoint: the state it left (what /show shows, where /fork branches)."""
    first_checkpoint_id: str
    created_at: datetime | None
    """When the run started (the message was sent)."""
    text: str
    """The user's message it answers ("" for undo, compact, fork)."""
    messages_before: int
    messages_after: int
    folded: int
    """Messages folded into the summary during the run."""
    summary_changed: bool
    finished: bool
    """False when the run stopped before its end (interrupted, failed, killed)."""
    fate: Fate = ""
    """``undone`` (an /undo rewound it), ``retried`` (a /retry replaced its reply), ``branch``
    (a side branch, as two turns at once leave) or "" when its state is part of the current one."""
    origin: str = ""
    """For a fork: ``thread@checkpoint`` it was branched from."""


def _runs(history: Sequence[Snapshot]) -> list[list[Snapshot]]:
    """The thread's checkpoints grouped by the run that wrote them, oldest run first."""
    runs: list[list[Snapshot]] = []
    run_of: dict[str, list[Snapshot]] = {}
    for snapshot in sorted(history, key=lambda s: s.checkpoint_id):
        run = run_of.get(snapshot.parent_id or "") if snapshot.source == "loop" else None
        if run is None:
            run = []
            runs.append(run)
        run.append(snapshot)
        run_of[snapshot.checkpoint_id] = run
    return runs


def _kind(first: Snapshot) -> str:
    action = str(first.metadata.get(ACTION_KEY) or "")
    if first.source == "input":
        return "compact" if action == "compact" else "turn"
    if first.source == "fork":
        return "retry"  # a run resumed from an older checkpoint: how /retry regenerates
    if first.source == "update":
        return action or "update"
    return first.source or "?"


def _undone(history: Sequence[Snapshot]) -> set[str]:
    """The checkpoints /undo rewound: for each undo, the last turn when it ran (found as /undo
    found it) and everything after it on the lineage of that time."""
    ordered = sorted(history, key=lambda s: s.checkpoint_id)
    undone: set[str] = set()
    for position, snapshot in enumerate(ordered):
        if position and snapshot.metadata.get(ACTION_KEY) == "undo":
            earlier, head = ordered[:position], ordered[position - 1]
            turn = last_turn(earlier, head)
            if turn is None or turn.input is None:
                continue
            chain = [s.checkpoint_id for s in lineage(earlier, head)]
            undone.update(chain[chain.index(turn.input.checkpoint_id) :])
    return undone


def _retried(runs: Sequence[list[Snapshot]], index: dict[str, Snapshot]) -> set[int]:
    """The runs (by position) whose reply a /retry replaced."""
    written_by: dict[str | None, int] = {}  # a message id -> the run that first held it
    awaiting: dict[str, list[int]] = {}  # a checkpoint where a message awaited its reply
    for number, run in enumerate(runs):
        for snapshot in run:
            for message in snapshot.messages:
                written_by.setdefault(message.id, number)
        first = run[0]
        if first.source == "input" and len(run) > 1 and _kind(first) == "turn":
            awaiting.setdefault(run[1].checkpoint_id, []).append(number)
        elif first.source == "fork" and first.parent_id:
            awaiting.setdefault(first.parent_id, []).append(number)
    retried: set[int] = set()
    for number, run in enumerate(runs):
        first = run[0]
        if first.source == "fork" and first.parent_id:
            # Resumed where earlier runs answered the same message: their replies are replaced.
            retried.update(n for n in awaiting.get(first.parent_id, []) if n < number)
        elif first.metadata.get(ACTION_KEY) == "retry" and first.parent_id in index:
            # Regenerated from the state then: the reply it removed was written by a run.
            kept = {m.id for m in first.messages}
            for message in index[first.parent_id].messages:
                if message.type == "ai" and message.id not in kept and message.id in written_by:
                    retried.add(written_by[message.id])
    return retried


def turn_entries(history: Sequence[Snapshot]) -> list[TurnEntry]:
    """The thread's history one entry per run, side branches included, newest first.

    An entry whose state is no longer part of the thread's says why (:attr:`TurnEntry.fate`):
    nothing a thread ever held is hidden.
    """
    if not history:
        return []
    index = by_id(history)
    current = {s.checkpoint_id for s in lineage(history)}
    ordered = sorted(history, key=lambda s: s.checkpoint_id)
    order = {s.checkpoint_id: position for position, s in enumerate(ordered)}
    runs = _runs(history)
    undone = _undone(history)
    retried = _retried(runs, index)
    entries = []
    for number, run in enumerate(runs):
        first, last = run[0], run[-1]
        kind = _kind(first)
        # The thread as it was when the run started (an undo's or a retry's parent is an
        # older checkpoint: the state it goes back to).
        position = order[first.checkpoint_id]
        before = ordered[position - 1] if position else None
        folded = 0  # the graph folds in its own steps, inside the run
        for previous, snapshot in itertools.pairwise(run):
            if snapshot.summary != previous.summary:
                kept = {m.id for m in snapshot.messages}
                folded += sum(1 for m in previous.messages if m.id not in kept)
        known = {m.id for m in first.messages} if first.source != "input" else set()
        known |= {m.id for m in before.messages} if before is not None else set()
        said = [m for s in run for m in s.messages if m.type == "human" and m.id not in known]
        if not said and kind == "retry":
            said = [m for m in last.messages if m.type == "human"][-1:]
        fate: Fate = ""
        if last.checkpoint_id in undone:
            fate = "undone"
        elif number in retried:
            fate = "retried"
        elif last.checkpoint_id not in current:
            fate = "branch"
        entries.append(
            TurnEntry(
                kind=kind,
                checkpoint_id=last.checkpoint_id,
                first_checkpoint_id=first.checkpoint_id,
                created_at=first.created_at,
                text=said[0].text if said else "",
                messages_before=len(before.messages) if before is not None else 0,
                messages_after=len(last.messages),
                folded=folded,
                summary_changed=last.summary != (before.summary if before is not None else ""),
                finished=not last.next,
                fate=fate,
                origin=str(first.metadata.get(ORIGIN_KEY) or "") if kind == "fork" else "",
            )
        )
    return list(reversed(entries))


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
    input: Snapshot | None = None
    """The turn's ``input`` checkpoint, where its run starts."""


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
            return TurnPoints(before=before, after_input=after, compacted=compacted, input=snapshot)
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
