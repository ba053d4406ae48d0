"""Standard output whose failures are known: a write that fails (a full disk, a reader gone)
is raised once as its own error, and what follows is dropped.

Python's own stdout retries at exit, where a failure is only printed ("Exception ignored")
and the exit code becomes 120, and mid-command it is an ``OSError`` like a database file's.
:func:`install` puts fd 1 behind :class:`StdoutFile`; the entry points end with :func:`flush`,
while the command can still say what failed.
"""

from __future__ import annotations

import errno
import io
import os
import sys

from chatbot.errors import FriendlyError


class OutputFailed(FriendlyError):
    """Writing to stdout failed (a full disk, an I/O error); one line for the user."""


class OutputClosed(BrokenPipeError):
    """The reader of stdout is gone (``| head``). A :class:`BrokenPipeError`, so that Rich's
    console ends quietly on it as on its own; the command ends quietly too."""


class StdoutFile(io.RawIOBase):
    """File descriptor 1 as a raw file that remembers its first failed write and drops
    everything written after it. Closing it leaves the descriptor open: it is the process's."""

    def __init__(self, fd: int = 1) -> None:
        super().__init__()
        self._fd = fd
        self.failure: OSError | None = None

    def fileno(self) -> int:
        return self._fd

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data: bytes | bytearray | memoryview) -> int | None:  # type: ignore[override]
        if self.failure is not None:
            return len(data)
        try:
            return os.write(self._fd, data)
        except BlockingIOError:  # (a non-blocking stdout: the buffer waits, as io.FileIO's does)
            return None
        except OSError as error:
            self.failure = error
            raise failure_error(error) from None


def failure_error(error: OSError) -> OSError | OutputFailed:
    """The error a failed write to stdout raises: quiet for a reader gone, one line else."""
    if error.errno == errno.EPIPE:
        return OutputClosed(error.errno, error.strerror)
    if error.errno == errno.EBADF:
        return OutputFailed("cannot write to stdout: it is closed (or not open for writing)")
    return OutputFailed(f"cannot write to stdout: {error.strerror or error}; the output is cut")


def install() -> None:
    """Put stdout behind :class:`StdoutFile`, as Python made it otherwise (encoding, line
    buffering, ``-u``); characters it cannot encode are written as ``?``.

    A closed stdout (``>&-``) gets ``/dev/null`` opened read-only as fd 1: every write fails
    and is reported, and no file or socket opened later takes fd 1."""
    if sys.stdout is None and _closed(1):
        readable = os.open(os.devnull, os.O_RDONLY)
        if readable != 1:
            os.dup2(readable, 1)
            os.close(readable)
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(StdoutFile(1)), encoding="utf-8")
        return
    current = sys.stdout
    if not isinstance(current, io.TextIOWrapper) or isinstance(_raw(current), StdoutFile):
        return
    try:
        fd = current.fileno()
    except (OSError, ValueError):
        return
    current.flush()
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(StdoutFile(fd)),
        encoding=current.encoding,
        errors="replace",
        line_buffering=current.line_buffering,
        write_through=current.write_through,
    )


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as error:
        return error.errno == errno.EBADF
    return False


def _raw(stream: object) -> object:
    return getattr(getattr(stream, "buffer", None), "raw", None)


def flush() -> OSError | None:
    """Write what stdout still holds; the first write to it that failed, now or before (also
    one a library caught and dropped), or None."""
    stream = sys.stdout
    if stream is None:
        return None
    try:
        stream.flush()
    except (OSError, OutputFailed) as error:
        if not isinstance(_raw(stream), StdoutFile):
            return error if isinstance(error, OSError) else None
    raw = _raw(stream)
    return raw.failure if isinstance(raw, StdoutFile) else None
