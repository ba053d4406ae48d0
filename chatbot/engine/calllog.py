"""The call log (``CHATBOT_LOG=PATH``): one JSON line per model call, for debugging.

Each line: ``time`` (ISO, UTC, when the call started), ``model`` (the one that answered, else
the one asked), ``role`` (``chat`` or ``summary``), ``thread`` (when the run has one),
``input_tokens``/``cached_tokens``/``output_tokens`` (as the provider reported them),
``latency_ms``, ``streamed``, and on failure ``error`` (one line: type and message, redacted)
and ``cancelled``. Never the API key, never what was said.

It is a LangChain callback handler attached where the models are made
(:func:`chatbot.engine.models.make_model`), so every call is logged. The file is created 0600;
a path that cannot be written is refused when the models are made.

A call ends on an event loop, which must not block, so the handler only queues the line: one
writer thread per file appends it. A turn and the process's exit wait for the lines
(:func:`settle`); lines that cannot be written are dropped, and said once.
"""

from __future__ import annotations

import errno
import json
import os
import queue
import stat
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult

from chatbot.config.sources import SettingsError
from chatbot.errors import redact
from chatbot.interrupts import at_exit
from chatbot.logs import logger

log = logger("calllog")

Role = Literal["chat", "summary"]
_MAX_ERROR_CHARS = 500


class LogFile:
    """An append-only JSON-lines file shared by its handlers, written by a thread of its own."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._pending = 0  # lines queued and not yet written (or dropped)
        self._idle = threading.Condition()
        self.problem = ""
        """Why lines were dropped (empty while every line was written)."""
        self.told = False
        """True once :attr:`problem` was handed to someone to say (:func:`settle`)."""

    def open(self) -> None:
        """Create the file (0600, folders 0700) or check it can be appended to, and start its
        writer; a path that cannot be written is one :class:`SettingsError` line."""
        from chatbot.files import make_private_dirs

        try:
            make_private_dirs(self.path.parent)
            fd = _open_to_append(self.path)
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISREG(mode) and mode & 0o077:  # (not /dev/stderr, a pipe…)
                    os.fchmod(fd, 0o600)  # a file made earlier, by hand or another program
                os.write(fd, b"")  # /dev/full and /proc's files refuse even this; files never
            finally:
                os.close(fd)
        except OSError as error:
            reason = _reason(error)
            raise SettingsError(
                f"CHATBOT_LOG={str(self.path)!r} cannot be written: {reason.lower()}; "
                "give a file path in a folder you can write to, or unset it"
            ) from None
        threading.Thread(target=self._write_lines, name="chatbot-calllog", daemon=True).start()

    def write(self, entry: dict[str, Any]) -> None:
        """Queue one line for the writer (never blocks: callers run on event loops)."""
        line = (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8", "replace")
        with self._idle:
            self._pending += 1
        self._lines.put(line)

    def flush(self, timeout: float) -> None:
        """Wait until every queued line is written or dropped, at most ``timeout`` seconds."""
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0, timeout)

    def _write_lines(self) -> None:
        while True:
            line = self._lines.get()
            try:
                self._append(line)
            except OSError as error:
                if not self.problem:
                    reason = _reason(error).lower()
                    self.problem = (
                        f"CHATBOT_LOG={str(self.path)!r} cannot be written ({reason}): "
                        "the call log's lines are dropped until it can"
                    )
                    log.warning("%s", self.problem)  # (a server's log says it too)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _append(self, line: bytes) -> None:
        fd = _open_to_append(self.path)
        try:
            written = os.write(fd, line)
            if written < len(line):  # (a short write: the rest, else an error)
                os.write(fd, line[written:])
        finally:
            os.close(fd)


def _open_to_append(path: Path) -> int:
    """Open ``path`` to append (made 0600) without waiting for a reader: a FIFO that nothing
    reads refuses at once (ENXIO) instead of blocking for ever."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o600)
    os.set_blocking(fd, True)
    return fd


def _reason(error: OSError) -> str:
    if error.errno == errno.ENXIO:  # (strerror says "No such device or address")
        return "it is a named pipe that nothing reads"
    return error.strerror or type(error).__name__


