"""Persistence in one place: the SQLite checkpointer, thread listing and history helpers.

The checkpoints are LangGraph's (``SqliteSaver``); next to them one small table,
``chatbot_threads``, remembers what a listing needs (title, counts, origin) so that listing
threads is plain SQL and never deserialises checkpoints.

A chatbot database carries a mark, ``PRAGMA application_id`` = :data:`APPLICATION_ID`, set when
its schema is made. A file is only ever opened if it is missing, empty, marked, or an unmarked
database holding nothing but chatbot's tables (one made before the mark, which gets it now):
another program's database, a file that is not SQLite, a folder or a device is refused before
anything is written to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Self, cast

from chatbot.files import create_private_file
from chatbot.store.compression import SMALLEST
from chatbot.store.errors import DamagedDatabase, StoreError, damage, reporting_damage
from chatbot.store.msgindex import ADDS_SEARCH_ROWS, index_waiting
from chatbot.store.msgindex import SEARCH_BATCH as SEARCH_BATCH  # (the index's batch: migration 9)

if TYPE_CHECKING:  # LangGraph is imported only where checkpoints are read or written
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.types import StateSnapshot

    from chatbot.memory.state import ChatGraph
    from chatbot.store.msgindex import MessageIndex
    from chatbot.store.saver import LocalSaver

BUSY_TIMEOUT_SECONDS = 30.0
APPLICATION_ID = 0x43686174  # "Chat": marks a SQLite file as a chatbot database
_OWN_TABLES = frozenset(  # LangGraph's and ours
    {"checkpoints", "writes", "chatbot_threads", "chatbot_migrations", "chatbot_leases"}
) | frozenset(  # the search index (chatbot.store.search): its table, FTS5's and their shadow tables
    {"chatbot_messages", "chatbot_messages_unindexed", "chatbot_messages_text", "chatbot_marks"}
    | {f"chatbot_messages_fts{part}" for part in ("", "_data", "_idx", "_docsize", "_config")}
)
_SQLITE_HEADER = b"SQLite format 3\x00"
_UUID_EPOCH_OFFSET = 0x01B21DD213814000  # 100-ns intervals from 1582-10-15 to 1970-01-01
_UUID_SHAPE = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")


class PerDatabase(NamedTuple):
    """A migration whose SQL differs between SQLite and PostgreSQL: each one's statements, run
    in order in the migration's transaction."""

    sqlite: tuple[str, ...]
    postgresql: tuple[str, ...]


def migration_statements(migration: str | PerDatabase, database: str) -> tuple[str, ...]:
    """The statements of one migration for ``database`` (``sqlite`` or ``postgresql``)."""
    if isinstance(migration, str):
        return (migration,)
    return migration.sqlite if database == "sqlite" else migration.postgresql


_MARKS_TABLE = """CREATE TABLE IF NOT EXISTS chatbot_marks (
    name TEXT PRIMARY KEY,
    done_at TEXT NOT NULL
)"""


def _batch_trigger(size: int) -> str:
    """The trigger that indexes the waiting rows once ``size`` of them wait."""
    return f"""CREATE TRIGGER chatbot_messages_batch AFTER INSERT ON chatbot_messages_unindexed
WHEN (SELECT COUNT(*) FROM chatbot_messages_unindexed) >= {size}
BEGIN
    INSERT INTO chatbot_messages_fts (rowid, content)
    SELECT m.id, m.content FROM chatbot_messages_unindexed AS u
    JOIN chatbot_messages AS m ON m.id = u.id ORDER BY m.id;
    DELETE FROM chatbot_messages_unindexed;
END"""


TEXT_FUNCTION = "chatbot_text"
"""The SQL function giving a search row's text (``chatbot.store.compression.unpack_text``):
every SQLite connection chatbot opens has it (:func:`add_functions`), with
``chatbot_search_text``, the text as the FTS5 index holds it, which the view and the triggers
of migration 10 call."""


def add_functions(conn: sqlite3.Connection) -> None:
    """Give a SQLite connection the SQL functions chatbot's schema calls."""
    from chatbot.store.compression import unpack_text
    from chatbot.store.msgindex import spaced

    conn.create_function(TEXT_FUNCTION, 1, unpack_text, deterministic=True)
    conn.create_function(
        "chatbot_search_text", 1, lambda value: spaced(unpack_text(value)), deterministic=True
    )


