"""A thread's history as /history shows it: one entry per run (:func:`turn_entries`), or one
row per checkpoint (:func:`history_rows`).

Vocabulary (and see :mod:`chatbot.history.lineage`):

- **run**: the checkpoints one graph run wrote. It starts with an ``input`` checkpoint (a message
  was sent, or ``/compact``), a ``fork`` checkpoint (LangGraph's name for a run resumed from an
  older checkpoint: ``/retry``) or an ``update`` (``/undo``, ``/fork``, a regenerating
  ``/retry``), and goes on with ``loop`` checkpoints, each the child of the one before.
- **turn entry**: one run as people think of it: a message and its reply, a retry, an undo, a
  compaction, a fork. Its checkpoint is the run's last one: the state it left.

The functions read only what their answer needs: which runs were undone, retried or left on
a side branch is worked out from ids, parents and metadata.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime
from typing import Literal, NamedTuple

from chatbot.history.lineage import (
    RecentStates,
    StateOf,
    ancestors,
    by_id,
    is_turn_start,
)
from chatbot.history.snapshots import (
    ACTION_KEY,
    FOLD_NODE,
    ORIGIN_KEY,
    PRUNED_KEY,
    CheckpointState,
    Snapshot,
)
from chatbot.history.summary import is_fold, taken_out
from chatbot.parts import describe


def node_of(snapshot: Snapshot, parent: Snapshot | None, state_of: StateOf) -> str:
    """What wrote a checkpoint: ``input``, a node name, or an action such as ``undo``."""
    if snapshot.source == "input":
        return "input"
    if snapshot.source in ("update", "fork"):
        # LangGraph writes a "fork" checkpoint when a run starts from an older one (/retry).
        default = "replay" if snapshot.source == "fork" else "update"
        return str(snapshot.metadata.get(ACTION_KEY) or default)
    if parent is not None:
        pending = state_of(parent).next
        if pending:
            return pending[0]
    return snapshot.source or "?"


class HistoryRow(NamedTuple):
    """One line of /history all: one checkpoint."""

    checkpoint_id: str
    parent_id: str | None
    step: int
    node: str
    messages: int
    summary_chars: int
    created_at: datetime | None
    next: tuple[str, ...]


def history_rows(history: Sequence[Snapshot], limit: int | None = None) -> list[HistoryRow]:
    """The newest ``limit`` checkpoints (default: all) as history rows, side branches
    included, newest first."""
    index = by_id(history)
    newest_first = sorted(history, key=lambda s: s.checkpoint_id, reverse=True)
    state_of = RecentStates()
    rows = []
    for snapshot in newest_first[:limit]:
        parent = index.get(snapshot.parent_id) if snapshot.parent_id else None
        state = state_of(snapshot)
        rows.append(
            HistoryRow(
                checkpoint_id=snapshot.checkpoint_id,
                parent_id=snapshot.parent_id,
                step=snapshot.step,
                node=node_of(snapshot, parent, state_of),
                messages=len(state.messages),
                summary_chars=len(state.summary),
                created_at=state.created_at,
                next=state.next,
            )
        )
    return rows


TurnKind = Literal["turn", "retry", "undo", "compact", "fork", "system", "update"]
Fate = Literal["", "undone", "retried", "branch"]


class TurnEntry(NamedTuple):
    """One entry of /history: a run as people think of it (see the module's vocabulary)."""

    kind: TurnKind | str
    """``turn`` (a message and its reply), ``retry``, ``undo``, ``compact``, ``fork``,
    ``system`` (the thread's system prompt set or cleared), or another action's name."""
    checkpoint_id: str
    """The run's last checkpoint: the state it left (what /show shows, where /fork branches)."""
    first_checkpoint_id: str
    created_at: datetime | None
    """When the run started (the message was sent)."""
    text: str
    """The user's message it answers ("" for undo, compact, fork; for ``system``: the new
    system prompt, "" when cleared)."""
    messages_before: int
    messages_after: int
    folded: int
    """Messages folded into the summary during the run."""
    summary_changed: bool
    finished: bool
    """False when the run stopped before doing what it was for (interrupted, failed, killed):
    a turn or a retry before its reply was saved, a compaction before it folded. A turn whose
    reply was saved is finished even when the fold after it was cut short (:attr:`fold_left`)."""
    fate: Fate = ""
    """``undone`` (an /undo rewound it), ``retried`` (a /retry replaced its reply), ``branch``
    (a side branch, as two turns at once leave) or "" when its state is part of the current one."""
    origin: str = ""
    """For a fork: ``thread@checkpoint`` it was branched from."""
    fold_left: bool = False
    """The reply was saved, but the fold after it was cut short (Ctrl-C while folding, a
    killed process): the next turn folds first."""


class _Runs:
    """The runs of a thread, found from ids, parents and sources alone: a first checkpoint
    that is not a ``loop`` one (or has no older parent), then ``loop`` checkpoints, each the
    child of one before it. A run is named by its first checkpoint's id."""

    def __init__(self, history: Sequence[Snapshot]) -> None:
        self.index = by_id(history)
        self.ordered = _oldest_first(history)
        self.position = {s.checkpoint_id: number for number, s in enumerate(self.ordered)}
        self._first: dict[str, str] = {}
        self._children: dict[str, list[Snapshot]] | None = None

    def _parent_in_run(self, snapshot: Snapshot) -> Snapshot | None:
        if snapshot.source != "loop" or not snapshot.parent_id:
            return None
        parent = self.index.get(snapshot.parent_id)
        return (
            parent if parent is not None and parent.checkpoint_id < snapshot.checkpoint_id else None
        )

    def starts_run(self, snapshot: Snapshot) -> bool:
        return self._parent_in_run(snapshot) is None

    def first_of(self, snapshot: Snapshot, floor: str = "") -> str | None:
        """The id of the first checkpoint of the run that wrote ``snapshot``; ``None`` when
        that is older than ``floor`` (found without reading further back)."""
        path: list[str] = []
        current: Snapshot | None = snapshot
        found: str | None = None
        while current is not None:
            known = self._first.get(current.checkpoint_id)
            if known is not None:
                found = known
                break
            if current.checkpoint_id < floor:
                break
            path.append(current.checkpoint_id)
            parent = self._parent_in_run(current)
            if parent is None:
                found = current.checkpoint_id
                break
            current = parent
        if found is not None:
            self._first.update(dict.fromkeys(path, found))
        return found

    def newest(self, limit: int | None) -> list[list[Snapshot]]:
        """The newest ``limit`` runs (default: all), oldest first, each oldest first. Reads
        the metadata of the checkpoints from the oldest of those runs on."""
        firsts: list[Snapshot] = []
        start = 0
        for position in range(len(self.ordered) - 1, -1, -1):
            snapshot = self.ordered[position]
            if self.starts_run(snapshot):
                firsts.append(snapshot)
                if limit is not None and len(firsts) == limit:
                    start = position
                    break
        if not firsts:
            return []
        runs: dict[str, list[Snapshot]] = {s.checkpoint_id: [] for s in reversed(firsts)}
        floor = firsts[-1].checkpoint_id
        for snapshot in self.ordered[start:]:
            first = self.first_of(snapshot, floor)
            if first in runs:
                runs[first].append(snapshot)
        return list(runs.values())

    def count(self) -> int:
        return sum(1 for snapshot in reversed(self.ordered) if self.starts_run(snapshot))

    def children(self, checkpoint_id: str) -> list[Snapshot]:
        if self._children is None:
            self._children = {}
            for snapshot in self.ordered:
                self._children.setdefault(snapshot.parent_id or "", []).append(snapshot)
        return self._children.get(checkpoint_id, [])


def _oldest_first(history: Sequence[Snapshot]) -> list[Snapshot]:
    return sorted(history, key=lambda s: s.checkpoint_id)


def turn_count(history: Sequence[Snapshot]) -> int:
    """How many entries :func:`turn_entries` has for the thread (reads every checkpoint's
    metadata, no state)."""
    return _Runs(history).count()


def _kind(first: Snapshot) -> str:
    action = str(first.metadata.get(ACTION_KEY) or "")
    if first.source == "input":
        return "compact" if action == "compact" else "turn"
    if first.source == "fork":
        return "retry"  # a run resumed from an older checkpoint: how /retry regenerates
    if first.source == "update":
        return action or "update"
    return first.source or "?"


def _regenerates(first: Snapshot, runs: _Runs, state_of: StateOf) -> bool:
    """True for a run that starts by removing the last reply to answer again: a local /retry
    says so in its metadata; a server's update carries none, so there it is told by the state
    (an update whose only change is that the last message, a reply, is gone)."""
    action = first.metadata.get(ACTION_KEY)
    if action or first.source != "update" or first.parent_id not in runs.index:
        return action == "retry"
    before, after = state_of(runs.index[str(first.parent_id)]), state_of(first)
    return (
        bool(before.messages)
        and before.messages[-1].type == "ai"
        and [m.id for m in before.messages[:-1]] == [m.id for m in after.messages]
        and (before.summary, before.system_prompt) == (after.summary, after.system_prompt)
    )


def _undone(runs: _Runs, since: str) -> set[str]:
    """The checkpoints the undos newer than ``since`` rewound: for each, the last turn when it
    ran and everything after it on the lineage of that time. Metadata only."""
    undone: set[str] = set()
    ordered = runs.ordered
    for position in range(len(ordered) - 1, 0, -1):
        snapshot = ordered[position]
        if snapshot.checkpoint_id < since:
            break
        if snapshot.metadata.get(ACTION_KEY) != "undo" or PRUNED_KEY in snapshot.metadata:
            continue  # (not an undo, or one whose rewound turn was removed since)
        path: list[str] = []
        for step in ancestors(runs.index, ordered[position - 1]):
            if step.checkpoint_id >= snapshot.checkpoint_id:
                break  # not among the checkpoints the undo saw
            path.append(step.checkpoint_id)
            if is_turn_start(step):
                # The undo went back to before that turn (or, for a thread's first turn,
                # emptied the thread on top of it): where it did not, the turn it rewound is
                # gone (pruned) and this one is another, on the line, kept.
                went_back_to = step.parent_id or ordered[position - 1].checkpoint_id
                if snapshot.parent_id == went_back_to:
                    undone.update(path)
                break
    return undone


def _first_holder(message_id: str | None, holder: Snapshot, runs: _Runs, state_of: StateOf) -> str:
    """The first run that held a message ``holder`` holds (the id of its first checkpoint).

    Walking back while the parent still holds it finds the parent of the checkpoints that
    brought it in (the run's own next step, or an update such as /undo applying a finished
    task's writes); the oldest run among those children is the first.
    """
    for parent in ancestors(runs.index, runs.index.get(holder.parent_id or "")):
        if not any(m.id == message_id for m in state_of(parent).messages):
            firsts = [
                runs.first_of(s)
                for s in runs.children(parent.checkpoint_id)
                if s is holder or any(m.id == message_id for m in state_of(s).messages)
            ]
            return min(first for first in firsts if first is not None)
        holder = parent
    first = runs.first_of(holder)
    assert first is not None
    return first


def _retried(runs: _Runs, window: Sequence[list[Snapshot]], state_of: StateOf) -> set[str]:
    """The runs of ``window`` (the newest runs) whose reply a /retry replaced (by first
    checkpoint). A /retry replaces only older runs' replies: it is in the window too."""
    awaiting: dict[str, list[str]] = {}  # a checkpoint where a message awaited its reply
    for run in window:
        first = run[0]
        if first.source == "input" and len(run) > 1 and _kind(first) == "turn":
            awaiting.setdefault(run[1].checkpoint_id, []).append(first.checkpoint_id)
        elif first.source == "fork" and first.parent_id:
            awaiting.setdefault(first.parent_id, []).append(first.checkpoint_id)
    retried: set[str] = set()
    for run in window:
        first = run[0]
        if first.source == "fork" and first.parent_id:
            # Resumed where earlier runs answered the same message: their replies are replaced.
            earlier = awaiting.get(first.parent_id, [])
            retried.update(other for other in earlier if other < first.checkpoint_id)
        elif first.parent_id in runs.index and _regenerates(first, runs, state_of):
            # Regenerated from the state then: the reply it removed was written by a run.
            parent = runs.index[str(first.parent_id)]
            for message in taken_out(state_of(parent), state_of(first)):
                if message.type == "ai":
                    retried.add(_first_holder(message.id, parent, runs, state_of))
    return retried


def turn_entries(history: Sequence[Snapshot], limit: int | None = None) -> list[TurnEntry]:
    """The thread's history one entry per run, side branches included, newest first: the
    newest ``limit`` entries (default: all). An entry whose state is no longer the thread's
    says why (:attr:`TurnEntry.fate`): nothing a thread ever held is hidden. Only the
    checkpoints of the entries returned (and the one before each) are read."""
    if not history or limit == 0:
        return []
    runs = _Runs(history)
    window = runs.newest(limit)
    if not window:
        return []
    current = {s.checkpoint_id for s in ancestors(runs.index, runs.ordered[-1])}
    state_of = RecentStates()
    undone = _undone(runs, window[0][0].checkpoint_id)
    retried = _retried(runs, window, state_of)
    entries = []
    for run in window:  # (oldest first: a checkpoint is read right after its parent)
        first, last = run[0], run[-1]
        kind = _kind(first)
        # The thread as it was when the run started (an undo's or a retry's parent is an
        # older checkpoint: the state it goes back to).
        position = runs.position[first.checkpoint_id]
        before = state_of(runs.ordered[position - 1]) if position else None
        states = [state_of(snapshot) for snapshot in run]
        if kind == "update" and _regenerates(first, runs, state_of):
            kind = "retry"  # (a server's /retry: see _regenerates)
        folded = 0  # the graph folds in its own steps, inside the run
        for (_, previous), (snapshot, state) in itertools.pairwise(zip(run, states, strict=True)):
            if is_fold(snapshot, previous, state):
                folded += len(taken_out(previous, state))
        known = {m.id for m in states[0].messages} if first.source != "input" else set()
        known |= {m.id for m in before.messages} if before is not None else set()
        said = [
            m
            for s in states
            for m in (*s.messages, *s.pending)
            if m.type == "human" and m.id not in known
        ]
        if not said and kind == "retry":
            said = [m for m in states[-1].messages if m.type == "human"][-1:]
        text = describe(said[0].content) if said else ""
        prompt_before = before.system_prompt if before is not None else ""
        if kind == "update" and states[-1].system_prompt != prompt_before:
            kind = "system"  # (a server's update carries no action name: told by the state)
        if kind == "system":
            text = states[-1].system_prompt
        fold_left = kind != "compact" and _fold_left(states[-1])
        fate: Fate = ""
        if last.checkpoint_id in undone:
            fate = "undone"
        elif first.checkpoint_id in retried:
            fate = "retried"
        elif last.checkpoint_id not in current:
            fate = "branch"
        entries.append(
            TurnEntry(
                kind=kind,
                checkpoint_id=last.checkpoint_id,
                first_checkpoint_id=first.checkpoint_id,
                created_at=states[0].created_at,
                text=text,
                messages_before=len(before.messages) if before is not None else 0,
                messages_after=len(states[-1].messages),
                folded=folded,
                summary_changed=states[-1].summary
                != (before.summary if before is not None else ""),
                finished=not states[-1].next or fold_left or PRUNED_KEY in last.metadata,
                fate=fate,
                origin=str(first.metadata.get(ORIGIN_KEY) or "") if kind == "fork" else "",
                fold_left=fold_left,
            )
        )
    entries.reverse()  # (newest first)
    return entries


def _fold_left(state: CheckpointState) -> bool:
    """True for a run that stopped with its reply saved and only the fold after it to run."""
    return state.next == (FOLD_NODE,) and bool(state.messages) and state.messages[-1].type == "ai"
