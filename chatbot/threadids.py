"""Thread ids: what makes one usable, a fresh one, and the name of a fork.

The REPL, its slash commands and the CLI all name threads through this module, so that a
thread id typed in one is valid in the others and a fork is named the same way everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

MAX_THREAD_ID = 100


def new_thread_id(now: datetime | None = None) -> str:
    """A fresh, short thread id people can type: month, day, time and a random suffix."""
    import secrets  # (here: it imports random and hashlib, which reading never needs)

    stamp = (now or datetime.now()).strftime("%m%d-%H%M")
    return f"{stamp}-{secrets.token_hex(2)}"


SHOWN_LENGTH = 60
"""The longest thread id a message quotes whole."""


def quoted(text: str, longest: int = SHOWN_LENGTH) -> str:
    """A thread id (or other text people typed) as a message quotes it: whole up to
    ``longest`` characters, else its start, an ellipsis and its length (a pasted page is not
    echoed back whole)."""
    if len(text) <= longest:
        return repr(text)
    return f"{text[: longest - 20] + '…'!r} ({len(text):,} characters)"


def check_thread_id(thread_id: str) -> str:
    """A thread id people can type: non-empty, no spaces or control characters, at most 100
    characters, not starting with ``-``. Returns it stripped; raises ``ValueError`` with one
    line otherwise.

    A leading ``-`` is refused as git refuses it in a branch name: every command would read
    the id as an option (``chatbot show -x``), and it would take ``--`` before it forever.
    Characters that show as nothing (a zero-width space, a bidi control, a BOM: Unicode's
    format characters and the like) and bytes that were not UTF-8 (read as U+FFFD or kept as
    lone surrogates) are refused too: listings show thread ids, and two that look alike there
    must be the same thread.
    """
    value = thread_id.strip()
    if any(c < " " or "\x7f" <= c <= "\x9f" for c in value):
        raise ValueError(
            f"{quoted(value)} is not a usable thread id: it contains a control character "
            "(an escape code?); use printable characters without spaces"
        )
    if any(c == "\ufffd" or "\ud800" <= c <= "\udfff" for c in value):
        raise ValueError(
            f"{quoted(value)} is not a usable thread id: it holds bytes that are not UTF-8 "
            "text; use printable characters without spaces"
        )
    if not value or any(c.isspace() for c in value) or len(value) > MAX_THREAD_ID:
        raise ValueError(
            f"{quoted(thread_id)} is not a usable thread id: use 1-{MAX_THREAD_ID} characters "
            "without spaces"
        )
    hidden = next((c for c in value if not c.isprintable()), None)
    if hidden is not None:
        raise ValueError(
            f"{quoted(value)} is not a usable thread id: it contains {_named(hidden)}, which "
            "listings would not show; use printable characters without spaces"
        )
    if value.startswith("-"):
        raise ValueError(
            f"{quoted(value)} is not a usable thread id: it starts with '-', which commands "
            "read as an option: start it with another character"
        )
    return value


def _named(char: str) -> str:
    """``U+200B (ZERO WIDTH SPACE)``: an invisible character, as a message can show it."""
    import unicodedata

    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" ({name})" if name else "")


def fork_id(thread_id: str, number: int) -> str:
    """``<thread>-fork<N>``, the thread's part shortened so that it stays a usable id."""
    suffix = f"-fork{number}"
    base = thread_id.lstrip("-") or "thread"  # (a thread named '-x' by another program: 'x-fork1')
    return base[: MAX_THREAD_ID - len(suffix)] + suffix


def next_fork_id(thread_id: str, taken: Callable[[str], bool]) -> str:
    """The first ``<thread>-fork<N>`` (N = 1, 2, ...) for which ``taken`` is false."""
    number = 1
    while taken(fork_id(thread_id, number)):
        number += 1
    return fork_id(thread_id, number)
