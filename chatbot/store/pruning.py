"""A thread's side branches, and which are abandoned (``chatbot prune --abandoned-days``).

A thread's line of history is its newest checkpoint and that one's ancestors: the state it
holds now and every state it went through to get there. The other checkpoints are side
branches: a turn an /undo rewound, a reply the REPL's /retry replaced (it goes back to before
the reply and answers again), the old continuation of a fork made from an earlier checkpoint,
the loser of two turns sent at once. A branch is everything that descends from a checkpoint
hanging off the line (or from none: a branch that starts a history of its own), so it is removed
whole or not at all: nothing left behind descends from what is removed, and every checkpoint of
the line reads as before (its window and summary are rebuilt from its own ancestors).

Pure: ids and parents in, branches out. :meth:`chatbot.store.sqlite.SqlStore.prune_branches`
removes them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime


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
    """The branches last written to before ``cutoff`` (a branch whose time cannot be read
    from its ids, not written by LangGraph, is kept)."""
    found = []
    for branch in branches:
        newest = time_of(branch.newest)
        if newest is not None and newest < cutoff:
            found.append(branch)
    return found


def pruning_marks(
    branches: Sequence[Branch],
    sources: Mapping[str, str],
    undos: Collection[str],
    parent_of: Mapping[str, str | None],
) -> dict[str, int]:
    """The checkpoints left whose metadata says what was pruned after them, and how many
    checkpoints (the history's ``PRUNED_KEY``): the line's checkpoint a branch hung from,
    where the branch went on with its run (a ``loop`` checkpoint first: the reply a REPL
    /retry replaced), so its run did not stop there; and an /undo that went back to where a
    pruned branch hung from (the turn it rewound), so its history does not take the turn
    before for it. ``sources``: the metadata source of each branch's first checkpoint;
    ``undos``: the /undo checkpoints among the children of the checkpoints branches hung
    from."""
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
