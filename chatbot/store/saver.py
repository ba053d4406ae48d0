"""LangGraph's checkpointers as chatbot uses them (imported only where checkpoints are read
or written: opening the database does not need them)."""

from __future__ import annotations

import json
import random
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite._delta import build_delta_stage2_sql

from chatbot.interrupts import decoding
from chatbot.memory.channels import added_messages
from chatbot.store import compression, deltas
from chatbot.store.errors import reporting_damage
from chatbot.store.msgindex import DELETE_THREAD_MESSAGES, INSERT_MESSAGE, index_waiting

if TYPE_CHECKING:
    from chatbot.store.msgindex import MessageIndex


class AsyncFromSync(BaseCheckpointSaver[str]):
    """A saver that also serves ``astream``, the way ``InMemorySaver`` does: the async
    methods run the sync ones. A checkpoint write takes milliseconds, and this keeps one
    connection (or pool), one lock and no extra thread."""

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

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self.get_delta_channel_history(config=config, channels=channels)


class Compressing:
    """LangGraph's serializer with zstd over each value it writes
    (:mod:`chatbot.store.compression`): checkpoints hold the message window, which is text,
    and take a third to a quarter of the space. Values written before are read as they are."""

    writing = True
    """False: values are written as LangGraph's serializer makes them (compressed ones are
    still read), for a database another LangGraph program shares (``chatbot db adopt``)."""

    def __init__(self, serde: SerializerProtocol) -> None:
        self.serde = serde

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if not self.writing:
            return self.serde.dumps_typed(obj)
        return compression.compress(*self.serde.dumps_typed(obj))

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.serde.loads_typed(compression.decompress(*data))

    def __getattr__(self, name: str) -> Any:  # (whatever else the saver asks of its serde)
        if name == "serde":  # (not set yet: an instance being copied)
            raise AttributeError(name)
        return getattr(self.serde, name)


