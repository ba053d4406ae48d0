"""The state of a checkpoint that does not store all of it.

The graph's ``messages`` and ``summary`` are LangGraph ``DeltaChannel``s
(:mod:`chatbot.memory.state`): a checkpoint stores them only every so often (a snapshot), and
the checkpoints between hold the writes that changed them. LangGraph rebuilds them when it
loads a checkpoint to run; chatbot's own readers (``history``, ``show``, export, /undo, the
search index) read checkpoints without the graph, and rebuild them here the same way: the
nearest stored value, then the writes since, through the channel's reducer.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
    writes_sort_key,
)
from langgraph.checkpoint.serde.types import _DeltaSnapshot


class Spec:
    """A delta channel as a reader needs it: its key, reducer and the type of its value."""

    def __init__(self, key: str, reducer: Any, typ: type, snapshot_frequency: int) -> None:
        self.key, self.reducer, self.typ = key, reducer, typ
        self.snapshot_frequency = snapshot_frequency

    def ValueType(self) -> Any:
        return self.typ()


def delta_channels() -> Mapping[str, Spec]:
    """The state's keys that are delta channels (:data:`chatbot.memory.channels.REDUCERS`)."""
    global _SPECS
    if _SPECS is None:
        from chatbot.memory.channels import REDUCERS, SNAPSHOT_EVERY

        _SPECS = {
            key: Spec(key, reducer, typ, SNAPSHOT_EVERY[key])
            for key, (reducer, typ) in REDUCERS.items()
        }
    return _SPECS


_SPECS: dict[str, Spec] | None = None


def missing(checkpoint: Checkpoint) -> list[str]:
    """The delta channels a checkpoint has written but does not store."""
    values = checkpoint["channel_values"]
    versions = checkpoint["channel_versions"]
    return [key for key in delta_channels() if key in versions and key not in values]


def unwrapped(value: Any) -> Any:
    """A stored value as the state holds it (a snapshot is stored wrapped)."""
    return value.value if isinstance(value, _DeltaSnapshot) else value


