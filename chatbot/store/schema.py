"""chatbot's own tables beside LangGraph's, for SQLite and PostgreSQL, and whose a database is.

``chatbot_threads`` holds what a listing shows (so listing never deserialises a checkpoint),
``chatbot_leases`` who is taking a turn on a thread, ``chatbot_messages`` every message once
per thread for search (FTS5's ``trigram`` on SQLite, ``pg_trgm`` on PostgreSQL) with
``chatbot_indexed`` how far each thread is indexed, and ``chatbot_marks`` named facts. The
schema's version is SQLite's ``user_version`` or PostgreSQL's ``chatbot_schema`` row: a newer
chatbot's database is only read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from chatbot.store.errors import StoreError

SCHEMA_VERSION = 1

APPLICATION_ID = 0x43686174  # "Chat": marks a SQLite file as a chatbot database

THREAD_TABLES = ("chatbot_threads", "chatbot_messages", "chatbot_indexed")
"""chatbot's tables keyed by thread id."""
TABLES = (*THREAD_TABLES, "chatbot_leases", "chatbot_marks")
COUNT_THREADS = "SELECT COUNT(DISTINCT thread_id) FROM checkpoints WHERE checkpoint_ns = ''"

_TABLES = (
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
    """CREATE TABLE IF NOT EXISTS chatbot_leases (
    thread_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS chatbot_indexed (
    thread_id TEXT PRIMARY KEY,
    checkpoint_id TEXT NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS chatbot_marks (
    name TEXT PRIMARY KEY,
    done_at TEXT NOT NULL
)""",
)

_MESSAGES = """CREATE TABLE IF NOT EXISTS chatbot_messages (
    id {id} PRIMARY KEY,
    thread_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    UNIQUE (thread_id, message_id)
)"""

SQLITE = (
    *_TABLES,
    _MESSAGES.format(id="INTEGER"),
    # (which trigrams a message holds, not where: search checks the rows it finds)
    """CREATE VIRTUAL TABLE IF NOT EXISTS chatbot_messages_fts USING fts5(
    content, content='chatbot_messages', content_rowid='id', tokenize='trigram',
    detail='none', columnsize=0
)""",
    """CREATE TRIGGER IF NOT EXISTS chatbot_messages_added AFTER INSERT ON chatbot_messages
BEGIN
    INSERT INTO chatbot_messages_fts (rowid, content) VALUES (new.id, new.content);
END""",
    """CREATE TRIGGER IF NOT EXISTS chatbot_messages_deleted AFTER DELETE ON chatbot_messages
BEGIN
    INSERT INTO chatbot_messages_fts (chatbot_messages_fts, rowid, content)
    VALUES ('delete', old.id, old.content);
END""",
)
"""The SQLite schema, made in one transaction (rows are added and deleted, never changed)."""

POSTGRESQL = (
    *_TABLES,
    _MESSAGES.format(id="BIGINT GENERATED ALWAYS AS IDENTITY"),
    # (GIN's fastupdate off: each message goes into the index at once, not a pending list)
    """DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
    CREATE INDEX IF NOT EXISTS chatbot_messages_trigrams
        ON chatbot_messages USING gin (content gin_trgm_ops) WITH (fastupdate = off);
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'chatbot: no pg_trgm index (%), search reads the messages', SQLERRM;
END
$$""",
    "CREATE TABLE IF NOT EXISTS chatbot_schema (version INTEGER NOT NULL)",
)
"""The PostgreSQL schema, made in one transaction with its version row."""

OLDER_TABLES = frozenset({"chatbot_migrations"})
"""What only a development build of chatbot from before 0.1.0 made."""


class Owner(NamedTuple):
    """Whose a database is, read before anything is written to it."""

    kind: str
    """``chatbot``, ``older chatbot`` (a development build's), ``new`` (nothing in it yet),
    ``langgraph`` (another LangGraph program's) or ``other``."""
    what: str = ""
    """For ``langgraph`` and ``other``: what was found (``tables users, orders``)."""
    version: int = 0


def tables_named(tables: Sequence[str]) -> str:
    shown = ", ".join(tables[:5]) + (f" and {len(tables) - 5} more" if len(tables) > 5 else "")
    return f"{'table' if len(tables) == 1 else 'tables'} {shown}"


def unmarked_owner(tables: Sequence[str], langgraph: frozenset[str], conn: Any) -> Owner:
    """Whose a database without chatbot's mark is (``conn``: open on it): LangGraph's tables
    alone, with checkpoints, another LangGraph program's; none, or LangGraph's empty (a set-up
    cut short), new; anything else another program's."""
    if OLDER_TABLES & set(tables):
        return Owner("older chatbot")
    foreign = [name for name in tables if name not in langgraph]
    if foreign:
        return Owner("other", tables_named(foreign))
    any_checkpoint = "SELECT 1 FROM checkpoints LIMIT 1"
    if "checkpoints" not in tables or conn.execute(any_checkpoint).fetchone() is None:
        return Owner("new")
    return Owner("langgraph", tables_named(tables))


class ForeignDatabase(StoreError):
    """Another program's database: refused, and left untouched."""


class EmptyDatabase(StoreError):
    """A database with nothing in it yet, opened to read: it is read as no file at all."""

    def __init__(self, path: str) -> None:
        super().__init__(f"the database {path!r} is empty: it has no threads to read yet")


class LangGraphDatabase(ForeignDatabase):
    """Another LangGraph program's database, which ``chatbot db adopt`` can take on purpose."""

    def __init__(self, message: str, threads: int, tables: str) -> None:
        super().__init__(message)
        self.threads = threads
        self.tables = tables


class OlderDatabase(StoreError):
    """A database a development build of chatbot wrote before 0.1.0, in a layout this
    version does not read."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"{path!r} was written by a development build of chatbot from before 0.1.0, whose "
            "storage this version does not read: with that build, save each thread with "
            "'chatbot export THREAD --format json -o THREAD.json', then bring it in here with "
            "'chatbot import THREAD.json' (or keep the file and choose another --db)"
        )


def refuse_foreign(
    owner: Owner, path: str, kind: str, threads: Callable[[], int], elsewhere: str = ""
) -> None:
    """Raise unless ``owner`` may be opened (:class:`ForeignDatabase`, :class:`OlderDatabase`).
    ``kind``: ``SQLite`` or ``PostgreSQL``; ``threads`` counts a LangGraph database's threads;
    ``elsewhere`` says where else chatbot's tables could go."""
    if owner.kind == "older chatbot":
        raise OlderDatabase(path)
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


def check_schema_version(version: int, path: str, read_only: bool) -> str | None:
    """A newer chatbot's database: writing to it is refused (:class:`StoreError`), reading it
    is allowed, with the note returned."""
    if version <= SCHEMA_VERSION:
        return None
    said = (
        f"{path!r} was written by a newer chatbot (its schema is at version {version}; this "
        f"one knows up to {SCHEMA_VERSION})"
    )
    if read_only:
        return f"{said}: reading only; upgrade chatbot to write to it"
    raise StoreError(
        f"{said}, so this one does not write to it: upgrade chatbot (reading commands still work)"
    )