_FILES: dict[Path, LogFile] = {}
_FILES_LOCK = threading.Lock()
EXIT_WAIT_SECONDS = 2.0
"""How long the process's exit waits for call-log lines still queued."""


def log_file(path: str) -> LogFile:
    """The one :class:`LogFile` for ``path`` in this process, checked writable when first asked."""
    resolved = Path(path).expanduser().absolute()
    with _FILES_LOCK:
        if resolved not in _FILES:
            opened = LogFile(resolved)
            opened.open()
            if not _FILES:
                at_exit(settle, EXIT_WAIT_SECONDS)
            _FILES[resolved] = opened
        return _FILES[resolved]


def settle(timeout: float = 1.0) -> list[str]:
    """Wait up to ``timeout`` seconds for every queued line; the problems not said yet."""
    with _FILES_LOCK:
        files = list(_FILES.values())
    deadline = time.monotonic() + timeout
    news = []
    for file in files:
        file.flush(max(0.0, deadline - time.monotonic()))
        if file.problem and not file.told:
            file.told = True
            news.append(file.problem)
    return news


def one_line_error(error: BaseException) -> str:
    """``Type: message`` on one line, redacted (no API key) and cut to a readable length."""
    text = " ".join(redact(str(error)).split())
    if len(text) > _MAX_ERROR_CHARS:
        text = text[: _MAX_ERROR_CHARS - 1] + "…"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class CallLog(BaseCallbackHandler):
    """Writes a line to the call log when each call of one model (in one role) ends."""

    run_inline = True  # in the caller's thread: ordering and timing as the call saw them
    raise_error = False  # the log never breaks a call

    def __init__(self, file: LogFile, role: Role, model: str) -> None:
        self.file = file
        self.role = role
        self.model = model
        self._started: dict[UUID, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        metadata = metadata or {}
        call = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "clock": time.perf_counter(),
            "model": str(metadata.get("ls_model_name") or self.model),
            "thread": metadata.get("thread_id"),
            "streamed": False,
        }
        with self._lock:
            self._started[run_id] = call

    def on_llm_new_token(self, token: Any, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._started.get(run_id)
        if call is not None:
            call["streamed"] = True

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        message = _message(response)
        usage = getattr(message, "usage_metadata", None) or {}
        details = usage.get("input_token_details") or {}
        answered = (getattr(message, "response_metadata", None) or {}).get("model_name")
        self._write(
            run_id,
            model=answered if isinstance(answered, str) and answered else None,
            input_tokens=usage.get("input_tokens"),
            cached_tokens=details.get("cache_read"),
            output_tokens=usage.get("output_tokens"),
        )

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        import asyncio

        cancelled = isinstance(error, asyncio.CancelledError | KeyboardInterrupt)
        self._write(
            run_id,
            error="cancelled" if cancelled else one_line_error(error),
            cancelled=cancelled,
        )

    def _write(self, run_id: UUID, *, model: str | None = None, **fields: Any) -> None:
        with self._lock:
            call = self._started.pop(run_id, None)
        if call is None:
            return
        latency = round((time.perf_counter() - call.pop("clock")) * 1000)
        entry: dict[str, Any] = {
            "time": call["time"],
            "model": model or call["model"],
            "role": self.role,
        }
        if call["thread"]:
            entry["thread"] = str(call["thread"])
        entry.update({k: v for k, v in fields.items() if v is not None and v is not False})
        entry["latency_ms"] = latency
        entry["streamed"] = call["streamed"]
        self.file.write(entry)


def _message(response: LLMResult) -> Any:
    """The reply message of a chat model's result (``None`` if it has none)."""
    for generations in response.generations:
        for generation in generations:
            message = getattr(generation, "message", None)
            if message is not None:
                return message
    return None


def call_log(path: str | None, role: Role, model: str) -> list[BaseCallbackHandler]:
    """The callbacks that log a model's calls to ``path`` (none without a path)."""
    if not path:
        return []
    return [CallLog(log_file(path), role, model)]
