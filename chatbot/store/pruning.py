"""A thread's side branches, and which are abandoned (``chatbot prune --abandoned-days``).

A thread's line of history is its newest checkpoint and that one's ancestors; the other
checkpoints are side branches (a turn /undo rewound, a reply /retry replaced, a fork's old
continuation, the loser of two turns sent at once). A branch is everything descending from a
checkpoint hanging off the line (or from none), removed whole, so the line reads as before.
Finding them is pure; :func:`abandoned_branches` and :func:`prune_branches` use a store.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chatbot.store.base import SqlStore


@dataclass(frozen=True)
class Branch:
    """One side branch of a thread's history."""

    first: str
    """Its first checkpoint (the one whose parent is on the line, or has none)."""
    parent: str | None
    """The checkpoint of the line it hangs from (``None``: it starts a history of its own)."""
    checkpoints: frozenset[str]
    """Every checkpoint of it: the first and all that descend from it."""
    newest: str
    """Its newest checkpoint (ids are time-ordered): when it was last written to."""


def line_of(parents: Sequence[tuple[str, str | None]]) -> set[str]:
    """The ids of the thread's line: its newest checkpoint and that one's ancestors.
    ``parents``: (id, parent id) of each checkpoint."""
    parent_of = dict(parents)
    line: set[str] = set()
    current = max(parent_of) if parent_of else None
    while current is not None and current not in line and current in parent_of:
        line.add(current)
        current = parent_of[current]
    return line


def side_branches(parents: Sequence[tuple[str, str | None]]) -> list[Branch]:
    """The thread's side branches, oldest first. ``parents``: (id, parent id) of each of its
    checkpoints, in any order."""
    parent_of = dict(parents)
    line = line_of(parents)
    first_of: dict[str, str] = {}

    def first(checkpoint_id: str) -> str:
        path = []
        current = checkpoint_id
        while current not in first_of:
            parent = parent_of.get(current)
            if parent is None or parent in line or parent not in parent_of:
                first_of[current] = current
                break
            path.append(current)
            current = parent
        found = first_of[current]
        first_of.update(dict.fromkeys(path, found))
        return found

    grouped: dict[str, set[str]] = {}
    for checkpoint_id in parent_of:
        if checkpoint_id not in line:
            grouped.setdefault(first(checkpoint_id), set()).add(checkpoint_id)
    return sorted(
        (
            Branch(
                first=root,
                parent=parent_of[root] if parent_of[root] in line else None,
                checkpoints=frozenset(members),
                newest=max(members),
            )
            for root, members in grouped.items()
        ),
        key=lambda branch: branch.first,
    )


def abandoned(
    branches: Iterable[Branch], cutoff: datetime, time_of: Callable[[str], datetime | None]
) -> list[Branch]:
    """The branches last written to before ``cutoff`` (one whose time cannot be read from its
    ids, not written by LangGraph, is kept)."""
    return [b for b in branches if (newest := time_of(b.newest)) is not None and newest < cutoff]


def pruning_marks(
    branches: Sequence[Branch],
    sources: Mapping[str, str],
    undos: Collection[str],
    parent_of: Mapping[str, str | None],
) -> dict[str, int]:
    """The checkpoints left whose metadata must count the checkpoints pruned after them
    (``PRUNED_KEY``): the line's checkpoint a branch hung from where the branch went on with
    its run (a ``loop`` first: the reply a /retry replaced), and an /undo back to where a
    pruned branch hung from (the turn it rewound). ``sources``: each branch's first checkpoint's
    metadata source; ``undos``: the /undo checkpoints among the children of those hung from."""
    under: dict[str, int] = {}
    marks: dict[str, int] = {}
    for branch in branches:
        if branch.parent is None:
            continue
        under[branch.parent] = under.get(branch.parent, 0) + len(branch.checkpoints)
        if sources.get(branch.first) == "loop":
            marks[branch.parent] = marks.get(branch.parent, 0) + len(branch.checkpoints)
    for undo in undos:
        parent = parent_of.get(undo)
        if parent in under:
            marks[undo] = marks.get(undo, 0) + under[parent]
    return marks


# --- a store's branches ----------------------------------------------------------------


def abandoned_branches(
    store: SqlStore, thread_id: str, days: float, now: datetime | None = None
) -> list[Branch]:
    """The thread's side branches last written to more than ``days`` ago, oldest first, but
    those holding a turn's steps after its input checkpoint (kept, or the turn's history would
    be an input checkpoint without its message)."""
    from datetime import timedelta

    from chatbot.store.base import checkpoint_time

    try:
        cutoff = (now or datetime.now(tz=UTC)) - timedelta(days=days)
    except OverflowError:  # (more days than a date can go back: nothing is that old)
        return []
    found = abandoned(side_branches(store.checkpoint_parents(thread_id)), cutoff, checkpoint_time)
    ends = {b.first for b in found} | {b.parent for b in found if b.parent is not None}
    metadata = store.checkpoint_metadata(thread_id, sorted(ends))
    return [
        branch
        for branch in found
        if not (
            metadata.get(branch.first, {}).get("source") == "loop"
            and metadata.get(str(branch.parent), {}).get("source") == "input"
        )
    ]


def prune_branches(store: SqlStore, thread_id: str, branches: Sequence[Branch]) -> int:
    """Remove side branches of a thread, checkpoints and pending writes, in one transaction,
    marking those left that history would misread; the thread's search rows are then made
    again. Take the thread's lease first. Returns the checkpoints removed."""
    from chatbot.history.snapshots import ACTION_KEY, PRUNED_KEY

    ids = sorted({checkpoint for branch in branches for checkpoint in branch.checkpoints})
    if not ids:
        return 0
    gone = set(ids)
    parent_of = dict(store.checkpoint_parents(thread_id))
    hung_from = {branch.parent for branch in branches if branch.parent is not None}
    siblings = [c for c, p in parent_of.items() if p in hung_from and c not in gone]
    metadata = store.checkpoint_metadata(
        thread_id, [*(branch.first for branch in branches), *siblings]
    )
    marks = pruning_marks(
        branches,
        sources={c: str(m.get("source", "")) for c, m in metadata.items()},
        undos={c for c in siblings if metadata.get(c, {}).get(ACTION_KEY) == "undo"},
        parent_of=parent_of,
    )
    from chatbot.store.search import index_statements, reindex

    # (a message a pruned checkpoint brought in may be on the line too, found there now)
    statements: list[tuple[str, Sequence[Any]]] = reindex(thread_id)
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        places = ", ".join("?" * len(chunk))
        for table in (store.writes_table, "checkpoints"):
            statements.append(
                (
                    f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = '' "
                    f"AND checkpoint_id IN ({places})",
                    (thread_id, *chunk),
                )
            )
    statements.extend(
        (store.mark_pruned, (PRUNED_KEY, PRUNED_KEY, count, thread_id, checkpoint_id))
        for checkpoint_id, count in marks.items()
    )
    if store.after_pruning:
        statements.append((store.after_pruning, (thread_id,)))
    store.write(*statements)
    reindexed = index_statements(store, thread_id)
    if reindexed:
        store.write(*reindexed)
    return len(ids)
