"""Search everything ever said: every message of every thread, folded into a summary or not.

A summary removes the messages it folds from the state, so they live on only in older
checkpoints. Rather than reading checkpoints at query time, each message is indexed once, when
the checkpoint that first holds it is written (:class:`chatbot.store.msgindex.MessageIndex`, called
by the savers in :mod:`chatbot.store.saver`), into ``chatbot_messages``: thread, message id, that
first checkpoint, role and text. A search reads only that table:

- **SQLite**: an FTS5 index with the ``trigram`` tokenizer over the text with every run of
  whitespace one space (kept in step by triggers and :func:`~chatbot.store.msgindex.index_waiting`;
  the rows keep text in scripts written with spaces compressed, read through ``chatbot_text``:
  migration 10). Trigrams match any substring of three characters or more, case-insensitively,
  which is what Chinese and Japanese need (they are written without spaces, and the default
  ``unicode61`` tokenizer would take a whole sentence for one word). New rows are indexed 256
  at a time (FTS5's cost is in merging the segments it writes more than per row); until then
  they wait in ``chatbot_messages_unindexed`` and a search matches them with FTS5 in memory,
  so a message is found as soon as its turn is saved. A term of one or two characters
  (``北京``) is matched with ``LIKE`` instead, on the rows the longer terms left, or by
  reading the table when there is no longer term (only its plain rows, for a term of a script
  kept plain).
- **PostgreSQL**: ``ILIKE`` per term, a regular expression per phrase (its words with any
  whitespace between them), which a ``pg_trgm`` GIN index answers when the extension could be
  created (else the table is read).

A query is words, each of which must appear (``"a phrase"`` in double quotes stays one
term); hits come newest first. Searching only reads. A new database's index is marked complete
in ``chatbot_marks`` as it is made; one made before the index (or adopted) is indexed once by
``/search`` in the REPL, a writing session (:func:`index_existing`), and until then
``chatbot search`` finds what is indexed and says what may be missing
(:func:`lacks_past_messages`).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from chatbot.errors import FriendlyError
from chatbot.memory.recall_search import Recalled, Searcher, best_matches
from chatbot.sanitize import sanitize
from chatbot.store.compression import unpack_text
from chatbot.store.msgindex import (
    INSERT_KEEPING_OLDEST,
    in_plain_rows,
    message_role,
    message_text,
    searchable,
    spaced,
)
from chatbot.store.sqlite import (
    INDEXED_MARK,
    MARK_INDEXED,
    Store,
    checkpoint_time,
    thread_config,
)

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from chatbot.store.sqlite import SqlStore

MIN_TRIGRAM = 3
"""Terms shorter than this (in characters) cannot use the trigram index."""
SNIPPET_WIDTH = 160
MAX_TERMS = 64
"""More terms than this is a pasted text, not a query (SQLite's expressions are limited)."""
LIKE_LONGEST = 50_000
"""The longest pattern SQLite's LIKE takes (``SQLITE_MAX_LIKE_PATTERN_LENGTH``, bytes): a
longer phrase is checked in Python only."""
MAX_LIMIT = 1_000_000
"""The most hits a search returns, whatever ``limit`` asks (SQL integers are bounded)."""


class SearchError(FriendlyError, ValueError):
    """A query that cannot be run; the message is one line for the user."""


# --- indexing a database made before the index -----------------------------------------------


def is_indexed(store: SqlStore) -> bool:
    """True once the checkpoints written before the index existed have been indexed (a
    database made with the index is from the start)."""
    if isinstance(store, Store) and not _has_table(store, "chatbot_marks"):
        return False  # (an older chatbot's file, opened read-only: no index yet)
    return bool(store._query("SELECT 1 FROM chatbot_marks WHERE name = ?", (INDEXED_MARK,)))


def lacks_past_messages(store: SqlStore) -> bool:
    """True when the index may lack messages: it is not marked complete, and the database
    holds checkpoints (those written before the index are not in it). Reads only."""
    return not is_indexed(store) and bool(
        store._query("SELECT 1 FROM checkpoints WHERE checkpoint_ns = '' LIMIT 1")
    )


def checkpoints_to_index(store: SqlStore) -> int:
    """How many checkpoints :func:`index_existing` reads (for its progress bar)."""
    ((count,),) = store._query("SELECT COUNT(*) FROM checkpoints WHERE checkpoint_ns = ''")
    return int(count)


def index_existing(store: SqlStore, progress: Callable[[int], None] = lambda n: None) -> int:
    """Index every message of every checkpoint, each at the oldest checkpoint holding it, and
    mark the database indexed. Safe while other processes write (a row indexed as it was
    written keeps the older checkpoint of the two). ``progress`` is told after each thread
    how many checkpoints it read. Returns the messages found."""
    threads = [
        row[0]
        for row in store._query(
            "SELECT DISTINCT thread_id FROM checkpoints WHERE checkpoint_ns = '' ORDER BY 1"
        )
    ]
    found = 0
    stored = store.message_index.stored
    for thread_id in threads:
        first, read = first_holders(store, thread_id)
        texts = [
            (message_id, checkpoint_id, m, message_text(m))
            for message_id, (checkpoint_id, m) in first.items()
        ]
        rows = [
            (thread_id, message_id, checkpoint_id, message_role(m), stored(text))
            for message_id, checkpoint_id, m, text in texts
            if text.strip()
        ]
        if rows:
            store._write(*((INSERT_KEEPING_OLDEST, row) for row in rows))
            if not store.thread_exists(thread_id):  # deleted meanwhile by another process
                store._write(("DELETE FROM chatbot_messages WHERE thread_id = ?", (thread_id,)))
        found += len(rows)
        progress(read)
    store._write(
        (MARK_INDEXED, (INDEXED_MARK, datetime.now().astimezone().isoformat(timespec="seconds")))
    )
    return found


def first_holders(
    store: SqlStore, thread_id: str, leaving_out: Collection[str] = ()
) -> tuple[dict[str, tuple[str, Any]], int]:
    """Each message of a thread's checkpoints (but those ``leaving_out``) by id: the oldest
    checkpoint it was first seen at, and the message (see :func:`sightings`); and how many
    checkpoints were read."""
    first: dict[str, tuple[str, Any]] = {}
    seen, read = sightings(store, thread_id, leaving_out)
    for checkpoint_id, message in seen:  # (newest first: older ones win)
        first[str(message.id)] = (checkpoint_id, message)
    return first, read


def sightings(
    store: SqlStore, thread_id: str, leaving_out: Collection[str] = ()
) -> tuple[list[tuple[str, Any]], int]:
    """Where each message of a thread is first seen, newest first: the messages a checkpoint
    stores, and those its parent's writes added (``added_messages``), for every checkpoint but
    those ``leaving_out``; and how many checkpoints were read. A parent's writes are those of
    the run that went on from it: a checkpoint a fork or an update made from the same parent is
    named too, though it may not hold them (read its state to be sure)."""
    from chatbot.memory.channels import added_messages

    listed = [
        saved
        for saved in store.saver.list(thread_config(thread_id))  # newest first
        if saved.config["configurable"]["checkpoint_id"] not in leaving_out
    ]
    pending = {
        saved.config["configurable"]["checkpoint_id"]: saved.pending_writes or ()
        for saved in listed
    }
    seen: list[tuple[str, Any]] = []
    for saved in listed:
        checkpoint_id = saved.config["configurable"]["checkpoint_id"]
        parent = (saved.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        stored = saved.checkpoint["channel_values"].get("messages")
        made_by = pending.get(parent, ())
        written = [value for _, channel, value in made_by if channel == "messages"]
        seen.extend(
            (checkpoint_id, message)
            for message in added_messages(stored, written)
            if getattr(message, "id", None)
        )
    return seen, len(listed)


def ensure_indexed(store: SqlStore, console: Console | None) -> None:
    """Index a database made before the index, once, with a progress bar on ``console`` (a
    terminal's) when there are many checkpoints to read."""
    if is_indexed(store):
        return
    total = checkpoints_to_index(store)
    if console is None or not console.is_terminal or total < 200:
        index_existing(store)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn("indexing past messages for search (once)"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("checkpoints"),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("index", total=total)
        index_existing(store, progress=lambda n: bar.advance(task, n))


# --- searching -------------------------------------------------------------------------------

_TERM = re.compile(r'"([^"]*)(?:"|$)|(\S+)')


def parse_query(text: str) -> list[str]:
    """The terms of a query: words, or ``"quoted phrases"`` (a quote left open runs to the
    end); each must appear in a hit."""
    terms = [quoted or word for quoted, word in _TERM.findall(searchable(text))]
    terms = [" ".join(term.split()) for term in terms]  # (a phrase's spaces: any whitespace)
    terms = list(dict.fromkeys(term for term in terms if term))
    if not terms:
        raise SearchError("the search is empty: give some text to find")
    if len(terms) > MAX_TERMS:
        raise SearchError(
            f"the search has {len(terms)} words: give at most {MAX_TERMS} "
            '(put a long text in "double quotes" to find it as one phrase)'
        )
    return terms


@dataclass(frozen=True)
class Snippet:
    """A one-line excerpt of a message and where the terms are in it (character offsets)."""

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
    """The text on one line, safe to print, cut to about ``width`` characters around the first
    match, with every match inside marked."""
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


def _has_cased_non_ascii(term: str) -> bool:
    """True when SQLite's ``LIKE`` (which folds ASCII letters only) would match ``term``
    case-sensitively: it has a letter beyond ASCII with an upper and a lower case."""
    return any(not c.isascii() and c.lower() != c.upper() for c in term)


def _contains_folded(content: str | bytes | None, term: str) -> bool:
    """``term`` (lower-cased) is in ``content``, any case (SQL function ``chatbot_contains``)."""
    return content is not None and term in unpack_text(content).lower()


def _has_trigram(term: str) -> bool:
    """True when a word of ``term`` has :data:`MIN_TRIGRAM` characters or more (the index
    finds the term by its words' trigrams)."""
    return any(len(word) >= MIN_TRIGRAM for word in term.split(" "))


def _short_fold(text: str, any_case: bool) -> str:
    """``text`` case-folded as a term too short for the index is matched: ASCII letters only,
    as ``LIKE`` folds them, or ``lower()`` when the term has letters beyond ASCII (see
    :func:`search`); U+FFFE and U+FFFF as U+FFFD, as SQLite reads them."""
    if "\ufffe" in text or "\uffff" in text:
        text = text.replace("\ufffe", "\ufffd").replace("\uffff", "\ufffd")
    return text.lower() if any_case else text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _holds_spaced(content: str | bytes | None, term: str, any_case: int) -> bool:
    """``content`` holds the phrase ``term`` (folded by :func:`_short_fold`; its words too
    short for the index) with any whitespace between its words, folded the same way (SQL
    function ``chatbot_spaced``)."""
    return content is not None and term in spaced(_short_fold(unpack_text(content), bool(any_case)))


WHITESPACE = "".join(chr(c) for c in range(0x3001) if chr(c).isspace())
"""Every character Python takes for whitespace (:func:`spaced` collapses a run of them)."""
_PG_WHITESPACE = f"[{WHITESPACE}]+"
"""Any run of what Python takes for whitespace (what :func:`spaced` collapses on SQLite), as
a PostgreSQL bracket expression: its ``\\s`` leaves out some (a no-break space, U+0085)."""
PG_LONGEST_PHRASE = 10_000
"""The longest phrase PostgreSQL's search takes (characters): one regular expression, which
its compiler refuses as too complex from some 30,000 on."""


def _spaced_pattern(term: str) -> str:
    """A PostgreSQL regular expression for the phrase ``term``: its words, each character
    but letters and digits escaped, with any whitespace between them."""
    if len(term) > PG_LONGEST_PHRASE:
        raise SearchError(
            f"the phrase is {len(term):,} characters long: PostgreSQL's search takes at most "
            f"{PG_LONGEST_PHRASE:,}; search for a part of it"
        )
    return _PG_WHITESPACE.join(re.sub(r"(\W)", r"\\\1", word) for word in term.split(" "))


def _text_read(row: Sequence[Any], at: int) -> tuple[Any, ...]:
    """A row with its search text (at ``at``) read as text (SQLite's may be compressed)."""
    return (*row[:at], unpack_text(row[at]), *row[at + 1 :])


def _fts_phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def search(
    store: SqlStore, query: str, *, thread_id: str | None = None, limit: int = 20
) -> list[Hit]:
    """The messages holding every term of ``query``, newest first (in one thread, or all)."""
    terms = parse_query(query)
    if isinstance(store, Store) and not _has_table(store, "chatbot_messages"):
        return []  # (an older chatbot's file, opened read-only: no index yet)
    limit = min(max(1, limit), MAX_LIMIT)
    columns = "m.thread_id, m.message_id, m.checkpoint_id, m.role, m.content, m.id"
    where: list[str] = []
    params: list[Any] = []
    long: list[str] = []  # (SQLite: the terms its FTS5 index finds)
    if isinstance(store, Store):
        long = [term for term in terms if _has_trigram(term)]
        for term in (term for term in terms if not _has_trigram(term)):
            if in_plain_rows(term):  # (a compressed row cannot hold it: SQLite skips them)
                where.append("typeof(m.content) = 'text'")
            if " " in term:  # ("ab cd": words too short for the index, any whitespace between)
                store.conn.create_function("chatbot_spaced", 3, _holds_spaced, deterministic=True)
                where.append("chatbot_spaced(m.content, ?, ?)")
                any_case = _has_cased_non_ascii(term)
                params.extend((_short_fold(term, any_case), any_case))
            elif _has_cased_non_ascii(term):  # ("ДА" finds "да", as FTS5 folds longer terms)
                store.conn.create_function(
                    "chatbot_contains", 2, _contains_folded, deterministic=True
                )
                where.append("chatbot_contains(m.content, ?)")
                params.append(term.lower())
            elif in_plain_rows(term):
                where.append("m.content LIKE ? ESCAPE '\\'")
                params.append(_like(term))
            else:
                where.append("chatbot_text(m.content) LIKE ? ESCAPE '\\'")
                params.append(_like(term))
    else:
        for term in terms:
            if " " in term:  # (a phrase: any whitespace between its words)
                where.append("m.content ~* ?")
                params.append(_spaced_pattern(term))
            else:
                where.append("m.content ILIKE ? ESCAPE '\\'")
                params.append(_like(term))
    if thread_id is not None:
        where.append("m.thread_id = ?")
        params.append(thread_id)
    newest = "ORDER BY m.checkpoint_id DESC, m.id DESC LIMIT ?"
    if not long:  # (every row of the table is read: the unindexed ones too)
        rows = store._query(
            f"SELECT {columns} FROM chatbot_messages AS m "
            f"WHERE {' AND '.join(where) or 'TRUE'} {newest}",
            (*params, limit),
        )
        rows = [_text_read(row, 4) for row in rows]
    else:
        rows = _matching(cast("Store", store), long, columns, where, params, newest, limit)
    return [
        Hit(
            thread_id=row[0],
            message_id=row[1],
            checkpoint_id=row[2],
            role=row[3],
            text=row[4],
            terms=tuple(terms),
        )
        for row in rows
    ]


FTS5_TOKENIZER = "trigram"
"""``chatbot_messages_fts``'s tokenizer (migration 3): rows not indexed yet are matched with
the same one."""


def _matching(
    store: Store,
    terms: list[str],
    columns: str,
    where: list[str],
    params: list[Any],
    newest: str,
    limit: int,
) -> list[tuple[Any, ...]]:
    """The newest ``limit`` rows holding every one of ``terms`` (of :data:`MIN_TRIGRAM`
    characters or more) that ``where`` keeps: those the FTS5 index finds, and those still
    waiting for it (fewer than ``SEARCH_BATCH``, see migrations 5 and 10), read in the same
    statement (one snapshot: a batch indexed meanwhile is found once).

    The index knows which trigrams a message holds, not where (migration 6): it finds the
    messages holding every trigram of every term, newest first, and those are checked to hold
    the terms themselves, as the index matched them when it kept positions
    (:func:`matched_as_indexed`), a page at a time until ``limit`` are found. A term of three
    characters is one trigram: what the index finds holds it."""
    exact = all(len(term) == MIN_TRIGRAM and " " not in term for term in terms)
    store.conn.create_function("chatbot_folded_text", 1, _folded_text, deterministic=True)
    match = [trigram_query(terms)]
    likes = [  # (folded as coarsely as the index folds: LIKE keeps every message it matches)
        like
        for like in (_like(coarse_fold(term)) for term in terms if " " in term)
        if len(like.encode()) <= LIKE_LONGEST
    ]
    indexed = (  # (a phrase of common words is in few of the messages holding its trigrams:
        f"SELECT 0, {columns} FROM chatbot_messages_fts AS f "  # LIKE on the text as indexed
        "JOIN chatbot_messages AS m ON m.id = f.rowid WHERE "  # keeps those, in SQL; a word
        + " AND ".join(  # is in most, checked in Python a page at a time, newest first)
            [
                "chatbot_messages_fts MATCH ?",
                *(["chatbot_folded_text(m.content) LIKE ? ESCAPE '\\'"] * len(likes)),
                *where,
            ]
        )
        + f" {newest} OFFSET ?"
    )
    match.extend(likes)
    page = limit if exact else max(2 * limit, 32)
    if not _has_table(store, "chatbot_messages_unindexed"):  # (before migration 5: read-only)
        rows = store._query(indexed, (*match, *params, page, 0))
    else:
        rows = store._query(
            f"SELECT * FROM ({indexed}) UNION ALL "
            f"SELECT 1, {columns} FROM chatbot_messages_unindexed AS u "
            f"JOIN chatbot_messages AS m ON m.id = u.id WHERE {' AND '.join(where) or 'TRUE'}",
            (*match, *params, page, 0, *params),
        )
    rows = [_text_read(row, 5) for row in rows]
    found = [row[1:] for row in rows if not row[0]]
    if not exact:
        read, candidates = len(found), found
        found = _holding(candidates, terms)
        while len(found) < limit and len(candidates) == page:  # (the next page, 4 times as long)
            offset, page = read, 4 * page
            candidates = [
                _text_read(row[1:], 4)
                for row in store._query(indexed, (*match, *params, page, offset))
            ]
            read += len(candidates)
            seen = {row[5] for row in found}  # (a batch indexed meanwhile moves rows down)
            found.extend(row for row in _holding(candidates, terms) if row[5] not in seen)
    waiting = {row[6]: row[1:] for row in rows if row[0]}
    if waiting:
        hits = matched_as_indexed({id_: row[4] for id_, row in waiting.items()}, terms)
        found.extend(waiting[id_] for id_ in hits)
        found.sort(key=lambda row: (row[2], row[5]), reverse=True)
    return found[:limit]


def _folded_text(content: str | bytes | None) -> str:
    """A search row's text as the index holds it, folded as coarsely as the index folds it
    (SQL function ``chatbot_folded_text``: what a phrase's ``LIKE`` reads)."""
    return spaced(coarse_fold(unpack_text(content)))


def _holding(rows: list[tuple[Any, ...]], terms: Sequence[str]) -> list[tuple[Any, ...]]:
    """The ``rows`` (the text fifth) whose text holds every term, in their order."""
    hits = matched_as_indexed({n: row[4] for n, row in enumerate(rows)}, terms)
    return [row for n, row in enumerate(rows) if n in hits]


def trigram_query(terms: Sequence[str]) -> str:
    """An FTS5 query for the messages holding every trigram of ``terms`` (each of
    :data:`MIN_TRIGRAM` characters or more): all an index without positions can answer."""
    grams = dict.fromkeys(  # (the index holds the text with a run of whitespace as one space)
        term[start : start + MIN_TRIGRAM]
        for term in terms
        for start in range(len(term) - MIN_TRIGRAM + 1)
    )
    return " AND ".join(_fts_phrase(gram) for gram in grams)


def matched_as_indexed(texts: dict[int, str], terms: Sequence[str]) -> set[int]:
    """The keys of the ``texts`` holding every term (of :data:`MIN_TRIGRAM` characters or
    more) exactly as ``chatbot_messages_fts`` would match them once indexed: FTS5 itself
    decides, in a table of its own in memory (its case folding is not Python's: ``ΟΔΟΣ``
    holds ``δοσ``, ``ſtr`` holds ``str``). Only the texts whose :func:`coarse_fold` holds
    every term's go in: a text FTS5 matches always does (a character's coarse fold is that of
    the character FTS5 folds it to, which tests/test_search_batches.py checks for every
    character up to U+1FFFF, where all cased ones are), and most texts hold none."""
    folded = [coarse_fold(term) for term in terms]
    maybe = []
    for key, text in texts.items():
        haystack = spaced(coarse_fold(text))
        if all(term in haystack for term in folded):
            maybe.append((key, spaced(text)))
    if not maybe:
        return set()
    with contextlib.closing(sqlite3.connect(":memory:")) as scratch:
        scratch.execute(
            f"CREATE VIRTUAL TABLE waiting USING fts5(content, tokenize={FTS5_TOKENIZER!r})"
        )
        scratch.executemany("INSERT INTO waiting (rowid, content) VALUES (?, ?)", maybe)
        return {
            key
            for (key,) in scratch.execute(
                "SELECT rowid FROM waiting WHERE waiting MATCH ?",
                (" AND ".join(_fts_phrase(term) for term in terms),),
            )
        }


def coarse_fold(text: str) -> str:
    """``text`` case-folded at least as coarsely as FTS5 folds it, character by character
    (see :func:`matched_as_indexed`): Python's full case folding, after U+FFFE and U+FFFF
    are made U+FFFD, as SQLite reads them."""
    if "\ufffe" in text or "\uffff" in text:
        text = text.replace("\ufffe", "\ufffd").replace("\uffff", "\ufffd")
    return text.casefold()


def _has_table(store: Store, name: str) -> bool:
    return bool(
        store._query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
    )


# --- showing hits ----------------------------------------------------------------------------


def hit_record(hit: Hit) -> dict[str, Any]:
    """A hit as JSON (``chatbot search --json``): the snippet, and where the terms are in it
    as ``[start, end)`` character offsets."""
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


def hits_view(hits: Sequence[Hit]) -> RenderableType:
    """Hits for the terminal: thread, time, role and checkpoint on one line, the snippet with
    the terms highlighted under it. Word-wrapped at the screen's width even on a console that
    leaves long lines to the terminal (which would break a checkpoint id anywhere)."""
    from rich.console import Group
    from rich.text import Text

    lines: list[Text] = []
    for hit in hits:
        when = hit.time
        heading = Text(no_wrap=False, overflow="fold")
        heading.append(sanitize(hit.thread_id), style="bold cyan")
        if when is not None:
            heading.append("  " + when.astimezone().strftime("%Y-%m-%d %H:%M"), style="dim")
        heading.append(f"  {hit.role}", style="green" if hit.role == "user" else "magenta")
        heading.append(f"  checkpoint {hit.checkpoint_id}", style="dim")
        snippet = hit.snippet()
        body = Text("  " + snippet.text, no_wrap=False, overflow="fold")
        for start, end in snippet.spans:
            body.stylize("bold black on yellow", start + 2, end + 2)
        lines.extend((heading, body))
    return Group(*lines)


def recaller(store: SqlStore) -> Searcher:
    """The recall tool's search (:mod:`chatbot.memory.recall`) over this store: a thread's
    messages holding every word of the query, newest first, as ``/search`` finds them; when
    none holds them all, those holding the most of its words
    (:func:`~chatbot.memory.recall_search.best_matches`: a model's query is a guess at the
    words)."""

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
        folded = [term.casefold() for term in terms]
        scored = [
            (sum(term in spaced(hit.text.casefold()) for term in folded), hit)
            for hit in candidates.values()
        ]
        return best_matches(scored, len(terms))[:limit]

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
    """The ids of ``checkpoint_id`` and its ancestors: its line of history. ``None`` when
    the checkpoint is not stored (yet: LangGraph writes a run's checkpoints in the
    background, so it is waited for up to ``wait`` seconds)."""
    deadline = time.monotonic() + wait
    while True:
        rows = store._query(_LINE, (thread_id, checkpoint_id, thread_id))
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
