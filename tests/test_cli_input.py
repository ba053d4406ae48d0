"""Input that is not valid UTF-8: every turn is stored whole, with U+FFFD where the bad bytes
were, and the command exits 0, so that a script never retries a turn that was saved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chatbot.cli.app import valid_text
from chatbot.cli.commands import app
from chatbot.store.sqlite import Store

runner = CliRunner()


def stored_messages(db: Path, thread_id: str) -> list[str]:
    """The contents of a thread's messages as ``chatbot show --json`` gives them."""
    shown = runner.invoke(app, ["show", thread_id, "--json", "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    return [m["content"] for m in json.loads(shown.stdout)["messages"]]


def run_chatbot(
    *args: str | bytes, stdin: bytes, io_encoding: str, home: Path
) -> subprocess.CompletedProcess[bytes]:
    """``python -m chatbot`` in a new process with stdin and stdout piped, as from a script."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OPENAI_"))}
    env.update(XDG_DATA_HOME=str(home), PYTHONIOENCODING=io_encoding)
    return subprocess.run(
        [sys.executable, "-m", "chatbot", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )


# Python reads stdin with "surrogateescape" under the C/POSIX locale and "strict" under most
# others: bad bytes became lone surrogates that SQLite refused after the checkpoint was
# written (exit 1 with the turn saved), or a decoding error.
STDIN_MODES = ["utf-8:surrogateescape", "utf-8:strict"]


@pytest.mark.slow
@pytest.mark.parametrize("io_encoding", STDIN_MODES)
def test_ask_with_bad_utf8_on_stdin_saves_one_turn_and_exits_0(
    tmp_path: Path, io_encoding: str
) -> None:
    db = tmp_path / "c.sqlite"
    result = run_chatbot(
        "ask",
        "-",
        "--db",
        str(db),
        stdin=b"hello \xff\xfe world\n",
        io_encoding=io_encoding,
        home=tmp_path,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert b"error" not in result.stderr
    assert 'You said: "hello \ufffd\ufffd world"'.encode() in result.stdout
    assert stored_messages(db, "default")[0] == "hello \ufffd\ufffd world\n"
    with Store(db) as store:
        (info,) = store.list_threads()
    assert info.message_count == 2 and info.title == "hello \ufffd\ufffd world"


@pytest.mark.slow
@pytest.mark.parametrize("io_encoding", STDIN_MODES)
def test_a_piped_repl_line_with_bad_utf8_is_stored_whole(tmp_path: Path, io_encoding: str) -> None:
    db = tmp_path / "c.sqlite"
    result = run_chatbot(
        "chat",
        "-t",
        "r",
        "--db",
        str(db),
        stdin=b"hi \xff\n",
        io_encoding=io_encoding,
        home=tmp_path,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert b"error" not in result.stdout + result.stderr
    assert stored_messages(db, "r")[0] == "hi \ufffd"


@pytest.mark.slow
def test_a_bad_utf8_argument_is_sent_with_a_replacement_character(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    result = run_chatbot(
        "ask", b"caf\xe9 \xff", "--db", str(db), stdin=b"", io_encoding="utf-8", home=tmp_path
    )
    assert result.returncode == 0, result.stderr.decode()
    assert stored_messages(db, "default")[0] == "caf\ufffd \ufffd"


def test_piped_input_and_text_are_sent_together_input_first(tmp_path: Path) -> None:
    """``git diff | chatbot ask "review this"``: the input, then the text, as llm orders them."""
    db = tmp_path / "c.sqlite"
    code = "def f():\n    return 1\n"
    piped = runner.invoke(app, ["ask", "explain", "--db", str(db)], input=code)
    assert piped.exit_code == 0, piped.output
    assert stored_messages(db, "default")[0] == "def f():\n    return 1\n\nexplain"
    alone = runner.invoke(app, ["ask", "just this", "-t", "t2", "--db", str(db)], input="")
    assert alone.exit_code == 0, alone.output
    assert stored_messages(db, "t2")[0] == "just this", "an empty pipe adds nothing"
    dash = runner.invoke(app, ["ask", "-", "-t", "t3", "--db", str(db)], input="only stdin\n")
    assert dash.exit_code == 0, dash.output
    assert stored_messages(db, "t3")[0] == "only stdin\n"


def test_in_process_bytes_and_surrogates_never_break_a_turn(tmp_path: Path) -> None:
    """CliRunner decodes stdin strictly; arguments carry what Python makes of bad bytes."""
    db = str(tmp_path / "c.sqlite")
    piped = runner.invoke(app, ["ask", "-", "--db", db], input=b"one \xff\n")
    assert piped.exit_code == 0, piped.output
    argument = runner.invoke(app, ["ask", "two \udcff", "--db", db])
    assert argument.exit_code == 0, argument.output
    thread = runner.invoke(app, ["ask", "three", "-t", "t\udcfe", "--db", db])
    assert thread.exit_code == 2, "a thread id that is not text is refused"
    assert "bytes that are not UTF-8" in thread.output
    repl = runner.invoke(app, ["chat", "-t", "r", "--db", db], input=b"four \xfe\n/rename r\xff\n")
    assert repl.exit_code == 0, repl.output
    assert stored_messages(Path(db), "default")[::2] == ["one \ufffd\n", "two \ufffd"]
    assert "three" not in json.dumps([stored_messages(Path(db), t) for t in ("default", "r")])
    assert stored_messages(Path(db), "r")[0] == "four \ufffd", "not renamed to a name not text"


def test_valid_text_replaces_what_was_not_utf8_like_a_decoder_would() -> None:
    assert valid_text("plain, 中文 and ✓") == "plain, 中文 and ✓"
    assert valid_text("a\udcff\udcfeb") == "a\ufffd\ufffdb"
    assert valid_text("cut \udce2\udc82") == "cut \ufffd", "a cut sequence is one character"
    assert valid_text("lone \ud800 surrogate") == "lone \ufffd surrogate"
    assert valid_text("\udcff").encode("utf-8")
