"""Threads in PostgreSQL: LangGraph's ``PostgresSaver`` on a ``psycopg_pool`` connection pool.

Selected by ``CHATBOT_DB=postgresql://user@host:port/db`` (or ``--db``). chatbot's tables are
made once under an advisory lock (:meth:`PgStore._set_up`); the mark of a chatbot database is
its ``chatbot_schema`` table. Connections are autocommit with dict rows, as the saver needs
them, checked before use and renewed when idle or old, so a server that drops idle
connections does not break a long REPL session. ``CHATBOT_PG_PREPARE_THRESHOLD`` sets psycopg's
prepared-statement threshold (``none`` for pgbouncer in transaction mode). A password in the
URL is never shown: :attr:`PgStore.path` and every error carry ``***`` in its place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from chatbot.config.sources import url_passwords, without_password
from chatbot.errors import remember_secret
from chatbot.store.base import SqlStore, is_postgres_url
from chatbot.store.errors import StoreError
from chatbot.store.pgschema import (
    LANGGRAPH_TABLES,
    check_search_path,
    read_schema,
    run_setup,
    schema_of_its_own,
    setup_lock,
    threads_in,
)
from chatbot.store.schema import TABLES, EmptyDatabase, Owner, check_schema_version, refuse_foreign
from chatbot.store.sqlite import Store, sqlite_owner

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from psycopg_pool import ConnectionPool

_TABLES = (*LANGGRAPH_TABLES, *TABLES, "chatbot_schema")
"""What ``db stats`` counts and ``db vacuum`` vacuums."""

CONNECT_TIMEOUT = 10
"""Seconds a PostgreSQL server gets to accept a connection (psycopg waits 2 at least)."""

SETUP_WAIT_SECONDS = 60.0
"""How long opening waits for another process setting the database up, and a statement of
the set-up for a lock another session holds, before it gives up saying what it waited for."""


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
    over another LangGraph program's database (see :class:`chatbot.store.sqlite.Store`)."""
    if is_postgres_url(db):
        return PgStore(
            db,
            prepare_threshold=prepare_threshold,
            connect_timeout=connect_timeout,
            read_only=read_only,
            adopt=adopt,
        )
    return Store(db, read_only=read_only, adopt=adopt)


def database_owner(
    db: str, prepare_threshold: int | None = 5, connect_timeout: int = CONNECT_TIMEOUT
) -> tuple[Owner, int]:
    """Whose the database ``db`` names is (see :class:`chatbot.store.sqlite.Owner`), and how many
    threads it holds if it is another LangGraph program's; nothing is written to it."""
    if not is_postgres_url(db):
        return sqlite_owner(db)
    import psycopg
    from psycopg.rows import dict_row

    for password in url_passwords(db.strip()):
        remember_secret(password)
    shown = without_password(db.strip())
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


def _storable(params: Sequence[Any]) -> tuple[Any, ...]:
    """Parameters as PostgreSQL takes them: its text cannot hold a NUL character, which a
    message or a title may: it is stored, and searched for, as U+FFFD."""
    return tuple(
        value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value
        for value in params
    )


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

    def after_pruning(self, thread_id: str) -> list[tuple[str, Sequence[Any]]]:
        # A value is stored once per version (checkpoint_blobs), named by every checkpoint
        # holding that version: those no checkpoint left names were the pruned ones' alone.
        return [
            (
                "DELETE FROM checkpoint_blobs AS b WHERE b.thread_id = ? AND b.checkpoint_ns = '' "
                "AND NOT EXISTS (SELECT 1 FROM checkpoints AS c WHERE c.thread_id = b.thread_id "
                "AND c.checkpoint_ns = b.checkpoint_ns "
                "AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)",
                (thread_id,),
            )
        ]

    def __init__(
        self,
        url: str,
        *,
        prepare_threshold: int | None = 5,
        max_size: int = 4,
        connect_timeout: int = CONNECT_TIMEOUT,
        read_only: bool = False,
        adopt: bool = False,
        setup_wait: float = SETUP_WAIT_SECONDS,
    ) -> None:
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        self.url = url.strip()
        self.path = without_password(self.url)
        for password in url_passwords(self.url):
            remember_secret(password)
        self._saver: BaseCheckpointSaver[str] | None = None
        self.pool: ConnectionPool[Any] = ConnectionPool(
            self.url,
            min_size=1,
            max_size=max_size,
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
            self._check_reachable(prepare_threshold, connect_timeout)
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

    def _check_reachable(self, prepare_threshold: int | None, timeout: int) -> None:
        """One connection first: a wrong host, database or password fails at once with the
        server's reason (a pool would retry until its timeout)."""
        import psycopg

        psycopg.connect(
            self.url, connect_timeout=timeout, prepare_threshold=prepare_threshold
        ).close()

    def _set_up(self, *, read_only: bool, adopt: bool, wait: float) -> None:
        """Check the database is chatbot's, then make what it lacks. A database set up is only
        read; otherwise the set-up runs under an advisory lock, all of it on the connection
        holding it: LangGraph's migrations build indexes ``CONCURRENTLY``, which waits for
        every transaction to end, so the lock is polled for (a waiter holds no transaction
        between tries). Every wait gives up after ``wait`` seconds, saying what it waited for."""
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

            self._saver = postgres_saver(self.pool, ZstdSerializer(writing=not self.adopted))
        return self._saver

    def close(self, wait: float | None = None) -> None:
        """Close the pool's connections, waiting ``wait`` seconds (default 5) for those in use
        on other threads."""
        self.pool.close(timeout=5.0 if wait is None else wait)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        from psycopg.rows import tuple_row

        with self.pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cursor:
            cursor.execute(sql.replace("?", "%s"), _storable(params))
            return cursor.fetchall()

    def write(self, *statements: tuple[str, Sequence[Any]]) -> int:
        count = 0
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            for sql, params in statements:
                cursor.execute(sql.replace("?", "%s"), _storable(params))
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
