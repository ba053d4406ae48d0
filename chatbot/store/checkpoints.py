"""Checkpoints read straight from LangGraph's checkpointer, without building the graph.

Reading a thread (``history``, ``show``, ``export``, /undo, /retry) needs no model and no
graph: a checkpoint's state is its channel values, rebuilt through the state's own channels,
and what was left to run is worked out as LangGraph's ``get_state`` does. A thread's history
is its ids and parents (plain SQL), each checkpoint's metadata and state read on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, CheckpointTuple

from chatbot.history.snapshots import CheckpointState, Snapshot, state_from_values
from chatbot.store.base import SqlStore, thread_config
from chatbot.store.saver import replayed

NODE_TRIGGERS: dict[str, tuple[str, ...]] = {
    "__start__": ("__start__",),
    "conversation": ("branch:to:conversation",),
    "summarize_conversation": ("branch:to:summarize_conversation",),
    "recall": ("branch:to:recall",),
}
"""The graph's nodes and the channels that trigger them (``graph.nodes[name].triggers``; a
test checks this against the compiled graph)."""


def pending_nodes(checkpoint: Checkpoint) -> tuple[str, ...]:
    """The nodes a checkpoint leaves to run, as ``StateSnapshot.next`` lists them: those with
    a trigger channel holding a newer version than the node has seen."""
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


def channel_values(saver: BaseCheckpointSaver[Any], saved: CheckpointTuple) -> dict[str, Any]:
    """A checkpoint's values, as ``graph.get_state`` reads them: each delta channel not stored
    is rebuilt through the channel itself from the saver's history."""
    from chatbot.memory.channels import delta_channels

    values = dict(saved.checkpoint["channel_values"])
    versions = saved.checkpoint["channel_versions"]
    channels = delta_channels()
    for key in [key for key in channels if key in values]:
        values[key] = channels[key].from_checkpoint(values[key]).get()
    wanted = [key for key in channels if key in versions and key not in values]
    if wanted:
        histories = saver.get_delta_channel_history(config=saved.config, channels=wanted)
        for key in wanted:
            values[key] = replayed(channels[key], histories.get(key, {"writes": []}))
    return values


def state_of(saver: BaseCheckpointSaver[Any], saved: CheckpointTuple) -> CheckpointState:
    """The state a checkpoint holds, as ``graph.get_state`` reads it."""
    checkpoint = saved.checkpoint
    return state_from_values(
        channel_values(saver, saved), pending_nodes(checkpoint), checkpoint["ts"]
    )


def read_checkpoint(store: SqlStore, thread_id: str, checkpoint_id: str | None = None) -> Snapshot:
    """One checkpoint of a thread (default: its latest); ``LookupError`` if there is none."""
    saved = store.saver.get_tuple(thread_config(thread_id, checkpoint_id))
    if saved is None:
        from chatbot.threadids import quoted

        raise LookupError(
            f"no checkpoint {quoted(checkpoint_id or '')} in thread {quoted(thread_id)}"
        )
    metadata: dict[str, Any] = dict(saved.metadata or {})
    parent = (saved.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return Snapshot(
        checkpoint_id=saved.config["configurable"]["checkpoint_id"],
        parent_id=parent,
        step=int(metadata.get("step", -1)),
        source=str(metadata.get("source", "")),
        metadata=metadata,
        state=state_of(store.saver, saved),
    )


def lazy_history(store: SqlStore, thread_id: str) -> list[Snapshot]:
    """Every checkpoint of a thread, newest first, from its ids and parents; each one's
    metadata and state are read when first asked for."""
    rows = store.checkpoint_parents(thread_id)
    metadata = _metadata_reader(store, thread_id, [row[0] for row in rows])
    return [
        Snapshot(
            c, parent, load=partial(state_of_id, store, thread_id, c), meta=partial(metadata, c)
        )
        for c, parent in rows
    ]


def _metadata_reader(
    store: SqlStore, thread_id: str, ids: list[str]
) -> Callable[[str], dict[str, Any]]:
    """A thread's checkpoint metadata (``ids`` newest first), read as asked for, a block of
    neighbours at a time (mostly older ones: commands read from the newest back)."""
    position = {checkpoint_id: number for number, checkpoint_id in enumerate(ids)}
    read: dict[str, dict[str, Any]] = {}

    def metadata(checkpoint_id: str) -> dict[str, Any]:
        if checkpoint_id in read:
            return read[checkpoint_id]
        here = position.get(checkpoint_id, 0)
        block = [other for other in ids[max(0, here - 16) : here + 48] if other not in read]
        if checkpoint_id not in block:
            block.append(checkpoint_id)
        read.update(store.checkpoint_metadata(thread_id, block))
        return read.setdefault(checkpoint_id, {})

    return metadata


def state_of_id(store: SqlStore, thread_id: str, checkpoint_id: str) -> CheckpointState:
    """The state at one checkpoint of a thread (empty if it has gone since)."""
    saved = store.saver.get_tuple(thread_config(thread_id, checkpoint_id))
    return state_of(store.saver, saved) if saved is not None else CheckpointState()
