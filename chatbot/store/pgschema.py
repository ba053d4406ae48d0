"""PostgreSQL's side of whose a database is, and of setting it up: chatbot's mark and schema
version, LangGraph's migrations and the indexes a cut-short build left INVALID, the set-up's
advisory lock, and the ``search_path`` a URL names (:class:`chatbot.store.postgres.PgStore`
opens a database through these)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from chatbot.store.errors import StoreError
from chatbot.store.schema import (
    COUNT_THREADS,
    OLDER_TABLES,
    POSTGRESQL,
    SCHEMA_VERSION,
    Owner,
    unmarked_owner,
)

if TYPE_CHECKING:
    from psycopg import Connection

_LOCK_KEY = 0x43686174  # "Chat": the advisory lock of chatbot's set-up
LANGGRAPH_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")

_LANGGRAPH_PG_TABLES = frozenset({*LANGGRAPH_TABLES, "checkpoint_migrations"})
_INDEX_BUILD = re.compile(r"CREATE INDEX CONCURRENTLY IF NOT EXISTS (\w+)", re.IGNORECASE)
_IN_SCHEMA = "options=-csearch_path%3Dchatbot"


def schema_of_its_own(shown: str) -> str:
    """Where else chatbot's tables could go, for refusing a database holding another
    program's: a database or a schema of its own, with the URL (``shown``) that uses it."""
    from urllib.parse import parse_qsl, urlsplit

    try:
        query = urlsplit(shown).query
    except ValueError:
        query = ""
    if any(name == "options" for name, _ in parse_qsl(query, keep_blank_values=True)):
        return (
            "a database of its own, or a schema of its own in this one (CREATE SCHEMA chatbot, "
            "then put -csearch_path=chatbot in the URL's options)"
        )
    base, _, fragment = shown.partition("#")
    joiner = "" if base.endswith(("?", "&")) else "&" if "?" in base else "?"
    in_schema = base + joiner + _IN_SCHEMA + (f"#{fragment}" if fragment else "")
    return (
        "a database of its own, or a schema of its own in this one: CREATE SCHEMA chatbot, "
        f"then --db {in_schema}"
    )


def check_search_path(conn: Connection[Any], path: str) -> None:
    """For a database that looks empty: when no schema of the ``search_path`` exists nothing
    can be made there, so say in one line which schema to create (``$user`` skipped, as
    PostgreSQL skips it)."""
    from psycopg.rows import tuple_row

    with conn.cursor(row_factory=tuple_row) as cursor:
        cursor.execute("SELECT current_schema() IS NULL, current_setting('search_path')")
        row = cursor.fetchone()
    if row is None or not row[0]:
        return
    names = [_unquoted(name) for name in _split_path(row[1])]
    first = next((name for name in names if name and name != "$user"), "chatbot")
    raise StoreError(
        f"the schema {first!r} that the search_path names does not exist in the PostgreSQL "
        f"database {path}: create it (CREATE SCHEMA {_quoted(first)}), or name another in the "
        "URL's options"
    )


def _split_path(text: str) -> list[str]:
    """``search_path``'s entries, commas inside double quotes kept."""
    return [part.strip() for part in re.findall(r'(?:"(?:[^"]|"")*"|[^,])+', text)]


def _unquoted(name: str) -> str:
    if len(name) >= 2 and name[0] == name[-1] == '"':
        return name[1:-1].replace('""', '"')
    return name


