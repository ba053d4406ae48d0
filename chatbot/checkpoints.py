"""Checkpoints read straight from LangGraph's checkpointer, without building the graph.

Reading a thread (``history``, ``show``, ``export``, /undo, /retry, /tokens) needs no model
and no graph: a checkpoint's state is its channel values, and what was left to run is which
nodes' trigger channels changed since each node last saw them, as LangGraph's own
``get_state`` works it out (:func:`pending_nodes`; a test holds it to ``get_state`` on every
kind of checkpoint the graph writes).

A thread's history is its checkpoint index (ids, parents, metadata: plain SQL, see
:meth:`chatbot.store.Store.checkpoint_index`) with each checkpoint's state deserialised on
first use, so a command that looks at the last turn of a 2,000-turn thread reads a handful of
checkpoints, not six thousand.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.sqlite import SqliteSaver

from chatbot.store import SqlStore, thread_config
from chatbot.timeline import Snapshot, State, state_from_values

NODE_TRIGGERS: dict[str, tuple[str, ...]] = {
    "__start__": ("__start__",),
    "conversation": ("branch:to:conversation",),
    "summarize_conversation": ("branch:to:summarize_conversation",),
}
"""The graph's nodes and the channels that trigger them (``graph.nodes[name].triggers``; a
test checks this against the compiled graph)."""


class LocalSaver(SqliteSaver):
    """LangGraph's ``SqliteSaver`` that also serves ``astream``, the way ``InMemorySaver``
    does: the async methods run the sync ones. A local SQLite write takes milliseconds, and
    this keeps one connection, one lock and no extra thread (``AsyncSqliteSaver`` would add
    both)."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)


def pending_nodes(checkpoint: Checkpoint) -> tuple[str, ...]:
    """The nodes a checkpoint leaves to run, as ``StateSnapshot.next`` lists them.

    A node runs when one of its trigger channels holds a value of a newer version than the
    node has seen (LangGraph's ``_triggers``).
    """
    values = checkpoint["channel_values"]
    versions = checkpoint["channel_versions"]
    seen_by = checkpoint["versions_seen"]
    null: Any = type(next(iter(versions.values())))() if versions else ""
    pending = []
    for node, triggers in NODE_TRIGGERS.items():
        seen = seen_by.get(node)
        if any(
            channel in values
            and (seen is None or versions.get(channel, null) > seen.get(channel, null))
            for channel in triggers
        ):
            pending.append(node)
    return tuple(pending)


def state_of(saved: CheckpointTuple) -> State:
    """The state a checkpoint holds, as ``graph.get_state`` reads it."""
    checkpoint = saved.checkpoint
    return state_from_values(
        dict(checkpoint["channel_values"]), pending_nodes(checkpoint), checkpoint["ts"]
    )


def snapshot_of_tuple(saved: CheckpointTuple) -> Snapshot:
    """A checkpoint tuple as a :class:`Snapshot`, its state read now."""
    metadata: dict[str, Any] = dict(saved.metadata or {})
    parent = (saved.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    state = state_of(saved)
    return Snapshot(
        checkpoint_id=saved.config["configurable"]["checkpoint_id"],
        parent_id=parent,
        step=int(metadata.get("step", -1)),
        source=str(metadata.get("source", "")),
        messages=state.messages,
        summary=state.summary,
        next=state.next,
        created_at=state.created_at,
        metadata=metadata,
    )


def read_checkpoint(store: SqlStore, thread_id: str, checkpoint_id: str | None = None) -> Snapshot:
    """One checkpoint of a thread (default: its latest); ``LookupError`` if there is none."""
    saved = store.saver.get_tuple(thread_config(thread_id, checkpoint_id))
    if saved is None:
        raise LookupError(f"no checkpoint {checkpoint_id or ''!r} in thread {thread_id!r}")
    return snapshot_of_tuple(saved)


def lazy_history(store: SqlStore, thread_id: str) -> list[Snapshot]:
    """Every checkpoint of a thread, newest first, from the index; each one's state is read
    when first asked for."""

    def loader(checkpoint_id: str) -> Any:
        return lambda: state_of_id(store, thread_id, checkpoint_id)

    return [
        Snapshot(
            checkpoint_id=checkpoint_id,
            parent_id=parent_id,
            step=int(metadata.get("step", -1)),
            source=str(metadata.get("source", "")),
            metadata=metadata,
            load=loader(checkpoint_id),
        )
        for checkpoint_id, parent_id, metadata in store.checkpoint_index(thread_id)
    ]


def state_of_id(store: SqlStore, thread_id: str, checkpoint_id: str) -> State:
    """The state at one checkpoint of a thread (empty if it has gone since)."""
    saved = store.saver.get_tuple(thread_config(thread_id, checkpoint_id))
    return state_of(saved) if saved is not None else State()
