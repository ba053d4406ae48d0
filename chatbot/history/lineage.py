"""Walking a thread's checkpoints by their ids and parents: the lineage, a checkpoint found by
id, where the latest turn started (for /undo and /retry).

A thread's history can branch: /undo, /retry and two turns at once leave checkpoints off the
**lineage** (the checkpoints that led to the newest one, following parents), on side
branches. Following ids and parents reads no state.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import NamedTuple

from chatbot.history.snapshots import ACTION_KEY, CheckpointState, Snapshot


def by_id(history: Sequence[Snapshot]) -> dict[str, Snapshot]:
    """Index a history by checkpoint id."""
    return {snapshot.checkpoint_id: snapshot for snapshot in history}


def ancestors(index: Mapping[str, Snapshot], head: Snapshot | None) -> Iterator[Snapshot]:
    """``head`` and its ancestors, newest first, as far as the index has them."""
    current = head
    while current is not None:
        yield current
        current = index.get(current.parent_id) if current.parent_id else None


def newest(history: Sequence[Snapshot]) -> Snapshot:
    """The newest checkpoint of a history (checkpoint ids grow with time)."""
    return max(history, key=lambda s: s.checkpoint_id)


def lineage(history: Sequence[Snapshot], head: Snapshot | None = None) -> list[Snapshot]:
    """The checkpoints that led to ``head`` (default: the newest), oldest first, following
    parents: side branches are skipped, and no state is read."""
    if not history:
        return []
    return list(reversed(list(ancestors(by_id(history), head or newest(history)))))


class RecentStates:
    """The states one pass reads: each read once while it is among the last few used, and
    none kept on its snapshot, so a pass over thousands of checkpoints holds a handful."""

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._recent: OrderedDict[str, CheckpointState] = OrderedDict()

    def __call__(self, snapshot: Snapshot) -> CheckpointState:
        if snapshot.loaded:
            return snapshot.state
        key = snapshot.checkpoint_id
        state = self._recent.get(key)
        if state is None:
            state = snapshot.peek()
            self._recent[key] = state
            if len(self._recent) > self._size:
                self._recent.popitem(last=False)
        else:
            self._recent.move_to_end(key)
        return state


StateOf = Callable[[Snapshot], CheckpointState]
"""How a pass reads a checkpoint's state (a :class:`RecentStates`, or the snapshot's own)."""


def is_turn_start(snapshot: Snapshot) -> bool:
    """A turn's ``input`` checkpoint (a compaction's run is not a turn)."""
    return snapshot.source == "input" and snapshot.metadata.get(ACTION_KEY) != "compact"


class TurnPoints(NamedTuple):
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
    """The latest turn's start, walking back from ``head`` to its ``input`` checkpoint (an
    undo's parent is the state it restored: repeated /undo keeps rewinding); ``None`` when
    there is no turn."""
    if not history:
        return None
    index = by_id(history)
    path: list[Snapshot] = []  # from head back to the input checkpoint
    for snapshot in ancestors(index, head or newest(history)):
        if is_turn_start(snapshot):
            after = path[-1] if path else None
            if after is not None and not after.next:
                after = None  # the input checkpoint is the run's last: nothing to resume from
            before = index.get(snapshot.parent_id) if snapshot.parent_id else None
            compacted = any(s.metadata.get(ACTION_KEY) == "compact" for s in [snapshot, *path])
            return TurnPoints(before=before, after_input=after, compacted=compacted, input=snapshot)
        path.append(snapshot)
    return None


def find_checkpoint(history: Sequence[Snapshot], fragment: str) -> Snapshot:
    """The checkpoint whose id equals, starts with or ends with ``fragment`` (unique); else a
    ``LookupError`` in one line."""
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
    from chatbot.threadids import quoted

    if not matches:
        raise LookupError(
            f"no checkpoint {quoted(fragment)} in this thread (its history lists them)"
        )
    if len(matches) > 1:
        raise LookupError(
            f"{quoted(fragment)} matches {len(matches)} checkpoints: give more of the id"
        )
    return matches[0]


def short_id(checkpoint_id: str) -> str:
    """The part of a checkpoint id people type: its last 8 characters (unique in practice)."""
    return checkpoint_id[-8:]
