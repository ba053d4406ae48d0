"""Reading local threads without a graph: the listing, search and checkpoint-reading part of
the Backend, used by the reading commands and the REPL before its backend is open.

:class:`~chatbot.threads.backend.LocalBackend` is a ``LocalReader`` too: one door to threads.
Each method imports only what it reads with, so a reading command never imports what runs a
turn and starts fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chatbot.history.snapshots import Snapshot
    from chatbot.store.base import SqlStore, ThreadInfo
    from chatbot.store.search import Hit
    from chatbot.threads.memorybook import MemoryBook


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

    def memory_book(self) -> MemoryBook:
        """The user's memories, in the database's LangGraph store."""
        from chatbot.threads.memorybook import MemoryBook

        return MemoryBook(self.store.memory_store)

    def current(self, thread_id: str) -> Snapshot | None:
        """The thread's latest checkpoint, or ``None`` for a thread with none."""
        from chatbot.store.checkpoints import read_checkpoint

        if self.store.latest_checkpoint_id(thread_id) is None:
            return None
        return read_checkpoint(self.store, thread_id)

    def history(self, thread_id: str) -> list[Snapshot]:
        """Every checkpoint of the thread (all branches), newest first, deserialised lazily."""
        from chatbot.store.checkpoints import lazy_history

        return lazy_history(self.store, thread_id)

    def recent_checkpoint_ids(self, thread_id: str, limit: int) -> list[str]:
        """The ids of the thread's newest ``limit`` checkpoints, newest first (completion)."""
        return self.store.recent_checkpoint_ids(thread_id, limit)

    def unindexed(self) -> bool:
        """True if some threads' latest checkpoints are not in the search index yet."""
        from chatbot.store.search import lagging_threads

        return bool(lagging_threads(self.store))

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
        too, newest first. With ``index``, lagging threads are indexed first (``progress``
        told after each); without, their checkpoints are matched as they are. Raises
        :class:`~chatbot.store.search.SearchError` for a query it cannot run."""
        from chatbot.store.search import catch_up, search

        if index and not self.store.read_only:
            catch_up(self.store, progress or (lambda done, of: None))
        return search(self.store, text, thread_id=thread_id, limit=limit)
