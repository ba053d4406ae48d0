"""LangGraph's stock ``SqliteSaver`` and ``PostgresSaver`` with a compressing serializer
(:class:`ZstdSerializer`), serving the graph's ``astream`` too, and remembering what they read
and wrote of a thread's newest checkpoints (:class:`Recent`): a turn that starts where the last
one ended replays no history from the database.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
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
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from chatbot.interrupts import decoding
from chatbot.memory.channels import delta_channels
from chatbot.store.base import without_nul
from chatbot.store.errors import reporting_damage

SUFFIX = "+zstd"
"""A compressed value's type ends with it (``msgpack+zstd``)."""
LEVEL = 3
SMALLEST = 64
"""Values this many bytes or fewer are stored as they are: zstd's frame would eat the gain."""

_CODECS = threading.local()
"""Each thread's zstd compressor and decompressor (zstd's are not safe to share)."""


class ZstdSerializer(SerializerProtocol):
    """LangGraph's serializer with zstd over each value it writes; a value without the suffix
    is read as it is. ``writing`` False writes as LangGraph's own (a database shared with
    another LangGraph program)."""

    def __init__(self, *, writing: bool = True) -> None:
        self.serde = JsonPlusSerializer()
        self.writing = writing

    @staticmethod
    def _codec() -> Any:
        codec = getattr(_CODECS, "codec", None)
        if codec is None:
            import zstandard

            codec = _CODECS.codec = (
                zstandard.ZstdCompressor(level=LEVEL),
                zstandard.ZstdDecompressor(),
            )
        return codec

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        kind, data = self.serde.dumps_typed(obj)
        if not self.writing or len(data) <= SMALLEST:
            return kind, data
        packed = self._codec()[0].compress(data)
        return (kind + SUFFIX, packed) if len(packed) < len(data) else (kind, data)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, value = data
        if kind and kind.endswith(SUFFIX):
            kind = kind[: -len(SUFFIX)]
            value = self._codec()[1].decompress(bytes(value))
        return self.serde.loads_typed((kind, value))


def replayed(channel: Any, history: DeltaChannelHistory) -> Any:
    """A delta channel's value from its history (the nearest stored value and the writes
    since), through the channel itself, as LangGraph rebuilds it."""
    seed = history["seed"] if "seed" in history else channel.ValueType()
    channel = channel.from_checkpoint(seed)
    channel.replay_writes(history["writes"])
    return channel.get()


def _own(value: Any) -> Any:
    """A shallow copy (of a list, of each item): what a saver remembers is kept apart from what
    the run and its callers hold, which they may change."""
    return [copy.copy(item) for item in value] if isinstance(value, list) else copy.copy(value)


def _ids(config: RunnableConfig) -> tuple[tuple[str, str], str | None]:
    configurable = config["configurable"]
    thread = (str(configurable["thread_id"]), str(configurable.get("checkpoint_ns", "")))
    return thread, configurable.get("checkpoint_id")


@dataclass
class _Known:
    """What a saver knows of one checkpoint."""

    parent: str | None
    rows: list[tuple[str, str, int, str, Any]] | None = field(default_factory=list)
    """Its writes to the delta channels in replay order, as (task path, task id, index,
    channel, value); None when not known whole."""
    keys: set[tuple[str, int]] | None = field(default_factory=set)
    """The (task id, index) of each of its writes; None when they were read (a read gives
    none, so a write of this saver's cannot be placed among them)."""
    values: dict[str, Any] = field(default_factory=dict)
    """The delta channels' values at it, where known."""


@dataclass
class _Thread:
    mark: object
    """What :meth:`ServesAsync.mark` said when the thread was last checked."""
    known: OrderedDict[str, _Known] = field(default_factory=OrderedDict)
    head: str | None = None
    """The checkpoint this saver last wrote, or read as the thread's newest."""


