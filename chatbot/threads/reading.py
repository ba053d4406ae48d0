"""Reading local threads without a graph: the listing and search part of the Backend.

:class:`LocalReader` is what the reading commands (``chatbot threads``, ``chatbot search``) and
the REPL's listing before its backend is open use. :class:`~chatbot.threads.backend.LocalBackend`
is a ``LocalReader`` too, so there is one door to threads: a reading command only asks for
less of it. This module imports nothing but the store's types, so a command that only lists
threads starts as fast as a plain SQL script (``benchmarks/startup.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chatbot.store.search import Hit
    from chatbot.store.sqlite import SqlStore, ThreadInfo


class LocalReader:
    """The threads of a local store (SQLite or PostgreSQL), read with plain SQL."""

    local_only_note = ""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.location = store.path

    def threads(self) -> list[ThreadInfo]:
        """All threads, newest activity first (plain SQL)."""
        return self.store.list_threads()

    def thread_info(self, thread_id: str) -> ThreadInfo | None:
        """One thread's listing row, or ``None`` for a thread the listing does not know."""
        return self.store.thread_info(thread_id)

    def thread_exists(self, thread_id: str) -> bool:
        """True if the thread has checkpoints."""
        return self.store.thread_exists(thread_id)

    def recent_checkpoint_ids(self, thread_id: str, limit: int) -> list[str]:
        """The ids of the thread's newest ``limit`` checkpoints, newest first (for completing
        /show and /fork): from the index, nothing deserialised."""
        return self.store.recent_checkpoint_ids(thread_id, limit)

    def unindexed(self) -> bool:
        """True if messages saved before this database had its search index are not yet in it
        (:meth:`search` indexes them first unless told not to)."""
        from chatbot.store.search import lacks_past_messages

        return lacks_past_messages(self.store)

    def search(
        self,
        text: str,
        *,
        thread_id: str | None = None,
        limit: int = 20,
        progress: Any = None,
        index: bool = True,
    ) -> list[Hit]:
        """The messages of every thread (or one) holding every term of ``text``, folded ones
        too, newest first. With ``index``, a database made before the search index is indexed
        first, once, with a progress bar on ``progress`` (a Rich console) when that takes a
        while; without it (a read-only command) only what is indexed is searched. Raises
        :class:`~chatbot.store.search.SearchError` for a query it cannot run."""
        from chatbot.store.search import ensure_indexed, search

        if index:
            ensure_indexed(self.store, progress)
        return search(self.store, text, thread_id=thread_id, limit=limit)
