"""Copying text out of the terminal (``/copy``): the OSC 52 escape (works over SSH), the system
clipboard through ``pyperclip``, and inside tmux ``tmux load-buffer`` (tmux drops OSC 52)."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from typing import IO

OSC52_PREFIX = "\x1b]52;c;"
BELL = "\x07"
OSC52_SAFE_BYTES = 100_000
"""The longest escape every common terminal takes (hterm and others cap near 100 kB; tmux, kitty
and xterm take more): a longer one is still sent, with a word that it may not arrive."""

_MECHANISMS = {
    "copy_wl": "wl-copy",
    "copy_xclip": "xclip",
    "copy_xsel": "xsel",
    "copy_klipper": "klipper",
    "copy_osx_pbcopy": "pbcopy",
    "copy_osx_pyobjc": "macOS pasteboard",
    "copy_qt": "Qt",
    "copy_windows": "Windows clipboard",
    "copy_wsl": "clip.exe",
    "copy_dev_clipboard": "/dev/clipboard",
}


def osc52(text: str) -> str:
    """The escape that asks the terminal to put ``text`` on the clipboard (OSC 52)."""
    return OSC52_PREFIX + base64.b64encode(text.encode("utf-8")).decode("ascii") + BELL


def copy_to_system(text: str) -> str | None:
    """Put ``text`` on the system clipboard; the name of the tool that did, or None."""
    import pyperclip  # type: ignore[import-untyped]

    try:
        copy, _paste = pyperclip.determine_clipboard()  # the environment as it is now
        if not copy:  # pyperclip's stand-in when nothing is available is falsy
            return None
        copy(text)
    except (pyperclip.PyperclipException, OSError):
        return None
    name = getattr(copy, "__name__", "")
    return _MECHANISMS.get(name, name.removeprefix("copy_") or "system clipboard")


def copy_to_tmux(text: str) -> bool:
    """Inside tmux: ``text`` in tmux's paste buffer and, with ``-w``, the outer clipboard."""
    tmux = shutil.which("tmux") if os.environ.get("TMUX") else None
    if tmux is None:
        return False
    for command in ([tmux, "load-buffer", "-w", "-"], [tmux, "load-buffer", "-"]):
        try:
            done = subprocess.run(command, input=text.encode(), capture_output=True, timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            return False
        if done.returncode == 0:
            return True
    return False


def copy_text(text: str, terminal: IO[str] | None) -> str | None:
    """Copy ``text`` everywhere it can go; says where (``to the clipboard (wl-copy) and the
    terminal (OSC 52)``), or None. ``terminal``: the terminal's stream, None when output is not
    a terminal."""
    places = []
    tool = copy_to_system(text)
    if tool is not None:
        places.append(f"the clipboard ({tool})")
    if copy_to_tmux(text):
        places.append("the tmux buffer")
    if terminal is not None:
        escape = osc52(text)
        terminal.write(escape)
        terminal.flush()
        big = "; some terminals drop one this big" if len(escape) > OSC52_SAFE_BYTES else ""
        places.append(f"the terminal (OSC 52{big})")
    if not places:
        return None
    listed = ", ".join(places[:-1]) + " and " + places[-1] if len(places) > 1 else places[0]
    return "to " + listed
