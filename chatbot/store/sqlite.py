"""The SQLite database: LangGraph's ``SqliteSaver`` and chatbot's tables in one file.

A file is only opened if it is missing, empty or marked as chatbot's (``PRAGMA
application_id``, with the schema's version in ``user_version``): anything else is refused
before anything is written to it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from chatbot.files import check_creatable, create_private_file
from chatbot.store.base import SqlStore
from chatbot.store.errors import DamagedDatabase, StoreError, damage, reporting_damage
from chatbot.store.schema import (
    APPLICATION_ID,
    COUNT_THREADS,
    SCHEMA_VERSION,
    SQLITE,
    EmptyDatabase,
    Owner,
    check_schema_version,
    refuse_foreign,
    unmarked_owner,
)

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from chatbot.store.saver import ChatSqliteSaver

BUSY_TIMEOUT_SECONDS = 30.0
_SQLITE_HEADER = b"SQLite format 3\x00"

LANGGRAPH_SQLITE_TABLES = frozenset({"checkpoints", "writes"})


_SPECIAL_FILES = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def _refuse_other_files(path: Path) -> None:
    """Refuse, reading only, a path that exists but cannot be a chatbot database: a folder, a
    device, a pipe, a socket, a non-empty file that is not SQLite."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return  # created later, or one clear error from creating its folder
    if not stat.S_ISREG(mode):
        kind = next((kind for test, kind in _SPECIAL_FILES if test(mode)), "not a regular file")
        raise StoreError(
            f"cannot use {str(path)!r} as the database: it is {kind}, "
            "not a file; choose another --db"
        )
    with path.open("rb") as file:
        header = file.read(len(_SQLITE_HEADER))
    if header and header != _SQLITE_HEADER:
        raise StoreError(
            f"{str(path)!r} is not a SQLite database, so chatbot leaves it untouched: "
            "choose another --db (a new file, or a chatbot database)"
        )


def _refuse_a_missing_folder(path: str) -> None:
    """Refuse a new file whose folder does not exist outside chatbot's data folder."""
    from chatbot.config.sources import missing_db_folder

    folder = missing_db_folder(path)
    if folder is not None:
        raise StoreError(
            f"the folder {str(folder)!r} does not exist: create it first, or choose another "
            "--db (nothing was written)"
        )


def _sqlite_owner(conn: sqlite3.Connection) -> Owner:
    """Whose the open SQLite database is (reads only): marked with :data:`APPLICATION_ID`,
    chatbot's at the version ``user_version`` says (0 with tables, or no mark with
    ``chatbot_threads``: a development build's). Read in one transaction: another process's
    set-up committing meanwhile is seen whole or not at all."""
    if conn.in_transaction:
        return _owner_now(conn)
    conn.execute("BEGIN")
    try:
        return _owner_now(conn)
    finally:
        conn.execute("ROLLBACK")


def _owner_now(conn: sqlite3.Connection) -> Owner:
    (application_id,) = conn.execute("PRAGMA application_id").fetchone()
    (user_version,) = conn.execute("PRAGMA user_version").fetchone()
    tables = sorted(
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
        )
        if not name.startswith("sqlite_")
    )
    if application_id == APPLICATION_ID:
        if user_version == 0 and tables:
            return Owner("older chatbot")
        return Owner("chatbot", version=user_version)
    if application_id != 0:
        return Owner("other", f"application id {application_id}")
    if user_version != 0:
        return Owner("other", f"user version {user_version}")
    if "chatbot_threads" in tables:
        return Owner("older chatbot")
    return unmarked_owner(tables, LANGGRAPH_SQLITE_TABLES, conn)


def sqlite_owner(db: str) -> tuple[Owner, int]:
    """Whose an existing SQLite file is, and how many threads a LangGraph database holds, read
    from the file opened read-only."""
    path = Path(db).expanduser()
    _refuse_other_files(path)
    conn = sqlite3.connect(path.absolute().as_uri() + "?mode=ro", uri=True)
    try:
        owner = _sqlite_owner(conn)
        threads = conn.execute(COUNT_THREADS).fetchone()[0] if owner.kind == "langgraph" else 0
        return owner, int(threads)
    except sqlite3.Error as error:
        if _in_read_only_place(error, str(path)):  # (adopting writes: it cannot be adopted)
            raise _read_only(str(path)) from None
        raise damage(error, str(path)) or StoreError(
            f"cannot open the database {str(path)!r}: {error}"
        ) from None
    finally:
        conn.close()


