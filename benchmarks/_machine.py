"""Where a benchmark's figures come from: the machine, Python and the commit, for its report."""

from __future__ import annotations

import os
import platform
import shutil
import sqlite3
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _proc_line(path: str, key: str) -> str | None:
    """The value of the first ``key: value`` line of a /proc file; ``None`` if none is read."""
    try:
        for text in Path(path).read_text().splitlines():
            if text.startswith(key):
                return text.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def machine(
    *, memory: bool = False, uv: bool = False, sqlite: bool = False, date: bool = False
) -> dict[str, Any]:
    """The CPU, how many, the system, Python and the commit; with ``memory``, ``uv`` (its
    version), ``sqlite`` (the library's version) and ``date`` (now, UTC) when asked."""
    cpu = _proc_line("/proc/cpuinfo", "model name") or platform.processor() or platform.machine()
    about: dict[str, Any] = {"cpu": cpu, "cpus": os.cpu_count()}
    if memory:
        total = _proc_line("/proc/meminfo", "MemTotal")
        about["memory"] = f"{int(total.split()[0]) / 1024**2:.0f} GB" if total else ""
    about["system"] = platform.platform()
    about["python"] = platform.python_version()
    if uv:
        found = shutil.which("uv")
        about["uv"] = (
            subprocess.run([found, "--version"], capture_output=True, text=True).stdout.strip()
            if found
            else None
        )
    if sqlite:
        about["sqlite"] = sqlite3.sqlite_version
    about["commit"] = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if date:
        about["date"] = datetime.now(tz=UTC).isoformat(timespec="seconds")
    return about
