"""Writing a message in the user's editor (``/edit``; Ctrl-X Ctrl-E is prompt_toolkit's own):
``$VISUAL``, else ``$EDITOR``, on a private temporary file holding the starting text."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from chatbot.errors import FriendlyError


class EditorError(FriendlyError, RuntimeError):
    """No editor, or it failed; one line for the user."""


FALLBACK_EDITORS = ("editor", "nano", "pico", "vi", "emacs")
"""Tried in order when neither variable is set, as prompt_toolkit does for Ctrl-X Ctrl-E
(``editor`` is Debian's and Ubuntu's choice of the system's editor)."""


def editor_command(environ: Mapping[str, str] | None = None) -> list[str]:
    """The editor to run, as prompt_toolkit picks it for Ctrl-X Ctrl-E: ``$VISUAL``, else
    ``$EDITOR`` (with arguments), else the first of :data:`FALLBACK_EDITORS` on the PATH."""
    import shutil

    env = os.environ if environ is None else environ
    for name in ("VISUAL", "EDITOR"):
        value = env.get(name, "").strip()
        if value:
            try:
                words = shlex.split(value)
            except ValueError:
                raise EditorError(f"{name}={value!r} has an unclosed quote") from None
            if words:
                return words
    for name in FALLBACK_EDITORS:
        found = shutil.which(name, path=env.get("PATH", os.defpath))
        if found:
            return [found]
    raise EditorError("no editor found: set EDITOR (e.g. export EDITOR=nano) or VISUAL")


def edit_text(initial: str = "") -> str:
    """Open the editor on ``initial``; the saved text, without the one newline editors add.
    The file is private and removed after; without a terminal no editor is started."""
    import sys

    for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)):
        if stream is None or not stream.isatty():
            raise EditorError(f"the editor needs a terminal ({name} is not one): nothing sent")
    command = editor_command()
    fd, name = tempfile.mkstemp(prefix="chatbot-", suffix=".md")
    path = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(initial)
        try:
            code = subprocess.call([*command, name])
        except OSError as error:
            raise EditorError(
                f"cannot run the editor {command[0]!r}: {error.strerror or error}"
            ) from None
        if code != 0:
            raise EditorError(f"the editor {command[0]!r} exited with code {code}: nothing sent")
        text = path.read_text(encoding="utf-8", errors="replace")
    finally:
        path.unlink(missing_ok=True)
    return text[:-1] if text.endswith("\n") else text
