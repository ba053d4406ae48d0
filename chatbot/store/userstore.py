"""LangGraph's long-term store (the user's memories) in the checkpoints' database:
``SqliteStore`` on the SQLite database's own connection and lock (its async methods run its
sync ones), ``PostgresStore`` on the PostgreSQL pool. Its tables are made by LangGraph's own
``setup()`` when first used for writing; a database opened to read without them holds no
memories.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from langgraph.store.base import BaseStore, ListNamespacesOp, Op, Result, SearchOp
from langgraph.store.sqlite import SqliteStore

STORE_TABLES = frozenset({"store", "store_migrations"})
"""The tables LangGraph's store makes in a database."""


class ChatSqliteStore(SqliteStore):
    """LangGraph's ``SqliteStore``, its ``abatch`` running ``batch`` for the graph's nodes."""

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self.batch(ops)


class EmptyStore(BaseStore):
    """The store of a database opened to read without the store's tables: it holds nothing."""

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [[] if isinstance(op, SearchOp | ListNamespacesOp) else None for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self.batch(ops)


def sqlite_store(conn: sqlite3.Connection, lock: threading.RLock, *, read_only: bool) -> BaseStore:
    """LangGraph's store on ``conn``, guarded by ``lock`` (the connection's one lock), set up
    with LangGraph's migrations unless ``read_only``."""
    if read_only:
        with lock:
            names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if not names >= STORE_TABLES:
            return EmptyStore()
    store = ChatSqliteStore(conn)
    store.lock = lock  # type: ignore[assignment]  # (an RLock does all a Lock does)
    if read_only:
        store.is_setup = True
    else:
        _set_up(store, conn, lock)
    return store


def _set_up(store: SqliteStore, conn: sqlite3.Connection, lock: threading.RLock) -> None:
    """LangGraph's set-up of the store, run again while another process runs its own on the
    same new file (LangGraph's migrations are not made for two at once: the second applies
    one the first just applied)."""
    for attempt in range(40):
        try:
            with lock:
                store.setup()
                conn.commit()  # (LangGraph's set-up leaves its migrations' rows uncommitted)
            return
        except (sqlite3.IntegrityError, sqlite3.OperationalError) as error:
            with lock:
                conn.rollback()
            said = str(error)
            racing = "store_migrations" in said or "duplicate column" in said or "locked" in said
            if not racing or attempt == 39:
                raise
            time.sleep(0.02 * (attempt + 1))


def postgres_store(
    pool: Any, *, read_only: bool, setting_up: Callable[[Any, Callable[[], None]], None]
) -> BaseStore:
    """LangGraph's ``PostgresStore`` on ``pool``; set up unless ``read_only`` by
    ``setting_up(conn, setup)``, which runs ``setup`` on ``conn`` under chatbot's set-up lock."""
    from langgraph.store.postgres import PostgresStore

    with pool.connection() as conn:
        if read_only:
            row = conn.execute("SELECT to_regclass('store_migrations') AS found").fetchone()
            if not row or row["found"] is None:
                return EmptyStore()
        else:
            setting_up(conn, lambda: PostgresStore(conn).setup())
    return PostgresStore(pool)
