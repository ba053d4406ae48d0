"""Search everything ever said: every message of every thread, folded into a summary or not.

Each message is indexed once into ``chatbot_messages`` (thread, message id, the first
checkpoint holding it, role, text) from the checkpoints' own writes, in the transaction that
records a turn; ``chatbot_indexed`` says how far each thread is indexed, so what a killed turn
left out is read from the checkpoints by the next turn or search. SQLite finds a word's
trigrams with FTS5 (shorter words with ``LIKE``) and checks each row in Python; PostgreSQL uses
``ILIKE``, which a ``pg_trgm`` index answers. A query is words that must all appear, or
``"a phrase"`` (any whitespace between its words); hits come newest first.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from chatbot.interrupts import decoding
from chatbot.memory.recall_search import (
    Recalled,
    Searcher,
    SearchError,
    holds,
    parse_query,
    recalled,
    role_of,
    searchable,
    spaced,
)
from chatbot.parts import readable_text
from chatbot.sanitize import sanitize
from chatbot.store.base import checkpoint_time, parsed_metadata, thread_config

if TYPE_CHECKING:
    from chatbot.store.base import SqlStore

SNIPPET_WIDTH = 160
MIN_TRIGRAM = 3
"""Words shorter than this (in characters) cannot use SQLite's trigram index."""
MAX_LIMIT = 1_000_000


Row = tuple[str, str, str, str, str]
"""A search row: thread id, message id, checkpoint id, role, text."""


def _rows_since(store: SqlStore, thread_id: str, mark: str) -> tuple[list[Row], str | None]:
    """The rows of the messages a thread's checkpoints after ``mark`` added, and its newest
    checkpoint's id (``None``: nothing new). A checkpoint's new messages are its parent's
    writes to ``messages``, unless it is a new branch's first (a fork's), which stores them."""
    fresh = store.query(
        "SELECT checkpoint_id, parent_checkpoint_id, metadata FROM checkpoints "
        "WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id > ? ORDER BY checkpoint_id",
        (thread_id, mark),
    )
    if not fresh:
        return [], None
    serde = store.saver.serde
    rows: list[Row] = []
    seen: set[str] = set()

    def add(checkpoint_id: str, messages: Iterable[Any]) -> None:
        for message in messages:
            message_id = getattr(message, "id", None)
            if not message_id or getattr(message, "type", "remove") == "remove":
                continue
            text = searchable(readable_text(getattr(message, "content", "")))
            if message_id in seen or not text.strip():
                continue
            seen.add(message_id)
            role = role_of(str(getattr(message, "type", "")))
            rows.append((thread_id, str(message_id), checkpoint_id, role, text))

    stores_its_own: set[str] = set()
    made_from: dict[str, str] = {}  # (a child, and the parent whose writes made it)
    for checkpoint_id, parent, metadata in fresh:
        meta = parsed_metadata(metadata)
        counted = meta.get("counters_since_delta_snapshot") or {}
        if parent is not None and ("messages" in counted or meta.get("source") == "loop"):
            made_from[checkpoint_id] = parent  # (a step, or an update of the head)
        elif "messages" not in counted:  # (a new branch's first: it stores its messages)
            stores_its_own.add(checkpoint_id)
    written: dict[str, list[Any]] = {}
    parents = sorted(set(made_from.values()))
    for start in range(0, len(parents), 500):
        chunk = parents[start : start + 500]
        rows_read = store.query(
            f"SELECT checkpoint_id, task_id, idx, type, {store.writes_value} "
            f"FROM {store.writes_table} WHERE thread_id = ? AND checkpoint_ns = '' "
            f"AND channel = 'messages' AND checkpoint_id IN ({', '.join('?' * len(chunk))}) "
            "ORDER BY checkpoint_id, task_id, idx",
            (thread_id, *chunk),
        )
        with decoding():
            for parent, _, _, kind, value in rows_read:
                value = serde.loads_typed((kind, bytes(value)))
                written.setdefault(parent, []).extend(value if isinstance(value, list) else [value])
    for checkpoint_id, _, _ in fresh:  # (oldest first: a message is its first holder's)
        if checkpoint_id in stores_its_own:
            add(checkpoint_id, _stored_messages(store, thread_id, checkpoint_id))
        elif checkpoint_id in made_from:
            add(checkpoint_id, written.get(made_from[checkpoint_id], ()))
    return rows, str(fresh[-1][0])


def _stored_messages(store: SqlStore, thread_id: str, checkpoint_id: str) -> list[Any]:
    from chatbot.store.checkpoints import channel_values

    saved = store.saver.get_tuple(thread_config(thread_id, checkpoint_id))
    if saved is None:
        return []
    return list(channel_values(store.saver, saved).get("messages") or ())


