"""Thread ids: what makes one usable, a fresh one, and the name of a fork.

The REPL, its slash commands and the CLI all name threads through this module, so that a
thread id typed in one is valid in the others and a fork is named the same way everywhere.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import datetime

MAX_THREAD_ID = 100


def new_thread_id(now: datetime | None = None) -> str:
    """A fresh, short thread id people can type: month, day, time and a random suffix."""
    stamp = (now or datetime.now()).strftime("%m%d-%H%M")
    return f"{stamp}-{secrets.token_hex(2)}"


def check_thread_id(thread_id: str) -> str:
    """A thread id people can type: non-empty, no spaces or control characters, at most 100
    characters. Returns it stripped; raises ``ValueError`` with one line otherwise."""
    value = thread_id.strip()
    if any(c < " " or "\x7f" <= c <= "\x9f" for c in value):
        raise ValueError(
            f"{value!r} is not a usable thread id: it contains a control character "
            "(an escape code?); use printable characters without spaces"
        )
    if not value or any(c.isspace() for c in value) or len(value) > MAX_THREAD_ID:
        raise ValueError(
            f"{thread_id!r} is not a usable thread id: use 1-{MAX_THREAD_ID} characters "
            "without spaces"
        )
    return value


def fork_id(thread_id: str, number: int) -> str:
    """``<thread>-fork<N>``, the thread's part shortened so that it stays a usable id."""
    suffix = f"-fork{number}"
    return thread_id[: MAX_THREAD_ID - len(suffix)] + suffix


def next_fork_id(thread_id: str, taken: Callable[[str], bool]) -> str:
    """The first ``<thread>-fork<N>`` (N = 1, 2, ...) for which ``taken`` is false."""
    number = 1
    while taken(fork_id(thread_id, number)):
        number += 1
    return fork_id(thread_id, number)
