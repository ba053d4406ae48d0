"""The search index's writing side: which messages a checkpoint adds, and their rows in
``chatbot_messages`` (the savers call it as checkpoints are written; :mod:`chatbot.store.search`
reads the table). It knows the database only through the two functions it is given, so the
store and the savers can use it without importing search."""

from __future__ import annotations

import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from chatbot.parts import readable_text

Query = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]
"""Runs a SELECT (``?`` placeholders) and returns its rows."""
Write = Callable[..., int]
"""Runs ``(sql, params)`` statements in one transaction."""

ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}

INSERT_MESSAGE = (
    "INSERT INTO chatbot_messages (thread_id, message_id, checkpoint_id, role, content) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (thread_id, message_id) DO NOTHING"
)
DELETE_THREAD_MESSAGES = "DELETE FROM chatbot_messages WHERE thread_id = ?"
INSERT_KEEPING_OLDEST = (
    "INSERT INTO chatbot_messages (thread_id, message_id, checkpoint_id, role, content) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (thread_id, message_id) DO UPDATE SET "
    "checkpoint_id = excluded.checkpoint_id "
    "WHERE excluded.checkpoint_id < chatbot_messages.checkpoint_id"
)


SEARCH_BATCH = 256
"""How many new messages SQLite's search index takes at once (migration 9; they wait in
``chatbot_messages_unindexed`` until then, and a search matches them itself)."""

INDEX_WAITING = (
    "INSERT INTO chatbot_messages_fts (rowid, content) "
    "SELECT m.id, chatbot_search_text(m.content) FROM chatbot_messages_unindexed AS u "
    "JOIN chatbot_messages AS m ON m.id = u.id ORDER BY m.id",
    "DELETE FROM chatbot_messages_unindexed",
)
"""Taking the rows waiting in ``chatbot_messages_unindexed`` into the FTS5 index."""


ADDS_SEARCH_ROWS = "INSERT INTO chatbot_messages ("
"""How the statements that add search rows begin (:data:`chatbot.store.msgindex.INSERT_MESSAGE`
and its kin): after them :meth:`chatbot.store.sqlite.Store._write` calls :func:`index_waiting`."""


def index_waiting(execute: Callable[[str], Any]) -> None:
    """Take the waiting rows into the index once :data:`SEARCH_BATCH` of them wait (what the
    trigger of migrations 5 and 9 did; since migration 10 the code does it, after it adds
    rows, in their transaction). ``execute``: a connection's or cursor's."""
    try:
        ((waiting,),) = execute("SELECT COUNT(*) FROM chatbot_messages_unindexed").fetchall()
    except sqlite3.OperationalError as error:  # (before migration 5, each row's trigger
        if "no such table" in str(error):  # indexes it)
            return
        raise
    if waiting >= SEARCH_BATCH:
        for sql in INDEX_WAITING:
            execute(sql)


def message_role(message: Any) -> str:
    """``user``, ``assistant``, ``tool`` or ``system``."""
    kind = str(getattr(message, "type", ""))
    return ROLES.get(kind, kind or "unknown")


def message_text(message: Any) -> str:
    """The text of a message as it is searched: its readable text (an attached file's text,
    and an image's name or link, are found too; its data is not text), a NUL character as
    U+FFFD (:func:`searchable`)."""
    return searchable(readable_text(getattr(message, "content", "")))


def searchable(text: str) -> str:
    """Text as the search index keeps it and a query looks for it: a NUL character (a paste,
    a model's reply) as U+FFFD, the character for one that could not be kept. SQLite's
    ``LIKE`` and FTS5 stop reading at a NUL, and PostgreSQL's text cannot hold one."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def spaced(text: str) -> str:
    """``text`` with every run of whitespace one space, as SQLite's FTS5 index holds a message
    (SQL function ``chatbot_search_text``): a quoted phrase is found with any whitespace
    between its words (a line break, a tab, two spaces)."""
    if text.isascii() and text[:1] != " " and text[-1:] != " ":  # (most: as it is, at once)
        for other in _ASCII_WHITESPACE:
            if other in text:
                break
        else:
            return text
    return " ".join(text.split())


_ASCII_WHITESPACE = ("\n", "  ", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f")
"""What :func:`spaced` changes in ASCII text: ASCII's whitespace but one space, and two."""


_SPACED_SCRIPTS = re.compile("[^\u0000-\u0dff\u2000-\u2bff\U0001f000-\U0001faff]")
"""A character beyond the scripts written with spaces between words (and their punctuation,
symbols and emoji): Thai and on, Chinese, Japanese, Korean..., the text a search of one or two
characters looks for."""


