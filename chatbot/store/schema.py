"""chatbot's own tables, for SQLite and PostgreSQL: one schema, made whole in a new database.

LangGraph's savers make their own tables (``setup()``); these sit beside them:

- ``chatbot_threads``: what a thread listing needs (title, counts, origin), so that listing is
  plain SQL and never deserialises a checkpoint;
- ``chatbot_leases``: who is taking a turn on a thread, until when (:mod:`chatbot.store.leases`);
- ``chatbot_messages``: every message ever written, once per thread, for search
  (:mod:`chatbot.store.search`), with ``chatbot_indexed``, how far each thread's checkpoints
  are indexed. SQLite indexes the text with FTS5's ``trigram`` tokenizer (substrings, and
  Chinese and Japanese, written without spaces), kept by triggers; PostgreSQL with a
  ``pg_trgm`` GIN index where the extension can be made (else search reads the table);
- ``chatbot_marks``: named facts about the database (``adopted``).

The schema carries a version (SQLite: ``PRAGMA user_version``; PostgreSQL: the
``chatbot_schema`` table): a database of a newer version is only read
(:func:`check_schema_version`), and a later version of chatbot that changes these tables
upgrades a database of this one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from chatbot.store.errors import StoreError

SCHEMA_VERSION = 1
"""The version of the tables below."""

APPLICATION_ID = 0x43686174  # "Chat": marks a SQLite file as a chatbot database

_THREADS = """CREATE TABLE IF NOT EXISTS chatbot_threads (
    thread_id TEXT PRIMARY KEY,
    title TEXT NOT NULL DEFAULT '',
    message_count INTEGER NOT NULL DEFAULT 0,
    has_summary INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    origin_thread TEXT,
    origin_checkpoint TEXT
)"""

_LEASES = """CREATE TABLE IF NOT EXISTS chatbot_leases (
    thread_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
)"""

_INDEXED = """CREATE TABLE IF NOT EXISTS chatbot_indexed (
    thread_id TEXT PRIMARY KEY,
    checkpoint_id TEXT NOT NULL
)"""

_MARKS = """CREATE TABLE IF NOT EXISTS chatbot_marks (
    name TEXT PRIMARY KEY,
    done_at TEXT NOT NULL
)"""

SQLITE: tuple[str, ...] = (
    _THREADS,
    _LEASES,
    _INDEXED,
    _MARKS,
    """CREATE TABLE IF NOT EXISTS chatbot_messages (
    id INTEGER PRIMARY KEY,
    thread_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    UNIQUE (thread_id, message_id)
)""",
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
    """CREATE TRIGGER IF NOT EXISTS chatbot_messages_changed
AFTER UPDATE OF content ON chatbot_messages
BEGIN
    INSERT INTO chatbot_messages_fts (chatbot_messages_fts, rowid, content)
    VALUES ('delete', old.id, old.content);
    INSERT INTO chatbot_messages_fts (rowid, content) VALUES (new.id, new.content);
END""",
)
"""The SQLite schema, made in one transaction."""

POSTGRESQL: tuple[str, ...] = (
    _THREADS,
    _LEASES,
    _INDEXED,
    _MARKS,
    """CREATE TABLE IF NOT EXISTS chatbot_messages (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    thread_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    UNIQUE (thread_id, message_id)
)""",
    # (GIN's fastupdate off: each message goes into the index at once, where a pending list
    # of up to 4 MB would sit in every database)
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
"""The PostgreSQL schema, made in one transaction (its version row is written with it)."""

OWN_TABLES = frozenset(
    {"chatbot_threads", "chatbot_leases", "chatbot_indexed", "chatbot_marks", "chatbot_schema"}
    | {"chatbot_messages"}
    | {f"chatbot_messages_fts{part}" for part in ("", "_data", "_idx", "_docsize", "_config")}
)
"""chatbot's tables, with FTS5's shadow tables."""

OLDER_TABLES = frozenset({"chatbot_migrations"})
"""What only a development build of chatbot from before 0.1.0 made."""


# --- whose a database is ------------------------------------------------------------------


class Owner(NamedTuple):
    """Whose a database is, read before anything is written to it."""

    kind: str
    """``chatbot`` (this version's schema), ``older chatbot`` (a development build's, before
    0.1.0), ``new`` (nothing in it yet), ``langgraph`` (another LangGraph program's) or
    ``other``."""
    what: str = ""
    """For ``langgraph`` and ``other``: what was found (``tables users, orders``)."""
    version: int = 0
    """For ``chatbot``: the schema version it records."""


def tables_named(tables: Sequence[str]) -> str:
    shown = ", ".join(tables[:5]) + (f" and {len(tables) - 5} more" if len(tables) > 5 else "")
    return f"{'table' if len(tables) == 1 else 'tables'} {shown}"


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


class OlderDatabase(StoreError):
    """A database a development build of chatbot wrote before 0.1.0: its checkpoints are in a
    layout this version does not read."""

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
    """Raise unless ``owner`` says the database may be opened: :class:`ForeignDatabase` for
    another program's, :class:`OlderDatabase` for a development build's. ``kind`` names the
    database for people (``SQLite``, ``PostgreSQL``); ``threads`` counts a LangGraph
    database's threads (asked only for one); ``elsewhere`` says where else chatbot's tables
    could go (default: a new file, or a chatbot database)."""
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
    """A database whose schema is newer than this chatbot's was written by a newer chatbot:
    writing to it is refused (:class:`StoreError`); reading it is allowed, with the note
    returned."""
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
