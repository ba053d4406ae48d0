"""What a search finds: a query's terms, the texts that hold them, and, for the recall tool, how
partial matches rank. One rule for every search, the store's and the recall tool's over a
server's history; no LangChain here, so reading commands start fast.

Vocabulary: a *term* is a word, or a ``"quoted phrase"`` matched with any whitespace between its
words; a text *holds* a term in any case (each character's case fold, as the indexes fold).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from chatbot.errors import FriendlyError

MAX_TERMS = 64
"""More terms than this is a pasted text, not a query (SQLite's expressions are limited)."""
ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}
"""A message's role by its LangChain type."""

_TERM = re.compile(r'"([^"]*)(?:"|$)|(\S+)')


class SearchError(FriendlyError, ValueError):
    """A query that cannot be run; the message is one line for the user."""


def role_of(kind: str) -> str:
    """``user``, ``assistant``, ``tool`` or ``system``, for a message's type."""
    return ROLES.get(kind, kind or "unknown")


def searchable(text: str) -> str:
    """Text as the index keeps it and a query looks for it: a NUL as U+FFFD (SQLite's ``LIKE``
    and FTS5 stop reading at a NUL, and PostgreSQL's text cannot hold one)."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def spaced(text: str) -> str:
    """``text`` with every run of whitespace one space, as a phrase is matched."""
    return " ".join(text.split())


def parse_query(text: str) -> list[str]:
    """A query's terms, each once: words, or ``"quoted phrases"`` (an open quote runs on)."""
    terms = [spaced(quoted or word) for quoted, word in _TERM.findall(searchable(text))]
    terms = list(dict.fromkeys(term for term in terms if term))
    if not terms:
        raise SearchError("the search is empty: give some text to find")
    if len(terms) > MAX_TERMS:
        raise SearchError(
            f"the search has {len(terms)} words: give at most {MAX_TERMS} "
            '(put a long text in "double quotes" to find it as one phrase)'
        )
    return terms


class _Folds(dict[int, str]):
    """Each character's case fold, else its lower case, where that is one character (``ſ`` is
    ``s``, ``ẞ`` is ``ß``), as the indexes fold case; else the character itself."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        folded = next((f for f in (char.casefold(), char.lower()) if len(f) == 1), char)
        self[code] = folded
        return folded


_FOLDS = _Folds()


def held(text: str, terms: Iterable[str]) -> int:
    """How many of the terms ``text`` holds."""
    folded = spaced(searchable(text)).translate(_FOLDS)
    return sum(term.translate(_FOLDS) in folded for term in terms)


def holds(text: str, terms: Sequence[str]) -> bool:
    """True when ``text`` holds every term."""
    return held(text, terms) == len(terms)


@dataclass(frozen=True)
class Recalled:
    """One folded message found, with the checkpoint that first held it, and when (or '')."""

    role: str
    text: str
    checkpoint_id: str
    time: str = ""
    message_id: str = ""


Searcher = Callable[[str, str, int, Collection[str], str | None], Sequence[Recalled]]
"""``(thread_id, query, limit, skip, at)``: that thread's messages holding the query, newest
first, but for the ids in ``skip``; with ``at`` (a checkpoint id), only its line of history."""
AsyncSearcher = Callable[
    [str, str, int, Collection[str], str | None], Awaitable[Sequence[Recalled]]
]
"""A :data:`Searcher` to await, for an event loop that must not block (a LangGraph server's)."""


def best_matches(scored: Sequence[tuple[int, Recalled]], terms: int) -> list[Recalled]:
    """The hits a query with ``terms`` words finds, newest first: those holding every word, else
    at least half of them, else the most (a model's query is a guess at the words used)."""
    if not scored:
        return []
    top = max(n for n, _ in scored)
    if top < 1:
        return []
    enough = terms if top >= terms else min(top, (terms + 1) // 2)
    found = [hit for n, hit in scored if n >= enough]
    found.sort(key=lambda hit: (hit.checkpoint_id, hit.message_id), reverse=True)
    if enough < terms:  # (a partial match: the more words a message holds, the earlier)
        counts = {id(hit): n for n, hit in scored}
        found.sort(key=lambda hit: counts[id(hit)], reverse=True)
    return found


def recalled(candidates: Iterable[Recalled], terms: Sequence[str], limit: int) -> list[Recalled]:
    """What the recall tool answers from candidate messages: each scored by the terms it holds
    (:func:`held`), the best of them (:func:`best_matches`)."""
    scored = [(held(hit.text, terms), hit) for hit in candidates]
    return best_matches(scored, len(terms))[:limit]
