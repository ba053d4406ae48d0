"""LangGraph's checkpointers as chatbot uses them (imported only where checkpoints are read
or written: opening the database does not need them)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite import SqliteSaver

from chatbot.interrupts import decoding
from chatbot.store import compression
from chatbot.store.errors import reporting_damage
from chatbot.store.msgindex import DELETE_THREAD_MESSAGES, INSERT_MESSAGE

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
        """Write values uncompressed, as LangGraph's own savers do (a database another
        LangGraph program shares: that program could not read compressed ones)."""
        self.compressing.writing = False


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
        messages = checkpoint["channel_values"].get("messages") or ()
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


class LocalSaver(IndexesMessages, AsyncFromSync, DecodesInterruptibly, SqliteSaver):
    """LangGraph's ``SqliteSaver``, serving ``astream`` too (``AsyncSqliteSaver`` would add a
    second connection and a thread). A checkpoint's new messages are indexed in the same
    transaction as the checkpoint, and a deleted thread's rows go in the same transaction as
    its checkpoints: one commit, and never one without the other."""

    _rows_in_checkpoint_transaction = True
    path = ""
    """The database file, as errors name it."""

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
            deleted = getattr(self._pending, "deleted", None)
            if deleted is not None:  # delete_thread's checkpoints went: its rows follow
                self._pending.deleted = None
                cur.execute(DELETE_THREAD_MESSAGES, (deleted,))
