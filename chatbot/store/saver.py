"""LangGraph's savers as chatbot uses them: ``SqliteSaver`` and ``PostgresSaver`` as LangGraph
ships them, given a serializer that compresses (:class:`ZstdSerializer`) and serving the
graph's ``astream`` too (:class:`ServesAsync`).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from chatbot.interrupts import decoding
from chatbot.store.errors import reporting_damage

SUFFIX = "+zstd"
"""A compressed value's type ends with it (``msgpack+zstd``), as ``EncryptedSerializer``'s
end with ``+aes``."""
LEVEL = 3
SMALLEST = 64
"""Values this many bytes or fewer are stored as they are: zstd's frame would eat the gain."""

_CODECS = threading.local()
"""Each thread's zstd compressor and decompressor (zstd's are not safe to share)."""


class ZstdSerializer(SerializerProtocol):
    """LangGraph's serializer with zstd over each value it writes; a value without the suffix
    is read as it is. ``writing`` False writes as LangGraph's own serializer does (a database
    another LangGraph program shares). Decoding runs under
    :func:`chatbot.interrupts.decoding`: Ctrl-C then is a KeyboardInterrupt, not ormsgpack's
    ``ext_hook failed``."""

    def __init__(self, serde: SerializerProtocol | None = None, *, writing: bool = True) -> None:
        self.serde = serde or JsonPlusSerializer()
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
        with decoding():
            if kind and kind.endswith(SUFFIX):
                kind = kind[: -len(SUFFIX)]
                value = self._codec()[1].decompress(bytes(value))
            return self.serde.loads_typed((kind, value))


class ServesAsync(BaseCheckpointSaver[str]):
    """A saver whose async methods run its sync ones, as ``InMemorySaver``'s do: the graph's
    ``astream`` then uses the same connection, lock and transactions as everything else."""

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


class ChatSqliteSaver(ServesAsync, SqliteSaver):
    """LangGraph's ``SqliteSaver``, serving ``astream`` too; a damaged file is said in one line
    (:class:`chatbot.store.errors.DamagedDatabase`, naming :attr:`path`)."""

    path = ""

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        with reporting_damage(self.path):
            return super().get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        with reporting_damage(self.path):
            yield from super().list(config, filter=filter, before=before, limit=limit)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        with reporting_damage(self.path):
            return super().get_delta_channel_history(config=config, channels=channels)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        with reporting_damage(self.path):
            return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        with reporting_damage(self.path):
            super().put_writes(config, writes, task_id, task_path)


def postgres_saver(pool: Any, serde: SerializerProtocol) -> BaseCheckpointSaver[str]:
    """LangGraph's ``PostgresSaver`` on ``pool``, serving ``astream`` too."""
    from langgraph.checkpoint.postgres import PostgresSaver

    class ChatPostgresSaver(ServesAsync, PostgresSaver):
        """LangGraph's ``PostgresSaver``, serving ``astream`` too; a text value holding a NUL
        (which the JSONB of a checkpoint's plain values cannot hold) is stored with U+FFFD."""

        def put(
            self,
            config: RunnableConfig,
            checkpoint: Checkpoint,
            metadata: CheckpointMetadata,
            new_versions: ChannelVersions,
        ) -> RunnableConfig:
            values = checkpoint["channel_values"]
            if any(isinstance(value, str) and "\x00" in value for value in values.values()):
                cleaned = {
                    key: value.replace("\x00", "\ufffd") if isinstance(value, str) else value
                    for key, value in values.items()
                }
                checkpoint = {**checkpoint, "channel_values": cleaned}
            return super().put(config, checkpoint, metadata, new_versions)

    return ChatPostgresSaver(pool, serde=serde)
