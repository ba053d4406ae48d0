"""Private folders and files: what holds conversations, settings or logs is created readable by
its owner only (folders 0700, files 0600), whatever the umask."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def make_private_dirs(folder: Path) -> None:
    """Create a folder and every missing parent 0700 (mkdir's mode covers only the last)."""
    missing = []
    for parent in [folder, *folder.parents]:
        if parent.exists():
            break
        missing.append(parent)
    for parent in reversed(missing):
        parent.mkdir(mode=0o700, exist_ok=True)
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is not a folder")


def check_creatable(path: Path) -> None:
    """Raise the error creating ``path`` and its missing folders would meet, making nothing
    that stays: a temporary file is made and removed in the nearest folder there is. The
    error names what creating would have failed on (the first missing folder, or ``path``);
    a file where a folder of the path should be is :class:`NotADirectoryError`."""
    import tempfile

    first, there = path, Path(".")
    for folder in path.parents:
        if folder.exists():
            there = folder
            break
        first = folder
    if not there.is_dir():
        raise NotADirectoryError(f"{there} is not a folder")
    try:
        fd, name = tempfile.mkstemp(dir=there, prefix=".chatbot-")
    except OSError as error:
        raise OSError(error.errno, error.strerror, str(first)) from None
    os.close(fd)
    os.unlink(name)


def create_private_file(path: Path) -> None:
    """Create an empty file 0600 (and its missing folders 0700) unless it exists: before
    SQLite opens a new database, or prompt_toolkit appends the REPL's input history."""
    make_private_dirs(path.parent)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def write_new_private(path: Path, text: str) -> None:
    """Create ``path`` holding ``text``, 0600 whatever the umask (its missing folders 0700);
    :class:`FileExistsError` when something is there already: nothing is overwritten."""
    make_private_dirs(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(text)


def replace_private(path: Path, text: str) -> None:
    """``path`` holding ``text``, whole or not at all: written to a new private file beside it
    (0600), synced to the disk, renamed over it; a failure leaves the file that was there as
    it was and no part file. The folder must exist."""
    import tempfile

    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # the rename itself on the disk (the text is there)
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def untracked_in(path: Path) -> Path | None:
    """The git work tree holding ``path`` when git would list the file as untracked there
    (neither tracked nor ignored), else ``None``: so that a file written into a checkout is
    not committed by mistake. Without git installed, a ``.git`` folder (or file) above the
    file is enough to tell."""
    import shutil
    import subprocess

    folder = path.absolute().parent
    top = next((place for place in [folder, *folder.parents] if (place / ".git").exists()), None)
    git = shutil.which("git")
    if top is None or git is None:
        return top
    try:
        found = subprocess.run(
            [git, "-C", str(top), "status", "--porcelain", "--ignored", "--", str(path.absolute())],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return top
    if found.returncode != 0:  # (git refuses this checkout: what .git says stands)
        return top
    return top if found.stdout.startswith("??") else None