def _retry_locked(action: Any) -> Any:
    """Run a schema statement, waiting out another process that holds the write lock."""
    for attempt in range(20):
        try:
            return action()
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or attempt == 19:
                raise
            time.sleep(0.05 * (attempt + 1))
    return None


def _read_only(path: str) -> StoreError:
    return StoreError(
        f"the database {path!r} is read-only: check its permissions, or use --db for another file"
    )


def _in_read_only_place(error: BaseException, path: str) -> bool:
    """True when SQLite could not open an existing database because its folder (where the
    write-ahead log goes) or the file cannot be written."""
    code = getattr(error, "sqlite_errorcode", None)
    if code not in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY_DIRECTORY):
        return False
    if not os.path.isfile(path):
        return False
    return not os.access(os.path.dirname(os.path.abspath(path)), os.W_OK) or not os.access(
        path, os.W_OK
    )


def _refusal(error: sqlite3.Error | OSError, path: str) -> StoreError:
    """The one line for a database file that could not be opened or created."""
    if isinstance(error, NotADirectoryError | FileExistsError):
        return StoreError(
            f"cannot open the database {path!r}: a file stands where a folder of its "
            "path should be; choose another --db"
        )
    if isinstance(error, sqlite3.Error) and (damaged := damage(error, path)):
        return damaged
    if "readonly" in str(error) or _in_read_only_place(error, path):
        return _read_only(path)
    return StoreError(f"cannot open the database {path!r}: {error}")


def check_new_file(db: str) -> None:
    """Refuse, making nothing, a database file that does not exist and could not be made, with
    the line opening it would fail with (the REPL opens it later, behind its prompt)."""
    path = Path(db).expanduser()
    _refuse_a_missing_folder(str(path))
    try:
        check_creatable(path)
    except OSError as error:
        raise _refusal(error, str(path)) from None


class _Connection(sqlite3.Connection):
    """A connection whose commits can be held: in :meth:`Store.transaction`, LangGraph's saver's
    and the store's wait for the one commit at the block's end."""

    holding = False

    def commit(self) -> None:
        if not self.holding:
            super().commit()