MIGRATIONS: tuple[str | PerDatabase, ...] = (
    # 1: what a thread listing needs, so that listing is plain SQL
    """CREATE TABLE IF NOT EXISTS chatbot_threads (
    thread_id TEXT PRIMARY KEY,
    title TEXT NOT NULL DEFAULT '',
    message_count INTEGER NOT NULL DEFAULT 0,
    has_summary INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    origin_thread TEXT,
    origin_checkpoint TEXT
)""",
    # 2: who is taking a turn on a thread, until when (see Store.try_lease)
    """CREATE TABLE IF NOT EXISTS chatbot_leases (
    thread_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
)""",
    # 3: every message ever written, once per thread, for search (see chatbot.store.search): SQLite
    # indexes it with FTS5's trigram tokenizer (substrings, Chinese and Japanese too),
    # PostgreSQL with pg_trgm when the extension can be made (else search scans the table)
    PerDatabase(
        sqlite=(
            """CREATE TABLE IF NOT EXISTS chatbot_messages (
    id INTEGER PRIMARY KEY,
    thread_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    UNIQUE (thread_id, message_id)
)""",
            "CREATE INDEX IF NOT EXISTS chatbot_messages_newest "
            "ON chatbot_messages (checkpoint_id)",
            """CREATE VIRTUAL TABLE IF NOT EXISTS chatbot_messages_fts USING fts5(
    content, content='chatbot_messages', content_rowid='id', tokenize='trigram'
)""",
            """CREATE TRIGGER IF NOT EXISTS chatbot_messages_added AFTER INSERT ON chatbot_messages
BEGIN
    INSERT INTO chatbot_messages_fts (rowid, content) VALUES (new.id, new.content);
END""",
            """CREATE TRIGGER IF NOT EXISTS chatbot_messages_deleted
AFTER DELETE ON chatbot_messages
BEGIN
    INSERT INTO chatbot_messages_fts (chatbot_messages_fts, rowid, content)
    VALUES ('delete', old.id, old.content);
END""",
            """CREATE TRIGGER IF NOT EXISTS chatbot_messages_changed
AFTER UPDATE OF content ON chatbot_messages
BEGIN
    INSERT INTO chatbot_messages_fts (chatbot_messages_fts, rowid, content)
    VALUES ('delete', old.id, old.content);
    INSERT INTO chatbot_messages_fts (rowid, content) VALUES (new.id, new.content);
END""",
            _MARKS_TABLE,
        ),
        postgresql=(
            """CREATE TABLE IF NOT EXISTS chatbot_messages (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    thread_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    UNIQUE (thread_id, message_id)
)""",
            "CREATE INDEX IF NOT EXISTS chatbot_messages_newest "
            "ON chatbot_messages (checkpoint_id)",
            """DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
    CREATE INDEX IF NOT EXISTS chatbot_messages_trigrams
        ON chatbot_messages USING gin (content gin_trgm_ops);
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'chatbot: no pg_trgm index (%), search scans the messages', SQLERRM;
END
$$""",
            _MARKS_TABLE,
        ),
    ),
    # 4: PostgreSQL's trigram index takes each message into the index at once (GIN's
    # fastupdate off): with it on, every database carried a pending list of up to 4 MB
    # (gin_pending_list_limit), 15 kB a turn over the first hundreds of turns
    PerDatabase(
        sqlite=(),
        postgresql=(
            """DO $$
BEGIN
    IF to_regclass('chatbot_messages_trigrams') IS NOT NULL THEN
        ALTER INDEX chatbot_messages_trigrams SET (fastupdate = off);
        PERFORM gin_clean_pending_list('chatbot_messages_trigrams'::regclass);
    END IF;
END
$$""",
        ),
    ),
    # 5: SQLite's FTS5 index takes new messages 64 at a time, not one turn's at a time: FTS5
    # writes a segment (and merges them) per transaction, most of a turn's index cost. A new
    # row's id waits in chatbot_messages_unindexed (search matches those rows itself, see
    # chatbot.store.search) until the 64th, whose insert indexes them all. Ids, not a high-water
    # mark: SQLite gives a deleted row's id to the next. FTS5 is told to delete only a row
    # it indexed (a 'delete' of one it never saw corrupts it).
    PerDatabase(
        sqlite=(
            "CREATE TABLE IF NOT EXISTS chatbot_messages_unindexed (id INTEGER PRIMARY KEY)",
            "DROP TRIGGER IF EXISTS chatbot_messages_added",
            "DROP TRIGGER IF EXISTS chatbot_messages_deleted",
            "DROP TRIGGER IF EXISTS chatbot_messages_changed",
            """CREATE TRIGGER chatbot_messages_added AFTER INSERT ON chatbot_messages
BEGIN
    INSERT OR IGNORE INTO chatbot_messages_unindexed (id) VALUES (new.id);
END""",
            """CREATE TRIGGER chatbot_messages_deleted AFTER DELETE ON chatbot_messages
BEGIN
    INSERT INTO chatbot_messages_fts (chatbot_messages_fts, rowid, content)
    SELECT 'delete', old.id, old.content
    WHERE NOT EXISTS (SELECT 1 FROM chatbot_messages_unindexed WHERE id = old.id);
    DELETE FROM chatbot_messages_unindexed WHERE id = old.id;
END""",
            """CREATE TRIGGER chatbot_messages_changed AFTER UPDATE OF content ON chatbot_messages
BEGIN
    INSERT INTO chatbot_messages_fts (chatbot_messages_fts, rowid, content)
    SELECT 'delete', old.id, old.content
    WHERE NOT EXISTS (SELECT 1 FROM chatbot_messages_unindexed WHERE id = old.id);
    DELETE FROM chatbot_messages_unindexed WHERE id = old.id;
    INSERT OR IGNORE INTO chatbot_messages_unindexed (id) VALUES (new.id);
END""",
            _batch_trigger(64),
        ),
        postgresql=(),
    ),
    # 6: SQLite's FTS5 index keeps which trigrams each message holds, not where (detail=none,
    # and no column sizes, which only ranking reads): a quarter of the bytes. A term of four
    # characters or more is found as its trigrams, each message then checked to hold the term
    # itself (chatbot.store.search). The rows indexed so far are indexed again; those waiting
    # for the next batch stay waiting.
    PerDatabase(
        sqlite=(
            "DROP TABLE IF EXISTS chatbot_messages_fts",
            """CREATE VIRTUAL TABLE chatbot_messages_fts USING fts5(
    content, content='chatbot_messages', content_rowid='id', tokenize='trigram',
    detail=none, columnsize=0
)""",
            """INSERT INTO chatbot_messages_fts (rowid, content)
SELECT id, content FROM chatbot_messages
WHERE id NOT IN (SELECT id FROM chatbot_messages_unindexed) ORDER BY id""",
        ),
        postgresql=(),
    ),
    # 7: no index of the search rows by checkpoint: only a search of one- or two-character
    # terms read them newest first through it (it reads every row the terms might be in
    # anyway), and it took 14 % of the text's bytes
    "DROP INDEX IF EXISTS chatbot_messages_newest",
    # 8: no table changes: checkpoints written from here on name short channel versions
    # (chatbot.store.saver.next_version), which a chatbot before it cannot count on from (it
    # would stop on one with an error): the number makes such a chatbot refuse to write
    # (check_schema_version), one clear line, where it would fail mid-turn
    PerDatabase(sqlite=(), postgresql=()),
    # 9: SQLite's FTS5 index takes new messages SEARCH_BATCH (256) at a time, not 64: what a
    # batch costs is mostly FTS5 merging its segments, and bigger batches make fewer of them
    # (a turn's CPU: -3 % of the tutorial's; benchmarks/turns.py). A search matches the rows
    # still waiting itself, as before.
    PerDatabase(
        sqlite=(
            "DROP TRIGGER IF EXISTS chatbot_messages_batch",
            _batch_trigger(256),  # (SEARCH_BATCH now; a migration's SQL never changes)
        ),
        postgresql=(),
    ),
    # 10: SQLite's search rows keep a message's text compressed with the zstd dictionary (a
    # BLOB; chatbot.store.compression.pack_text) where that is smaller and the text is in
    # scripts written with spaces (msgindex.keeps_compressed), and SQL reads it through
    # chatbot_text(). The FTS5 index's content is a view of the text with every run of
    # whitespace one space (chatbot_search_text(): a phrase is found across a line break),
    # and the triggers that take a row out of the index give it that text (only when the
    # text changes, for an update: db migrate compresses a row without taking it out).
    # Taking the waiting rows into the index is chatbot's code's (index_waiting), no longer a
    # trigger's: a chatbot from before, still running, has no chatbot_text, and SQLite
    # prepares a table's triggers with every insert, so its turns go on (their rows wait for
    # the next chatbot). Rows written before stay text, which chatbot_text() returns as it
    # is. The index is made again over the view (the rows waiting for the next batch stay
    # waiting).
    PerDatabase(
        sqlite=(
            "DROP VIEW IF EXISTS chatbot_messages_text",
            "CREATE VIEW chatbot_messages_text AS "
            "SELECT id, chatbot_search_text(content) AS content FROM chatbot_messages",
            "DROP TRIGGER IF EXISTS chatbot_messages_deleted",
            "DROP TRIGGER IF EXISTS chatbot_messages_changed",
            "DROP TRIGGER IF EXISTS chatbot_messages_batch",
            "DROP TABLE IF EXISTS chatbot_messages_fts",
            """CREATE VIRTUAL TABLE chatbot_messages_fts USING fts5(
    content, content='chatbot_messages_text', content_rowid='id', tokenize='trigram',
    detail=none, columnsize=0
)""",
            """INSERT INTO chatbot_messages_fts (rowid, content)
SELECT id, content FROM chatbot_messages_text
WHERE id NOT IN (SELECT id FROM chatbot_messages_unindexed) ORDER BY id""",
            """CREATE TRIGGER chatbot_messages_deleted AFTER DELETE ON chatbot_messages
BEGIN
    INSERT INTO chatbot_messages_fts (chatbot_messages_fts, rowid, content)
    SELECT 'delete', old.id, chatbot_search_text(old.content)
    WHERE NOT EXISTS (SELECT 1 FROM chatbot_messages_unindexed WHERE id = old.id);
    DELETE FROM chatbot_messages_unindexed WHERE id = old.id;
END""",
            """CREATE TRIGGER chatbot_messages_changed AFTER UPDATE OF content ON chatbot_messages
WHEN chatbot_text(old.content) IS NOT chatbot_text(new.content)
BEGIN
    INSERT INTO chatbot_messages_fts (chatbot_messages_fts, rowid, content)
    SELECT 'delete', old.id, chatbot_search_text(old.content)
    WHERE NOT EXISTS (SELECT 1 FROM chatbot_messages_unindexed WHERE id = old.id);
    DELETE FROM chatbot_messages_unindexed WHERE id = old.id;
    INSERT OR IGNORE INTO chatbot_messages_unindexed (id) VALUES (new.id);
END""",
        ),
        postgresql=(),
    ),
)
"""chatbot's own tables, for SQLite and PostgreSQL alike: numbered by position, each applied
once (``chatbot_migrations`` records them) under the database's write lock. Append, never
edit: a database made by an older version gets the ones it lacks."""

