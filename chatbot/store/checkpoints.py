"""Checkpoints read straight from LangGraph's checkpointer, without building the graph.

Reading a thread (``history``, ``show``, ``export``, /undo, /retry) needs no model and no
graph: a checkpoint's state is its channel values, rebuilt through the state's own channels,
and what was left to run is worked out as LangGraph's ``get_state`` does
(:func:`pending_nodes`). A thread's history is its ids and parents (plain SQL), each
checkpoint's metadata and state read on first use.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, CheckpointTuple

from chatbot.history.snapshots import CheckpointState, Snapshot, state_from_values
from chatbot.store.base import SqlStore, thread_config

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


class Passing:
    """The delta channels' values at the last checkpoints a pass over a thread's history read,
    with their pending writes: a child read next is its parent's values with those applied,
    not rebuilt from the nearest snapshot (an export reads its line oldest first)."""

    def __init__(self, size: int = 8) -> None:
        self._size = size
        self._recent: OrderedDict[str, tuple[dict[str, Any], list[Any]]] = OrderedDict()

    def get(self, checkpoint_id: str | None) -> tuple[dict[str, Any], list[Any]] | None:
        return self._recent.get(checkpoint_id) if checkpoint_id else None

    def keep(self, checkpoint_id: str, values: dict[str, Any], writes: list[Any]) -> None:
        self._recent[checkpoint_id] = (values, writes)
        while len(self._recent) > self._size:
            self._recent.popitem(last=False)


def channel_values(
    saver: BaseCheckpointSaver[Any], saved: CheckpointTuple, passing: Passing | None = None
) -> dict[str, Any]:
    """A checkpoint's values, as ``graph.get_state`` reads them: each delta channel not stored
    is rebuilt through the channel itself, from the parent's values and writes where
    ``passing`` has them, else from the saver's history (the nearest snapshot and the writes
    since)."""
    from chatbot.memory.channels import delta_channels

    values = dict(saved.checkpoint["channel_values"])
    versions = saved.checkpoint["channel_versions"]
    channels = delta_channels()
    stored = {key: channel for key, channel in channels.items() if key in values}
    for key, channel in stored.items():
        values[key] = channel.from_checkpoint(values[key]).get()
    wanted = [key for key in channels if key in versions and key not in values]
    parent_id = (saved.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    before = passing.get(parent_id) if passing is not None else None
    if wanted and before is not None and all(key in before[0] for key in wanted):
        parent_values, parent_writes = before
        for key in wanted:
            channel = channels[key].from_checkpoint(parent_values[key])
            channel.replay_writes([write for write in parent_writes if write[1] == key])
            values[key] = channel.get()
    elif wanted:
        histories = saver.get_delta_channel_history(config=saved.config, channels=wanted)
        for key in wanted:
            history = histories.get(key, {"writes": []})
            channel = channels[key]
            seed = history["seed"] if "seed" in history else channel.ValueType()
            channel = channel.from_checkpoint(seed)
            channel.replay_writes(history["writes"])
            values[key] = channel.get()
    if passing is not None:
        passing.keep(
            saved.config["configurable"]["checkpoint_id"],
            {key: values[key] for key in channels if key in values},
            [write for write in saved.pending_writes or () if write[1] in channels],
        )
    return values


def state_of(
    saver: BaseCheckpointSaver[Any], saved: CheckpointTuple, passing: Passing | None = None
) -> CheckpointState:
    """The state a checkpoint holds, as ``graph.get_state`` reads it."""
    checkpoint = saved.checkpoint
    return state_from_values(
        channel_values(saver, saved, passing), pending_nodes(checkpoint), checkpoint["ts"]
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
    metadata = _MetadataReader(store, thread_id, [row[0] for row in rows])
    passing = Passing()

    def loader(checkpoint_id: str) -> Any:
        return lambda: state_of_id(store, thread_id, checkpoint_id, passing)

    def meta(checkpoint_id: str) -> Any:
        return lambda: metadata(checkpoint_id)

    return [
        Snapshot(checkpoint_id, parent_id, load=loader(checkpoint_id), meta=meta(checkpoint_id))
        for checkpoint_id, parent_id in rows
    ]


class _MetadataReader:
    """A thread's checkpoint metadata, read as it is asked for, a block of neighbours at a
    time (mostly older ones: commands read from the newest back), as reading it all reads
    through every checkpoint's pages."""

    NEWER, OLDER = 16, 48

    def __init__(self, store: SqlStore, thread_id: str, ids: list[str]) -> None:
        self.store = store
        self.thread_id = thread_id
        self.ids = ids  # newest first
        self.position = {checkpoint_id: number for number, checkpoint_id in enumerate(ids)}
        self.read: dict[str, dict[str, Any]] = {}

    def __call__(self, checkpoint_id: str) -> dict[str, Any]:
        found = self.read.get(checkpoint_id)
        if found is not None:
            return found
        here = self.position.get(checkpoint_id, 0)
        block = [
            other
            for other in self.ids[max(0, here - self.NEWER) : here + self.OLDER]
            if other not in self.read
        ]
        if checkpoint_id not in block:
            block.append(checkpoint_id)
        self.read.update(self.store.checkpoint_metadata(self.thread_id, block))
        return self.read.setdefault(checkpoint_id, {})


def state_of_id(
    store: SqlStore, thread_id: str, checkpoint_id: str, passing: Passing | None = None
) -> CheckpointState:
    """The state at one checkpoint of a thread (empty if it has gone since)."""
    saved = store.saver.get_tuple(thread_config(thread_id, checkpoint_id))
    return state_of(store.saver, saved, passing) if saved is not None else CheckpointState()