_INSERT_ROW = (
    "INSERT INTO chatbot_messages (thread_id, message_id, checkpoint_id, role, content) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (thread_id, message_id) DO NOTHING"
)
_MARK = (
    "INSERT INTO chatbot_indexed (thread_id, checkpoint_id) VALUES (?, ?) "
    "ON CONFLICT (thread_id) DO UPDATE SET checkpoint_id = excluded.checkpoint_id "
    "WHERE excluded.checkpoint_id > chatbot_indexed.checkpoint_id"
)


def _mark_of(store: SqlStore, thread_id: str) -> tuple[str, bool]:
    """How far a thread is indexed (``""``: not at all), and whether its rows are stale (the
    checkpoint it was indexed to is gone)."""
    rows = store.query(
        "SELECT i.checkpoint_id, EXISTS (SELECT 1 FROM checkpoints AS c "
        "WHERE c.thread_id = i.thread_id AND c.checkpoint_ns = '' "
        "AND c.checkpoint_id = i.checkpoint_id) FROM chatbot_indexed AS i WHERE i.thread_id = ?",
        (thread_id,),
    )
    if not rows:
        return "", False
    mark, there = rows[0]
    return (str(mark), False) if there else ("", True)


def index_statements(store: SqlStore, thread_id: str) -> list[tuple[str, Sequence[Any]]]:
    """The statements that index what a thread's checkpoints added since it was last indexed,
    and move its mark, to run in one transaction (a turn's, with its listing row)."""
    mark, stale = _mark_of(store, thread_id)
    rows, newest = _rows_since(store, thread_id, mark)
    if newest is None:
        return []
    return [
        *(reindex(thread_id) if stale else ()),
        *((_INSERT_ROW, row) for row in rows),
        (_MARK, (thread_id, newest)),
    ]


def lagging_threads(store: SqlStore, thread_id: str | None = None) -> list[str]:
    """The threads (or the one) with checkpoints the index has not read yet."""
    only = "AND thread_id = ?" if thread_id is not None else ""
    return [
        row[0]
        for row in store.query(
            "SELECT c.thread_id FROM (SELECT thread_id, MAX(checkpoint_id) AS newest "
            f"FROM checkpoints WHERE checkpoint_ns = '' {only} GROUP BY thread_id) AS c "
            "LEFT JOIN chatbot_indexed AS i ON i.thread_id = c.thread_id "
            "WHERE i.checkpoint_id IS NULL OR c.newest > i.checkpoint_id ORDER BY 1",
            () if thread_id is None else (thread_id,),
        )
    ]


def catch_up(store: SqlStore, progress: Callable[[int, int], None] = lambda done, of: None) -> int:
    """Index every thread's checkpoints the index lacks, telling ``progress`` after each
    thread; safe while other processes write. Returns the rows added."""
    store.write(  # (the rows of threads deleted through LangGraph's saver)
        *(
            statement
            for (thread_id,) in store.query(
                "SELECT thread_id FROM chatbot_indexed AS i WHERE NOT EXISTS (SELECT 1 FROM "
                "checkpoints AS c WHERE c.thread_id = i.thread_id AND c.checkpoint_ns = '')"
            )
            for statement in reindex(thread_id)
        )
    )
    threads = lagging_threads(store)
    added = 0
    for done, thread_id in enumerate(threads, start=1):
        statements = index_statements(store, thread_id)
        if statements:
            store.write(*statements)
            if not store.thread_exists(thread_id):  # (deleted meanwhile by another process)
                store.write(*reindex(thread_id))
            added += len(statements) - 1
        progress(done, len(threads))
    return added


def reindex(thread_id: str) -> list[tuple[str, Sequence[Any]]]:
    """The statements that forget a thread's search rows (its checkpoints are then read
    again)."""
    return [
        ("DELETE FROM chatbot_messages WHERE thread_id = ?", (thread_id,)),
        ("DELETE FROM chatbot_indexed WHERE thread_id = ?", (thread_id,)),
    ]


def unindexed_rows(store: SqlStore, thread_id: str | None = None) -> list[Row]:
    """The rows the index lacks, read from the checkpoints and written nowhere."""
    rows: list[Row] = []
    for lagging in lagging_threads(store, thread_id):
        mark, _ = _mark_of(store, lagging)
        rows.extend(_rows_since(store, lagging, mark)[0])
    return rows


