"""Threads in PostgreSQL (``CHATBOT_DB=postgresql://...``): LangGraph's ``PostgresSaver`` on a
``psycopg_pool`` pool, and which kind of database (SQLite or PostgreSQL) a ``CHATBOT_DB`` opens.

chatbot's tables are made once under an advisory lock; a chatbot database's mark is its
``chatbot_schema`` table. Connections are autocommit with dict rows, as the saver needs them,
checked before use and renewed when idle or old (a server may drop idle ones).
``CHATBOT_PG_PREPARE_THRESHOLD`` sets psycopg's prepared-statement threshold (``none`` for
pgbouncer in transaction mode). A URL's password is never shown: ``***`` stands in its place.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, Self

from chatbot.config.sources import (
    check_db_path,
    check_postgres_database,
    url_passwords,
    without_password,
)
from chatbot.errors import remember_secret
from chatbot.store.base import SqlStore, is_postgres_url, without_nul
from chatbot.store.errors import StoreError
from chatbot.store.schema import (
    COUNT_THREADS,
    OLDER_TABLES,
    POSTGRESQL,
    SCHEMA_VERSION,
    TABLES,
    EmptyDatabase,
    Owner,
    check_schema_version,
    refuse_foreign,
    unmarked_owner,
)
from chatbot.store.sqlite import Store, sqlite_owner

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.store.base import BaseStore
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

CONNECT_TIMEOUT = 10
"""Seconds a PostgreSQL server gets to accept a connection (psycopg waits 2 at least)."""

SETUP_WAIT_SECONDS = 60.0
"""How long opening waits for another process's set-up, and a set-up statement for a lock,
before giving up saying what it waited for."""

# --- whose a database is, and setting it up ------------------------------------------------

_LOCK_KEY = 0x43686174  # "Chat": the advisory lock of chatbot's set-up
LANGGRAPH_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
_TABLES = (*LANGGRAPH_TABLES, *TABLES, "chatbot_schema")
"""What ``db stats`` counts and ``db vacuum`` vacuums."""

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
    own = "a database of its own, or a schema of its own in this one"
    if any(name == "options" for name, _ in parse_qsl(query, keep_blank_values=True)):
        return f"{own} (CREATE SCHEMA chatbot, then put -csearch_path=chatbot in the URL's options)"
    base, _, fragment = shown.partition("#")
    joiner = "" if base.endswith(("?", "&")) else "&" if "?" in base else "?"
    in_schema = base + joiner + _IN_SCHEMA + (f"#{fragment}" if fragment else "")
    return f"{own}: CREATE SCHEMA chatbot, then --db {in_schema}"


def check_search_path(conn: Connection[Any], path: str) -> None:
    """For a database that looks empty: when no schema of the ``search_path`` exists, say
    which one to create (``$user`` skipped, as PostgreSQL skips it)."""
    from psycopg.rows import tuple_row

    with conn.cursor(row_factory=tuple_row) as cursor:
        cursor.execute("SELECT current_schema() IS NULL, current_setting('search_path')")
        row = cursor.fetchone()
    if row is None or not row[0]:
        return
    # (its entries, commas inside double quotes kept)
    names = [_unquoted(part.strip()) for part in re.findall(r'(?:"(?:[^"]|"")*"|[^,])+', row[1])]
    first = next((name for name in names if name and name != "$user"), "chatbot")
    raise StoreError(
        f"the schema {first!r} that the search_path names does not exist in the PostgreSQL "
        f"database {path}: create it (CREATE SCHEMA {_quoted(first)}), or name another in the "
        "URL's options"
    )


def _unquoted(name: str) -> str:
    return name[1:-1].replace('""', '"') if len(name) >= 2 and name[0] == name[-1] == '"' else name


def _quoted(name: str) -> str:
    """``name`` as SQL writes it: in double quotes when it needs them."""
    return name if re.fullmatch(r"[a-z_][a-z0-9_$]*", name) else '"' + name.replace('"', '""') + '"'


def _langgraph_migrations() -> list[str]:
    from langgraph.checkpoint.postgres.base import BasePostgresSaver

    return list(BasePostgresSaver.MIGRATIONS)


def _langgraph_index_builds() -> dict[str, str]:
    """LangGraph's ``CREATE INDEX CONCURRENTLY`` migrations by index name: a build cut short
    leaves an INVALID index that ``IF NOT EXISTS`` would skip for ever."""
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

        def newest(table: str, column: str) -> str:
            return f"(SELECT max({column}) FROM {table})" if table in tables else "NULL::integer"

        cursor.execute(
            f"SELECT {newest('chatbot_schema', 'version')}, "
            f"{newest('checkpoint_migrations', 'v')}, "
            "(SELECT array_agg(c.relname::text) FROM pg_index AS i "
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
            owner = unmarked_owner(tables, _LANGGRAPH_PG_TABLES, conn)
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


# --- the store -------------------------------------------------------------------------------


def open_store(
    db: str,
    prepare_threshold: int | None = 5,
    connect_timeout: int = CONNECT_TIMEOUT,
    *,
    read_only: bool = False,
    adopt: bool = False,
) -> SqlStore:
    """The database ``CHATBOT_DB`` names: a PostgreSQL URL (``connect_timeout`` seconds to
    connect), or a SQLite file. ``read_only`` for a command that only reads; ``adopt`` takes
    over another LangGraph program's database. A URL naming no database, or a path no file can
    be at, is refused."""
    if is_postgres_url(db):
        try:
            check_postgres_database(db)
        except ValueError as error:
            raise StoreError(
                f"cannot use the PostgreSQL database {without_password(db.strip())}: {error}"
            ) from None
        return PgStore(
            db, prepare_threshold, connect_timeout=connect_timeout, read_only=read_only, adopt=adopt
        )
    try:
        check_db_path(db)
    except ValueError as error:
        raise StoreError(f"cannot open the database {db!r}: {error}") from None
    return Store(db, read_only=read_only, adopt=adopt)


def database_owner(
    db: str, prepare_threshold: int | None = 5, connect_timeout: int = CONNECT_TIMEOUT
) -> tuple[Owner, int]:
    """Whose the database ``db`` names is, and how many threads it holds if it is another
    LangGraph program's; nothing is written to it."""
    if not is_postgres_url(db):
        return sqlite_owner(db)
    import psycopg
    from psycopg.rows import dict_row

    shown = _shown(db.strip())
    try:
        with psycopg.connect(
            db.strip(),
            autocommit=True,
            row_factory=dict_row,
            connect_timeout=connect_timeout,
            prepare_threshold=prepare_threshold,
        ) as conn:
            owner = read_schema(conn).owner
            if owner.kind == "new":
                check_search_path(conn, shown)
            return owner, threads_in(conn) if owner.kind == "langgraph" else 0
    except psycopg.Error as error:
        raise StoreError(f"cannot use the PostgreSQL database {shown}: {_reason(error)}") from None


