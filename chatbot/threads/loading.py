"""A local backend that is still being made: the REPL shows its prompt at once and opens the
database and makes the models behind it (:class:`LoadingBackend`).

Loading has two stages, each on a daemon thread started behind the prompt: the backend open
(:class:`Opened`: threads can be read) and the models and the graph made (:class:`Loaded`: turns
can run). Each backend operation waits for the stage it needs (:data:`READS`, :data:`RUNS`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from chatbot.logs import logger
from chatbot.threads.reading import LocalReader

if TYPE_CHECKING:
    from chatbot.config.settings import Settings
    from chatbot.store.base import SqlStore, ThreadInfo
    from chatbot.threads.backend import Backend

log = logger("loading")


@dataclass(frozen=True)
class Opened:
    """Loading's first stage: the settings checked and the backend open (threads can be read)."""

    backend: Backend
    settings: Settings


@dataclass(frozen=True)
class Loaded:
    """Loading's second stage: the models and the graph are made (turns can run)."""

    model_name: str
    notice: str = ""


class LoadFailed(BaseException):
    """Loading failed: the REPL ends with ``error``. A BaseException, so that no command's
    error handling turns it into one more line and carries on."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


READS = frozenset(
    {"current", "history", "recent_checkpoint_ids", "threads", "thread_exists", "rename", "delete"}
    | {"search", "answering_elsewhere", "memory_book"}
)
"""Backend operations that need only the backend open (loading's first stage)."""
RUNS = frozenset(
    {"send", "resume", "compact", "regenerate", "run_settings", "fork", "restore"}
    | {"set_system_prompt", "undo", "retry", "context_tokens", "context_window", "leave"}
)
"""Backend operations that need the graph (loading's second stage)."""

Waiter = Callable[[threading.Event, str], None]
"""Waits for a stage of loading (``done``) while showing ``words`` (the REPL's spinner)."""


class LoadingBackend:
    """A local backend while it is being made, on a daemon thread started behind the prompt:
    ``open_backend``, then ``load_models``. Each operation waits through ``waiting`` for the
    stage it needs, then is the real backend's; listing threads never waits (it reads
    ``store`` until the backend is open). Once loading failed, every wait raises
    :class:`LoadFailed`."""

    local_only_note = ""

    def __init__(
        self,
        location: str,
        store: SqlStore | None,
        open_backend: Callable[[], Opened],
        load_models: Callable[[Opened], Loaded],
    ) -> None:
        self.location = location
        self._reader = LocalReader(store) if store is not None else None
        self._open_backend = open_backend
        self._load_models = load_models
        self.waiting: Waiter = _wait_quietly
        self.finished_hook: Callable[[], None] | None = None
        """Called on the loading thread when loading has ended, well or not."""
        self._opened_event = threading.Event()
        self._loaded_event = threading.Event()
        self._opened: Opened | None = None
        self._loaded: Loaded | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()

    def start(self) -> None:
        """Start loading (once; later calls do nothing)."""
        with self._starting:
            if self._thread is None:
                self._thread = threading.Thread(target=self._load, name="chatbot-load", daemon=True)
                self._thread.start()

    def _load(self) -> None:
        try:
            self._opened = self._open_backend()
            self._opened_event.set()
            self._loaded = self._load_models(self._opened)
        except BaseException as error:  # shown by the REPL, on its own thread
            self._error = error
        finally:
            self._opened_event.set()
            self._loaded_event.set()
            if self.finished_hook is not None:
                try:
                    self.finished_hook()
                except Exception:
                    log.debug("after loading", exc_info=True)

    @property
    def is_open(self) -> bool:
        """True when threads can be read without waiting."""
        return self._opened is not None

    @property
    def finished(self) -> bool:
        """True when loading has ended, well or not."""
        return self._loaded_event.is_set()

    def wait(self, *, reading: bool = False) -> Opened:
        """Wait until turns can run (with ``reading``: until threads can be read)."""
        self.start()
        if reading:
            done, words = self._opened_event, "opening the threads…"
        else:
            done, words = self._loaded_event, "loading the model…"
        if not done.is_set():
            self.waiting(done, words)
        if self._error is not None:
            raise LoadFailed(self._error)
        assert self._opened is not None
        return self._opened

    def result(self) -> tuple[Opened, Loaded]:
        """What loading made, once it has finished; raises :class:`LoadFailed` if it failed."""
        if self._error is not None:
            raise LoadFailed(self._error)
        assert self._opened is not None and self._loaded is not None
        return self._opened, self._loaded

    def thread_info(self, thread_id: str) -> ThreadInfo | None:
        """A thread's listing row from the database the REPL started from (plain SQL)."""
        return self._reader.thread_info(thread_id) if self._reader is not None else None

    def threads(self) -> list[ThreadInfo]:
        """All threads, newest activity first, without waiting (see the class)."""
        if self._opened is not None:
            return self._opened.backend.threads()
        return self._reader.threads() if self._reader is not None else []

    def __getattr__(self, name: str) -> Any:
        if name in RUNS:
            return getattr(self.wait().backend, name)
        if name in READS:
            return getattr(self.wait(reading=True).backend, name)
        raise AttributeError(name)

    def as_backend(self) -> Backend:
        """This object where a ``Backend`` is expected (it is one, by delegation)."""
        return cast("Backend", self)


def _wait_quietly(done: threading.Event, words: str) -> None:
    done.wait()
