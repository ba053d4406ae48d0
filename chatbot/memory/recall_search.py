"""What a recall search finds, and how partial matches rank: no LangChain here, so the store's
search (which ``chatbot search`` runs at a reading command's start-up speed) can use it.
:mod:`chatbot.memory.recall` is the tool itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Recalled:
    """One folded message found: its role, its text, the checkpoint that first held it, and
    when (ISO 8601, or '')."""

    role: str
    text: str
    checkpoint_id: str
    time: str = ""
    message_id: str = ""


Searcher = Callable[[str, str, int, Collection[str], str | None], Sequence[Recalled]]
"""``(thread_id, query, limit, skip, at)``: that thread's messages holding the query, newest
first, but for the ids in ``skip`` (the messages still in the window); with ``at`` (a
checkpoint id), only those of its line of history (not of an undone turn, a replaced reply
or another fork)."""
AsyncSearcher = Callable[
    [str, str, int, Collection[str], str | None], Awaitable[Sequence[Recalled]]
]
"""A :data:`Searcher` to await (a coroutine function): one that must not block the event loop
it runs on, as a LangGraph server's."""


def best_matches(scored: Sequence[tuple[int, Recalled]], terms: int) -> list[Recalled]:
    """The hits a query with ``terms`` words finds, newest first: those holding every word;
    else those holding at least half of them; else the ones holding the most (a model's
    query is a guess at the words used)."""
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