def _shown(url: str) -> str:
    """The URL as shown, its passwords kept from every message from now on."""
    for password in url_passwords(url):
        remember_secret(password)
    return without_password(url)


class PgStore(SqlStore):
    """The app's PostgreSQL database: LangGraph checkpoints plus chatbot's tables."""

    dialect = "postgresql"
    checkpoint_tables = LANGGRAPH_TABLES
    writes_table = "checkpoint_writes"
    writes_value = "blob"
    octets = "octet_length(content)"
    clock = "extract(epoch from clock_timestamp())"
    mark_pruned = (
        "UPDATE checkpoints SET metadata = metadata || jsonb_build_object(?::text, "
        "COALESCE((metadata ->> ?)::int, 0) + ?) "
        "WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id = ?"
    )

    # (a value is stored once per version, named by every checkpoint holding that version:
    # those no checkpoint left names were the pruned ones' alone)
    after_pruning = (
        "DELETE FROM checkpoint_blobs AS b WHERE b.thread_id = ? AND b.checkpoint_ns = '' "
        "AND NOT EXISTS (SELECT 1 FROM checkpoints AS c WHERE c.thread_id = b.thread_id "
        "AND c.checkpoint_ns = b.checkpoint_ns "
        "AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)"
    )

    def __init__(
        self,
        url: str,
        prepare_threshold: int | None = 5,
        *,
        connect_timeout: int = CONNECT_TIMEOUT,
        read_only: bool = False,
        adopt: bool = False,
        setup_wait: float = SETUP_WAIT_SECONDS,
    ) -> None:
        import psycopg
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        self.url = url.strip()
        self.path = _shown(self.url)
        self._saver: BaseCheckpointSaver[str] | None = None
        self._memory_store: BaseStore | None = None
        self.setup_wait = setup_wait
        self.memory_read_only = read_only
        self.pool: ConnectionPool[Any] = ConnectionPool(
            self.url,
            min_size=1,
            max_size=4,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "prepare_threshold": prepare_threshold,
                "application_name": "chatbot",  # (so pg_stat_activity says whose they are)
            },
            check=ConnectionPool.check_connection,  # a dropped connection is replaced
            max_idle=300,
            max_lifetime=1800,
            timeout=15,
            open=False,
            name="chatbot",
        )
        try:
            # (one connection first: a wrong host, database or password fails at once with the
            # server's reason, where a pool would retry until its timeout)
            psycopg.connect(
                self.url, connect_timeout=connect_timeout, prepare_threshold=prepare_threshold
            ).close()
            self.pool.open(wait=True, timeout=connect_timeout)
            self._set_up(read_only=read_only, adopt=adopt, wait=setup_wait)
        except StoreError:
            self.pool.close()
            raise
        except Exception as error:
            self.pool.close()
            raise StoreError(
                f"cannot use the PostgreSQL database {self.path}: {_reason(error)}"
            ) from None

    def _set_up(self, *, read_only: bool, adopt: bool, wait: float) -> None:
        """Check the database is chatbot's, then make what it lacks under an advisory lock, on
        the connection holding it. The lock is polled for: LangGraph's migrations build indexes
        ``CONCURRENTLY``, which waits for every transaction to end (a waiter holds none)."""
        with self.pool.connection() as conn:
            schema = read_schema(conn)
            if schema.owner.kind == "new":
                check_search_path(conn, self.path)
            if not (adopt and schema.owner.kind == "langgraph"):
                refuse_foreign(
                    schema.owner,
                    self.path,
                    "PostgreSQL",
                    lambda: threads_in(conn),
                    elsewhere=schema_of_its_own(self.path),
                )
            if read_only and schema.owner.kind == "new":
                raise EmptyDatabase(self.path)
            self.notice = check_schema_version(schema.owner.version, self.path, read_only)
            if schema.complete:
                return
            with setup_lock(conn, self.path, wait):
                if not read_schema(conn).complete:  # (another process may have done it)
                    run_setup(conn, self.path, wait)

    @property
    def saver(self) -> BaseCheckpointSaver[str]:
        """LangGraph's checkpointer on the pool."""
        if self._saver is None:
            from chatbot.store.saver import ZstdSerializer, postgres_saver

            serde = ZstdSerializer(writing=not self.adopted)
            self._saver = postgres_saver(self.pool, serde, self.thread_mark)
        return self._saver

    @property
    def memory_store(self) -> BaseStore:
        """LangGraph's ``PostgresStore`` on the pool (the user's memories), set up on first
        use under the set-up lock (:mod:`chatbot.store.userstore`)."""
        if self._memory_store is None:
            from chatbot.store.userstore import postgres_store

            def setting_up(conn: Connection[Any], setup: Callable[[], None]) -> None:
                with setup_lock(conn, self.path, self.setup_wait):
                    setup()

            self._memory_store = postgres_store(
                self.pool, read_only=self.memory_read_only, setting_up=setting_up
            )
        return self._memory_store

    def close(self, wait: float | None = None) -> None:
        """Close the pool's connections, waiting ``wait`` seconds (default 5) for those in use
        on other threads."""
        self.pool.close(timeout=5.0 if wait is None else wait)

    _bound: Connection[Any] | None = None
    """The one connection a :meth:`transaction` runs on (else each use takes one)."""

    @contextmanager
    def transaction(self) -> Iterator[Self]:
        """A copy of the store bound to one of the pool's connections, in one transaction,
        with LangGraph's saver on that connection."""
        from chatbot.store.saver import ZstdSerializer, postgres_saver

        serde = ZstdSerializer(writing=not self.adopted)
        with self.pool.connection() as conn, conn.transaction():
            bound = copy.copy(self)
            bound._bound = conn
            bound._saver = postgres_saver(conn, serde, bound.thread_mark)
            yield bound

    @contextmanager
    def _connection(self) -> Iterator[Connection[Any]]:
        if self._bound is not None:
            yield self._bound
        else:
            with self.pool.connection() as conn:
                yield conn

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        from psycopg.rows import tuple_row

        with self._connection() as conn, conn.cursor(row_factory=tuple_row) as cursor:
            cursor.execute(sql.replace("?", "%s"), tuple(map(without_nul, params)))
            return cursor.fetchall()

    def write(self, *statements: tuple[str, Sequence[Any]]) -> int:
        count = 0
        with self._connection() as conn, conn.transaction(), conn.cursor() as cursor:
            for sql, params in statements:
                cursor.execute(sql.replace("?", "%s"), tuple(map(without_nul, params)))
                count = cursor.rowcount
        return count

    def sizes(self) -> list[tuple[str, int]]:
        """Each table's bytes on the server, with its indexes and TOAST."""
        rows = self.query(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class AS c "
            "JOIN pg_namespace AS n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relname = ANY(?)",
            ([*_TABLES, "checkpoint_migrations"],),
        )
        return [(str(name), int(size)) for name, size in rows]

    def vacuum(self) -> tuple[int, int]:
        """``VACUUM (ANALYZE)`` chatbot's and LangGraph's tables (PostgreSQL reuses deleted
        rows' space; autovacuum does this too); the tables' bytes before and after."""
        before = self.bytes_on_disk()
        with self.pool.connection() as conn:
            for table in _TABLES:
                conn.execute(f"VACUUM (ANALYZE) {table}")
        return before, self.bytes_on_disk()


def _reason(error: BaseException) -> str:
    """A psycopg error in one line, without the password."""
    from chatbot.errors import redact

    text = " ".join(str(error).split()) or type(error).__name__
    return redact(text)