class _DecodingInterruptibly:
    """A serializer that decodes under :func:`chatbot.interrupts.decoding`: Ctrl-C while a
    checkpoint is decoded is a KeyboardInterrupt, not ormsgpack's ``ext_hook failed``."""

    def __init__(self, serde: SerializerProtocol) -> None:
        self.serde = serde

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return self.serde.dumps_typed(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        with decoding():
            return self.serde.loads_typed(data)

    def __getattr__(self, name: str) -> Any:  # (whatever else the saver asks of its serde)
        if name == "serde":  # (not set yet: an instance being copied)
            raise AttributeError(name)
        return getattr(self.serde, name)


class DecodesInterruptibly(BaseCheckpointSaver[str]):
    """A saver whose values are compressed (:class:`Compressing`) and decode as
    :class:`_DecodingInterruptibly` does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.compressing = Compressing(self.serde)
        self.serde = _DecodingInterruptibly(self.compressing)

    def keep_uncompressed(self) -> None:
        """Write values uncompressed and whole, as LangGraph's own savers do (a database
        another LangGraph program shares: that program could not read compressed ones, nor a
        checkpoint that leaves its messages to be replayed from writes)."""
        self.compressing.writing = False

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if self.compressing.writing:
            if metadata.get("parents") == {}:  # (a root graph's: LangGraph reads it with a {})
                metadata = cast(
                    "CheckpointMetadata", {k: v for k, v in metadata.items() if k != "parents"}
                )
            return super().put(config, checkpoint, metadata, new_versions)
        values = checkpoint["channel_values"]  # (whole: every value stored, none wrapped)
        plain = {key: deltas.unwrapped(value) for key, value in values.items()}
        checkpoint = {**checkpoint, "channel_values": plain}
        written = super().put(config, checkpoint, metadata, new_versions)
        if any(key in new_versions or self._inline for key in deltas.missing(checkpoint)):
            saved = self.get_tuple(written)
            if saved is not None:
                whole = deltas.complete(self, saved).checkpoint
                written = super().put(config, whole, metadata, new_versions)
        return written

    def get_next_version(self, current: str | None, channel: None) -> str:
        short = isinstance(current, str) and current[:1].isalpha()  # (a thread copied in)
        if not self.compressing.writing and not short:
            return super().get_next_version(current, channel)
        return next_version(current)

    _inline = True
    """True where a checkpoint stores every channel's value itself (SQLite), False where it
    stores each version of a value once, apart (PostgreSQL's blobs)."""


def next_version(current: str | int | float | None) -> str:
    """The version after ``current``, short: ``c604.1f3a9b2`` where LangGraph's savers write
    ``00000000000000000000000000000604.0.8483856236080155``.

    A checkpoint names a version for every channel and every node's view of it, a dozen on
    this graph, three checkpoints a turn: at 52 characters each they were half of a PostgreSQL
    checkpoint row. The letter says how many digits follow (``a`` one, ``b`` two…), so versions
    sort as their counters do, and after every version LangGraph's own format wrote (those
    start with ``0``): a thread written before goes on. The random part keeps two branches'
    versions of a channel apart, as LangGraph's does (PostgreSQL keys a value by its version).
    """
    if current is None:
        counter = 0
    elif isinstance(current, (int, float)):
        counter = int(current)
    elif current[:1].isalpha():
        counter = int(current[1:].split(".", 1)[0])
    else:
        counter = int(current.split(".", 1)[0])
    digits = str(counter + 1)
    return f"{chr(ord('a') + len(digits) - 1)}{digits}.{random.getrandbits(30):x}"


class IndexesMessages(BaseCheckpointSaver[str]):
    """A saver that indexes, for search, the messages a checkpoint adds
    (:mod:`chatbot.store.search`): when a write changes the ``messages`` channel, the ids not yet
    indexed for that thread are added with this checkpoint as theirs. Turns, retries, undo, forks
    and ``db copy`` all write through here; deleting a thread here (as LangGraph's server does)
    deletes its rows too. The rows go in the checkpoint's own transaction where the saver allows it
    (:class:`LocalSaver`), else in one of their own right after it."""

    message_index: MessageIndex | None = None
    _rows_in_checkpoint_transaction = False
    _pending = threading.local()
    _written: dict[tuple[str, str], list[Any]]
    """The messages written at each checkpoint (thread id and checkpoint id) not yet followed
    by the checkpoint they make: a checkpoint stores its messages only every so often
    (:data:`chatbot.memory.state.MESSAGES_SNAPSHOT_EVERY`), so the new ones are known from the
    writes that made it."""

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        if self.message_index is not None and not configurable.get("checkpoint_ns"):
            messages = [value for channel, value in writes if channel == "messages"]
            if messages:
                key = (str(configurable["thread_id"]), str(configurable["checkpoint_id"]))
                written = self.__dict__.setdefault("_written", {})
                with _WRITTEN_LOCK:
                    written.setdefault(key, []).extend(messages)
                    while len(written) > 64:  # (writes no checkpoint followed: a failed run)
                        written.pop(next(iter(written)))
        super().put_writes(config, writes, task_id, task_path)

    def _new_messages(self, config: RunnableConfig, checkpoint: Checkpoint) -> list[Any]:
        """The messages a checkpoint holds (one that stores them) or that the writes made
        it from added (one that does not)."""
        stored = checkpoint["channel_values"].get("messages")
        if stored is not None:
            return added_messages(stored)
        configurable = config["configurable"]
        parent = configurable.get("checkpoint_id")
        if not parent:
            return []
        key = (str(configurable["thread_id"]), str(parent))
        with _WRITTEN_LOCK:
            writes = self.__dict__.get("_written", {}).pop(key, None)
        if writes is None:  # (written by another process, or before this one started)
            saved = self.get_tuple(config)
            pending = saved.pending_writes or [] if saved is not None else []
            writes = [value for _, channel, value in pending if channel == "messages"]
        return added_messages(None, writes)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        index = self.message_index
        configurable = config["configurable"]
        if index is None or "messages" not in new_versions or configurable.get("checkpoint_ns"):
            return super().put(config, checkpoint, metadata, new_versions)  # (a subgraph's)
        thread_id = str(configurable["thread_id"])
        messages = self._new_messages(config, checkpoint)
        rows, ids = index.fresh_rows(thread_id, checkpoint["id"], messages)
        if self._rows_in_checkpoint_transaction:
            self._pending.rows = rows
            try:
                written = super().put(config, checkpoint, metadata, new_versions)
            finally:
                self._pending.rows = None
        else:
            written = super().put(config, checkpoint, metadata, new_versions)
            index.write(rows)
        index.remember(thread_id, ids)
        return written

    def delete_thread(self, thread_id: str) -> None:
        index = self.message_index
        if index is None:
            return super().delete_thread(thread_id)
        if self._rows_in_checkpoint_transaction:
            self._pending.deleted = str(thread_id)
            try:
                super().delete_thread(thread_id)
            finally:
                self._pending.deleted = None
            index.forget(str(thread_id))
        else:
            super().delete_thread(thread_id)
            index.drop(str(thread_id))


_WRITTEN_LOCK = threading.Lock()

_ANCESTORS = """
WITH RECURSIVE ancestors(checkpoint_id, parent_checkpoint_id, counters) AS (
    SELECT checkpoint_id, parent_checkpoint_id, NULL FROM checkpoints
    WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?
    UNION ALL
    SELECT c.checkpoint_id, c.parent_checkpoint_id,
        json_extract(CAST(c.metadata AS TEXT), '$.counters_since_delta_snapshot')
    FROM ancestors AS a CROSS JOIN checkpoints AS c ON c.checkpoint_id = a.parent_checkpoint_id
    WHERE c.thread_id = ? AND c.checkpoint_ns = ?
)
SELECT checkpoint_id, counters FROM ancestors
"""
"""A checkpoint's ancestors, nearest first, each with the counts LangGraph keeps of the
updates since each delta channel's last snapshot (none for a channel it snapshots)."""


class LocalSaver(
    IndexesMessages, deltas.KeepsDeltaValues, AsyncFromSync, DecodesInterruptibly, SqliteSaver
):
    """LangGraph's ``SqliteSaver``, serving ``astream`` too (``AsyncSqliteSaver`` would add a
    second connection and a thread). A checkpoint's new messages are indexed in the same
    transaction as the checkpoint, and a deleted thread's rows go in the same transaction as
    its checkpoints: one commit, and never one without the other."""

    _rows_in_checkpoint_transaction = True
    path = ""
    """The database file, as errors name it."""

    def _rebuild(self, config: RunnableConfig, specs: Mapping[str, Any]) -> dict[str, Any]:
        """The values at ``config``'s checkpoint, rebuilt from the nearest stored ones and the
        writes since, found without decoding every ancestor (LangGraph's ``SqliteSaver``
        decodes each checkpoint back to the last snapshot to see whether it holds one, while a
        checkpoint's metadata already says which channels it stores:
        ``counters_since_delta_snapshot`` leaves them out). Reading a thread's history reads
        many neighbouring checkpoints: the values at every checkpoint on the way from the
        snapshot are kept, so each write is decoded and applied once, not once for every
        checkpoint after it."""
        configurable = config["configurable"]
        thread, namespace = str(configurable["thread_id"]), configurable.get("checkpoint_ns", "")
        target = str(get_checkpoint_id(config))
        chains, seeds, found = self._walk(config, list(specs)) or ({}, {}, [])
        written: dict[tuple[str, str], list[tuple[tuple[str, str, int], Any]]] = {}
        for checkpoint_id, channel, task_id, idx, kind, value, path in found:
            order = writes_sort_key(path, task_id, idx)
            written.setdefault((checkpoint_id, channel), []).append((order, (kind, value)))
        values: dict[str, Any] = {}
        with decoding():  # (once, not for every write)
            for channel, spec in specs.items():
                chain = chains.get(channel, [])  # (nearest first: the target's parent, ...)
                value = deltas.unwrapped(seeds[channel]) if channel in seeds else spec.ValueType()
                for number in range(len(chain) - 1, -1, -1):
                    ancestor = chain[number]
                    rows = sorted(written.get((ancestor, channel), ()), key=lambda row: row[0])
                    writes = [self.compressing.loads_typed(data) for _, data in rows]
                    value = deltas.replay(spec, value, writes)
                    child = chain[number - 1] if number else target
                    self._keep(thread, namespace, child, {channel: value})
                values[channel] = value
        return values

    others_wrote = 0
    """How many times the store has written on this saver's connection (a rename, a
    deletion, a prune: ``SqlStore._write``), which SQLite's ``data_version`` does not count."""

    def _database_version(self) -> Any:
        # (SQLite's data_version changes when another connection commits, never for this
        # connection's own commits: those of the store are counted apart)
        with reporting_damage(self.path), self.lock:
            return self.conn.execute("PRAGMA data_version").fetchone()[0], self.others_wrote

    def _delta_write_count(
        self, thread: str, namespace: str, checkpoint_id: str, channels: list[str]
    ) -> int | None:
        with reporting_damage(self.path), self.lock:
            ((count,),) = self.conn.execute(
                "SELECT COUNT(*) FROM writes WHERE thread_id = ? AND checkpoint_ns = ? "
                f"AND checkpoint_id = ? AND channel IN ({', '.join('?' * len(channels))})",
                (thread, namespace, checkpoint_id, *channels),
            ).fetchall()
        return int(count)

    def _delta_write_rows(
        self, thread: str, namespace: str, checkpoint_id: str, channels: list[str]
    ) -> list[tuple[Any, ...]] | None:
        path = "task_path" if self._has_task_path else "''"
        with reporting_damage(self.path), self.lock:  # (a read: no cursor of its own, no commit)
            return self.conn.execute(
                f"SELECT task_id, idx, channel, {path}, type, value FROM writes "
                "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? "
                f"AND channel IN ({', '.join('?' * len(channels))})",
                (thread, namespace, checkpoint_id, *channels),
            ).fetchall()

    def _walk(
        self, config: RunnableConfig, channels: list[str]
    ) -> tuple[dict[str, list[str]], dict[str, Any], list[Any]] | None:
        """The ancestors whose writes make each channel's value at ``config`` (nearest first,
        the one holding its stored value last), those values, and the writes (rows of
        LangGraph's stage-2 query). ``None``: no such checkpoint."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        namespace = configurable.get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        if not checkpoint_id:
            target = self.get_tuple(config)
            if target is None:
                return None
            checkpoint_id = target.config["configurable"]["checkpoint_id"]
        chains: dict[str, list[str]] = {channel: [] for channel in channels}
        seeds: dict[str, Any] = {}
        seeking = set(channels)
        with self.cursor(transaction=False) as cur:
            rows = cur.execute(
                _ANCESTORS, (thread_id, namespace, checkpoint_id, thread_id, namespace)
            ).fetchmany(1)
            walked = {checkpoint_id}
            if rows:
                for ancestor, counters in cur:
                    if ancestor in walked:  # (a loop: LangGraph's walk stops there too)
                        break
                    walked.add(ancestor)
                    counted = json.loads(counters) if counters else {}
                    for channel in seeking:
                        chains[channel].append(ancestor)
                    stored = [channel for channel in seeking if channel not in counted]
                    if stored:
                        values = self._channel_values(thread_id, namespace, ancestor)
                        for channel in stored:
                            if channel in values:
                                seeds[channel] = values[channel]
                                seeking.discard(channel)
                    if not seeking:
                        break
            with_chain = [channel for channel in channels if chains[channel]]
            sql = build_delta_stage2_sql(
                has_task_path=self._has_task_path,
                chain_lens=[len(chains[channel]) for channel in with_chain],
            )
            found: list[Any] = []
            if sql:
                params: list[Any] = []
                for channel in with_chain:
                    params.extend([thread_id, namespace, channel, *chains[channel]])
                found = cur.execute(sql, params).fetchall()
        return chains, seeds, found

    def _channel_values(self, thread_id: str, namespace: str, checkpoint_id: str) -> Any:
        row = self.conn.execute(
            "SELECT type, checkpoint FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
            "AND checkpoint_id = ?",
            (thread_id, namespace, checkpoint_id),
        ).fetchone()
        if row is None:
            return {}
        return self.serde.loads_typed((row[0], row[1])).get("channel_values") or {}

    @contextmanager
    def cursor(self, transaction: bool = True) -> Iterator[sqlite3.Cursor]:
        with reporting_damage(self.path), super().cursor(transaction) as cur:
            yield cur
            if not transaction:
                return
            rows = getattr(self._pending, "rows", None)
            if rows:  # put's checkpoint went in: its messages follow
                self._pending.rows = None
                cur.executemany(INSERT_MESSAGE, rows)
                index_waiting(cur.execute)
            deleted = getattr(self._pending, "deleted", None)
            if deleted is not None:  # delete_thread's checkpoints went: its rows follow
                self._pending.deleted = None
                cur.execute(DELETE_THREAD_MESSAGES, (deleted,))
