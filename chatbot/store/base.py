"""What both databases do alike: chatbot's tables (:mod:`chatbot.store.schema`) and plain SQL
over LangGraph's, written once with ``?`` placeholders; :class:`chatbot.store.sqlite.Store`
runs it on SQLite and :class:`chatbot.store.postgres.PgStore` on PostgreSQL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Self, cast

from chatbot.store.schema import THREAD_TABLES

if TYPE_CHECKING:  # LangGraph is imported only where checkpoints are read or written
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.store.base import BaseStore

LEASE_SECONDS = 30.0
"""How long a turn's lease lasts unless renewed (every third of it): the longest a process
killed mid-turn blocks its thread."""

_UUID_EPOCH_OFFSET = 0x01B21DD213814000  # 100-ns intervals from 1582-10-15 to 1970-01-01
_UUID_SHAPE = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")


def is_postgres_url(db: str) -> bool:
    """True when ``CHATBOT_DB`` names a PostgreSQL database rather than a SQLite file."""
    return db.strip().lower().startswith(("postgresql://", "postgres://"))


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


PER_TURN_FROM = 10
"""The fewest turns whose bytes a turn ``db stats`` tells."""


class StoreStats(NamedTuple):
    """What a database holds and what it takes on disk."""

    location: str
    threads: int
    checkpoints: int
    writes: int
    bytes: int
    free_bytes: int
    """Bytes deleted data left free inside the file (``chatbot db vacuum`` returns them)."""
    parts: tuple[tuple[str, int], ...] = ()
    """Bytes of each part (:data:`PARTS`), tables with their indexes."""
    turns: int = 0
    text_bytes: int = 0
    """UTF-8 bytes of every message's text, folded ones too."""

    @property
    def per_turn(self) -> float | None:
        """Bytes a turn; ``None`` below :data:`PER_TURN_FROM` turns, where the empty tables'
        own pages would dwarf the turns'."""
        return self.bytes / self.turns if self.turns >= PER_TURN_FROM else None

    def record(self) -> dict[str, Any]:
        """As JSON (``chatbot db stats --json``)."""
        record = {"pending_writes" if k == "writes" else k: v for k, v in self._asdict().items()}
        record["parts"] = dict(self.parts)
        record["bytes_per_turn"] = round(self.per_turn) if self.per_turn is not None else None
        return record


PARTS = ("checkpoints", "pending writes", "search index", "other")
"""What ``db stats`` says the space goes to."""


_PART_TABLES = {  # (the names each part's tables and indexes begin with)
    "pending writes": ("checkpoint_writes", "writes", "sqlite_autoindex_writes"),
    "checkpoints": ("checkpoints", "checkpoint_blobs", "sqlite_autoindex_checkpoints"),
    "search index": ("chatbot_messages", "sqlite_autoindex_chatbot_messages"),
}