class Recent:
    """What a saver read and wrote of recent threads' newest checkpoints: each one's parent, its
    writes to the delta channels and their values at it. A child's values are its parent's with
    the parent's writes replayed, so reading a checkpoint just written replays one step's
    writes, not every write since the nearest stored value. A thread is forgotten when its
    mark moves (another connection wrote it) or a write lands anywhere but its head."""

    THREADS, CHECKPOINTS = 8, 32

    def __init__(self) -> None:
        self._threads: OrderedDict[tuple[str, str], _Thread] = OrderedDict()
        self._lock = threading.RLock()

    def forget(self) -> None:
        with self._lock:
            self._threads.clear()

    def check(self, thread: tuple[str, str], mark: object) -> None:
        """Forget the thread if ``mark`` is not the one it was known at."""
        with self._lock:
            if thread not in self._threads or self._threads[thread].mark != mark:
                self._threads[thread] = _Thread(mark)
                while len(self._threads) > self.THREADS:
                    self._threads.popitem(last=False)
            self._threads.move_to_end(thread)

    def _known(self, thread: tuple[str, str]) -> OrderedDict[str, _Known]:
        """The thread's checkpoints known (an empty one, kept nowhere, if it is not checked)."""
        entry = self._threads.get(thread)
        return entry.known if entry is not None else OrderedDict()

    def _add(
        self, thread: tuple[str, str], checkpoint_id: str, known: _Known, head: bool = False
    ) -> None:
        entry = self._threads.get(thread)
        if entry is not None:
            entry.known[checkpoint_id] = known
            entry.known.move_to_end(checkpoint_id)
            while len(entry.known) > self.CHECKPOINTS:
                entry.known.popitem(last=False)
            if head:
                entry.head = checkpoint_id

    @staticmethod
    def _stored(checkpoint: Checkpoint) -> dict[str, Any]:
        channels = delta_channels()
        values = checkpoint["channel_values"]
        return {
            k: _own(channels[k].from_checkpoint(values[k]).get()) for k in channels if k in values
        }

    def read(self, saved: CheckpointTuple, newest: bool) -> None:
        """A checkpoint read whole (``newest``: as the thread's newest)."""
        thread, checkpoint_id = _ids(saved.config)
        parent = (saved.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        pending = saved.pending_writes or []
        channels = delta_channels()
        rows = [
            ("", task, -1, name, _own(value)) for task, name, value in pending if name in channels
        ]
        known = _Known(parent, rows, None if pending else set(), self._stored(saved.checkpoint))
        with self._lock:
            before = self._known(thread).get(str(checkpoint_id))
            if before is not None and before.rows is not None and len(before.rows) == len(rows):
                known.values = {**before.values, **known.values}
            elif before is not None:  # (writes came since: values made without them are stale)
                self._known(thread).clear()
            self._add(thread, str(checkpoint_id), known, head=newest)

    def wrote(
        self, config: RunnableConfig, checkpoint: Checkpoint, marked: Callable[[object], object]
    ) -> None:
        """A new checkpoint written under the parent ``config`` names; ``marked`` gives the
        thread's mark after it."""
        thread, parent = _ids(config)
        with self._lock:
            entry = self._threads.get(thread)
            if entry is not None:
                entry.mark = marked(entry.mark)
            known = _Known(parent, values=self._stored(checkpoint))
            self._add(thread, checkpoint["id"], known, head=True)

    def wrote_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        path: str,
        marked: Callable[[object], object],
    ) -> None:
        """Writes stored at a checkpoint (as the savers do, leaving out one whose (task id,
        index) is taken); ``marked`` gives the thread's mark after them."""
        thread, checkpoint_id = _ids(config)
        channels = delta_channels()
        with self._lock:
            entry = self._threads.get(thread)
            if entry is not None:
                entry.mark = marked(entry.mark)
            if all(channel in WRITES_IDX_MAP for channel, _ in writes):
                return  # (errors, interrupts: not the delta channels', in places of their own)
            known = entry.known.get(str(checkpoint_id)) if entry is not None else None
            if entry is None or known is None or known.rows is None or known.keys is None:
                if entry is not None:
                    entry.known.clear()
                return
            for index, (channel, value) in enumerate(writes):
                key = (task_id, WRITES_IDX_MAP.get(channel, index))
                if key not in known.keys:
                    known.keys.add(key)
                    if channel in channels:
                        known.rows.append((path, task_id, key[1], channel, _own(value)))
                        if checkpoint_id != entry.head:
                            entry.known.clear()
                            return
            known.rows.sort(key=lambda row: writes_sort_key(*row[:3]))

    def value(self, thread: tuple[str, str], checkpoint_id: str, channel: str) -> Any:
        """The channel's value at a checkpoint, from what is known (``KeyError``: not known)."""
        checkpoints = self._known(thread)
        path = []
        at = checkpoint_id
        while channel not in checkpoints[at].values:
            path.append(at)
            parent = checkpoints[at].parent
            if parent is None or checkpoints[parent].rows is None or len(path) > self.CHECKPOINTS:
                raise KeyError(at)
            at = parent
        value = checkpoints[at].values[channel]
        for child in reversed(path):
            rows = checkpoints[str(checkpoints[child].parent)].rows or []
            writes = [(row[1], row[3], row[4]) for row in rows if row[3] == channel]
            value = replayed(delta_channels()[channel], {"seed": value, "writes": writes})
            checkpoints[child].values[channel] = value
        return value

    def history(
        self,
        config: RunnableConfig,
        channels: Sequence[str],
        read: Mapping[str, DeltaChannelHistory] | None = None,
    ) -> dict[str, DeltaChannelHistory] | None:
        """The channels' histories at a checkpoint as values alone, from what is known (None if
        not) or from ``read``, the histories the database gave."""
        thread, checkpoint_id = _ids(config)
        specs = delta_channels()
        if checkpoint_id is None or not set(channels) <= specs.keys():
            return None
        with self._lock:
            checkpoints = self._known(thread)
            if read is not None:
                known = checkpoints.get(checkpoint_id) or _Known(None, None)
                for name in channels:
                    known.values[name] = replayed(specs[name], read.get(name, {"writes": []}))
                self._add(thread, checkpoint_id, known)
            try:
                values = {name: self.value(thread, checkpoint_id, name) for name in channels}
            except KeyError:
                return None
        return {name: {"seed": _own(value), "writes": []} for name, value in values.items()}