INDEX_MIGRATION = 3
"""The migration that makes the search index (``chatbot_messages``)."""
ADOPTED_MARK = "adopted"
"""The ``chatbot_marks`` row of a database taken over from another LangGraph program
(``chatbot db adopt``): it is shared with that program, so checkpoints go in uncompressed."""

INDEXED_MARK = "messages_indexed"
"""The ``chatbot_marks`` row saying every message of the database's checkpoints is indexed:
recorded with the index when the database holds no checkpoint yet (a new one), else once the
checkpoints written before the index are indexed (:func:`chatbot.store.search.index_existing`)."""
MARK_INDEXED = (
    "INSERT INTO chatbot_marks (name, done_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING"
)

MIGRATIONS_TABLE = """CREATE TABLE IF NOT EXISTS chatbot_migrations (
    version INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL
)"""

LEASE_SECONDS = 30.0
"""How long a turn's lease on its thread lasts unless renewed: a process killed mid-turn
blocks the thread at most this long. A running turn renews it every third of that."""


class ThreadInfo(NamedTuple):
    """One row of a thread listing."""

    thread_id: str
    checkpoints: int | None
    last_active: datetime | None
    title: str = ""
    message_count: int | None = None
    has_summary: bool | None = None
    origin_thread: str | None = None
    origin_checkpoint: str | None = None


class StoreStats(NamedTuple):
    """What a database holds and what it takes on disk."""

    location: str
    threads: int
    checkpoints: int
    writes: int
    bytes: int
    """The file, its write-ahead log and shared-memory file, as they are on disk."""
    free_bytes: int
    """Pages inside the file that deleted data left free (``chatbot db vacuum`` returns them)."""
    parts: tuple[tuple[str, int], ...] = ()
    """Bytes of each part (:data:`PARTS`), tables with their indexes."""
    turns: int = 0
    """The user's messages: a turn each."""
    text_bytes: int = 0
    """UTF-8 bytes of every message's text (what was said, folded messages too)."""

    @property
    def per_turn(self) -> float | None:
        """Bytes a turn, everything included (``None`` before the first turn)."""
        return self.bytes / self.turns if self.turns else None

    def record(self) -> dict[str, Any]:
        """As JSON (``chatbot db stats --json``)."""
        return {
            "location": self.location,
            "threads": self.threads,
            "checkpoints": self.checkpoints,
            "pending_writes": self.writes,
            "bytes": self.bytes,
            "free_bytes": self.free_bytes,
            "parts": dict(self.parts),
            "turns": self.turns,
            "text_bytes": self.text_bytes,
            "bytes_per_turn": round(self.per_turn) if self.per_turn is not None else None,
        }


PARTS = ("checkpoints", "pending writes", "search index", "other")
"""What ``db stats`` says the space goes to: LangGraph's checkpoints (with their blobs), its
pending writes, chatbot's search index (messages, FTS5), and the rest (thread listing, leases,
marks, the schema)."""


def part_of(table: str) -> str:
    """The part of :data:`PARTS` a table or index belongs to."""
    if table.startswith(("checkpoint_writes", "writes", "sqlite_autoindex_writes")):
        return "pending writes"
    if table.startswith(("checkpoints", "checkpoint_blobs", "sqlite_autoindex_checkpoints")):
        return "checkpoints"
    if table.startswith(("chatbot_messages", "sqlite_autoindex_chatbot_messages")):
        return "search index"
    return "other"


