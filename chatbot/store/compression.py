"""zstd over the values LangGraph's savers store (checkpoints, their blobs, pending writes).

A compressed value's type carries the suffix ``+zstd`` (``msgpack+zstd``), after the convention
of LangGraph's ``EncryptedSerializer`` (``msgpack+aes``): a LangGraph program without chatbot's
serializer that reads one fails with ``Unknown serialization type: msgpack+zstd``. Values
written before, or too small to gain, carry no suffix and are read as they are. Used by the
saver's serializer (:class:`chatbot.store.saver.Compressing`) and by ``chatbot db migrate``,
which rewrites an older database's values the same way.

zstd's compressor and decompressor objects are not safe to share between threads (the saver
writes from LangGraph's threads and the caller's), and making one costs more than compressing a
checkpoint with it (LangGraph starts new threads for every run): a call takes one from a pool,
used by one thread at a time, and puts it back.
"""

from __future__ import annotations

from typing import Any

SUFFIX = "+zstd"
LEVEL = 1
SMALLEST = 256
"""Values this many bytes or fewer are stored as they are: zstd's frame would eat the gain."""

_compressors: list[Any] = []
_decompressors: list[Any] = []
"""Idle compressors and decompressors: ``list.pop`` and ``list.append`` are atomic, so a
context taken from here is used by one thread only until it is put back."""


def _compressor() -> Any:
    try:
        return _compressors.pop()
    except IndexError:
        import zstandard

        return zstandard.ZstdCompressor(level=LEVEL)


def _decompressor() -> Any:
    try:
        return _decompressors.pop()
    except IndexError:
        import zstandard

        return zstandard.ZstdDecompressor()


def is_compressed(kind: str | None) -> bool:
    return bool(kind) and str(kind).endswith(SUFFIX)


def compress(kind: str, data: bytes) -> tuple[str, bytes]:
    """``(kind, data)`` compressed, or as it is when that would not make it smaller."""
    if len(data) <= SMALLEST or is_compressed(kind):
        return kind, data
    compressor = _compressor()
    try:
        packed = compressor.compress(data)
    finally:
        _compressors.append(compressor)
    if len(packed) >= len(data):
        return kind, data
    return kind + SUFFIX, packed


def decompress(kind: str, data: bytes) -> tuple[str, bytes]:
    """The value as its serializer wrote it: ``(kind, data)`` without the compression."""
    if not is_compressed(kind):
        return kind, data
    decompressor = _decompressor()
    try:
        return kind[: -len(SUFFIX)], decompressor.decompress(data)
    finally:
        _decompressors.append(decompressor)
