"""A count and its noun in agreement, as the CLI and the REPL say them: ``1 message``,
``2 messages``, ``1,204 threads``, ``2 replies``. Imports nothing: every path may use it."""

from __future__ import annotations


def counted(count: float, noun: str, plural: str = "", *, spec: str = "") -> str:
    """``count`` and ``noun``, the noun in the plural (``plural``, else ``noun`` + ``s``) unless
    the count is 1; ``spec`` formats the number (``","``: ``2,000 threads``; ``"g"``:
    ``1.5 days``)."""
    word = noun if count == 1 else plural or f"{noun}s"
    return f"{count:{spec}} {word}"