def _quoted(name: str) -> str:
    """``name`` as SQL writes it: as is when it needs no quotes, else in double quotes."""
    if re.fullmatch(r"[a-z_][a-z0-9_$]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def _langgraph_migrations() -> list[str]:
    from langgraph.checkpoint.postgres.base import BasePostgresSaver

    return list(BasePostgresSaver.MIGRATIONS)


def _langgraph_index_builds() -> dict[str, str]:
    """LangGraph's ``CREATE INDEX CONCURRENTLY`` migrations, by index name: a build cut short
    leaves the index INVALID, which ``IF NOT EXISTS`` skips for ever, so it is built again."""
    return {
        found[1]: statement
        for statement in _langgraph_migrations()
        if (found := _INDEX_BUILD.search(statement))
    }


class _Schema(NamedTuple):
    """What a PostgreSQL database holds of chatbot's and LangGraph's, read without a lock."""

    owner: Owner
    langgraph_version: int | None
    """LangGraph's newest migration applied (None: no ``checkpoint_migrations``)."""
    invalid_indexes: list[str]
    """LangGraph's indexes left INVALID by a build cut short."""

    @property
    def complete(self) -> bool:
        return (
            self.owner.kind == "chatbot"
            and self.owner.version >= SCHEMA_VERSION
            and self.langgraph_version is not None
            and self.langgraph_version >= len(_langgraph_migrations()) - 1
            and not self.invalid_indexes
        )


def read_schema(conn: Connection[Any]) -> _Schema:
    """chatbot's mark (``chatbot_schema`` and its version), LangGraph's migrations and its
    broken indexes, in the connection's current schema."""
    from psycopg.rows import tuple_row

    with conn.cursor(row_factory=tuple_row) as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n "
            "ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
            "AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY 1"
        )
        tables = [row[0] for row in cursor.fetchall()]
        if OLDER_TABLES & set(tables):
            return _Schema(Owner("older chatbot"), None, [])
        cursor.execute(
            "SELECT "
            + (
                "(SELECT max(version) FROM chatbot_schema), "
                if "chatbot_schema" in tables
                else "NULL::integer, "
            )
            + (
                "(SELECT max(v) FROM checkpoint_migrations), "
                if "checkpoint_migrations" in tables
                else "NULL::integer, "
            )
            + "(SELECT array_agg(c.relname::text) FROM pg_index AS i "
            "JOIN pg_class AS c ON c.oid = i.indexrelid "
            "JOIN pg_namespace AS n ON n.oid = c.relnamespace "
            "WHERE NOT i.indisvalid AND n.nspname = current_schema() "
            "AND c.relname = ANY(%s))",
            (list(_langgraph_index_builds()),),
        )
        row = cursor.fetchone()
        assert row is not None
        version, langgraph_version, invalid = row
        invalid = list(invalid or ())
        if "chatbot_schema" not in tables:
            owner = unmarked_owner(
                tables,
                _LANGGRAPH_PG_TABLES,
                lambda: conn.execute("SELECT 1 FROM checkpoints LIMIT 1").fetchone() is not None,
            )
            return _Schema(owner, langgraph_version, invalid)
    return _Schema(Owner("chatbot", version=int(version or 0)), langgraph_version, invalid)


def threads_in(conn: Connection[Any]) -> int:
    row = conn.execute(COUNT_THREADS).fetchone()
    return int(row["count"]) if row else 0


@contextmanager
def setup_lock(conn: Connection[Any], path: str, wait: float) -> Iterator[None]:
    """Hold chatbot's set-up lock on ``conn``, polled for at most ``wait`` seconds."""
    deadline = time.monotonic() + wait
    pause = 0.02
    while not _try_lock(conn):
        if time.monotonic() >= deadline:
            raise StoreError(
                f"gave up after {wait:g} s waiting for another process to finish setting up "
                f"the PostgreSQL database {path}{_lock_holder(conn)}: try again once it is done"
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.25)
    try:
        yield
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))


def _try_lock(conn: Connection[Any]) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (_LOCK_KEY,)).fetchone()
    return bool(row and row["got"])


def _lock_holder(conn: Connection[Any]) -> str:
    """Who holds chatbot's set-up lock, for the message of a wait given up."""
    row = conn.execute(
        "SELECT a.pid, a.state, a.wait_event FROM pg_locks AS l "
        "JOIN pg_stat_activity AS a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objid = %s "
        "AND l.objsubid = 1 "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        (_LOCK_KEY,),
    ).fetchone()
    if row is None:
        return ""
    doing = row["state"] or "unknown state"
    if row["wait_event"]:
        doing += f", waiting on {row['wait_event']}"
    return (
        f" (its server process {row['pid']} holds the set-up lock, {doing}; "
        f"SELECT pg_terminate_backend({row['pid']}) ends it)"
    )


def run_setup(conn: Connection[Any], path: str, wait: float) -> None:
    """LangGraph's migrations (and its INVALID indexes built again), then chatbot's tables
    and their version in one transaction, on ``conn`` under the set-up lock. A statement
    waiting ``wait`` seconds for a lock gives up; the server cancels the set-up of a process
    that died (``client_connection_check_interval``), freeing the lock."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    step = "LangGraph's tables and indexes"
    conn.execute(f"SET lock_timeout = {int(wait * 1000)}")
    conn.execute("SET client_connection_check_interval = 1000")
    try:
        PostgresSaver(conn).setup()
        builds = _langgraph_index_builds()
        for name in read_schema(conn).invalid_indexes:
            step = f"LangGraph's index {name}"
            conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            conn.execute(builds[name])
        step = "chatbot's tables"
        with conn.transaction():
            for statement in POSTGRESQL:
                conn.execute(statement)
            if conn.execute("SELECT 1 FROM chatbot_schema").fetchone() is None:
                conn.execute("INSERT INTO chatbot_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
    except psycopg.errors.LockNotAvailable:
        raise StoreError(
            f"setting up the PostgreSQL database {path} waited more than {wait:g} s for other "
            f"sessions (to make {step}): one holds a lock or a transaction open (look for "
            "'idle in transaction' in pg_stat_activity); try again once it ends"
        ) from None
    finally:
        if not conn.closed:
            conn.execute("RESET lock_timeout")
            conn.execute("RESET client_connection_check_interval")