def sum_parts(sizes: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    """Sizes by table summed by part, in the order of :data:`PARTS`."""
    totals = dict.fromkeys(PARTS, 0)
    for table, size in sizes:
        totals[part_of(str(table))] += int(size or 0)
    return tuple(totals.items())


POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(db: str) -> bool:
    """True when ``CHATBOT_DB`` names a PostgreSQL database rather than a SQLite file."""
    return db.strip().lower().startswith(POSTGRES_SCHEMES)


def thread_record(info: ThreadInfo) -> dict[str, Any]:
    """A thread listing row as JSON (``chatbot threads --json``)."""
    return {
        "thread_id": info.thread_id,
        "messages": info.message_count,
        "has_summary": info.has_summary,
        "checkpoints": info.checkpoints,
        "last_active": info.last_active.isoformat() if info.last_active else None,
        "title": info.title,
        "origin": (
            {"thread_id": info.origin_thread, "checkpoint_id": info.origin_checkpoint}
            if info.origin_thread
            else None
        ),
    }


def checkpoint_time(checkpoint_id: str) -> datetime | None:
    """When a checkpoint was written, read from its time-ordered (v6) UUID; no deserialising.

    (Read by hand, as LangGraph writes it, 8-4-4-4-12 hex digits: the uuid module imports
    platform, a tenth of what ``threads --json`` takes, to read one field.)"""
    if not isinstance(checkpoint_id, str) or not _UUID_SHAPE.fullmatch(checkpoint_id):
        return None  # (not LangGraph's: a row written by something else)
    value = int(checkpoint_id.replace("-", ""), 16)
    if (value >> 76) & 0xF != 6 or (value >> 62) & 0b11 != 0b10:  # version 6, RFC variant
        return None
    # v6 (RFC 9562): the 60-bit timestamp's high 48 bits, the version, then its low 12 bits
    ticks = ((value >> 80) << 12) | ((value >> 64) & 0x0FFF)
    seconds = (ticks - _UUID_EPOCH_OFFSET) / 10_000_000
    return datetime.fromtimestamp(seconds, tz=UTC)


def _now() -> str:
    return datetime.now(tz=UTC).isoformat(timespec="seconds")


def _kind_of_special_file(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refuse_other_files(path: Path) -> None:
    """Refuse, before SQLite opens it, a path that exists but cannot be a chatbot database.

    A folder, a device (``/dev/null`` would get a ``-journal`` file next to it), a named pipe
    or socket, and a non-empty file that is not SQLite at all. Only reads: nothing is written.
    """
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return  # created later, or one clear error from creating its folder
    if not stat.S_ISREG(mode):
        raise StoreError(
            f"cannot use {str(path)!r} as the database: it is {_kind_of_special_file(mode)}, "
            "not a file; choose another --db"
        )
    with path.open("rb") as file:
        header = file.read(len(_SQLITE_HEADER))
    if header and header != _SQLITE_HEADER:
        raise StoreError(
            f"{str(path)!r} is not a SQLite database, so chatbot leaves it untouched: "
            "choose another --db (a new file, or a chatbot database)"
        )


LANGGRAPH_SQLITE_TABLES = frozenset({"checkpoints", "writes"})
"""What LangGraph's ``SqliteSaver`` makes: a database holding only these is another LangGraph
program's (chatbot's own always have ``chatbot_threads`` too, since its first version)."""


class Owner(NamedTuple):
    """Whose a database is, read before anything is written to it."""

    kind: str
    """``chatbot`` (marked), ``unmarked chatbot`` (made before the mark), ``new`` (nothing in
    it yet), ``langgraph`` (another LangGraph program's) or ``other``."""
    what: str = ""
    """For ``langgraph`` and ``other``: what was found (``tables users, orders``)."""


def tables_named(tables: Sequence[str]) -> str:
    shown = ", ".join(tables[:5]) + (f" and {len(tables) - 5} more" if len(tables) > 5 else "")
    return f"{'table' if len(tables) == 1 else 'tables'} {shown}"


def _sqlite_owner(conn: sqlite3.Connection) -> Owner:
    """Whose the open SQLite database is (reads only).

    Marked with :data:`APPLICATION_ID`: chatbot's. Unmarked, with no other mark
    (``user_version`` is what SQLite programs number their schema with): empty is new; only
    chatbot's tables, ``chatbot_threads`` among them, is chatbot's from before the mark; only
    LangGraph's ``checkpoints`` and ``writes`` is another LangGraph program's; anything else is
    another program's."""
    (application_id,) = conn.execute("PRAGMA application_id").fetchone()
    if application_id == APPLICATION_ID:
        return Owner("chatbot")
    if application_id != 0:
        return Owner("other", f"application id {application_id}")
    (user_version,) = conn.execute("PRAGMA user_version").fetchone()
    if user_version != 0:
        return Owner("other", f"user version {user_version}")
    tables = sorted(
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
        )
        if not name.startswith("sqlite_")
    )
    foreign = [name for name in tables if name not in _OWN_TABLES]
    if foreign:
        return Owner("other", tables_named(foreign))
    if not tables:
        return Owner("new")
    if "chatbot_threads" in tables:
        return Owner("unmarked chatbot")
    if set(tables) <= LANGGRAPH_SQLITE_TABLES:
        return Owner("langgraph", tables_named(tables))
    return Owner("other", tables_named(tables))


def sqlite_owner(db: str) -> tuple[Owner, int]:
    """Whose an existing SQLite file is, and how many threads a LangGraph database holds:
    read from the file opened read-only (``chatbot db adopt`` asks before writing)."""
    path = Path(db).expanduser()
    _refuse_other_files(path)
    conn = sqlite3.connect(path.absolute().as_uri() + "?mode=ro", uri=True)
    try:
        owner = _sqlite_owner(conn)
        threads = 0
        if owner.kind == "langgraph":
            ((threads,),) = conn.execute(
                "SELECT COUNT(DISTINCT thread_id) FROM checkpoints WHERE checkpoint_ns = ''"
            ).fetchall()
        return owner, int(threads)
    except sqlite3.Error as error:
        if _in_read_only_place(error, str(path)):  # (adopting writes: it cannot be adopted)
            raise _read_only(str(path)) from None
        raise damage(error, str(path)) or StoreError(
            f"cannot open the database {str(path)!r}: {error}"
        ) from None
    finally:
        conn.close()


class ForeignDatabase(StoreError):
    """Another program's database: refused, and left untouched."""


class EmptyDatabase(StoreError):
    """A database with nothing in it yet (an empty file, a PostgreSQL database without
    tables), opened to read: nothing is made in it. A reading command reads it as it reads a
    file that does not exist yet."""

    def __init__(self, path: str) -> None:
        super().__init__(f"the database {path!r} is empty: it has no threads to read yet")


class LangGraphDatabase(ForeignDatabase):
    """Another LangGraph program's database, which ``chatbot db adopt`` can take on purpose."""

    def __init__(self, message: str, threads: int, tables: str) -> None:
        super().__init__(message)
        self.threads = threads
        self.tables = tables


def refuse_foreign(
    owner: Owner, path: str, kind: str, threads: Callable[[], int], elsewhere: str = ""
) -> None:
    """Raise :class:`ForeignDatabase` unless ``owner`` says the database may be opened.
    ``kind`` names the database for people (``SQLite``, ``PostgreSQL``); ``threads`` counts
    a LangGraph database's threads (asked only for one); ``elsewhere`` says where else
    chatbot's tables could go (default: a new file, or a chatbot database)."""
    if owner.kind == "other":
        elsewhere = elsewhere or "a new file, or a chatbot database"
        raise ForeignDatabase(
            f"{path!r} is another program's {kind} database ({owner.what}, no chatbot mark), "
            f"so chatbot leaves it untouched: choose another --db ({elsewhere})"
        )
    if owner.kind == "langgraph":
        from chatbot.plural import counted

        count = threads()
        raise LangGraphDatabase(
            f"{path!r} is another LangGraph program's {kind} database ({counted(count, 'thread')} "
            f"in its {owner.what}, no chatbot mark), so chatbot leaves it untouched: choose "
            f"another --db, or take it over on purpose with 'chatbot db adopt --db {path}'",
            count,
            owner.what,
        )


def check_schema_version(applied: Iterable[int], path: str, read_only: bool) -> str | None:
    """A database whose ``chatbot_migrations`` records a migration this chatbot does not know
    was written by a newer chatbot: writing to it is refused (:class:`StoreError`); reading
    it is allowed, with the note returned."""
    newest, known = max(applied, default=0), len(MIGRATIONS)
    if newest <= known:
        return None
    said = (
        f"{path!r} was written by a newer chatbot (its schema is at version {newest}; this "
        f"one knows up to {known})"
    )
    if read_only:
        return f"{said}: reading only; upgrade chatbot to write to it"
    raise StoreError(
        f"{said}, so this one does not write to it: upgrade chatbot (reading commands still work)"
    )


def _retry_locked(action: Any, attempts: int = 20) -> Any:
    """Run a schema statement, waiting out another process that holds the write lock."""
    for attempt in range(attempts):
        try:
            return action()
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    return None


class Migrated(NamedTuple):
    """What ``chatbot db migrate`` did (or, in a dry run, would do)."""

    values: int
    """Stored values rewritten in the compact form."""
    before: int
    """Their bytes as they were."""
    after: int
    """Their bytes now."""


_UNCOMPRESSED = "%+zstd"
"""What a compressed value's type ends with, as a ``NOT LIKE`` pattern."""


class SqlStore:
    """What both databases do alike: chatbot's tables and LangGraph's checkpoint index, in SQL
    written once (``?`` placeholders; a dialect translates). :class:`Store` is SQLite;
    ``chatbot.store.postgres.PgStore`` is PostgreSQL."""

    path: str
    """Where the threads live, as shown to people (a URL's password is never in it)."""
    checkpoint_tables: tuple[str, ...]
    """LangGraph's tables keyed by thread id (renaming and deleting move them all)."""
    compressible: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    """LangGraph's tables holding serialized values: (table, value column, key columns)."""
    notice: str | None = None
    """Something to tell whoever opened it (a newer chatbot's database, opened to read)."""

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _write(self, *statements: tuple[str, Sequence[Any]]) -> int:
        """Run statements in one transaction; the last one's row count."""
        raise NotImplementedError

    @property
    def saver(self) -> BaseCheckpointSaver[str]:
        raise NotImplementedError

    def try_lease(
        self,
        thread_id: str,
        holder: str,
        seconds: float = LEASE_SECONDS,
        replacing: str | None = None,
    ) -> bool:
        """Take (or renew) the thread's lease for ``holder``; False while another holds an
        unexpired one, unless that one is ``replacing`` (a holder known to be gone)."""
        raise NotImplementedError

    def lease_holder(self, thread_id: str) -> str | None:
        """Who holds the thread's lease (its row may have expired), or None."""
        rows = self._query("SELECT holder FROM chatbot_leases WHERE thread_id = ?", (thread_id,))
        return str(rows[0][0]) if rows else None

    def lease_taken(self, thread_id: str) -> str | None:
        """Who holds the thread's lease and has not let it expire, or None (a read only)."""
        rows = self._query(
            "SELECT holder FROM chatbot_leases WHERE thread_id = ? AND expires_at >= ?",
            (thread_id, time.time()),
        )
        return str(rows[0][0]) if rows else None

    def stats(self) -> StoreStats:
        raise NotImplementedError

    def note_adopted(self) -> None:
        """Mark the database as taken over from another LangGraph program (:data:`ADOPTED_MARK`)."""
        self._write((MARK_INDEXED, (ADOPTED_MARK, _now())))
        self._adopted = True

    _adopted: bool | None = None

    @property
    def adopted(self) -> bool:
        """True for a database taken over from another LangGraph program, which shares it."""
        if self._adopted is None:
            try:
                rows = self._query("SELECT 1 FROM chatbot_marks WHERE name = ?", (ADOPTED_MARK,))
            except Exception:  # (a database being set up: chatbot's tables come after LangGraph's)
                return False
            self._adopted = bool(rows)
        return self._adopted

    def uncompressed_values(self) -> int:
        """How many stored values are not compressed (what ``migrate_values`` looks at)."""
        total = 0
        for table, _, _ in self.compressible:
            ((count,),) = self._query(
                f"SELECT COUNT(*) FROM {table} WHERE type NOT LIKE ?", (_UNCOMPRESSED,)
            )
            total += count
        return total

    def migrate_values(
        self,
        *,
        dry_run: bool = False,
        progress: Callable[[int], object] | None = None,
        batch: int = 200,
    ) -> Migrated:
        """Rewrite the values an older chatbot stored uncompressed as the saver writes them now
        (:mod:`chatbot.store.compression`), ``batch`` rows a transaction: a run cut short keeps
        what it did, and the next one goes on from there. A value is replaced only if it is
        still the one read (its type unchanged); ``dry_run`` counts without writing.
        ``progress`` is called with the number of values looked at, after each batch."""
        from chatbot.store import compression

        values = before = after = 0
        for table, column, key in self.compressible:
            keys, marks = ", ".join(key), ", ".join("?" * len(key))
            matches = " AND ".join(f"{name} = ?" for name in key)
            update = f"UPDATE {table} SET type = ?, {column} = ? WHERE {matches} AND type = ?"
            last: tuple[Any, ...] | None = None
            while True:
                after_last = f"AND ({keys}) > ({marks})" if last is not None else ""
                rows = self._query(
                    f"SELECT {keys}, type, {column} FROM {table} "
                    f"WHERE type NOT LIKE ? {after_last} ORDER BY {keys} LIMIT {int(batch)}",
                    (_UNCOMPRESSED, *(last or ())),
                )
                if not rows:
                    break
                updates: list[tuple[str, Sequence[Any]]] = []
                for row in rows:
                    ident, kind, data = row[: len(key)], row[-2], row[-1]
                    if not kind or data is None:
                        continue
                    data = bytes(data)
                    new_kind, new_data = compression.compress(kind, data)
                    if new_kind != kind:
                        values, before, after = (
                            values + 1,
                            before + len(data),
                            after + len(new_data),
                        )
                        updates.append((update, (new_kind, new_data, *ident, kind)))
                last = tuple(rows[-1][: len(key)])
                if updates and not dry_run:
                    self._write(*updates)
                if progress is not None:
                    progress(len(rows))
        return Migrated(values, before, after)

    def uncompressed_search_rows(self) -> int:
        """How many search rows keep text :meth:`migrate_search_text` may compress."""
        return 0

    def migrate_search_text(
        self,
        *,
        dry_run: bool = False,
        progress: Callable[[int], object] | None = None,
        batch: int = 500,
    ) -> Migrated:
        """Compress the search rows' text an older chatbot stored as it was (SQLite's, see
        :meth:`Store.stored_text`); PostgreSQL's stays text, which its index reads."""
        return Migrated(0, 0, 0)

    def vacuum(self) -> tuple[int, int]:
        raise NotImplementedError

    def close(self, wait: float | None = None) -> None:
        """Close the database; ``wait``: at most that many seconds for another thread's use."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- listing, plain SQL ------------------------------------------------------------

    def list_threads(self, thread_id: str | None = None) -> list[ThreadInfo]:
        """Every thread (or just one) with checkpoints, newest activity first.

        Plain SQL over the checkpoint index and the listing table: no checkpoint is read.
        """
        only = "AND thread_id = ?" if thread_id is not None else ""
        rows = self._query(
            f"""
            SELECT c.thread_id, c.checkpoints, c.newest,
                   t.title, t.message_count, t.has_summary, t.origin_thread, t.origin_checkpoint
            FROM (
                SELECT thread_id, COUNT(*) AS checkpoints, MAX(checkpoint_id) AS newest
                FROM checkpoints
                WHERE checkpoint_ns = '' {only}
                GROUP BY thread_id
            ) AS c
            LEFT JOIN chatbot_threads AS t ON t.thread_id = c.thread_id
            ORDER BY c.newest DESC
            """,
            () if thread_id is None else (thread_id,),
        )
        return [
            ThreadInfo(
                thread_id=row[0],
                checkpoints=row[1],
                last_active=checkpoint_time(row[2]),
                title=row[3] or "",
                message_count=row[4],
                has_summary=None if row[5] is None else bool(row[5]),
                origin_thread=row[6],
                origin_checkpoint=row[7],
            )
            for row in rows
        ]

    def thread_exists(self, thread_id: str) -> bool:
        """True if the thread has at least one checkpoint."""
        return bool(
            self._query("SELECT 1 FROM checkpoints WHERE thread_id = ? LIMIT 1", (thread_id,))
        )

    def newest_thread(self) -> str | None:
        """The most recently active thread's id (its newest checkpoint is the newest)."""
        rows = self._query(
            "SELECT thread_id FROM checkpoints WHERE checkpoint_ns = '' "
            "ORDER BY checkpoint_id DESC LIMIT 1"
        )
        return rows[0][0] if rows else None

    def thread_info(self, thread_id: str) -> ThreadInfo | None:
        """The listing row of one thread, or ``None`` if it has no checkpoints."""
        found = self.list_threads(thread_id)
        return found[0] if found else None

    def record_turn(
        self,
        thread_id: str,
        *,
        title: str,
        message_count: int,
        has_summary: bool,
        origin: tuple[str, str | None] | None = None,
    ) -> None:
        """Remember what a listing shows about a thread after a turn.

        The title is set once, by the first message, and cleared when the thread is emptied.
        """
        now = _now()
        self._write(
            (
                """
                INSERT INTO chatbot_threads (thread_id, title, message_count, has_summary,
                    created_at, updated_at, origin_thread, origin_checkpoint)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT(thread_id) DO UPDATE SET
                    title = CASE
                        WHEN excluded.message_count = 0 AND excluded.has_summary = 0 THEN ''
                        WHEN chatbot_threads.title = '' THEN excluded.title
                        ELSE chatbot_threads.title END,
                    message_count = excluded.message_count,
                    has_summary = excluded.has_summary,
                    updated_at = excluded.updated_at,
                    origin_thread = COALESCE(chatbot_threads.origin_thread, excluded.origin_thread),
                    origin_checkpoint = COALESCE(chatbot_threads.origin_checkpoint,
                                                 excluded.origin_checkpoint)
                """,
                (
                    thread_id,
                    title,
                    message_count,
                    int(has_summary),
                    now,
                    now,
                    origin[0] if origin else None,
                    origin[1] if origin else None,
                ),
            )
        )

    _ROW_COLUMNS = (
        "thread_id, title, message_count, has_summary, created_at, updated_at, "
        "origin_thread, origin_checkpoint"
    )

    def thread_row(self, thread_id: str) -> tuple[Any, ...] | None:
        """A thread's listing row as stored (for copying it to another database)."""
        rows = self._query(
            f"SELECT {self._ROW_COLUMNS} FROM chatbot_threads WHERE thread_id = ?", (thread_id,)
        )
        return tuple(rows[0]) if rows else None

    def put_thread_row(self, row: Sequence[Any]) -> None:
        """Store a listing row as :meth:`thread_row` gave it, replacing the thread's."""
        self._write(
            ("DELETE FROM chatbot_threads WHERE thread_id = ?", (row[0],)),
            (
                f"INSERT INTO chatbot_threads ({self._ROW_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                tuple(row),
            ),
        )

    def rename_thread(self, thread_id: str, new_id: str) -> None:
        """Move every checkpoint, write and the listing row of a thread to a new id.

        Checkpoint blobs do not contain the thread id (LangGraph keeps it out of metadata),
        so renaming is a plain UPDATE in one transaction.
        """
        self._write(
            ("DELETE FROM chatbot_messages WHERE thread_id = ?", (new_id,)),  # none, normally
            *(
                (f"UPDATE {table} SET thread_id = ? WHERE thread_id = ?", (new_id, thread_id))
                for table in (*self.checkpoint_tables, "chatbot_threads", "chatbot_messages")
            ),
        )
        self._forget_messages(thread_id, new_id)

    def delete_thread(self, thread_id: str) -> bool:
        """Delete a thread's checkpoints and row; False if there was no such thread."""
        existed = self.thread_exists(thread_id)
        self._write(  # what the saver's delete_thread does, and our rows
            *(
                (f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))
                for table in (*self.checkpoint_tables, "chatbot_threads", "chatbot_messages")
            )
        )
        self._forget_messages(thread_id)
        return existed

    # --- the search index (chatbot.store.search) -----------------------------------------------

    _message_index: MessageIndex | None = None

    @property
    def message_index(self) -> MessageIndex:
        """Indexes the messages of each checkpoint the saver writes (made on first use)."""
        if self._message_index is None:
            from chatbot.store.msgindex import MessageIndex

            self._message_index = MessageIndex(self._query, self._write, self.stored_text)
        return self._message_index

    @staticmethod
    def stored_text(text: str) -> str | bytes:
        """A message's text as this database's search rows keep it."""
        return text

    def _forget_messages(self, *thread_ids: str) -> None:
        if self._message_index is not None:
            for thread_id in thread_ids:
                self._message_index.forget(thread_id)

    def release_lease(self, thread_id: str, holder: str) -> None:
        """Give the thread's lease back (if ``holder`` still has it)."""
        self._write(
            ("DELETE FROM chatbot_leases WHERE thread_id = ? AND holder = ?", (thread_id, holder))
        )

    # --- keeping it small --------------------------------------------------------------

    def inactive_threads(self, days: float, now: datetime | None = None) -> list[ThreadInfo]:
        """Threads whose newest checkpoint is more than ``days`` old, least recently active
        first. A thread's activity is its newest checkpoint's time (its UUID's)."""
        cutoff = (now or datetime.now(tz=UTC)).timestamp() - days * 86_400
        stale = [
            info
            for info in self.list_threads()
            if info.last_active is not None and info.last_active.timestamp() < cutoff
        ]
        return sorted(stale, key=lambda info: info.last_active or datetime.min.replace(tzinfo=UTC))

    _writes_table = "writes"
    _mark_pruned = (
        "UPDATE checkpoints SET metadata = CAST(json_set(CAST(metadata AS TEXT), '$.' || ?, "
        "COALESCE(json_extract(CAST(metadata AS TEXT), '$.' || ?), 0) + ?) AS BLOB) "
        "WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id = ?"
    )
    """Adds to a checkpoint's count of pruned checkpoints that followed it (key, key, count,
    thread, checkpoint)."""

    def _after_pruning(self, thread_id: str) -> list[tuple[str, Sequence[Any]]]:
        """What else pruning a thread's branches removes (PostgreSQL: the blobs no checkpoint
        left names)."""
        return []

    # --- a thread's checkpoints, plain SQL ---------------------------------------------

    def checkpoint_parents(self, thread_id: str) -> list[tuple[str, str | None]]:
        """A thread's checkpoints as (id, parent id), newest first: ids only, reading neither a
        checkpoint nor its metadata."""
        rows = self._query(
            "SELECT checkpoint_id, parent_checkpoint_id FROM checkpoints "
            "WHERE thread_id = ? AND checkpoint_ns = '' ORDER BY checkpoint_id DESC",
            (thread_id,),
        )
        return [(row[0], row[1]) for row in rows]

    def checkpoint_metadata(self, thread_id: str, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The metadata of some of a thread's checkpoints, by id (JSON: none is deserialised)."""
        if not ids:
            return {}
        rows = self._query(
            "SELECT checkpoint_id, metadata FROM checkpoints WHERE thread_id = ? "
            f"AND checkpoint_ns = '' AND checkpoint_id IN ({', '.join('?' * len(ids))})",
            (thread_id, *ids),
        )
        return {row[0]: _metadata(row[1]) for row in rows}

    def recent_checkpoint_ids(self, thread_id: str, limit: int) -> list[str]:
        """The ids of a thread's newest ``limit`` checkpoints, newest first."""
        rows = self._query(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '' "
            "ORDER BY checkpoint_id DESC LIMIT ?",
            (thread_id, max(0, limit)),
        )
        return [row[0] for row in rows]

    def latest_checkpoint_id(self, thread_id: str) -> str | None:
        """The id of a thread's newest checkpoint, or ``None``."""
        rows = self._query(
            "SELECT MAX(checkpoint_id) FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ''",
            (thread_id,),
        )
        return rows[0][0] if rows else None


def _metadata(value: Any) -> dict[str, Any]:
    """Checkpoint metadata as stored: JSON text (SQLite) or already a dict (PostgreSQL)."""
    if isinstance(value, dict):
        return value
    return json.loads(value) if value else {}


def _read_only(path: str) -> StoreError:
    return StoreError(
        f"the database {path!r} is read-only: check its permissions, or use --db for another file"
    )


def _in_read_only_place(error: BaseException, path: str) -> bool:
    """True when SQLite could not open an existing database because its folder (where the
    write-ahead log goes) or the file cannot be written."""
    if getattr(error, "sqlite_errorcode", None) != sqlite3.SQLITE_CANTOPEN:
        return False
    if not os.path.isfile(path):
        return False
    return not os.access(os.path.dirname(os.path.abspath(path)), os.W_OK) or not os.access(
        path, os.W_OK
    )


class Store(SqlStore):
    """The app's SQLite database: LangGraph checkpoints keyed by ``thread_id`` plus thread rows.

    One connection, shared with the ``SqliteSaver`` (both guard it with one lock), in WAL mode
    with a busy timeout so that several processes can use the same file. Opening it imports
    nothing of LangGraph: the saver is made on first use (and at once only for a new file,
    whose checkpoint tables LangGraph creates).
    """

    def __init__(
        self, db: str | os.PathLike[str], *, read_only: bool = False, adopt: bool = False
    ) -> None:
        """Open (or create) the database ``db``. ``read_only``: for a command that only reads,
        which then writes nothing to the file (an empty one is :class:`EmptyDatabase`),
        unless it lacks some of what reading needs (a database made by an older chatbot: set
        up once). ``adopt``:
        take over another LangGraph program's database (``chatbot db adopt``)."""
        self.path = str(db)
        self.lock = threading.RLock()
        """One lock for the connection: LangGraph's reads and writes, ours, and every read of
        ours too. A read running on another thread of this process holds a read transaction
        open on the shared connection; a write begun meanwhile could not wait for another
        process's commit (SQLite answers "database is locked" at once, as the snapshot it
        reads is stale), and a turn would fail. Reentrant: a write may read."""
        self._saver: LocalSaver | None = None
        self.read_only = read_only and self.path != ":memory:"
        try:
            if self.path != ":memory:":
                from chatbot.config.sources import check_db

                try:
                    check_db(self.path)
                except ValueError as error:
                    raise StoreError(f"cannot use {self.path!r} as the database: {error}") from None
                self.path = str(Path(self.path).expanduser())
                _refuse_other_files(Path(self.path))
            if self.read_only and not self._open(read_only=True, adopt=False):
                self.conn.close()
                self.read_only = False  # nothing to read yet, or an older chatbot's schema
            if not self.read_only:
                if self.path != ":memory:":
                    create_private_file(Path(self.path))
                self._open(read_only=False, adopt=adopt)
        except (NotADirectoryError, FileExistsError):
            raise StoreError(
                f"cannot open the database {self.path!r}: a file stands where a folder of its "
                "path should be; choose another --db"
            ) from None
        except (sqlite3.Error, OSError) as error:
            if isinstance(error, sqlite3.Error) and (damaged := damage(error, self.path)):
                raise damaged from None
            if "readonly" in str(error) or _in_read_only_place(error, self.path):
                raise _read_only(self.path) from None
            raise StoreError(f"cannot open the database {self.path!r}: {error}") from None

    def _open(self, *, read_only: bool, adopt: bool) -> bool:
        """Connect and set up; with ``read_only``, False (connection open) when the database
        cannot be read as it is, and must be set up first."""
        if read_only:
            if not Path(self.path).is_file():
                raise StoreError(f"no database {self.path!r}: check --db or CHATBOT_DB")
            target, uri = Path(self.path).absolute().as_uri() + "?mode=ro", True
        else:
            target, uri = self.path, False
        self.conn = sqlite3.connect(
            target, uri=uri, check_same_thread=False, timeout=BUSY_TIMEOUT_SECONDS
        )
        add_functions(self.conn)
        try:
            return self._set_up(read_only, adopt)
        except sqlite3.OperationalError as error:
            self.conn.close()
            if not (read_only and self._unshareable(error)):
                raise
        except BaseException:
            self.conn.close()
            raise
        # A read-only place: SQLite's readers of a WAL database share its -shm file, which
        # cannot be made there, so no writer can be either. Read it as the unchanging file
        # it is, as SQLite's documentation advises (immutable=1).
        self.immutable = True
        self.conn = sqlite3.connect(
            target + "&immutable=1", uri=True, check_same_thread=False, timeout=0
        )
        add_functions(self.conn)
        try:
            return self._set_up(read_only, adopt)
        except BaseException:
            self.conn.close()
            raise

    immutable = False
    """Opened read-only with ``immutable=1``: the file is in a place no one can write."""

    def _unshareable(self, error: sqlite3.OperationalError) -> bool:
        """True when a read-only open failed because SQLite cannot make the files a WAL
        database's readers share (``-shm``, ``-wal``) in the file's folder, and nothing waits
        in a write-ahead log (which ``immutable=1`` would not read)."""
        wal = Path(self.path + "-wal")
        return _in_read_only_place(error, self.path) and (
            not wal.exists() or wal.stat().st_size == 0
        )

    def _set_up(self, read_only: bool, adopt: bool) -> bool:
        """Check the file is chatbot's, then make the schema and the mark (idempotent). Read
        only, nothing is written: False if what reading needs is not there yet."""
        self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
        owner = _retry_locked(lambda: _sqlite_owner(self.conn))
        if not (adopt and owner.kind == "langgraph"):
            refuse_foreign(owner, self.path, "SQLite", self._count_threads)
        if read_only and owner.kind == "new":
            raise EmptyDatabase(self.path)
        applied = self._applied_migrations()
        if max(applied or (0,)) > len(MIGRATIONS):  # (a newer chatbot's, or a damaged page's
            self._check_intact()  # numbers: damage is said as damage)
        self.notice = check_schema_version(applied or (), self.path, read_only)
        if read_only:
            (journal,) = self.conn.execute("PRAGMA journal_mode").fetchone()
            tables = {name for (name,) in self.conn.execute("SELECT name FROM sqlite_master")}
            wal = journal == "wal" or self.immutable  # (which reports "delete")
            return wal and {"checkpoints", "writes", "chatbot_threads"} <= tables
        if owner.kind == "new":  # the mark first: a set-up cut short is still chatbot's
            self._mark()
        if self.path != ":memory:":
            _retry_locked(lambda: self.conn.execute("PRAGMA journal_mode=WAL"))
        # SQLite's advice for WAL: a commit reaches the log without waiting for the disk, so a
        # crash of chatbot loses nothing and a power cut may lose the last turns, never the
        # file (FULL waits for the disk at every checkpoint: most of a turn's system time).
        self.conn.execute("PRAGMA synchronous = NORMAL")
        upgrading = owner.kind != "new"
        if not self._has_checkpoint_tables():
            if upgrading:
                self._check_intact()
                upgrading = False
            _ = self.saver  # LangGraph creates its tables
        if applied is None or not applied >= set(range(1, len(MIGRATIONS) + 1)):
            if upgrading:  # (checked without the write lock: opening to read never waits
                self._check_intact()  # for another process's long write)
            _retry_locked(self._migrate)
        if owner.kind != "chatbot":
            self._mark()
        self._check_writable()
        return True

    def _mark(self) -> None:
        _retry_locked(lambda: self.conn.execute(f"PRAGMA application_id = {APPLICATION_ID}"))

    def _count_threads(self) -> int:
        ((count,),) = self.conn.execute(
            "SELECT COUNT(DISTINCT thread_id) FROM checkpoints WHERE checkpoint_ns = ''"
        ).fetchall()
        return int(count)

    def _check_intact(self) -> None:
        """Before changing the schema of a database that holds threads: SQLite's quick check,
        so that a damaged file is reported rather than written into."""
        ((found,),) = self.conn.execute("PRAGMA quick_check(1)").fetchall()
        if found != "ok":
            raise DamagedDatabase(self.path, found.replace("*** in database main ***", ""))

    def _applied_migrations(self) -> set[int] | None:
        """The migrations applied (read without taking any lock); None with no such table."""
        try:
            return {v for (v,) in self.conn.execute("SELECT version FROM chatbot_migrations")}
        except sqlite3.OperationalError as error:
            if "no such table" not in str(error):
                raise
            return None

    def _migrate(self) -> None:
        """Apply the migrations this database lacks, under SQLite's write lock (a search index
        made before the first checkpoint is marked complete: there is nothing to catch up)."""
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.execute(MIGRATIONS_TABLE)
                applied = {
                    v for (v,) in self.conn.execute("SELECT version FROM chatbot_migrations")
                }
                for version, migration in enumerate(MIGRATIONS, start=1):
                    if version not in applied:
                        for statement in migration_statements(migration, "sqlite"):
                            self.conn.execute(statement)
                        self.conn.execute(
                            "INSERT INTO chatbot_migrations (version, applied_at) VALUES (?, ?)",
                            (version, _now()),
                        )
                if (
                    INDEX_MIGRATION not in applied
                    and not self.conn.execute("SELECT 1 FROM checkpoints LIMIT 1").fetchone()
                ):  # an index made before the first checkpoint holds every message
                    self.conn.execute(MARK_INDEXED, (INDEXED_MARK, _now()))
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise

    def _has_checkpoint_tables(self) -> bool:
        """True when LangGraph's tables are there, as its current version makes them."""
        columns = {row[1] for row in self.conn.execute("PRAGMA table_info(writes)")}
        tables = {
            name
            for (name,) in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'checkpoints'"
            )
        }
        return "task_path" in columns and "checkpoints" in tables

    @staticmethod
    def stored_text(text: str) -> str | bytes:
        """A message's text as SQLite's search rows keep it: compressed where that is smaller
        (migration 10)."""
        from chatbot.store.compression import pack_text
        from chatbot.store.msgindex import keeps_compressed

        return pack_text(text) if keeps_compressed(text) else text

    _PACKABLE = (
        "FROM chatbot_messages WHERE typeof(content) = 'text' "
        f"AND length(CAST(content AS BLOB)) > {SMALLEST}"
    )

    def uncompressed_search_rows(self) -> int:
        ((count,),) = self._query(f"SELECT COUNT(*) {self._PACKABLE}")
        return int(count)

    def migrate_search_text(
        self,
        *,
        dry_run: bool = False,
        progress: Callable[[int], object] | None = None,
        batch: int = 500,
    ) -> Migrated:
        """Each text row as :meth:`stored_text` keeps it now, ``batch`` rows a transaction (a
        row is replaced only if it still holds the text read; its text is the same, so the
        index keeps it as it is: migration 10's update trigger)."""
        rows_done = before = after = 0
        last = -1
        while True:
            rows = self._query(
                f"SELECT id, content {self._PACKABLE} AND id > ? ORDER BY id LIMIT {int(batch)}",
                (last,),
            )
            if not rows:
                break
            updates: list[tuple[str, Sequence[Any]]] = []
            for row_id, text in rows:
                packed = self.stored_text(text)
                if isinstance(packed, bytes):
                    rows_done += 1
                    before += len(text.encode())
                    after += len(packed)
                    updates.append(
                        (
                            "UPDATE chatbot_messages SET content = ? WHERE id = ? AND content = ?",
                            (packed, row_id, text),
                        )
                    )
            last = rows[-1][0]
            if updates and not dry_run:
                self._write(*updates)
            if progress is not None:
                progress(len(rows))
        return Migrated(rows_done, before, after)

    @property
    def saver(self) -> LocalSaver:
        """LangGraph's checkpointer on this connection, made (and set up) on first use."""
        if self._saver is None:
            from chatbot.store.saver import LocalSaver

            saver = LocalSaver(self.conn)
            saver.path = self.path
            # one lock for the connection, LangGraph's and ours (an RLock does all a Lock does)
            saver.lock = self.lock  # type: ignore[assignment]
            saver.message_index = self.message_index
            if self.adopted:  # (another LangGraph program reads it too)
                saver.keep_uncompressed()
            with self.lock:  # (LangGraph sets up under its lock too; here it is called directly)
                _retry_locked(saver.setup)
            self._saver = saver
        return self._saver

    def _check_writable(self) -> None:
        """Fail now, not after a reply, when turns could not be saved."""
        if self.path == ":memory:":
            return
        with self.lock:
            self.conn.execute("PRAGMA busy_timeout = 0")
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as error:
                if "locked" in str(error):  # another process is writing: this file takes
                    return  # writes, and opening (to read, often) does not wait for it
                raise
            finally:
                self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
            try:  # a real write, rolled back: a read-only file fails here, not after a reply
                self.conn.execute(
                    "INSERT INTO chatbot_threads (thread_id, created_at, updated_at) "
                    "VALUES (' probe ', '', '')"
                )
            finally:
                self.conn.execute("ROLLBACK")

    checkpoint_tables = ("checkpoints", "writes")
    compressible = (("checkpoints", "checkpoint", ("rowid",)), ("writes", "value", ("rowid",)))

    def close(self, wait: float | None = None) -> None:
        """Close the connection, once no other thread of this process is using it: the REPL
        leaves while its loading thread may still be setting LangGraph's tables up, and
        closing a SQLite connection under a running statement crashes the process.

        With ``wait``, give up after that many seconds and leave the connection to the end of
        the process (leaving the REPL): SQLite needs nothing at close, committed turns are on
        disk and a transaction cut short is rolled back when the file is next opened."""
        if not self.lock.acquire(timeout=-1 if wait is None else wait):
            return
        try:
            self.conn.close()
        finally:
            self.lock.release()

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.lock, reporting_damage(self.path):
            return self.conn.execute(sql, tuple(params)).fetchall()

    def _write(self, *statements: tuple[str, Sequence[Any]]) -> int:
        count = 0
        with self.lock, reporting_damage(self.path), self.conn:
            if self._saver is not None:  # (what its kept writes cannot have seen)
                self._saver.others_wrote += 1
            added = False
            for sql, params in statements:
                count = self.conn.execute(sql, tuple(params)).rowcount
                added = added or sql.startswith(ADDS_SEARCH_ROWS)
            if added:
                index_waiting(self.conn.execute)
        return count

    # --- one turn at a time per thread ------------------------------------------------------

    def try_lease(
        self,
        thread_id: str,
        holder: str,
        seconds: float = LEASE_SECONDS,
        replacing: str | None = None,
    ) -> bool:
        """Take (or renew) the thread's lease for ``holder``; False while another holds an
        unexpired one, unless that one is ``replacing``. Different threads never wait for each
        other."""
        now = time.time()
        acquired = self._write(
            (
                """
                INSERT INTO chatbot_leases (thread_id, holder, expires_at) VALUES (?, ?, ?)
                ON CONFLICT(thread_id) DO UPDATE SET
                    holder = excluded.holder, expires_at = excluded.expires_at
                WHERE chatbot_leases.holder = excluded.holder
                   OR chatbot_leases.expires_at < ?
                   OR chatbot_leases.holder = ?
                """,
                (thread_id, holder, now + seconds, now, replacing),
            )
        )
        return acquired == 1

    # --- keeping the file small ----------------------------------------------------------

    def stats(self) -> StoreStats:
        """Threads, checkpoints, pending writes and bytes of the database (file and WAL)."""
        ((threads,),) = self._query(
            "SELECT COUNT(DISTINCT thread_id) FROM checkpoints WHERE checkpoint_ns = ''"
        )
        ((checkpoints,),) = self._query("SELECT COUNT(*) FROM checkpoints")
        ((writes,),) = self._query("SELECT COUNT(*) FROM writes")
        ((page_size,),) = self._query("PRAGMA page_size")
        ((free,),) = self._query("PRAGMA freelist_count")
        try:  # (SQLite's dbstat table: in Python's builds, not in every SQLite)
            sizes = self._query("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
        except sqlite3.OperationalError:
            sizes = []
        ((turns, text),) = self._query(
            "SELECT COALESCE(SUM(role = 'user'), 0), "
            "COALESCE(SUM(length(CAST(chatbot_text(content) AS BLOB))), 0) "
            "FROM chatbot_messages"
        )
        return StoreStats(
            location=self.path,
            threads=threads,
            checkpoints=checkpoints,
            writes=writes,
            bytes=self._bytes_on_disk(),
            free_bytes=free * page_size,
            parts=sum_parts(sizes),
            turns=turns,
            text_bytes=text,
        )

    def _bytes_on_disk(self) -> int:
        if self.path == ":memory:":
            return 0
        total = 0
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                total += os.stat(self.path + suffix).st_size
        return total

    def vacuum(self) -> tuple[int, int]:
        """Give the space of deleted threads back to the file system (SQLite's ``VACUUM``,
        after folding the write-ahead log into the file). Returns bytes before and after."""
        before = self._bytes_on_disk()
        with self.lock:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.conn.execute("VACUUM")
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return before, self._bytes_on_disk()


# --- state through the graph ---------------------------------------------------------------


def thread_config(
    thread_id: str, checkpoint_id: str | None = None, metadata: dict[str, Any] | None = None
) -> RunnableConfig:
    """The ``RunnableConfig`` addressing a thread (and optionally one of its checkpoints);
    ``metadata`` goes into the checkpoints the run writes."""
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
        configurable["checkpoint_ns"] = ""
    config = cast("RunnableConfig", {"configurable": configurable})
    if metadata:
        config["metadata"] = metadata
    return config


def read_state(graph: ChatGraph, thread_id: str, checkpoint_id: str | None = None) -> StateSnapshot:
    """A thread's current state, or its state at one past checkpoint."""
    return graph.get_state(thread_config(thread_id, checkpoint_id))


def state_history(
    graph: ChatGraph, thread_id: str, limit: int | None = None
) -> Iterator[StateSnapshot]:
    """A thread's checkpoints, newest first; older ones still hold messages later folded."""
    return graph.get_state_history(thread_config(thread_id), limit=limit)