class Store(SqlStore):
    """The app's SQLite database: one connection shared with LangGraph's ``SqliteSaver`` under
    one lock, in WAL mode with a busy timeout so that several processes can use the file."""

    dialect = "sqlite"
    checkpoint_tables = ("checkpoints", "writes")
    writes_table = "writes"
    writes_value = "value"
    octets = "length(CAST(content AS BLOB))"
    clock = "((julianday('now') - 2440587.5) * 86400.0)"
    mark_pruned = (
        "UPDATE checkpoints SET metadata = CAST(json_set(CAST(metadata AS TEXT), '$.' || ?, "
        "COALESCE(json_extract(CAST(metadata AS TEXT), '$.' || ?), 0) + ?) AS BLOB) "
        "WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id = ?"
    )

    def __init__(
        self, db: str | os.PathLike[str], *, read_only: bool = False, adopt: bool = False
    ) -> None:
        """Open (or create) the database ``db``. ``read_only``: write nothing to the file (an
        empty one is :class:`EmptyDatabase`). ``adopt``: take over another LangGraph program's."""
        self.path = str(db)
        self.lock = threading.RLock()
        """The connection's one lock: a read on another thread would hold a read transaction
        open, and a write begun meanwhile could not wait for another process's commit."""
        self._saver: ChatSqliteSaver | None = None
        self._memory_store: BaseStore | None = None
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
                self.read_only = False  # (not a write-ahead-log database yet: set up once)
            if not self.read_only:
                if self.path != ":memory:":
                    _refuse_a_missing_folder(self.path)
                    create_private_file(Path(self.path))
                self._open(read_only=False, adopt=adopt)
        except (sqlite3.Error, OSError) as error:
            raise _refusal(error, self.path) from None

    def _open(self, *, read_only: bool, adopt: bool) -> bool:
        """Connect and set up; with ``read_only``, False (connection open) when the database
        must be set up before it can be read."""
        if read_only:
            if not Path(self.path).is_file():
                raise StoreError(f"no database {self.path!r}: check --db or CHATBOT_DB")
            target, uri = Path(self.path).absolute().as_uri() + "?mode=ro", True
        else:
            target, uri = self.path, False
        # (in a read-only place no WAL reader's -shm can be made, nor any writer: the file is
        # read as unchanging, as SQLite's documentation advises)
        for self.immutable in (False, True):
            self.conn = sqlite3.connect(
                target + "&immutable=1" if self.immutable else target,
                uri=uri or self.immutable,
                check_same_thread=False,
                timeout=0 if self.immutable else BUSY_TIMEOUT_SECONDS,
                factory=_Connection,
            )
            try:
                return self._set_up(read_only, adopt)
            except sqlite3.OperationalError as error:
                self.conn.close()
                if self.immutable or not (read_only and self._unshareable(error)):
                    raise
            except BaseException:
                self.conn.close()
                raise
        raise AssertionError("unreachable")

    immutable = False
    """Opened read-only with ``immutable=1``: the file is in a place no one can write."""

    def _unshareable(self, error: sqlite3.OperationalError) -> bool:
        """True when a read-only open failed for want of a WAL reader's files in the folder, and
        nothing waits in a write-ahead log (which ``immutable=1`` would not read)."""
        wal = Path(self.path + "-wal")
        return _in_read_only_place(error, self.path) and (
            not wal.exists() or wal.stat().st_size == 0
        )

    def _set_up(self, read_only: bool, adopt: bool) -> bool:
        """Check the file is chatbot's, then make the schema and the mark (read only: nothing,
        False if what reading needs is not there yet)."""
        self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
        owner = _retry_locked(lambda: _sqlite_owner(self.conn))
        if not (adopt and owner.kind == "langgraph"):
            refuse_foreign(owner, self.path, "SQLite", self._count_threads)
        if read_only and owner.kind == "new":
            raise EmptyDatabase(self.path)
        if owner.version > SCHEMA_VERSION:  # (a newer chatbot's, or a damaged page's
            self._check_intact()  # numbers: damage is said as damage)
        self.notice = check_schema_version(owner.version, self.path, read_only)
        if read_only:
            (journal,) = self.conn.execute("PRAGMA journal_mode").fetchone()
            return journal == "wal" or self.immutable  # (which reports "delete")
        if self.path != ":memory:":
            _retry_locked(lambda: self.conn.execute("PRAGMA journal_mode=WAL"))
        # (SQLite's advice for WAL: a crash loses nothing, a power cut the last turns at most)
        self.conn.execute("PRAGMA synchronous = NORMAL")
        if owner.kind != "new":
            self._check_whole()
        if owner.kind != "chatbot" or owner.version < SCHEMA_VERSION:
            if owner.kind != "new":
                self._check_intact()
            _retry_locked(self._make_schema)
        self._check_writable()
        return True

    def _make_schema(self) -> None:
        """LangGraph's tables (its own ``setup``), then chatbot's and the mark in one
        transaction: a set-up cut short leaves an empty database or a whole one."""
        from chatbot.store.saver import ChatSqliteSaver

        with self.lock:
            ChatSqliteSaver(self.conn).setup()
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                (version,) = self.conn.execute("PRAGMA user_version").fetchone()
                if version < SCHEMA_VERSION:  # (else another process made it meanwhile)
                    for statement in SQLITE:
                        self.conn.execute(statement)
                    self.conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise

    def _count_threads(self) -> int:
        return int(self.conn.execute(COUNT_THREADS).fetchone()[0])

    def _check_intact(self) -> None:
        """SQLite's quick check, before changing a database that holds threads: a damaged file
        is reported, not written into."""
        ((found,),) = self.conn.execute("PRAGMA quick_check(1)").fetchall()
        if found != "ok":
            raise DamagedDatabase(self.path, found.replace("*** in database main ***", ""))

    def _check_whole(self) -> None:
        """Before writing: a file that is not a whole number of pages was cut short. (``stat``:
        closing a descriptor of the file would drop SQLite's POSIX locks on it.)"""
        if self.path == ":memory:":
            return
        ((page_size,),) = self.conn.execute("PRAGMA page_size").fetchall()
        size = os.stat(self.path).st_size
        if size % page_size:
            raise DamagedDatabase(
                self.path,
                f"its {size:,} bytes are not a whole number of pages of {page_size:,} bytes; "
                "it was cut short",
            )

    @property
    def saver(self) -> ChatSqliteSaver:
        """LangGraph's checkpointer on this connection, made on first use."""
        if self._saver is None:
            from chatbot.store.saver import ChatSqliteSaver, ZstdSerializer

            saver = ChatSqliteSaver(self.conn, serde=ZstdSerializer(writing=not self.adopted))
            saver.path = self.path
            saver.lock = self.lock  # type: ignore[assignment]  # (an RLock does what a Lock does)
            saver.is_setup = True  # (its tables are made before the schema's mark)
            self._saver = saver
        return self._saver

    @property
    def memory_store(self) -> BaseStore:
        """LangGraph's store on this connection (the user's memories), made on first use."""
        if self._memory_store is None:
            from chatbot.store.userstore import sqlite_store

            with reporting_damage(self.path):
                self._memory_store = sqlite_store(self.conn, self.lock, read_only=self.read_only)
        return self._memory_store

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

    def close(self, wait: float | None = None) -> None:
        """Close the connection once no other thread uses it (closing it under a running
        statement crashes the process); after ``wait`` seconds, leave it open (SQLite needs
        nothing at close)."""
        if not self.lock.acquire(timeout=-1 if wait is None else wait):
            return
        try:
            self.conn.close()
        finally:
            self.lock.release()

    conn: _Connection

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Self]:
        """Under the write lock from the start (``BEGIN IMMEDIATE``), so that nothing it reads
        changes before its commit."""
        with self.lock, reporting_damage(self.path):
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.holding = True
            try:
                yield self
                self.conn.holding = False
                self.conn.commit()
            except BaseException:
                self.conn.holding = False
                self.conn.rollback()
                if self._saver is not None:  # (what it wrote in the block is gone)
                    self._saver.recent.forget()
                raise

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.lock, reporting_damage(self.path):
            return self.conn.execute(sql, tuple(params)).fetchall()

    def write(self, *statements: tuple[str, Sequence[Any]]) -> int:
        count = 0
        with self.lock, reporting_damage(self.path):
            try:  # (not the connection's context manager, which skips commit())
                for sql, params in statements:
                    count = self.conn.execute(sql, tuple(params)).rowcount
                self.conn.commit()
            except BaseException:
                self.conn.rollback()
                raise
        return count

    # --- size ----------------------------------------------------------------------------

    def sizes(self) -> list[tuple[str, int]]:
        try:  # (SQLite's dbstat table: in Python's builds, not in every SQLite)
            return self.query("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
        except sqlite3.OperationalError:
            return []

    @property
    def free_bytes(self) -> int:  # type: ignore[override]
        ((page_size,),) = self.query("PRAGMA page_size")
        ((free,),) = self.query("PRAGMA freelist_count")
        return int(free * page_size)

    def bytes_on_disk(self) -> int:
        """The file, its write-ahead log and shared-memory file, as they are on disk."""
        if self.path == ":memory:":
            return 0
        total = 0
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                total += os.stat(self.path + suffix).st_size
        return total

    def vacuum(self) -> tuple[int, int]:
        """SQLite's ``VACUUM`` between folding the write-ahead log into the file."""
        before = self.bytes_on_disk()
        with self.lock:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.conn.execute("VACUUM")
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return before, self.bytes_on_disk()