def complete(saver: BaseCheckpointSaver[Any], saved: CheckpointTuple) -> CheckpointTuple:
    """``saved`` with every state key's value in its ``channel_values``, as LangGraph's
    ``get_state`` would read them (the checkpoint itself is not changed)."""
    checkpoint = saved.checkpoint
    values = checkpoint["channel_values"]
    wanted = missing(checkpoint)
    snapshots = [key for key, value in values.items() if isinstance(value, _DeltaSnapshot)]
    if not wanted and not snapshots:
        return saved
    filled = {key: unwrapped(value) for key, value in values.items()}
    replayed = getattr(saver, "replayed", None)
    if wanted and replayed is not None:  # (chatbot's SQLite saver: kept as it reads)
        parent = (saved.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        asked = {key: delta_channels()[key] for key in wanted}
        filled.update(replayed(saved.config, asked, parent))
    if replayed is not None:  # (its children's values, if asked for next: these and its writes)
        ours = {key: filled[key] for key in delta_channels() if key in filled}
        saver.before_writes(saved.config, ours, saved.pending_writes or [])  # type: ignore[attr-defined]
    elif wanted:
        histories = saver.get_delta_channel_history(config=saved.config, channels=wanted)
        specs = delta_channels()
        for key in wanted:
            history = histories.get(key, {"writes": []})
            spec = specs[key]
            seed = unwrapped(history["seed"]) if "seed" in history else spec.ValueType()
            filled[key] = replay(spec, seed, [value for _, _, value in history["writes"]])
    return saved._replace(checkpoint={**checkpoint, "channel_values": filled})


_NONE = object()
_TAKEN = "\0taken"
"""The key under which the kept writes of a checkpoint note every task slot (task id, index)
written there, of any channel."""
_AHEAD = "\0ahead"
"""The key under which a checkpoint's values and pending writes are kept (:meth:`before_writes`)."""
_LOCK = threading.Lock()


def replay(spec: Spec, value: Any, writes: list[Any]) -> Any:
    """``value`` with ``writes`` applied through the channel's reducer, as LangGraph's
    ``DeltaChannel.replay_writes`` applies them: the last ``Overwrite`` among them (the typed
    one, or its dict forms) starts again from its value."""
    if not writes:
        return value
    start = 0
    for number, write in enumerate(writes):
        overwritten, new = _overwrite(write)
        if overwritten:
            value = new if new is not None else spec.ValueType()
            start = number + 1
    rest = writes[start:]
    return spec.reducer(value, rest) if rest else value


def _overwrite(value: Any) -> tuple[bool, Any]:
    """LangGraph's ``_get_overwrite``, without importing its channels."""
    if type(value).__name__ == "Overwrite" and hasattr(value, "value"):
        return True, value.value
    if isinstance(value, dict):
        if set(value) == {"__overwrite__"}:
            return True, value["__overwrite__"]
        if set(value) == {"value", "type"} and value.get("type") == "__overwrite__":
            return True, value["value"]
    return False, None


class KeepsDeltaValues(BaseCheckpointSaver[Any]):
    """A saver that keeps, for the checkpoints it has just written or read, the values of the
    delta channels (a few thousand at most), so that LangGraph loading the checkpoint a turn
    starts from finds them at once: the state is not rebuilt from the writes at every turn.

    As a checkpoint is written, its values are its parent's with the parent's writes applied
    (the writes this process just made, else read back). Asked for a channel's history
    (``get_delta_channel_history``), the saver answers with the value itself as the seed and
    no writes, which rebuilds the same state (a test holds every checkpoint of every kind to
    what LangGraph's own ``SqliteSaver`` rebuilds)."""

    def _delta_cache(self) -> OrderedDict[tuple[str, str, str, str], Any]:
        return self.__dict__.setdefault("_delta_values", OrderedDict())

    def _delta_stash(self) -> OrderedDict[tuple[str, str, str], dict[Any, Any]]:
        return self.__dict__.setdefault("_delta_writes", OrderedDict())

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        super().put_writes(config, writes, task_id, task_path)
        specs = delta_channels()
        configurable = config["configurable"]
        key = (
            str(configurable["thread_id"]),
            str(configurable.get("checkpoint_ns", "")),
            str(configurable["checkpoint_id"]),
        )
        with _LOCK:
            stash = self._delta_stash()
            found = stash.setdefault(key, {})
            taken = found.setdefault(_TAKEN, set())
            for idx, (channel, value) in enumerate(writes):
                # (as the table keeps them: the first write to a task's slot stays, whatever
                # its channel: LangGraph's savers ignore a second one)
                slot = (task_id, WRITES_IDX_MAP.get(channel, idx))
                if channel in specs and slot not in taken:
                    found[(task_id, idx, channel)] = (task_path, value)
                taken.add(slot)
            while len(stash) > 256:  # (writes no checkpoint followed: a run that failed)
                evicted, _ = stash.popitem(last=False)  # (its writes are no longer all here)
                gone = self._delta_evicted()
                gone[evicted] = None
                while len(gone) > 256:
                    gone.popitem(last=False)

    def delete_thread(self, thread_id: str) -> None:
        super().delete_thread(thread_id)
        self._forget_thread(str(thread_id))

    def _forget_thread(self, thread_id: str) -> None:
        """Drop the writes and records kept for a thread (deleted through the saver)."""
        with _LOCK:
            for kept in (self._delta_stash(), self._delta_alone()):
                for key in [key for key in kept if key[0] == thread_id]:
                    del kept[key]

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        version = self._database_version()  # (before: a write just after ours changes it)
        written = super().put(config, checkpoint, metadata, new_versions)
        configurable = config["configurable"]
        thread = str(configurable["thread_id"])
        namespace = str(configurable.get("checkpoint_ns", ""))
        parent = configurable.get("checkpoint_id")
        with _LOCK:
            pending = self._delta_stash().pop((thread, namespace, str(parent)), {})
            alone = self._delta_alone().pop((thread, namespace, str(parent)), None)
            if (thread, namespace, str(parent)) in self._delta_evicted():
                alone = None  # (some of its writes were kept, then dropped)
        cache = self._delta_cache()
        values = checkpoint["channel_values"]
        known: dict[str, Any] = {}
        bases: dict[str, Any] = {}
        for channel in delta_channels():
            if channel not in checkpoint["channel_versions"]:
                continue
            if channel in values:
                known[channel] = unwrapped(values[channel])
            elif parent:
                base = cache.get((thread, namespace, str(parent), channel), _NONE)
                if base is not _NONE:
                    bases[channel] = base
        if bases:
            rows: list[tuple[str, Any]] | None
            if alone is not None and alone == self._database_version():
                rows = _in_order(pending, list(bases))  # (all its writes are this saver's)
            else:
                rows = self._delta_writes_at(thread, namespace, str(parent), list(bases), pending)
            if rows is not None:
                specs = delta_channels()
                for channel, base in bases.items():
                    writes = [value for ch, value in rows if ch == channel]
                    known[channel] = replay(specs[channel], base, writes)
        self._keep(thread, namespace, str(checkpoint["id"]), known)
        if version is not None:
            with _LOCK:
                wrote = self._delta_alone()
                wrote[(thread, namespace, str(checkpoint["id"]))] = version
                while len(wrote) > 256:
                    wrote.popitem(last=False)
        return written

    def _delta_evicted(self) -> OrderedDict[tuple[str, str, str], None]:
        """The checkpoints whose kept writes were dropped to bound the memory they take."""
        return self.__dict__.setdefault("_delta_dropped", OrderedDict())

    def _delta_alone(self) -> OrderedDict[tuple[str, str, str], Any]:
        """The checkpoints this saver wrote, with :meth:`_database_version` just before."""
        return self.__dict__.setdefault("_delta_written", OrderedDict())

    def _database_version(self) -> Any:
        """A value that changes when anything but this saver writes to the database
        (``None`` where the saver cannot tell). While it is the same as just before this saver
        wrote a checkpoint, the checkpoint's writes are exactly those :meth:`put_writes` kept,
        and its first child's values are made from them without reading them back."""
        return None

    def _keep(
        self, thread: str, namespace: str, checkpoint_id: str, values: dict[str, Any]
    ) -> None:
        cache = self._delta_cache()
        with _LOCK:
            for channel, value in values.items():
                cache[(thread, namespace, checkpoint_id, channel)] = value
            while len(cache) > 4096:
                cache.popitem(last=False)

    def _delta_writes_at(
        self,
        thread: str,
        namespace: str,
        checkpoint_id: str,
        channels: list[str],
        pending: dict[Any, Any],
    ) -> list[tuple[str, Any]] | None:
        """The writes to ``channels`` stored at a checkpoint, in the order LangGraph applies
        them: those this process made (``pending``) as they are, the others decoded.
        ``None`` if this saver cannot say."""
        rows = self._delta_write_rows(thread, namespace, checkpoint_id, channels)
        if rows is None:
            return None
        found = []
        for task_id, idx, channel, path, kind, data in rows:
            mine = pending.get((task_id, idx, channel))
            value = mine[1] if mine is not None else self.serde.loads_typed((kind, bytes(data)))
            found.append((writes_sort_key(path or "", task_id, idx), channel, value))
        found.sort(key=lambda row: row[0])
        return [(channel, value) for _, channel, value in found]

    def _delta_write_rows(
        self, thread: str, namespace: str, checkpoint_id: str, channels: list[str]
    ) -> list[tuple[Any, ...]] | None:
        """(task id, idx, channel, task path, type, value) of the writes to ``channels`` at a
        checkpoint; ``None`` where the saver does not know its tables."""
        return None

    def _delta_write_count(
        self, thread: str, namespace: str, checkpoint_id: str, channels: list[str]
    ) -> int | None:
        """How many writes to ``channels`` a checkpoint has (``None``: the saver cannot say)."""
        rows = self._delta_write_rows(thread, namespace, checkpoint_id, channels)
        return None if rows is None else len(rows)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        specs = delta_channels()
        if not channels or any(channel not in specs for channel in channels):
            return super().get_delta_channel_history(config=config, channels=channels)
        if not get_checkpoint_id(config):
            saved = self.get_tuple(config)
            if saved is None:
                return {channel: {"writes": []} for channel in channels}
            config = saved.config
        values = self.replayed(config, {channel: specs[channel] for channel in channels})
        return {
            channel: {"seed": _copied(value), "writes": []} for channel, value in values.items()
        }

    def replayed(
        self, config: RunnableConfig, specs: Mapping[str, Any], parent: str | None = None
    ) -> dict[str, Any]:
        """The values of the delta channels ``specs`` names at the checkpoint ``config``
        names: kept ones; else, if its ``parent``'s are kept, those with the parent's writes
        applied (a history read oldest first); else rebuilt (:meth:`_rebuild`). All kept."""
        configurable = config["configurable"]
        key = (str(configurable["thread_id"]), str(configurable.get("checkpoint_ns", "")))
        target = str(get_checkpoint_id(config))
        cache = self._delta_cache()
        known = {channel: cache.get((*key, target, channel), _NONE) for channel in specs}
        wanted = {channel: specs[channel] for channel, value in known.items() if value is _NONE}
        if wanted and parent:
            ahead = cache.get((*key, parent, _AHEAD), _NONE)
            if (
                ahead is not _NONE
                and all(channel in ahead[0] for channel in wanted)
                and self._delta_write_count(*key, parent, list(wanted))
                == sum(1 for _, c, _ in ahead[1] if c in wanted)
            ):  # (the same writes as when they were read: none added since by another process)
                values, writes = ahead
                found = {
                    channel: replay(
                        spec, values[channel], [v for _, c, v in writes if c == channel]
                    )
                    for channel, spec in wanted.items()
                }
                self._keep(*key, target, found)
                known.update(found)
                wanted = {}
        if wanted and parent:
            bases = {channel: cache.get((*key, parent, channel), _NONE) for channel in wanted}
            if all(base is not _NONE for base in bases.values()):
                rows = self._delta_writes_at(*key, parent, list(wanted), {})
                if rows is not None:
                    found = {
                        channel: replay(spec, bases[channel], [v for c, v in rows if c == channel])
                        for channel, spec in wanted.items()
                    }
                    self._keep(*key, target, found)
                    known.update(found)
                    wanted = {}
        if wanted:
            known.update(self._rebuild(config, wanted))
        return known

    def before_writes(
        self, config: RunnableConfig, values: dict[str, Any], writes: Sequence[Any]
    ) -> None:
        """Keep a checkpoint's values with its pending writes (as ``get_tuple`` read them), so
        that a child read next is its values with these applied: nothing to read again."""
        configurable = config["configurable"]
        key = (str(configurable["thread_id"]), str(configurable.get("checkpoint_ns", "")))
        target = str(get_checkpoint_id(config))
        with _LOCK:
            cache = self._delta_cache()
            cache[(*key, target, _AHEAD)] = (values, list(writes))

    def _rebuild(self, config: RunnableConfig, specs: Mapping[str, Any]) -> dict[str, Any]:
        """The values at ``config``'s checkpoint rebuilt from LangGraph's history of them."""
        histories = super().get_delta_channel_history(config=config, channels=list(specs))
        values = {}
        for channel, spec in specs.items():
            history = histories.get(channel, {"writes": []})
            seed = unwrapped(history["seed"]) if "seed" in history else spec.ValueType()
            values[channel] = replay(spec, seed, [value for _, _, value in history["writes"]])
        configurable = config["configurable"]
        self._keep(
            str(configurable["thread_id"]),
            str(configurable.get("checkpoint_ns", "")),
            str(get_checkpoint_id(config)),
            values,
        )
        return values


def _in_order(pending: dict[Any, Any], channels: list[str]) -> list[tuple[str, Any]]:
    """The writes to ``channels`` :meth:`KeepsDeltaValues.put_writes` kept for a checkpoint,
    in the order LangGraph applies them (as :meth:`KeepsDeltaValues._delta_writes_at` gives
    those it reads)."""
    found = [
        (writes_sort_key(kept[0] or "", key[0], key[1]), key[2], kept[1])
        for key, kept in pending.items()
        if key != _TAKEN and key[2] in channels
    ]
    found.sort(key=lambda row: row[0])
    return [(channel, value) for _, channel, value in found]


def _copied(value: Any) -> Any:
    """A kept value as a seed: a list of its own (the run's channel must not share it)."""
    return list(value) if isinstance(value, list) else value