class ServesAsync(BaseCheckpointSaver[str]):
    """A LangGraph saver as chatbot uses it: its async methods run its sync ones, as
    ``InMemorySaver``'s do (``astream`` shares the connection, lock and transactions); each
    call decodes under :func:`chatbot.interrupts.decoding` (Ctrl-C stays a KeyboardInterrupt)
    and says a damaged file in one line; it remembers what it reads and writes (:class:`Recent`)."""

    path = ""
    nul_free = False
    """A text value holding a NUL is stored with U+FFFD (:func:`chatbot.store.base.without_nul`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recent = Recent()

    def mark(self, thread_id: str, checkpoint_ns: str) -> object:
        """What changes when another connection writes the thread."""
        raise NotImplementedError

    def marked(self, mark: object, checkpoint_id: str | None = None, writes: int = 0) -> object:
        """The thread's mark once this saver wrote ``checkpoint_id`` or ``writes`` to it."""
        return mark

    @contextmanager
    def _calling(self, config: RunnableConfig | None = None) -> Iterator[None]:
        with reporting_damage(self.path), decoding():
            if config is not None:
                thread, _ = _ids(config)
                self.recent.check(thread, self.mark(*thread))
            yield

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        with self._calling(config):
            saved = super().get_tuple(config)
            if saved is not None:
                self.recent.read(saved, newest=_ids(config)[1] is None)
            return saved

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[CheckpointTuple]:
        with self._calling():
            yield from super().list(config, **kwargs)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        with self._calling(config):
            known = self.recent.history(config, channels)
            if known is not None:
                return known
            read = super().get_delta_channel_history(config=config, channels=channels)
            return self.recent.history(config, channels, read) or read

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        values = checkpoint["channel_values"]
        if self.nul_free and any(isinstance(v, str) and "\x00" in v for v in values.values()):
            cleaned = {key: without_nul(value) for key, value in values.items()}
            checkpoint = {**checkpoint, "channel_values": cleaned}
        with self._calling():
            written = super().put(config, checkpoint, metadata, new_versions)
        self.recent.wrote(config, checkpoint, lambda mark: self.marked(mark, checkpoint["id"]))
        return written

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        with self._calling():
            super().put_writes(config, writes, task_id, task_path)
        self.recent.wrote_writes(
            config, writes, task_id, task_path, lambda mark: self.marked(mark, writes=len(writes))
        )

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(self, *args: Any, **kwargs: Any) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(*args, **kwargs):
            yield item

    async def aput(self, *args: Any, **kwargs: Any) -> RunnableConfig:
        return self.put(*args, **kwargs)

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        self.put_writes(*args, **kwargs)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def aget_delta_channel_history(self, **kwargs: Any) -> Mapping[str, DeltaChannelHistory]:
        return self.get_delta_channel_history(**kwargs)


class ChatSqliteSaver(ServesAsync, SqliteSaver):
    """LangGraph's ``SqliteSaver`` as chatbot uses it; the mark is SQLite's ``data_version``,
    which other connections' commits move, this one's do not."""

    def mark(self, thread_id: str, checkpoint_ns: str) -> object:
        with self.lock:
            return self.conn.execute("PRAGMA data_version").fetchone()[0]


def postgres_saver(
    pool: Any, serde: SerializerProtocol, thread_mark: Callable[[str], tuple[str | None, int]]
) -> ServesAsync:
    """LangGraph's ``PostgresSaver`` on ``pool`` (or one connection), as chatbot uses it;
    ``thread_mark`` gives a thread's newest checkpoint id and its count of pending writes."""
    from langgraph.checkpoint.postgres import PostgresSaver

    class ChatPostgresSaver(ServesAsync, PostgresSaver):
        """LangGraph's ``PostgresSaver`` as chatbot uses it; a text value holding a NUL (which
        JSONB cannot hold) is stored with U+FFFD. PostgreSQL tells no other session's commits:
        a thread's mark is its newest checkpoint and its count of pending writes, which turns
        and writes elsewhere move. (A write of this saver's left out, its key taken, leaves the
        count short: the thread is read again.)"""

        nul_free = True

        def mark(self, thread_id: str, checkpoint_ns: str) -> object:
            return thread_mark(thread_id) if checkpoint_ns == "" else object()

        def marked(self, mark: object, checkpoint_id: str | None = None, writes: int = 0) -> object:
            if not isinstance(mark, tuple):
                return mark
            newest, count = mark
            if checkpoint_id is not None:
                newest = max(str(newest or ""), checkpoint_id)
            return newest, count + writes

    return ChatPostgresSaver(pool, serde=serde)
