"""The store's errors, below the store and its saver (which both report a damaged file)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

from chatbot.errors import FriendlyError


class StoreError(FriendlyError, RuntimeError):
    """The database cannot be opened or used; the message is one line for the user."""


class DamagedDatabase(StoreError):
    """A SQLite file SQLite finds damaged: one line saying how to recover what it holds."""

    def __init__(self, path: str, reason: object) -> None:
        from shlex import quote

        super().__init__(
            f"the database {path!r} is damaged ({' '.join(str(reason).split())}): recover what "
            f"it holds with 'sqlite3 {quote(path)} .recover | sqlite3 recovered.sqlite' and use "
            "--db recovered.sqlite, or copy your threads from a backup with 'chatbot db copy "
            "BACKUP NEW.sqlite'"
        )


def damage(error: sqlite3.Error, path: str) -> DamagedDatabase | None:
    """:class:`DamagedDatabase` if ``error`` says the file is damaged; None for any other."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is None or code & 0xFF not in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return None
    return DamagedDatabase(path, error)


@contextlib.contextmanager
def reporting_damage(path: str) -> Iterator[None]:
    """Statements run in this block that find the file damaged raise :func:`damage`'s line."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        damaged = damage(error, path)
        if damaged is None:
            raise
        raise damaged from None