def sum_parts(sizes: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    """Sizes by table or index summed by part, in the order of :data:`PARTS`."""
    totals = dict.fromkeys(PARTS, 0)
    for table, size in sizes:
        found = (part for part, names in _PART_TABLES.items() if str(table).startswith(names))
        totals[next(found, "other")] += int(size or 0)
    return tuple(totals.items())


def checkpoint_time(checkpoint_id: str) -> datetime | None:
    """When a checkpoint was written, read by hand from LangGraph's time-ordered (v6) UUID."""
    if not isinstance(checkpoint_id, str) or not _UUID_SHAPE.fullmatch(checkpoint_id):
        return None  # (not LangGraph's: a row written by something else)
    value = int(checkpoint_id.replace("-", ""), 16)
    if (value >> 76) & 0xF != 6 or (value >> 62) & 0b11 != 0b10:  # version 6, RFC variant
        return None
    # v6 (RFC 9562): the 60-bit timestamp's high 48 bits, the version, then its low 12 bits
    ticks = ((value >> 80) << 12) | ((value >> 64) & 0x0FFF)
    seconds = (ticks - _UUID_EPOCH_OFFSET) / 10_000_000
    return datetime.fromtimestamp(seconds, tz=UTC)


def without_nul(value: Any) -> Any:
    """A text holding a NUL with U+FFFD in its place: PostgreSQL's text cannot hold one, which a
    message or a title may (it is stored, and searched for, so)."""
    return value.replace("\x00", "\ufffd") if isinstance(value, str) and "\x00" in value else value


def now_text() -> str:
    return datetime.now(tz=UTC).isoformat(timespec="seconds")


ADOPTED_MARK = "adopted"
"""The ``chatbot_marks`` row of a database taken over from another LangGraph program, which
shares it: checkpoints go in uncompressed."""


class SqlStore:
    """A chatbot database: LangGraph's checkpoints through its saver, chatbot's tables in SQL
    written once (``?`` placeholders; each database translates)."""

    path: str
    """Where the threads live, as shown to people (never with a URL's password)."""
    checkpoint_tables: tuple[str, ...]
    """LangGraph's tables keyed by thread id."""
    writes_table: str
    """LangGraph's table of pending writes, and its column holding a write's value."""
    writes_value: str
    dialect: str
    """``sqlite`` or ``postgresql``."""
    octets: str
    """SQL for the UTF-8 bytes of a ``content`` column."""
    clock: str
    """The database's clock in SQL (epoch seconds): leases expire by one clock for all hosts."""
    notice: str | None = None
    """Something to tell whoever opened it (a newer chatbot's database, opened to read)."""
    read_only = False

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a SELECT and return its rows."""
        raise NotImplementedError

    def write(self, *statements: tuple[str, Sequence[Any]]) -> int:
        """Run statements in one transaction; the last one's row count."""
        raise NotImplementedError

    @property
    def saver(self) -> BaseCheckpointSaver[str]:
        raise NotImplementedError

    @property
    def memory_store(self) -> BaseStore:
        """LangGraph's long-term store in this database: the user's memories."""
        raise NotImplementedError

    def transaction(self) -> AbstractContextManager[Self]:
        """The store, everything written through it and its saver in one transaction: committed
        when the block ends, rolled back if it raises."""
        raise NotImplementedError

    def close(self, wait: float | None = None) -> None:
        """Close the database; ``wait``: at most that many seconds for another thread's use."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- one turn at a time per thread: chatbot_leases ---------------------------------------
    def try_lease(
        self,
        thread_id: str,
        holder: str,
        seconds: float = LEASE_SECONDS,
        replacing: str | None = None,
    ) -> bool:
        """Take (or renew) the thread's lease for ``holder``; False while another holds an
        unexpired one, unless that one is ``replacing`` (a holder known to be gone)."""
        taken = self.write(
            (
                f"""
                INSERT INTO chatbot_leases (thread_id, holder, expires_at)
                VALUES (?, ?, {self.clock} + ?)
                ON CONFLICT (thread_id) DO UPDATE SET
                    holder = excluded.holder, expires_at = excluded.expires_at
                WHERE chatbot_leases.holder = excluded.holder
                   OR chatbot_leases.expires_at < {self.clock}
                   OR chatbot_leases.holder = CAST(? AS TEXT)
                """,
                (thread_id, holder, seconds, replacing),
            )
        )
        return taken == 1

    def lease_holder(self, thread_id: str, *, unexpired: bool = False) -> str | None:
        """Who holds the thread's lease (``unexpired``: and has not let it expire), or None."""
        alive = f"AND expires_at >= {self.clock}" if unexpired else ""
        rows = self.query(
            f"SELECT holder FROM chatbot_leases WHERE thread_id = ? {alive}", (thread_id,)
        )
        return str(rows[0][0]) if rows else None

    def release_lease(self, thread_id: str, holder: str) -> None:
        """Give the thread's lease back (if ``holder`` still has it)."""
        self.write(
            ("DELETE FROM chatbot_leases WHERE thread_id = ? AND holder = ?", (thread_id, holder))
        )

    # --- size -----------------------------------------------------------------------------
    def sizes(self) -> list[tuple[str, int]]:
        """The bytes each table and index takes."""
        raise NotImplementedError

    def bytes_on_disk(self) -> int:
        return sum(size for _, size in self.sizes())

    free_bytes = 0
    """Bytes inside the database that deleted data left free (SQLite's)."""

    def stats(self) -> StoreStats:
        """Threads, checkpoints, pending writes, turns and text, and the bytes they take."""
        ((threads, checkpoints),) = self.query(
            "SELECT COUNT(DISTINCT thread_id), COUNT(*) FROM checkpoints"
        )
        ((writes,),) = self.query(f"SELECT COUNT(*) FROM {self.writes_table}")
        ((turns, text),) = self.query(
            "SELECT COALESCE(SUM(CASE WHEN role = 'user' THEN 1 ELSE 0 END), 0), "
            f"COALESCE(SUM({self.octets}), 0) FROM chatbot_messages"
        )
        counts = (int(threads), int(checkpoints), int(writes), self.bytes_on_disk())
        parts = sum_parts(self.sizes())
        return StoreStats(self.path, *counts, self.free_bytes, parts, int(turns), int(text))

    def vacuum(self) -> tuple[int, int]:
        """Give deleted rows' space back; the bytes before and after."""
        raise NotImplementedError

    # --- shared with another LangGraph program ---------------------------------------------
    def note_adopted(self) -> None:
        """Mark the database as taken over from another LangGraph program (:data:`ADOPTED_MARK`)."""
        self.write(
            (
                "INSERT INTO chatbot_marks (name, done_at) VALUES (?, ?) "
                "ON CONFLICT (name) DO NOTHING",
                (ADOPTED_MARK, now_text()),
            )
        )
        self._adopted = True

    _adopted: bool | None = None

    @property
    def adopted(self) -> bool:
        """True for a database taken over from another LangGraph program, which shares it."""
        if self._adopted is None:
            try:
                rows = self.query("SELECT 1 FROM chatbot_marks WHERE name = ?", (ADOPTED_MARK,))
            except Exception:  # (a database being set up: chatbot's tables come after LangGraph's)
                return False
            self._adopted = bool(rows)
        return self._adopted

    # --- listing, plain SQL ------------------------------------------------------------
    def list_threads(self, thread_id: str | None = None) -> list[ThreadInfo]:
        """Every thread (or just one) with checkpoints, newest activity first; no checkpoint
        is read."""
        only = "AND thread_id = ?" if thread_id is not None else ""
        rows = self.query(
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
            ThreadInfo(t, n, checkpoint_time(at), title or "", m, s if s is None else bool(s), *o)
            for t, n, at, title, m, s, *o in rows
        ]

    def thread_exists(self, thread_id: str) -> bool:
        """True if the thread has at least one checkpoint."""
        return bool(
            self.query("SELECT 1 FROM checkpoints WHERE thread_id = ? LIMIT 1", (thread_id,))
        )

    def newest_thread(self) -> str | None:
        """The most recently active thread's id (its newest checkpoint is the newest)."""
        rows = self.query(
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
        indexed: Sequence[tuple[str, Sequence[Any]]] = (),
    ) -> None:
        """Remember what a listing shows about a thread after a turn, in one transaction with
        ``indexed`` (:func:`chatbot.store.search.index_statements`). The first message sets the
        title; emptying the thread clears it."""
        now = now_text()
        origins = origin or (None, None)
        self.write(
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
                (thread_id, title, message_count, int(has_summary), now, now, *origins),
            ),
            *indexed,
        )

    _ROW_COLUMNS = (
        "thread_id, title, message_count, has_summary, created_at, updated_at, "
        "origin_thread, origin_checkpoint"
    )

    def thread_row(self, thread_id: str) -> tuple[Any, ...] | None:
        """A thread's listing row as stored (for copying it to another database)."""
        rows = self.query(
            f"SELECT {self._ROW_COLUMNS} FROM chatbot_threads WHERE thread_id = ?", (thread_id,)
        )
        return tuple(rows[0]) if rows else None

    def put_thread_row(self, row: Sequence[Any]) -> None:
        """Store a listing row as :meth:`thread_row` gave it, replacing the thread's."""
        self.write(
            ("DELETE FROM chatbot_threads WHERE thread_id = ?", (row[0],)),
            (
                f"INSERT INTO chatbot_threads ({self._ROW_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                tuple(row),
            ),
        )

    def rename_thread(self, thread_id: str, new_id: str) -> None:
        """Move every checkpoint, write and row of a thread to a new id, in one transaction."""
        self.write(
            *(
                (f"DELETE FROM {table} WHERE thread_id = ?", (new_id,))  # none, normally
                for table in THREAD_TABLES
            ),
            *(
                (f"UPDATE {table} SET thread_id = ? WHERE thread_id = ?", (new_id, thread_id))
                for table in (*self.checkpoint_tables, *THREAD_TABLES)
            ),
        )

    def delete_thread(self, thread_id: str) -> bool:
        """Delete a thread's checkpoints and rows; False if there was no such thread."""
        existed = self.thread_exists(thread_id)
        self.write(  # what the saver's delete_thread does, and our rows
            *(
                (f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))
                for table in (*self.checkpoint_tables, *THREAD_TABLES)
            )
        )
        return existed

    # --- keeping it small --------------------------------------------------------------
    def inactive_threads(self, days: float, now: datetime | None = None) -> list[ThreadInfo]:
        """Threads whose newest checkpoint is more than ``days`` old, least recently active
        first."""
        cutoff = (now or datetime.now(tz=UTC)).timestamp() - days * 86_400
        stale = [
            info
            for info in self.list_threads()
            if info.last_active is not None and info.last_active.timestamp() < cutoff
        ]
        return sorted(stale, key=lambda info: info.last_active or datetime.min.replace(tzinfo=UTC))

    mark_pruned: str
    """Adds to a checkpoint's count of pruned checkpoints after it (key, key, count, thread,
    checkpoint)."""

    after_pruning = ""
    """What else pruning a thread's branches removes (the thread id as its one parameter)."""

    # --- a thread's checkpoints, plain SQL ---------------------------------------------
    def checkpoint_parents(self, thread_id: str) -> list[tuple[str, str | None]]:
        """A thread's checkpoints as (id, parent id), newest first."""
        rows = self.query(
            "SELECT checkpoint_id, parent_checkpoint_id FROM checkpoints "
            "WHERE thread_id = ? AND checkpoint_ns = '' ORDER BY checkpoint_id DESC",
            (thread_id,),
        )
        return [(row[0], row[1]) for row in rows]

    def checkpoint_metadata(self, thread_id: str, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The metadata of some of a thread's checkpoints, by id (JSON: none is deserialised)."""
        if not ids:
            return {}
        rows = self.query(
            "SELECT checkpoint_id, metadata FROM checkpoints WHERE thread_id = ? "
            f"AND checkpoint_ns = '' AND checkpoint_id IN ({', '.join('?' * len(ids))})",
            (thread_id, *ids),
        )
        return {row[0]: parsed_metadata(row[1]) for row in rows}

    def recent_checkpoint_ids(self, thread_id: str, limit: int) -> list[str]:
        """The ids of a thread's newest ``limit`` checkpoints, newest first."""
        rows = self.query(
            "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '' "
            "ORDER BY checkpoint_id DESC LIMIT ?",
            (thread_id, max(0, limit)),
        )
        return [row[0] for row in rows]

    def thread_mark(self, thread_id: str) -> tuple[str | None, int]:
        """A thread's newest checkpoint id and how many pending writes it holds: what another
        connection's turn, or its write at any checkpoint of the thread, changes."""
        ((newest, writes),) = self.query(
            "SELECT (SELECT MAX(checkpoint_id) FROM checkpoints WHERE thread_id = ? "
            "AND checkpoint_ns = ''), "
            f"(SELECT COUNT(*) FROM {self.writes_table} WHERE thread_id = ? "
            "AND checkpoint_ns = '')",
            (thread_id, thread_id),
        )
        return newest, int(writes)

    def latest_checkpoint_id(self, thread_id: str) -> str | None:
        """The id of a thread's newest checkpoint, or ``None``."""
        return next(iter(self.recent_checkpoint_ids(thread_id, 1)), None)


def parsed_metadata(value: Any) -> dict[str, Any]:
    """Checkpoint metadata as stored: JSON text (SQLite) or already a dict (PostgreSQL)."""
    if isinstance(value, dict):
        return value
    return json.loads(value) if value else {}


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
