"""Threads in PostgreSQL: LangGraph's ``PostgresSaver`` on a ``psycopg_pool`` connection pool.

Selected by ``CHATBOT_DB=postgresql://user@host:port/db`` (or ``--db`` with the URL). The
checkpoints are LangGraph's own tables; chatbot's (listing, leases) come from the same
numbered migrations as on SQLite (:data:`chatbot.store.MIGRATIONS`), applied once under an
advisory lock. Connections are autocommit with dict rows, as the saver needs them, checked
before each use and renewed when idle or old, so a server that drops idle connections does not
break a long REPL session. ``CHATBOT_PG_PREPARE_THRESHOLD`` sets psycopg's prepared-statement
threshold (``none`` turns them off, which pgbouncer in transaction mode needs).

A password in the URL is never shown: :attr:`PgStore.path` and every error carry the URL with
``***`` in its place, and the password is remembered as a secret to redact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from chatbot.errors import remember_secret
from chatbot.store import (
    LEASE_SECONDS,
    MIGRATIONS,
    MIGRATIONS_TABLE,
    SqlStore,
    Store,
    StoreError,
    StoreStats,
    _now,
    is_postgres_url,
    migration_statements,
)

if TYPE_CHECKING:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg_pool import ConnectionPool

    from chatbot.saver import IndexesMessages

_LOCK_KEY = 0x43686174  # "Chat": the advisory lock of chatbot's set-up
_LANGGRAPH_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
_CHATBOT_TABLES = ("chatbot_threads", "chatbot_leases", "chatbot_messages", "chatbot_marks")
"""chatbot's own tables, but ``chatbot_migrations``: what ``db stats`` counts and ``db vacuum``
vacuums, with LangGraph's."""


CONNECT_TIMEOUT = 10
"""Seconds a PostgreSQL server gets to accept a connection (psycopg waits 2 at least)."""


