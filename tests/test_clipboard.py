"""/copy without a terminal, and the clipboard module: the OSC 52 escape and the system
clipboard through pyperclip, with a fake ``wl-copy`` on PATH (it writes its input to a file).
The terminal's side (the escape reaching a pty) is in tests/test_pty_input.py."""

from __future__ import annotations

import base64
import io
import os
from pathlib import Path

import pytest

from chatbot.terminal.clipboard import copy_text, copy_to_system, osc52
from tests.fake_openai import FakeOpenAI
from tests.helpers import Cli, fake_wl_copy


def fake_wayland(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Wayland session whose ``wl-copy`` writes what it is given to a file (returned)."""
    bin_dir, clip = fake_wl_copy(folder)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-test")
    monkeypatch.delenv("TMUX", raising=False)
    return clip


def no_clipboard(monkeypatch: pytest.MonkeyPatch) -> None:
    """No display at all (as over SSH): pyperclip finds no clipboard."""
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("TMUX", raising=False)


def test_osc52_is_esc_52_c_base64_bel() -> None:
    text = "héllo\nworld"
    encoded = base64.b64encode(text.encode()).decode()
    assert osc52(text) == f"\x1b]52;c;{encoded}\x07"


def test_the_system_clipboard_is_used_when_there_is_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip = fake_wayland(tmp_path, monkeypatch)
    terminal = io.StringIO()

    where = copy_text("copied ✓", terminal)

    assert where == "to the clipboard (wl-copy) and the terminal (OSC 52)"
    assert clip.read_text() == "copied ✓"
    assert terminal.getvalue() == osc52("copied ✓")


def test_without_a_clipboard_only_the_terminal_gets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    no_clipboard(monkeypatch)
    terminal = io.StringIO()

    assert copy_to_system("x") is None
    assert copy_text("x", terminal) == "to the terminal (OSC 52)"
    assert copy_text("x", None) is None


def test_inside_tmux_the_reply_goes_to_tmuxs_buffer_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_clipboard(monkeypatch)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    buffer, calls = tmp_path / "tmux-buffer", tmp_path / "tmux-args"
    (bin_dir / "tmux").write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\ncat > "{buffer}"\n')
    (bin_dir / "tmux").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TMUX", "/tmp/tmux-0/default,1,0")
    terminal = io.StringIO()

    where = copy_text("in tmux ✓", terminal)

    assert where == "to the tmux buffer and the terminal (OSC 52)"
    assert buffer.read_text() == "in tmux ✓"
    assert calls.read_text() == "load-buffer -w -\n"  # -w: tmux passes it to the outer terminal


def test_a_reply_too_big_for_some_terminals_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    no_clipboard(monkeypatch)
    terminal = io.StringIO()

    where = copy_text("x" * 80_000, terminal)

    assert where == "to the terminal (OSC 52; some terminals drop one this big)"
    assert terminal.getvalue() == osc52("x" * 80_000), "sent all the same"
    assert copy_text("x" * 70_000, io.StringIO()) == "to the terminal (OSC 52)"


@pytest.fixture
def replied(cli: Cli, openai_server: FakeOpenAI) -> Cli:
    openai_server.script("first reply", "second **reply**")
    for text in ("one", "two"):
        assert cli.ask(text).exit_code == 0
    return cli


def chat(cli: Cli, lines: str) -> str:
    result = cli.invoke("chat", "--thread", "t1", "--db", str(cli.db), stdin=lines)
    assert result.exit_code == 0, result.output
    return result.output


def test_copy_puts_the_nth_last_reply_on_the_clipboard(
    replied: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip = fake_wayland(tmp_path, monkeypatch)

    output = chat(replied, "/copy\n")
    assert "copied reply 1 (16 characters) to the clipboard (wl-copy)" in output
    assert clip.read_text() == "second **reply**"  # the Markdown as the model wrote it

    output = chat(replied, "/copy 2\n")
    assert "copied reply 2 (11 characters) to the clipboard (wl-copy)" in output
    assert clip.read_text() == "first reply"


def test_copy_out_of_range_or_nowhere_to_go_is_one_line(
    replied: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_clipboard(monkeypatch)

    output = chat(replied, "/copy 3\n/copy zero\n/copy \u00b2\n/copy\n")

    assert "error: no reply 3: only 2 replies to copy (/copy 1 is the last)" in output
    assert "error: /copy takes a reply number, not 'zero'" in output
    assert "error: /copy takes a reply number, not '\u00b2'" in output  # isdigit(), not int()
    assert "error: nothing copied: no system clipboard here, and output is not a terminal" in (
        output
    )


def test_copy_in_a_thread_without_replies(cli: Cli) -> None:
    output = chat(cli, "/copy\n")
    assert "error: no reply to copy in this thread yet" in output
