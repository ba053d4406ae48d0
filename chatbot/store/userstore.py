"""LangGraph's long-term store as chatbot opens it: ``SqliteStore`` on the SQLite database's own
connection, ``PostgresStore`` on the PostgreSQL database's pool, so the user's memories live in
the same database as the checkpoints (and a SQLite file keeps its 0600).

The store's tables are LangGraph's own (``store``, ``store_migrations``), made by its own
``setup()`` the first time a database's store is used for writing; a database opened to read
that has none yet reads as holding no memories. As with the savers (:mod:`chatbot.store.saver`),
the SQLite store's async methods run its sync ones on the one connection and lock.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable
from typing import Any

from langgraph.store.base import BaseStore, ListNamespacesOp, Op, Result, SearchOp
from langgraph.store.sqlite import SqliteStore

STORE_TABLES = frozenset({"store", "store_migrations"})
"""The tables LangGraph's store makes in a database."""


class ChatSqliteStore(SqliteStore):
    """LangGraph's ``SqliteStore``, serving the graph's async nodes too: its ``abatch`` runs
    ``batch`` (the connection and its lock are shared with the saver and chatbot's own SQL)."""

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return self.batch(ops)


class EmptyStore(BaseStore):
    """The store of a database opened to read that has no store's tables yet: it holds
    nothing (and is never written: reading commands write nothing)."""

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
        with lock:
            store.setup()
            conn.commit()  # (its migrations' rows: LangGraph's set-up leaves them uncommitted
            # on a connection that is not in autocommit mode)
    return store


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
