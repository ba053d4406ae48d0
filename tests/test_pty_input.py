"""Writing and copying in a real terminal: Ctrl-X Ctrl-E and /edit open ``$EDITOR`` (a small
script that rewrites the file it is given), and /copy writes the OSC 52 escape to the terminal
and hands the reply to the system clipboard (a fake ``wl-copy`` on PATH writing to a file).

The terminal is tests/test_pty.py's: the installed ``chatbot`` under pexpect, the offline model.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import fake_wl_copy
from tests.test_pty import Terminal, cli_json, plain, terminal_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Terminal]]:
    """Start ``chatbot ARGS...`` in a terminal with extra environment; killed at the end."""
    started: list[Terminal] = []

    def start(*args: str, **env: str) -> Terminal:
        terminal = Terminal(list(args), terminal_env(tmp_path, **env), tmp_path)
        started.append(terminal)
        return terminal

    yield start
    for terminal in started:
        terminal.kill()


CTRL_X_CTRL_E = "\x18\x05"


def editor_script(folder: Path, body: str) -> str:
    """An ``$EDITOR``: a shell script that runs ``body`` with the file as ``$1``."""
    script = folder / "fake-editor"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


def prefixing_editor(folder: Path) -> str:
    """Writes 'edited: ' before what the file held (so the test sees the starting text)."""
    return editor_script(
        folder, 'printf "edited: %s\\n" "$(cat "$1")" > "$1.new" && mv "$1.new" "$1"'
    )


def stored_messages(tmp_path: Path, thread: str) -> list[Any]:
    document = cli_json(tmp_path / "chat.sqlite", "show", thread)
    return [m["content"] for m in document["messages"] if m["type"] == "human"]


def test_ctrl_x_ctrl_e_edits_the_line_being_typed_and_sends_it(spawn: Any, tmp_path: Path) -> None:
    term: Terminal = spawn("chat", "--thread", "ed", EDITOR=prefixing_editor(tmp_path), VISUAL="")
    term.started("ed")

    term.child.send("my draft")
    term.child.send(CTRL_X_CTRL_E)
    term.expect(re.escape('You said: "edited: my draft"'))
    term.expect_prompt("ed")

    assert stored_messages(tmp_path, "ed") == ["edited: my draft"]


def test_edit_starts_from_its_text_and_sends_what_was_saved(spawn: Any, tmp_path: Path) -> None:
    term: Terminal = spawn("chat", "--thread", "ed", VISUAL=prefixing_editor(tmp_path), EDITOR="")
    term.started("ed")

    term.child.send("/edit a long message\r")
    term.expect(re.escape('You said: "edited: a long message"'))
    term.expect_prompt("ed")

    assert stored_messages(tmp_path, "ed") == ["edited: a long message"]


def appending_editor(folder: Path) -> str:
    """Writes ' -- appended' after what the file held."""
    return editor_script(
        folder, 'printf "%s -- appended\\n" "$(cat "$1")" > "$1.new" && mv "$1.new" "$1"'
    )


@pytest.mark.parametrize("how", ["/edit", "Ctrl-X Ctrl-E"])
def test_the_message_an_editor_changed_is_shown_once_as_sent_above_its_reply(
    spawn: Any, tmp_path: Path, how: str
) -> None:
    term: Terminal = spawn("chat", "--thread", "ed", EDITOR=appending_editor(tmp_path), VISUAL="")
    term.started("ed")

    if how == "/edit":
        term.child.send("/edit my draft\r")
    else:
        term.child.send("my draft" + CTRL_X_CTRL_E)
    shown = term.expect(re.escape('You said: "my draft -- appended"'))
    term.expect_prompt("ed")

    # on one row of the screen, as the prompt draws a line sent (it may draw it again in place)
    rows = [row for row in shown.split("\n") if "ed> my draft -- appended" in row]
    assert len(rows) == 1, shown
    assert stored_messages(tmp_path, "ed") == ["my draft -- appended"]


def test_edit_saved_empty_sends_nothing(spawn: Any, tmp_path: Path) -> None:
    emptying = editor_script(tmp_path, ': > "$1"')
    term: Terminal = spawn("chat", "--thread", "ed", EDITOR=emptying, VISUAL="")
    term.started("ed")

    shown = term.say("/edit start", "ed")

    assert "nothing sent: the editor left the message empty" in shown
    assert "You said" not in shown


def test_edit_without_an_editor_says_to_set_one(spawn: Any, tmp_path: Path) -> None:
    nothing = tmp_path / "no-editors"
    nothing.mkdir()
    term: Terminal = spawn("chat", "--thread", "ed", EDITOR="", VISUAL="", PATH=str(nothing))
    term.started("ed")

    shown = term.say("/edit", "ed")

    assert "error: no editor found: set EDITOR (e.g. export EDITOR=nano) or VISUAL" in shown


def test_without_editor_or_visual_edit_uses_the_systems_editor_as_ctrl_x_ctrl_e_does(
    tmp_path: Path,
) -> None:
    from chatbot.terminal.editor import editor_command

    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("vi", "nano"):
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)
    assert editor_command({"PATH": str(folder)}) == [str(folder / "nano")]  # nano before vi
    assert editor_command({"PATH": str(folder), "EDITOR": "vi -u NONE"}) == ["vi", "-u", "NONE"]
    assert editor_command({"PATH": str(folder), "VISUAL": "code -w", "EDITOR": "vi"}) == [
        "code",
        "-w",
    ]


def test_copy_writes_osc52_to_the_terminal_and_the_reply_to_the_clipboard(
    spawn: Any, tmp_path: Path
) -> None:
    bin_dir, clip = fake_wl_copy(tmp_path)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    term: Terminal = spawn(
        "chat", "--thread", "cp", PATH=path, WAYLAND_DISPLAY="wayland-test", TMUX=""
    )
    term.started("cp")
    term.chat("first", "cp")
    term.chat("second", "cp")

    shown = term.say("/copy 2", "cp")

    document = cli_json(tmp_path / "chat.sqlite", "show", "cp")
    replies = [m["content"] for m in document["messages"] if m["type"] == "ai"]
    wanted = replies[0]
    assert wanted.startswith('You said: "first"')
    escape = "\x1b]52;c;" + base64.b64encode(wanted.encode()).decode() + "\x07"
    assert escape in term.transcript.getvalue()
    assert (
        f"copied reply 2 ({len(wanted):,} characters) to the clipboard (wl-copy) and the "
        "terminal (OSC 52)" in " ".join(shown.split())
    )
    assert clip.read_text() == wanted

    shown = term.say("/copy 9", "cp")
    assert "error: no reply 9: only 2 replies to copy (/copy 1 is the last)" in plain(shown)


def test_copy_over_ssh_without_a_clipboard_still_reaches_the_terminal(
    spawn: Any, tmp_path: Path
) -> None:
    term: Terminal = spawn("chat", "--thread", "cp", WAYLAND_DISPLAY="", DISPLAY="", TMUX="")
    term.started("cp")
    term.chat("hello", "cp")

    shown = term.say("/copy", "cp")

    assert "copied reply 1" in shown
    assert "to the terminal (OSC 52)" in shown
    assert "clipboard" not in shown
    assert "\x1b]52;c;" in term.transcript.getvalue()
