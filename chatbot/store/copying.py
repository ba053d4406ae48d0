"""Moving threads between databases, either way (``chatbot db copy``).

A thread is copied through LangGraph's own savers, every checkpoint oldest first with its
metadata and pending writes, then its listing row and search rows, in one transaction on the
target. Copying is idempotent and resumable: a thread the target holds part of gets the rest,
and one with a checkpoint the source does not have is refused before anything is written.
LangGraph's store (memories, thread records) comes along: every item the target lacks, in one
batch; an item the target holds is left as it is there (it may have changed since).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.store.base import BaseStore, Item, PutOp

from chatbot.errors import FriendlyError
from chatbot.plural import counted
from chatbot.store.base import SqlStore, thread_config
from chatbot.store.search import index_statements, lagging_threads


class CopyError(FriendlyError, ValueError):
    """A copy that would overwrite history; the message is one line for the user."""


@dataclass
class CopyPlan:
    """What a copy will do, thread by thread."""

    copy: dict[str, list[Any]] = field(default_factory=dict)
    """Thread id -> the checkpoint tuples to write, oldest first (none: only its listing row
    or search rows are missing)."""
    skipped: list[str] = field(default_factory=list)
    """Threads the target holds whole already."""
    store_items: list[Item] = field(default_factory=list)
    """The items of LangGraph's store the target does not hold."""

    @property
    def checkpoints(self) -> int:
        return sum(len(tuples) for tuples in self.copy.values())


def plan_copy(source: SqlStore, target: SqlStore, thread_ids: Sequence[str] = ()) -> CopyPlan:
    """Check every thread against the target and say what to write; raise
    :class:`CopyError` (writing nothing) if one exists there with a different history."""
    wanted = list(dict.fromkeys(thread_ids)) or [t.thread_id for t in source.list_threads()]
    missing = [thread for thread in wanted if not source.thread_exists(thread)]
    if missing:
        raise CopyError(  # the source is not the default database: name it in the hint
            f"no thread {missing[0]!r} in {source.path} "
            f"('chatbot threads --db {source.path}' lists the threads there)"
        )
    plan = CopyPlan()
    for thread in wanted:
        tuples = list(source.saver.list(thread_config(thread)))
        tuples.reverse()  # oldest first: a parent is written before its children
        have = (
            {row[0] for row in target.checkpoint_parents(thread)}
            if target.thread_exists(thread)
            else set()
        )
        ids = [t.config["configurable"]["checkpoint_id"] for t in tuples]
        foreign = have - set(ids)
        if foreign:
            raise CopyError(
                f"thread {thread!r} exists in {target.path} with a different history "
                f"({counted(len(foreign), 'checkpoint')} the source does "
                "not have): nothing was copied; rename or delete it there first"
            )
        written = _writes_per_checkpoint(target, thread) if have else {}
        todo = [
            t
            for t, c in zip(tuples, ids, strict=True)
            if c not in have or written.get(c, 0) < len(t.pending_writes or [])
        ]
        whole = not todo and (
            target.thread_row(thread) is not None or source.thread_row(thread) is None
        )
        if whole and not lagging_threads(target, thread):
            plan.skipped.append(thread)
        else:
            plan.copy[thread] = todo
    have_items = {(item.namespace, item.key) for item in _store_items(target.memory_store)}
    plan.store_items = [
        item
        for item in _store_items(source.memory_store)
        if (item.namespace, item.key) not in have_items
    ]
    return plan


STORE_PAGE = 1_000


def _store_items(store: BaseStore) -> list[Item]:
    """Every item in LangGraph's store, in every namespace."""
    items: list[Item] = []
    while True:
        page = store.search((), limit=STORE_PAGE, offset=len(items))
        items += page
        if len(page) < STORE_PAGE:
            return items


def _writes_per_checkpoint(store: SqlStore, thread: str) -> dict[str, int]:
    """How many pending writes the store holds for each of a thread's checkpoints."""
    rows = store.query(
        f"SELECT checkpoint_id, COUNT(*) FROM {store.writes_table} "
        "WHERE thread_id = ? GROUP BY checkpoint_id",
        (thread,),
    )
    return {row[0]: int(row[1]) for row in rows}


def run_copy(
    source: SqlStore,
    target: SqlStore,
    plan: CopyPlan,
    progress: Callable[[int], None] = lambda done: None,
) -> None:
    """Write what :func:`plan_copy` found missing; ``progress`` is told after each checkpoint."""
    if plan.store_items:
        puts = [PutOp(item.namespace, item.key, item.value) for item in plan.store_items]
        target.memory_store.batch(puts)
    for thread, tuples in plan.copy.items():
        with target.transaction() as writing:
            _copy_thread(source, writing, thread, tuples, progress)


def _copy_thread(
    source: SqlStore,
    target: SqlStore,
    thread: str,
    tuples: list[Any],
    progress: Callable[[int], None],
) -> None:
    """One thread's checkpoints with their writes, listing row and search rows."""
    saver = target.saver
    for saved in tuples:
        configurable = saved.config["configurable"]
        parent = (saved.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        at: dict[str, Any] = {
            "thread_id": thread,
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
        }
        if parent:
            at["checkpoint_id"] = parent
        checkpoint = saved.checkpoint
        written = saver.put(
            {"configurable": at},
            checkpoint,
            saved.metadata,
            dict(checkpoint["channel_versions"]),  # every channel's value is stored
        )
        by_task: dict[str, list[tuple[str, Any]]] = defaultdict(list)
        for task_id, channel, value in saved.pending_writes or []:
            by_task[task_id].append((channel, value))
        for task_id, writes in by_task.items():
            saver.put_writes(written, writes, task_id)
        progress(1)
    row = source.thread_row(thread)
    if row is not None:
        target.put_thread_row(row)
    indexed = index_statements(target, thread)
    if indexed:
        target.write(*indexed)