def open_store(
    db: str, prepare_threshold: int | None = 5, connect_timeout: int = CONNECT_TIMEOUT
) -> SqlStore:
    """The database ``CHATBOT_DB`` names: a PostgreSQL URL (``connect_timeout`` seconds to
    connect), or a SQLite file."""
    if is_postgres_url(db):
        return PgStore(db, prepare_threshold=prepare_threshold, connect_timeout=connect_timeout)
    return Store(db)


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***`` (for people, logs and errors), in
    ``user:password@`` and ``?password=`` alike."""
    from chatbot.places import without_password

    return without_password(url)


def _saver_class() -> type[PostgresSaver]:
    from langgraph.checkpoint.postgres import PostgresSaver

    from chatbot.saver import AsyncFromSync, DecodesInterruptibly, IndexesMessages

    class PgSaver(IndexesMessages, AsyncFromSync, DecodesInterruptibly, PostgresSaver):
        """LangGraph's ``PostgresSaver``, serving ``astream`` too: the async methods run the
        sync ones on the pool, as :class:`chatbot.saver.LocalSaver` does for SQLite."""

    return PgSaver


class PgStore(SqlStore):
    """The app's PostgreSQL database: LangGraph checkpoints plus chatbot's tables."""

    checkpoint_tables = _LANGGRAPH_TABLES

    def __init__(
        self,
        url: str,
        *,
        prepare_threshold: int | None = 5,
        max_size: int = 4,
        connect_timeout: int = CONNECT_TIMEOUT,
    ) -> None:
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        self.url = url.strip()
        self.path = redact_url(self.url)
        from chatbot.places import url_passwords

        for password in url_passwords(self.url):
            remember_secret(password)
        self._saver: PostgresSaver | None = None
        self.pool: ConnectionPool[Any] = ConnectionPool(
            self.url,
            min_size=1,
            max_size=max_size,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "prepare_threshold": prepare_threshold,
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
            self._set_up()
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

    def _set_up(self) -> None:
        """LangGraph's tables, then chatbot's migrations, once, under an advisory lock (two
        processes starting at once on a new database do it one after the other)."""
        with self.pool.connection() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
            try:
                self.saver.setup()
                with conn.transaction():
                    conn.execute(MIGRATIONS_TABLE)
                    rows = conn.execute("SELECT version FROM chatbot_migrations").fetchall()
                    applied = {row["version"] for row in rows}
                    for version, migration in enumerate(MIGRATIONS, start=1):
                        if version not in applied:
                            for statement in migration_statements(migration, "postgresql"):
                                conn.execute(statement)
                            conn.execute(
                                "INSERT INTO chatbot_migrations (version, applied_at) "
                                "VALUES (%s, %s)",
                                (version, _now()),
                            )
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))

    @property
    def saver(self) -> PostgresSaver:
        """LangGraph's checkpointer on the pool."""
        if self._saver is None:
            saver = _saver_class()(self.pool)
            cast("IndexesMessages", saver).message_index = self.message_index
            self._saver = saver
        return self._saver

    def close(self, wait: float | None = None) -> None:
        """Close the pool's connections, waiting ``wait`` seconds (default 5) for those in use
        on other threads."""
        self.pool.close(timeout=5.0 if wait is None else wait)

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        from psycopg.rows import tuple_row

        with self.pool.connection() as conn, conn.cursor(row_factory=tuple_row) as cursor:
            cursor.execute(sql.replace("?", "%s"), tuple(params))
            return cursor.fetchall()

    def _write(self, *statements: tuple[str, Sequence[Any]]) -> int:
        count = 0
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            for sql, params in statements:
                cursor.execute(sql.replace("?", "%s"), tuple(params))
                count = cursor.rowcount
        return count

    # --- one turn at a time per thread -------------------------------------------------------

    def try_lease(self, thread_id: str, holder: str, seconds: float = LEASE_SECONDS) -> bool:
        """Take (or renew) the thread's lease; the server's clock decides expiry, so hosts
        whose clocks differ agree."""
        now = "extract(epoch from clock_timestamp())"
        acquired = self._write(
            (
                f"""
                INSERT INTO chatbot_leases (thread_id, holder, expires_at)
                VALUES (?, ?, {now} + ?)
                ON CONFLICT (thread_id) DO UPDATE SET
                    holder = excluded.holder, expires_at = excluded.expires_at
                WHERE chatbot_leases.holder = excluded.holder
                   OR chatbot_leases.expires_at < {now}
                """,
                (thread_id, holder, seconds),
            )
        )
        return acquired == 1

    # --- size ------------------------------------------------------------------------------

    def stats(self) -> StoreStats:
        """Threads, checkpoints, pending writes and the tables' size on the server."""
        ((threads, checkpoints),) = self._query(
            "SELECT COUNT(DISTINCT thread_id), COUNT(*) FROM checkpoints"
        )
        ((writes,),) = self._query("SELECT COUNT(*) FROM checkpoint_writes")
        size = self._bytes()
        return StoreStats(
            location=self.path,
            threads=threads,
            checkpoints=checkpoints,
            writes=writes,
            bytes=size,
            free_bytes=0,
        )

    def _bytes(self) -> int:
        tables = (
            *_LANGGRAPH_TABLES,
            *_CHATBOT_TABLES,
            "checkpoint_migrations",
            "chatbot_migrations",
        )
        ((size,),) = self._query(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class AS c "
            "JOIN pg_namespace AS n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relname = ANY(?)",
            (list(tables),),
        )
        return int(size)

    def vacuum(self) -> tuple[int, int]:
        """``VACUUM`` chatbot's and LangGraph's tables (PostgreSQL reuses the space of deleted
        rows; autovacuum does this too). Returns the tables' bytes before and after."""
        before = self._bytes()
        with self.pool.connection() as conn:
            for table in (*_LANGGRAPH_TABLES, *_CHATBOT_TABLES):
                conn.execute(f"VACUUM (ANALYZE) {table}")
        return before, self._bytes()


def _reason(error: BaseException) -> str:
    """A psycopg error in one line, without the password."""
    from chatbot.errors import redact

    text = " ".join(str(error).split()) or type(error).__name__
    return redact(text)