def keeps_compressed(text: str) -> bool:
    """True when SQLite's search rows may keep ``text`` compressed: only characters of the
    scripts written with spaces. A search of one or two characters (``北京``) reads every row
    that may hold them; those in other scripts stay plain text, which SQLite reads itself, and
    a term holding such a character need not read a compressed row (:func:`in_plain_rows`)."""
    return _SPACED_SCRIPTS.search(text) is None and _SPACED_SCRIPTS.search(text.lower()) is None


def in_plain_rows(term: str) -> bool:
    """True when ``term`` can only be in rows kept as plain text (see :func:`keeps_compressed`):
    it, lower-cased as a search compares it, has a character a compressed text has in no
    case."""
    return _SPACED_SCRIPTS.search(term.lower()) is not None


_IDS_PER_QUERY = 500
"""Message ids asked about in one query (below the oldest SQLite's 999 parameters)."""


class MessageIndex:
    """Adds each thread's new messages to ``chatbot_messages`` as checkpoints are written.

    A checkpoint holds the whole message list, so the ids already indexed are remembered per
    thread, for the last :attr:`REMEMBERED` threads: the first time a thread is written, the
    table is asked which of that checkpoint's messages it holds (not for the thread's whole
    history, which grows without end); a turn then writes only its one or two new messages.
    A message not known here is written all the same: the row one already in the table
    (another process's, or a message of an older state brought back) is kept as it is.
    """

    REMEMBERED = 16

    def __init__(
        self, query: Query, write: Write, stored: Callable[[str], Any] = lambda text: text
    ) -> None:
        self._query = query
        self._write = write
        self.stored = stored
        """A message's text as the database keeps it (SQLite's compressed, see
        :meth:`chatbot.store.sqlite.Store.stored_text`)."""
        self._known: OrderedDict[str, set[str]] = OrderedDict()
        self._lock = threading.Lock()

    def _known_ids(self, thread_id: str, candidates: Iterable[str] = ()) -> set[str]:
        known = self._known.get(thread_id)
        if known is None:
            known = self._indexed(thread_id, candidates)
            self._known[thread_id] = known
            while len(self._known) > self.REMEMBERED:
                self._known.popitem(last=False)
        self._known.move_to_end(thread_id)
        return known

    def _indexed(self, thread_id: str, message_ids: Iterable[str]) -> set[str]:
        """Which of ``message_ids`` the thread has indexed: a question about one checkpoint's
        messages, which costs the same on a thread of ten turns or of thousands."""
        wanted = list(dict.fromkeys(message_ids))
        found: set[str] = set()
        for start in range(0, len(wanted), _IDS_PER_QUERY):
            chunk = wanted[start : start + _IDS_PER_QUERY]
            rows = self._query(
                "SELECT message_id FROM chatbot_messages WHERE thread_id = ? "
                f"AND message_id IN ({', '.join('?' * len(chunk))})",
                (thread_id, *chunk),
            )
            found.update(row[0] for row in rows)
        return found

    def fresh_rows(
        self, thread_id: str, checkpoint_id: str, messages: Iterable[Any]
    ) -> tuple[list[tuple[Any, ...]], list[str]]:
        """The rows to index for the messages this thread has not indexed yet, as first seen
        at ``checkpoint_id`` (messages without text have none), and all their ids."""
        with self._lock:
            with_ids = [m for m in messages if getattr(m, "id", None)]
            known = self._known_ids(thread_id, (str(m.id) for m in with_ids))
            fresh = [m for m in with_ids if m.id not in known]
        texts = [(m, message_text(m)) for m in fresh]
        rows = [
            (thread_id, str(m.id), checkpoint_id, message_role(m), self.stored(text))
            for m, text in texts
            if text.strip()
        ]
        return rows, [str(m.id) for m in fresh]

    def remember(self, thread_id: str, message_ids: Iterable[str]) -> None:
        """Note ids as indexed, once their rows are written."""
        with self._lock:
            self._known_ids(thread_id).update(message_ids)

    def write(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Write rows from :meth:`fresh_rows` in a transaction of their own."""
        if rows:
            self._write(*((INSERT_MESSAGE, row) for row in rows))

    def add(self, thread_id: str, checkpoint_id: str, messages: Iterable[Any]) -> int:
        """Index the messages not yet indexed for this thread, as first seen at
        ``checkpoint_id``; how many rows were written."""
        rows, ids = self.fresh_rows(thread_id, checkpoint_id, messages)
        self.write(rows)
        self.remember(thread_id, ids)
        return len(rows)

    def forget(self, thread_id: str) -> None:
        """Drop what is remembered of a thread (it was renamed or deleted)."""
        with self._lock:
            self._known.pop(thread_id, None)

    def drop(self, thread_id: str) -> None:
        """Delete a thread's rows (its checkpoints were deleted) and forget it."""
        self._write((DELETE_THREAD_MESSAGES, (thread_id,)))
        self.forget(thread_id)