@dataclass(frozen=True)
class Snippet:
    """A one-line excerpt of a message, and where the terms are in it."""

    text: str
    spans: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Hit:
    """One message found."""

    thread_id: str
    message_id: str
    checkpoint_id: str
    """The first checkpoint holding the message: ``show --checkpoint`` and ``/fork`` take it."""
    role: str
    text: str
    terms: tuple[str, ...] = field(default=(), repr=False)

    @property
    def time(self) -> datetime | None:
        """When the message was first checkpointed."""
        return checkpoint_time(self.checkpoint_id)

    def snippet(self, width: int = SNIPPET_WIDTH) -> Snippet:
        return make_snippet(self.text, self.terms, width)


def make_snippet(text: str, terms: Sequence[str], width: int = SNIPPET_WIDTH) -> Snippet:
    """The text on one line, safe to print, about ``width`` characters around the first
    match, every match marked."""
    flat = spaced(sanitize(spaced(text)))  # (whitespace sanitize removes: a space still)
    pattern = re.compile(
        "|".join(re.escape(term) for term in sorted(terms, key=len, reverse=True)) or "(?!)",
        re.IGNORECASE,
    )
    matches = list(pattern.finditer(flat))
    start = 0
    if matches and len(flat) > width:
        start = max(0, matches[0].start() - width // 3)
        start = max(0, min(start, len(flat) - width))
        space = flat.find(" ", start, start + 12)  # begin at a word where there are words
        if start and space != -1:
            start = space + 1
    end = min(len(flat), start + width)
    prefix = "…" if start else ""
    cut = prefix + flat[start:end] + ("…" if end < len(flat) else "")
    spans = tuple(
        (m.start() - start + len(prefix), m.end() - start + len(prefix))
        for m in matches
        if m.start() >= start and m.end() <= end
    )
    return Snippet(cut, spans)


def _like(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _fts_phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _narrowing(store: SqlStore, terms: Sequence[str]) -> tuple[str, list[Any], list[str]]:
    """SQL that finds every row that may hold the terms (a join, parameters, conditions), each
    word by the index where it can; :func:`_unsettled` says what :func:`holds` checks."""
    words = list(dict.fromkeys(word for term in terms for word in term.split(" ")))
    if store.dialect == "postgresql":
        return "", [_like(word) for word in words], ["m.content ILIKE ? ESCAPE '\\'"] * len(words)
    where: list[str] = []
    params: list[Any] = []
    long = [word for word in words if len(word) >= MIN_TRIGRAM]
    for word in (word for word in words if len(word) < MIN_TRIGRAM):
        cases = sorted({word, word.lower(), word.upper(), word.title()})
        # (LIKE folds ASCII's case only: a word beyond ASCII in each of its cases)
        where.append("(" + " OR ".join(["m.content LIKE ? ESCAPE '\\'"] * len(cases)) + ")")
        params.extend(_like(case) for case in cases)
    if not long:
        return "", params, where
    grams = dict.fromkeys(  # (the index keeps which trigrams a message holds, not where)
        word[start : start + MIN_TRIGRAM]
        for word in long
        for start in range(len(word) - MIN_TRIGRAM + 1)
    )
    join = "JOIN chatbot_messages_fts AS f ON f.rowid = m.id"
    where.insert(0, "chatbot_messages_fts MATCH ?")
    params.insert(0, " AND ".join(_fts_phrase(gram) for gram in grams))
    return join, params, where


def _unsettled(store: SqlStore, terms: Sequence[str]) -> list[str]:
    """The terms :func:`_narrowing` does not settle: on SQLite every one (its index finds a
    word's trigrams anywhere; ``LIKE`` folds ASCII only), on PostgreSQL a phrase."""
    return [term for term in terms if store.dialect == "sqlite" or " " in term]


def search(
    store: SqlStore, query: str, *, thread_id: str | None = None, limit: int = 20
) -> list[Hit]:
    """The messages holding every term of ``query``, newest first (in one thread, or all),
    indexed or not yet."""
    terms = parse_query(query)
    limit = min(max(1, limit), MAX_LIMIT)
    if thread_id is None:
        join, params, where = _narrowing(store, terms)
        unsettled = _unsettled(store, terms)
    else:  # (one thread's rows, by its own index: each checked here, faster than the index)
        join, params, where, unsettled = "", [thread_id], ["m.thread_id = ?"], terms
    where.append(  # (not a row of a thread deleted through LangGraph's saver)
        "EXISTS (SELECT 1 FROM checkpoints AS c WHERE c.thread_id = m.thread_id "
        "AND c.checkpoint_ns = '' AND c.checkpoint_id = m.checkpoint_id)"
    )
    sql = (
        "SELECT m.thread_id, m.message_id, m.checkpoint_id, m.role, m.content "
        f"FROM chatbot_messages AS m {join} WHERE {' AND '.join(where)} "
        "ORDER BY m.checkpoint_id DESC, m.id DESC LIMIT ? OFFSET ?"
    )
    found: list[Row] = []
    page, offset = max(2 * limit, 256 if unsettled else 32), 0
    while len(found) < limit:
        rows = store.query(sql, (*params, page, offset))
        found.extend(row for row in rows if holds(row[4], unsettled))
        if len(rows) < page:
            break
        offset, page = offset + page, 4 * page
    indexed = {(row[0], row[1]) for row in found}
    extra = [
        row
        for row in _matching(store, terms, unindexed_rows(store, thread_id))
        if (row[0], row[1]) not in indexed
    ]
    if extra:
        found = sorted([*found, *extra], key=lambda row: row[2], reverse=True)
    return [Hit(*row, terms=tuple(terms)) for row in found[:limit]]


def _matching(store: SqlStore, terms: Sequence[str], rows: list[Row]) -> list[Row]:
    """The ``rows`` not indexed yet that hold every term, as the index would find them:
    PostgreSQL's ``ILIKE`` decides its words (its collation folds case), :func:`holds` the rest."""
    if not rows:
        return []
    if store.dialect != "postgresql":
        return [row for row in rows if holds(row[4], terms)]
    _, params, where = _narrowing(store, terms)
    kept = {
        int(number) - 1
        for (number,) in store.query(
            "SELECT m.n FROM unnest(?::text[]) WITH ORDINALITY AS m(content, n) "
            f"WHERE {' AND '.join(where)}",
            ([row[4] for row in rows], *params),
        )
    }
    unsettled = _unsettled(store, terms)
    return [row for n, row in enumerate(rows) if n in kept and holds(row[4], unsettled)]


def hit_record(hit: Hit) -> dict[str, Any]:
    """A hit as JSON (``chatbot search --json``), its terms' places in the snippet as
    ``[start, end)``."""
    snippet = hit.snippet()
    when = hit.time
    return {
        "thread_id": hit.thread_id,
        "checkpoint_id": hit.checkpoint_id,
        "message_id": hit.message_id,
        "role": hit.role,
        "time": when.isoformat() if when else None,
        "snippet": snippet.text,
        "highlights": [list(span) for span in snippet.spans],
    }


def recaller(store: SqlStore) -> Searcher:
    """The recall tool's search: a thread's messages holding every word of the query, as
    ``/search`` finds them, else those holding the most of them (a model's query is a guess)."""

    def recall(
        thread_id: str, query: str, limit: int, skip: Collection[str], at: str | None = None
    ) -> list[Recalled]:
        try:
            terms = parse_query(query)
        except SearchError:
            return []
        line = line_of(store, thread_id, at) if at else None

        def wanted_hit(hit: Hit) -> bool:
            return hit.message_id not in skip and (line is None or hit.checkpoint_id in line)

        wanted = limit + len(skip) + 16
        hits = [h for h in search(store, query, thread_id=thread_id, limit=wanted) if wanted_hit(h)]
        if hits or len(terms) < 2:
            return [_recalled(hit) for hit in hits[:limit]]
        candidates: dict[str, Recalled] = {}  # (any term's newest messages, then each scored
        for term in terms:  # on every term: a common word's list alone stops short)
            for hit in search(store, _fts_phrase(term), thread_id=thread_id, limit=wanted * 4):
                if wanted_hit(hit):
                    candidates.setdefault(hit.message_id, _recalled(hit))
        return recalled(candidates.values(), terms, limit)

    return recall


_LINE = """
WITH RECURSIVE line(id) AS (
    SELECT checkpoint_id FROM checkpoints
    WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id = ?
    UNION
    SELECT c.parent_checkpoint_id FROM checkpoints AS c JOIN line ON c.checkpoint_id = line.id
    WHERE c.thread_id = ? AND c.checkpoint_ns = '' AND c.parent_checkpoint_id IS NOT NULL
)
SELECT id FROM line
"""


def line_of(
    store: SqlStore, thread_id: str, checkpoint_id: str, wait: float = 0.5
) -> set[str] | None:
    """The ids of ``checkpoint_id`` and its ancestors; ``None`` when it is not stored (LangGraph
    may write a run's checkpoints in the background: waited for up to ``wait`` seconds)."""
    deadline = time.monotonic() + wait
    while True:
        rows = store.query(_LINE, (thread_id, checkpoint_id, thread_id))
        if rows or time.monotonic() >= deadline:
            return {str(row[0]) for row in rows} or None
        time.sleep(0.01)


def _recalled(hit: Hit) -> Recalled:
    return Recalled(
        role=hit.role,
        text=hit.text,
        checkpoint_id=hit.checkpoint_id,
        time=hit.time.isoformat(timespec="minutes") if hit.time else "",
        message_id=hit.message_id,
    )
