"""zstd over the values LangGraph's savers store (checkpoints, their blobs, pending writes).

A compressed value's type carries the suffix ``+zstd`` (``msgpack+zstd``), after the convention
of LangGraph's ``EncryptedSerializer`` (``msgpack+aes``): a LangGraph program without chatbot's
serializer that reads one fails with ``Unknown serialization type: msgpack+zstd``. Values
written before, or too small to gain, carry no suffix and are read as they are. Used by the
saver's serializer (:class:`chatbot.store.saver.Compressing`) and by ``chatbot db migrate``,
which rewrites an older database's values the same way.

zstd's compressor and decompressor objects are not safe to share between threads (the saver
writes from LangGraph's threads and the caller's): each thread makes its own.
"""

from __future__ import annotations

import threading
from typing import Any

SUFFIX = "+zstd"
LEVEL = 3
SMALLEST = 256
"""Values this many bytes or fewer are stored as they are: zstd's frame would eat the gain."""

_local = threading.local()


def _contexts() -> Any:
    contexts = getattr(_local, "contexts", None)
    if contexts is None:
        import zstandard

        contexts = (zstandard.ZstdCompressor(level=LEVEL), zstandard.ZstdDecompressor())
        _local.contexts = contexts
    return contexts


def is_compressed(kind: str | None) -> bool:
    return bool(kind) and str(kind).endswith(SUFFIX)


def compress(kind: str, data: bytes) -> tuple[str, bytes]:
    """``(kind, data)`` compressed, or as it is when that would not make it smaller."""
    if len(data) <= SMALLEST or is_compressed(kind):
        return kind, data
    packed = _contexts()[0].compress(data)
    if len(packed) >= len(data):
        return kind, data
    return kind + SUFFIX, packed


def decompress(kind: str, data: bytes) -> tuple[str, bytes]:
    """The value as its serializer wrote it: ``(kind, data)`` without the compression."""
    if not is_compressed(kind):
        return kind, data
    return kind[: -len(SUFFIX)], _contexts()[1].decompress(data)
