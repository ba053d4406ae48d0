"""zstd over the values LangGraph's savers store (checkpoints, their blobs, pending writes),
and over the text of SQLite's search rows (:func:`pack_text`).

A compressed value's type carries the suffix ``+zstd`` (``msgpack+zstd``), after the convention
of LangGraph's ``EncryptedSerializer`` (``msgpack+aes``): a LangGraph program without chatbot's
serializer that reads one fails with ``Unknown serialization type: msgpack+zstd``. Values
written before, or too small to gain, carry no suffix and are read as they are. Used by the
saver's serializer (:class:`chatbot.store.saver.Compressing`) and by ``chatbot db migrate``,
which rewrites an older database's values the same way.

Values are compressed with a zstd dictionary (``zstd-1.dict`` beside this module, made by
``benchmarks/dictionary.py``): the skeleton every checkpoint and message shares (LangGraph's keys,
channel names, version strings, message fields) is in it, so a value of a few hundred bytes
shrinks by more than its text alone would let it. zstd writes the dictionary's id in each frame;
values written before it (without one) read with the same decompressor. The file is part of the
format: it never changes; a better one would get an id of its own and this one kept for reading.

zstd's compressor and decompressor objects are not safe to share between threads (the saver
writes from LangGraph's threads and the caller's), and making one costs more than compressing a
checkpoint with it (LangGraph starts new threads for every run): a call takes one from a pool,
used by one thread at a time, and puts it back.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

SUFFIX = "+zstd"
LEVEL = 1
SMALLEST = 32
"""Values this many bytes or fewer are stored as they are: zstd's frame would eat the gain."""
DICTIONARY = "zstd-1.dict"
DICTIONARY_ID = 0x43680001
"""The id zstd writes in the frames compressed with :data:`DICTIONARY` ("Ch", 1: in the range
zstd leaves to private dictionaries)."""

_compressors: list[Any] = []
_decompressors: list[Any] = []
"""Idle compressors and decompressors: ``list.pop`` and ``list.append`` are atomic, so a
context taken from here is used by one thread only until it is put back."""


@functools.cache
def dictionary() -> Any:
    """The dictionary, read once, prepared for compressing at :data:`LEVEL`."""
    import zstandard

    data = Path(__file__).with_name(DICTIONARY).read_bytes()  # (importlib.resources: 9 ms)
    made = zstandard.ZstdCompressionDict(data)
    if made.dict_id() != DICTIONARY_ID:
        raise RuntimeError(f"{DICTIONARY} is not chatbot's dictionary: reinstall chatbot")
    made.precompute_compress(level=LEVEL)
    return made


def _compressor() -> Any:
    try:
        return _compressors.pop()
    except IndexError:
        import zstandard

        return zstandard.ZstdCompressor(level=LEVEL, dict_data=dictionary())


def _decompressor() -> Any:
    try:
        return _decompressors.pop()
    except IndexError:
        import zstandard

        return zstandard.ZstdDecompressor(dict_data=dictionary())


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
    return kind[: -len(SUFFIX)], _unzstd(data)


def pack_text(text: str) -> str | bytes:
    """A message's text as SQLite's search index keeps it (``chatbot_messages.content``): its
    UTF-8 compressed with the dictionary, as a BLOB, when that is smaller; else the text, as
    before (rows written before compression are text too)."""
    try:
        data = text.encode()
    except UnicodeEncodeError:  # (a lone surrogate: SQLite refuses it either way)
        return text
    if len(data) <= SMALLEST:
        return text
    compressor = _compressor()
    try:
        packed = compressor.compress(data)
    finally:
        _compressors.append(compressor)
    return packed if len(packed) < len(data) else text


def unpack_text(value: str | bytes | None) -> str:
    """The text :func:`pack_text` kept (SQL function ``chatbot_text``)."""
    if isinstance(value, bytes):
        return _unzstd(value).decode()
    return value or ""


def _unzstd(data: bytes) -> bytes:
    decompressor = _decompressor()
    try:
        return decompressor.decompress(data)
    except Exception as error:
        import zstandard

        from chatbot.store.errors import StoreError

        used = zstandard.get_frame_parameters(data).dict_id
        if used not in (0, DICTIONARY_ID):  # (a newer chatbot's)
            raise StoreError(
                f"the database holds values compressed with zstd dictionary {used:#x}, which "
                "this version of chatbot does not have: update chatbot to read it"
            ) from error
        raise
    finally:
        _decompressors.append(decompressor)
