"""The REPL in a real pseudo-terminal: prompt_toolkit reads keys, Rich draws, signals are real.

Each test spawns the installed ``chatbot`` console script under ``pexpect`` with a clean
environment (no CHATBOT_* / OPENAI_* from the machine, a data directory and a database under
tmp_path, ``messages:6`` / ``messages:2`` summaries) in a 40x120 ``xterm-256color`` terminal
(narrower where a test checks wrapping).
The test plays the terminal's part in prompt_toolkit's cursor-position handshake (it answers
``ESC[6n``), so the bottom toolbar is drawn as in a real terminal emulator.

The prompt comes before the models and the graph, which load behind it; a test that sends
lines with :meth:`Terminal.say` first waits for :meth:`Terminal.started` (the status line names
the model), because the prompt is drawn again when loading ends.

Model replies come from the offline model, or from ``tests/fake_openai.py`` on 127.0.0.1 when
a test needs a slow stream. Afterwards the database is read back with ``chatbot show --json``
and ``chatbot threads --json`` (in-process), so every check covers both the screen and SQLite.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from typer.testing import CliRunner

from chatbot.cli.commands import app
from chatbot.memory.facts import LEAVING
from tests.fake_openai import FakeOpenAI, Reply
from tests.helpers import (
    SUMMARY_TEXT,
    chat_requests,
    closed_port,
    echo_or_summary,
    is_summary_request,
    wait_until,
    worth_folding,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROWS, COLUMNS = 40, 120
TIMEOUT = 30.0
"""The longest any single wait may take (start-up included)."""

CPR_REQUEST = "\x1b[6n"
"""prompt_toolkit asks where the cursor is; a terminal answers ``ESC[row;colR``."""
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-9A-B]|\x1b[=>]")
LEAKY_PREFIXES = ("CHATBOT_", "OPENAI_", "LANGSMITH_", "LANGCHAIN_", "PROMPT_TOOLKIT_")
LEAKY_NAMES = {"columns", "lines", "http_proxy", "https_proxy", "all_proxy", "no_proxy"}

FRESH_PROMPT = r"\x1b\[\?2004h(?:\x1b\[[0-9;?]*[A-Za-z])*{}>"
ALT_ENTER = "\x1b\r"
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"

SLOW_WORDS = [f"tick{n:02d}" for n in range(1, 81)]
SLOW_CHUNK_DELAY = 0.25
"""80 words, a quarter of a second apart: the slow reply would take 20 s to finish."""


def plain(text: str) -> str:
    """Terminal output without colours and cursor movements."""
    return ANSI.sub("", text).replace("\r", "")


def console_script() -> list[str]:
    """The installed ``chatbot`` command (``python -m chatbot`` if there is no script)."""
    script = os.path.join(sys.prefix, "bin", "chatbot")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "chatbot"]


class Terminal:
    """A ``chatbot`` process in a pseudo-terminal, driven like a person at a keyboard."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        cwd: Path,
        columns: int = COLUMNS,
        program: list[str] | None = None,
    ) -> None:
        """Run ``chatbot ARGS...`` (or ``program ARGS...``)."""
        command, *rest = [*(program or console_script()), *args]
        self.transcript = io.StringIO()
        self.child = pexpect.spawn(
            command,
            rest,
            env=env,
            cwd=str(cwd),
            dimensions=(ROWS, columns),
            encoding="utf-8",
            codec_errors="replace",
            timeout=TIMEOUT,
        )
        self.child.logfile_read = self.transcript

    def expect(self, pattern: str, timeout: float = TIMEOUT) -> str:
        """Wait for ``pattern`` (a regex over the raw output), answering cursor-position
        requests on the way as a terminal emulator would. Returns the output read up to the
        end of the match, colours and cursor movements removed."""
        deadline = time.monotonic() + timeout
        wanted = re.compile(pattern)
        consumed = ""
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                index = self.child.expect([re.escape(CPR_REQUEST), wanted], timeout=remaining)
            except (pexpect.TIMEOUT, pexpect.EOF) as error:
                raise AssertionError(
                    f"{type(error).__name__} waiting for {pattern!r}; the screen so far:\n"
                    f"{self.tail()}"
                ) from None
            consumed += str(self.child.before) + str(self.child.after)
            if index == 0:
                self.child.send(f"\x1b[{ROWS};1R")  # the cursor is on the bottom row
                continue
            return plain(consumed)

    def expect_prompt(self, thread: str, timeout: float = TIMEOUT) -> str:
        """Wait until prompt_toolkit draws a fresh ``THREAD>`` prompt.

        A prompt session starts by switching bracketed paste on (``ESC[?2004h``); only cursor
        and colour sequences come between that and the prompt (whose space is a cursor move).
        This tells a new prompt from the redraw of the line just sent."""
        return self.expect(FRESH_PROMPT.format(re.escape(thread)), timeout)

    def started(self, thread: str, model: str = "offline") -> str:
        """Wait for the first prompt and for loading behind it to end: the status line names
        the model. (A line sent earlier waits for loading; but the prompt redrawn when loading
        ends could be taken for the prompt after it.)"""
        return self.expect_prompt(thread) + self.expect(
            rf"{re.escape(thread)} · {re.escape(model)} · "
        )

    def say(self, line: str, thread: str) -> str:
        """Send a line and wait for the next prompt of ``thread``; returns what was shown."""
        self.child.send(line + "\r")
        return self.expect_prompt(thread)

    def chat(self, text: str, thread: str) -> str:
        """Send keys ending a message to the offline model; wait for its echo and the next
        prompt; returns what was shown."""
        self.child.send(text + "\r")
        typed = text.replace(ALT_ENTER, "\n").replace(PASTE_START, "").replace(PASTE_END, "")
        shown = self.expect(re.escape(f'You said: "{" ".join(typed.split())}"'))
        return shown + self.expect_prompt(thread)

    def leave(self) -> int:
        """Ctrl-D at the prompt; returns the exit status once the process is gone."""
        self.child.sendeof()
        try:
            self.child.expect(pexpect.EOF, timeout=TIMEOUT)
        except pexpect.TIMEOUT:
            raise AssertionError(f"still running after Ctrl-D:\n{self.tail()}") from None
        self.child.close()
        assert self.child.signalstatus is None, self.tail()
        assert self.child.exitstatus is not None
        return self.child.exitstatus

    def tail(self, chars: int = 3000) -> str:
        return plain(self.transcript.getvalue())[-chars:]

    def kill(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


def terminal_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The machine's environment minus settings, keys, proxies and size overrides."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith(LEAKY_PREFIXES) and name.lower() not in LEAKY_NAMES
    }
    env.update(
        TERM="xterm-256color",
        XDG_DATA_HOME=str(tmp_path / "data"),
        CHATBOT_DB=str(tmp_path / "chat.sqlite"),
        CHATBOT_SUMMARY_TRIGGER="messages:6",
        CHATBOT_SUMMARY_KEEP="messages:2",
    )
    env.update(extra)
    return env


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Any]:
    """Start ``chatbot ARGS...`` in a terminal (``columns`` wide); every terminal is killed at
    the end."""
    started: list[Terminal] = []

    def start(*args: str, columns: int = COLUMNS, **env: str) -> Terminal:
        terminal = Terminal(list(args), terminal_env(tmp_path, **env), tmp_path, columns)
        started.append(terminal)
        return terminal

    yield start
    for terminal in started:
        terminal.kill()


runner = CliRunner()


def cli_json(db: Path, *args: str) -> Any:
    """Run a ``chatbot ... --json`` command on the database and parse its output."""
    result = runner.invoke(app, [*args, "--json", "--db", str(db)], env={"CHATBOT_DB": str(db)})
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def texts(document: dict[str, Any], kind: str | None = None) -> list[str]:
    return [m["content"] for m in document["messages"] if kind is None or m["type"] == kind]


def assert_clean(terminal: Terminal) -> None:
    screen = plain(terminal.transcript.getvalue())
    assert "Traceback" not in screen
    assert "error:" not in screen.replace("error: nothing to undo", "")
    assert "cursor position requests" not in screen  # every CPR was answered


# --- the offline model: threads, summaries, history, forks, multi-line input --------------------


def test_offline_session_with_summary_threads_history_fork_undo_and_multiline_input(
    spawn: Any, tmp_path: Path
) -> None:
    term = spawn("chat", "--thread", "main")
    term.expect(r"chatbot \d")
    term.expect("new thread main")
    term.expect_prompt("main")
    term.expect(r"main · offline · 0/6 messages")  # the bottom toolbar is drawn

    for number in range(1, 4):
        assert "summarized" not in term.chat(f"hello {number}", "main")
    screen = term.chat("hello 4", "main")
    assert re.search(r"summarized 6 messages \([\d,]+ tokens\) into [\d,]+ tokens", screen)

    shown = term.say("/threads", "main")
    assert re.search(r"thread\s+messages\s+summary\s+last active\s+title", shown)
    assert re.search(r"\* main\s+2\s+yes\s+\S+ \S+\s+hello 1", shown)

    term.child.send("/thread other\r")
    term.expect("new thread other")
    term.expect_prompt("other")
    # Alt-Enter inserts a newline; Enter then sends both lines as one message.
    shown = term.chat(f"line one{ALT_ENTER}line two", "other")
    assert re.search(r"other> line one\n\.{6} line two", shown)  # the continuation prompt
    # A bracketed paste with a newline stays one message too.
    term.chat(f"{PASTE_START}pasted one\npasted two{PASTE_END}", "other")

    term.child.send("/thread main\r")
    term.expect("thread main: 2 messages, with a summary")
    term.expect_prompt("main")

    shown = term.say("/summary history", "main")
    assert re.search(r"#1 step \d+ · .* · folded 6 messages", shown)
    assert "• hello 1" in shown and "• hello 3" in shown  # the summary is Markdown

    shown = term.say("/history 3", "main")
    assert re.search(r"checkpoint\s+time\s+message\s+msgs\s+summary", shown)
    assert re.search(r"hello 4\s+6→2\s+folded 6", shown)
    assert "... 1 older turn (/history 4)" in shown
    shown = term.say("/history all 5", "main")
    assert re.search(r"checkpoint\s+step\s+node\s+next\s+msgs\s+summary\s+time", shown)
    assert "summarize_conversation" in shown
    assert re.search(r"\.\.\. \d+ older checkpoints \(/history all \d+\)", shown)

    term.child.send("/fork\r")
    term.expect(r"forked main at checkpoint \w{8} into main-fork1")
    term.expect("thread main-fork1: 2 messages, with a summary")
    term.expect_prompt("main-fork1")
    # A fork starts from a copied state: there is no turn in it to undo yet.
    term.child.send("/undo\r")
    term.expect("nothing to undo in this thread")
    term.expect_prompt("main-fork1")
    term.chat("only in the fork", "main-fork1")
    term.child.send("/undo\r")
    term.expect(r"rewound the last turn: back to checkpoint \w{8} \(2 messages\)")
    said = " ".join(term.expect_prompt("main-fork1").split())
    found = re.search(r"It stays in /history, marked undone, as checkpoint (\w{8})", said)
    assert found, said
    undone = found.group(1)
    # ... and it is there: listed, shown, and a fork carries on from it.
    listed = term.say("/history", "main-fork1")
    (row,) = [line for line in listed.splitlines() if line.startswith(undone)]
    assert "only in the fork (undone by /undo)" in row
    assert "only in the fork" in term.say(f"/show {undone}", "main-fork1").splitlines()

    assert term.leave() == 0
    assert_clean(term)

    db = tmp_path / "chat.sqlite"
    threads = {t["thread_id"]: t for t in cli_json(db, "threads")}
    assert set(threads) == {"main", "other", "main-fork1"}
    assert threads["main-fork1"]["origin"]["thread_id"] == "main"

    main = cli_json(db, "show", "main")
    assert main["summary"].splitlines()[1:] == ["- hello 1", "- hello 2", "- hello 3"]
    assert texts(main, "human") == ["hello 4"]
    fork = cli_json(db, "show", "main-fork1")
    assert fork["summary"] == main["summary"] and texts(fork) == texts(main)

    other = cli_json(db, "show", "other")
    assert texts(other, "human") == ["line one\nline two", "pasted one\npasted two"]
    assert len(texts(other, "ai")) == 2


C_PASTE = "/* a C comment */\nint main(void){return 0;}\nwhat does this do?"


def test_a_paste_or_a_line_starting_with_a_slash_is_a_message_unless_it_names_a_command(
    spawn: Any, tmp_path: Path
) -> None:
    """Code pasted at the prompt is one message, sent as typed; ``//`` sends a line starting
    with ``/``; a near miss of a command names the command and sends nothing."""
    term = spawn("chat", "--thread", "slash")
    term.started("slash")
    term.chat(f"{PASTE_START}{C_PASTE}{PASTE_END}", "slash")
    term.chat("/etc/hosts is empty", "slash")
    shown = term.say("/hisotry", "slash")
    assert "unknown command /hisotry: did you mean /history?" in " ".join(shown.split())
    term.child.send("//help me\r")
    term.expect(re.escape('You said: "/help me"'))
    term.expect_prompt("slash")
    assert term.leave() == 0
    screen = plain(term.transcript.getvalue())
    assert "Traceback" not in screen and "cursor position requests" not in screen
    stored = cli_json(tmp_path / "chat.sqlite", "show", "slash")
    assert texts(stored, "human") == [C_PASTE, "/etc/hosts is empty", "/help me"]


# --- the prompt first, the models behind it -------------------------------------------------------

OFFLINE_NOTE = (
    "note: No OPENAI_API_KEY or OPENAI_BASE_URL is set, so chatbot uses its offline model"
)


def test_the_prompt_comes_first_and_a_message_typed_at_once_is_answered(
    spawn: Any, tmp_path: Path
) -> None:
    term = spawn("chat", "--thread", "quick")
    before = term.expect("new thread quick") + term.expect_prompt("quick")
    assert "offline" not in before, "the prompt does not wait for the model"
    term.child.send("hello at once\r")  # while the model loads
    shown = " ".join(term.expect(re.escape('You said: "hello at once"')).split())
    assert OFFLINE_NOTE in shown, "the offline model's note comes before the reply"
    term.expect_prompt("quick")
    term.expect(r"quick · offline · 2/6 messages")
    term.say("/thread", "quick")
    assert term.leave() == 0
    assert_clean(term)
    screen = " ".join(plain(term.transcript.getvalue()).split())
    assert screen.count(OFFLINE_NOTE) == 1
    assert texts(cli_json(tmp_path / "chat.sqlite", "show", "quick"))[0] == "hello at once"


def test_before_the_prompt_nothing_of_langgraph_or_the_full_settings_is_imported(
    spawn: Any, tmp_path: Path
) -> None:
    """Python reports each import on stderr (PYTHONPROFILEIMPORTTIME): those written before the
    prompt are what starting costs. Reading commands run before the models are made."""
    db = tmp_path / "chat.sqlite"
    made = runner.invoke(app, ["ask", "first words", "-t", "main", "--db", str(db)])
    assert made.exit_code == 0, made.output
    term = spawn("chat", PYTHONPROFILEIMPORTTIME="1")
    before = term.expect("thread main: 2 messages, no summary yet") + term.expect_prompt("main")
    imported = re.findall(r"import time:\s+\d+ \|\s+\d+ \|\s+([\w.]+)", before)
    assert "prompt_toolkit" in imported and "sqlite3" in imported
    heavy = ("langgraph", "langchain_core", "openai", "chatbot.config.settings")  # (read behind)
    assert [m for m in imported if m.split(".")[0] in heavy or m in heavy] == []
    term.child.send("/threads\r")  # answered from the database while the model loads
    assert re.search(r"\* main\s+2\s+no\s+\S+ \S+\s+first words", term.expect(r"first words"))
    term.expect_prompt("main")
    assert term.leave() == 0
    assert "Traceback" not in term.tail()


def test_a_bad_setting_found_behind_the_prompt_ends_the_repl_with_one_line_and_code_2(
    spawn: Any, tmp_path: Path
) -> None:
    term = spawn("chat", "--thread", "main", CHATBOT_SUMMARY_KEEP="lots")
    term.expect_prompt("main")
    term.child.expect(pexpect.EOF, timeout=TIMEOUT)
    term.child.close()
    assert term.child.exitstatus == 2, term.tail()
    screen = plain(term.transcript.getvalue())
    (line,) = [line for line in screen.splitlines() if "error" in line.lower()]
    assert line.startswith("error: CHATBOT_SUMMARY_KEEP='lots' is not valid: use messages:N")
    assert "Traceback" not in screen
    assert not (tmp_path / "chat.sqlite").exists(), "nothing is created before settings are valid"


PROMPT_SESSION = "\x1b[?2004h"
"""What prompt_toolkit writes first when a prompt session starts (bracketed paste on)."""


def test_a_repl_whose_server_does_not_answer_ends_in_one_line_before_any_prompt_and_drops_keys(
    tmp_path: Path,
) -> None:
    """Keys typed while the REPL starts are the REPL's: when it cannot start, they are dropped,
    not left to the shell that started it (a shell here reads what is left when it ends)."""
    with closed_port() as port:
        chatbot = " ".join(shlex.quote(word) for word in console_script())
        script = (
            f"echo started; sleep 1; {chatbot} chat --url http://127.0.0.1:{port}; "
            'echo "exit=$?"; IFS= read -r -t 3 left; echo "the shell read [$left]"'
        )
        term = Terminal(["-c", script], terminal_env(tmp_path), tmp_path, program=["bash"])
        try:
            term.expect("started")
            term.child.send("typed ahead\r")  # (the terminal holds it while chatbot starts)
            shown = term.expect(r"the shell read \[.*\]")
        finally:
            term.kill()
    assert "exit=1" in shown, shown
    assert "the shell read []" in shown, "what was typed was left to the shell"
    raw = term.transcript.getvalue()
    assert PROMPT_SESSION not in raw, "a prompt was drawn"
    (line,) = [line for line in plain(raw).splitlines() if "error" in line]
    assert line.startswith(f"error: cannot reach the LangGraph server at http://127.0.0.1:{port}")
    assert line.endswith(f"is it running? Start it: uv run --group dev langgraph dev --port {port}")


def test_a_repl_whose_database_cannot_be_made_ends_in_one_line_before_any_prompt(
    spawn: Any,
) -> None:
    """Nothing can be made in /proc, not even by root."""
    term = spawn("chat", "--thread", "main", "--db", "/proc/chatbot-test.sqlite")
    term.child.expect(pexpect.EOF, timeout=TIMEOUT)
    term.child.close()
    assert term.child.exitstatus == 2, term.tail()
    raw = term.transcript.getvalue()
    assert PROMPT_SESSION not in raw, "a prompt was drawn"
    (line,) = [line for line in plain(raw).splitlines() if line.strip()]
    assert line.startswith("error: cannot open the database '/proc/chatbot-test.sqlite': ")
    assert line.endswith(": '/proc/chatbot-test.sqlite'"), line


@pytest.mark.parametrize("leave", ["ctrl-d", "/exit"])
def test_leaving_at_once_does_not_wait_for_loading(spawn: Any, tmp_path: Path, leave: str) -> None:
    term = spawn("chat", "--thread", "bye")
    term.expect_prompt("bye")
    if leave == "ctrl-d":
        assert term.leave() == 0
    else:
        term.child.send("/exit\r")
        term.child.expect(pexpect.EOF, timeout=TIMEOUT)
        term.child.close()
        assert term.child.exitstatus == 0
    screen = plain(term.transcript.getvalue())
    assert "Traceback" not in screen and "error" not in screen


# --- every word on screen at 80 and 40 columns -------------------------------------------------

LONG_STATEMENTS = [
    "my name is Ada Lovelace and I work as an engineer on the analytical engine in London",
    "I prefer green tea over coffee and I answer in French whenever I am tired or hungry",
    "the budget for the trip is 4200 pounds and the flight number is BA2490 on the ninth",
    "please remember that the punch card layout needs a review before Thursday afternoon",
]
MULTI_LINE = "fix this:\ndef f():\n    return 1  # the indented body line of the function"


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text))


def assert_every_word(text: str, screen: str, where: str) -> None:
    missing = words(text) - words(screen)
    assert not missing, f"{where}: not on the screen: {sorted(missing)}\n{screen}"


@pytest.mark.parametrize("columns", [80, 40])
def test_every_word_of_a_long_summary_and_a_multi_line_message_is_on_screen(
    spawn: Any, tmp_path: Path, columns: int
) -> None:
    term = spawn("chat", "--thread", "w", columns=columns)
    term.started("w")
    for statement in LONG_STATEMENTS:  # the fourth turn folds the first three
        term.say(statement, "w")
    term.say(f"{PASTE_START}{MULTI_LINE}{PASTE_END}", "w")
    db = tmp_path / "chat.sqlite"
    stored = cli_json(db, "show", "w")
    summary = stored["summary"]
    for statement in LONG_STATEMENTS[:3]:
        assert statement in summary
    assert texts(stored, "human") == [LONG_STATEMENTS[3], MULTI_LINE]

    assert_every_word(summary, term.say("/summary", "w"), "/summary")
    timeline = term.say("/summary history", "w")
    assert_every_word(summary, timeline, "/summary history")
    (change,) = [t for t in cli_json(db, "history", "w") if t["summary_changed"]]
    assert change["folded"] == 6
    assert any(change["checkpoint_id"] in line for line in timeline.splitlines()), (
        "the full checkpoint id, whole on one line"
    )

    turns = cli_json(db, "history", "w")
    assert [t["text"] for t in turns] == [MULTI_LINE, *reversed(LONG_STATEMENTS)]
    listed = term.say("/history", "w")
    for turn in turns:
        assert turn["checkpoint_id"][-8:] in listed
    assert_every_word("fix this: def f(): return 1", listed, "/history")

    head = turns[0]["checkpoint_id"]
    shown = term.say(f"/show {head[-8:]}", "w")
    lines = [line.rstrip() for line in shown.splitlines()]
    assert any(head in line for line in lines), "the full checkpoint id, whole on one line"
    assert_every_word(summary, shown, "/show")
    start = lines.index("fix this:")
    assert lines[start + 1] == "def f():"
    assert lines[start + 2].startswith("    return 1  # the"), "line breaks and indentation"
    assert_every_word(MULTI_LINE, "\n".join(lines[start : start + 4]), "/show")
    assert term.leave() == 0
    assert_clean(term)

    show = spawn("show", "w", columns=columns)
    show.child.expect(pexpect.EOF, timeout=TIMEOUT)
    printed = plain(show.transcript.getvalue())
    assert_every_word(summary, printed, "chatbot show")
    lines = [line.rstrip() for line in printed.splitlines()]
    start = lines.index("fix this:")
    assert lines[start + 1 : start + 2] == ["def f():"]
    assert lines[start + 2].startswith("    return 1  # the")


# --- a real model over HTTP: Ctrl-C during a slow reply, then reopening and /retry --------------


def fake_model_env(server: FakeOpenAI, **extra: str) -> dict[str, str]:
    """Settings that point the app at the fake OpenAI-compatible server, without retries."""
    return {
        "OPENAI_API_KEY": "sk-test-pty",
        "OPENAI_BASE_URL": server.base_url,
        "CHATBOT_MODEL": "fake-model",
        "CHATBOT_MAX_RETRIES": "0",
        **extra,
    }


def test_ctrl_c_stops_a_slow_reply_and_retry_after_reopening_finishes_the_turn(
    spawn: Any, tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    openai_server.responder = echo_or_summary
    model_env = fake_model_env(openai_server, CHATBOT_TIMEOUT="25")
    term = spawn("chat", "--thread", "main", **model_env)
    term.expect_prompt("main")
    term.expect(r"main · fake-model · 0/6 messages")
    for number in range(1, 5):  # (the first worth folding: a summary is made)
        text = worth_folding("turn 1") if number == 1 else f"turn {number}"
        term.child.send(f"{text}\r")
        term.expect(f"echo: turn {number}")
        term.expect_prompt("main")
    term.expect(r"main · fake-model · 2/6 messages")  # the fourth turn made a summary
    term.child.send("/thread other\r")
    term.expect("new thread other")
    term.child.send("in other\r")
    term.expect("echo: in other")
    term.expect_prompt("other")
    term.say("/thread main", "main")

    # Keys typed while a reply streams are not echoed into it; they wait for the next prompt.
    openai_server.script(Reply(text="alpha bravo charlie delta foxtrot golf", chunk_delay=0.3))
    term.child.send("spell it\r")
    term.expect(r"alpha\b")
    term.child.send("typed ahead")
    shown = term.expect(r"golf\b") + term.expect_prompt("main")
    assert "typed ahead" not in shown
    term.expect("typed ahead")  # the new prompt's input line
    term.child.send("\r")
    term.expect("echo: typed ahead")
    term.expect_prompt("main")

    # A slow streamed reply; Ctrl-C once its first words are on the screen.
    openai_server.script(Reply(text=" ".join(SLOW_WORDS), chunk_delay=SLOW_CHUNK_DELAY))
    term.child.send("tell me a long story\r")
    term.expect(r"tick01\b")
    interrupted_at = time.monotonic()
    term.child.sendintr()
    shown = term.expect(r"interrupted.*your message is kept; /retry regenerates the reply")
    waited = time.monotonic() - interrupted_at
    shown += term.expect_prompt("main")
    assert "tick80" not in shown, "the whole reply was shown: Ctrl-C did not stop it"
    assert waited < 5, f"'interrupted' came {waited:.1f} s after Ctrl-C"
    assert "^C" not in shown  # not echoed into the live display

    # Ctrl-C at the prompt clears the typed text; the app goes on.
    term.child.send("half typed text")
    term.expect("half typed text")
    term.child.sendintr()
    term.expect_prompt("main")
    shown = term.say("/thread", "main")
    assert re.search(r"thread main: \d+ messages, with a summary", shown)
    assert term.leave() == 0
    assert_clean(term)
    requests_before_reopen = len(chat_requests(openai_server))

    # Reopen: the unfinished turn is reported, and /retry finishes it.
    again = spawn("chat", "--thread", "main", **model_env)
    again.expect("thread main: 7 messages, with a summary")
    again.expect(r"The last turn in this thread did not finish \(interrupted or failed\)")
    again.expect(r"/retry resumes it")
    again.expect_prompt("main")
    openai_server.script("the retried reply")
    again.child.send("/retry\r")
    again.expect("the retried reply")
    again.expect("summarized 6 messages")
    again.expect_prompt("main")
    assert again.leave() == 0
    assert_clean(again)
    assert len(chat_requests(openai_server)) == requests_before_reopen + 1
    retried = chat_requests(openai_server)[-1]
    assert retried.last_user_text == "tell me a long story"

    db = tmp_path / "chat.sqlite"
    assert {t["thread_id"] for t in cli_json(db, "threads")} == {"main", "other"}
    main = cli_json(db, "show", "main")
    assert main["summary"] == SUMMARY_TEXT
    assert texts(main) == ["tell me a long story", "the retried reply"]
    # The retried turn made the thread long enough to fold again: everything before it went
    # into the second summary call, the interrupted attempt's words did not.
    summary_calls = [r for r in openai_server.requests if is_summary_request(r)]
    leaving = [r for r in summary_calls if r.messages[0]["content"] == LEAVING["en"]]
    assert len(leaving) == 1, "thread other, which never folded, is read for memories once"
    assert "in other" in leaving[0].last_user_text
    folded = [r.last_user_text for r in summary_calls if r not in leaving]
    assert len(folded) == 2
    for text in ["turn 4", "spell it", "foxtrot golf", "typed ahead", "echo: typed ahead"]:
        assert text in folded[1]
    assert "tick01" not in folded[1] and "half typed" not in folded[1]
    assert texts(cli_json(db, "show", "other")) == ["in other", "echo: in other"]


CTRL_D_DURING_A_REPLY = "Ctrl-D does nothing while a reply streams: at an empty prompt it leaves"


def test_ctrl_d_during_a_reply_does_nothing_and_keys_typed_ahead_wait_in_the_input_line(
    spawn: Any, tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    openai_server.responder = echo_or_summary
    term = spawn("chat", "--thread", "main", **fake_model_env(openai_server))
    term.started("main", "fake-model")

    # Typed ahead, Ctrl-D, typed ahead again: nothing is sent, nothing is lost.
    openai_server.script(Reply(text="alpha bravo charlie delta foxtrot golf", chunk_delay=0.3))
    spell = worth_folding("spell it")  # (the summary the fourth turn makes folds it)
    term.child.send(f"{spell}\r")
    term.expect(r"alpha\b")
    term.child.send("ahead")
    term.child.sendcontrol("d")
    term.child.send("more")
    shown = term.expect(r"golf\b") + term.expect_prompt("main")
    assert CTRL_D_DURING_A_REPLY in " ".join(shown.split())
    term.expect("aheadmore")  # the new prompt's input line, not sent
    assert len(chat_requests(openai_server)) == 1
    term.child.send("\x7f" * 4 + "less\r")  # ... and editable
    term.expect("echo: aheadless")
    term.expect_prompt("main")

    # Ctrl-D alone during a reply: the REPL stays; at the (empty) prompt Ctrl-D leaves.
    openai_server.script(Reply(text="one two three four", chunk_delay=0.3))
    term.child.send("again\r")
    term.expect(r"one\b")
    term.child.sendcontrol("d")
    shown = term.expect(r"four\b") + term.expect_prompt("main")
    assert CTRL_D_DURING_A_REPLY in " ".join(shown.split())
    assert term.child.isalive()

    # A paste during a reply (the terminal marks it: bracketed paste is on) stays text.
    openai_server.script(Reply(text="five six seven eight", chunk_delay=0.3))
    term.child.send("more\r")
    term.expect(r"five\b")
    assert "\x1b[?2004h" in term.transcript.getvalue().rsplit("more", 1)[-1]
    term.child.send(f"{PASTE_START}pasted one\npasted two{PASTE_END}")
    term.expect(r"eight\b")
    shown = term.expect_prompt("main") + term.expect("pasted two")
    assert re.search(r"main> pasted one\n\.{5} pasted two", shown), "in the input line"
    term.child.send("\r")
    term.expect("echo: pasted one")
    term.expect_prompt("main")
    assert term.leave() == 0
    assert_clean(term)
    sent = [request.last_user_text for request in chat_requests(openai_server)]
    assert sent == [spell, "aheadless", "again", "more", "pasted one\npasted two"]
    document = cli_json(tmp_path / "chat.sqlite", "show", "main")
    assert texts(document, "human") == ["more", "pasted one\npasted two"]  # (6 were folded)


LOADING_GATE = """
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import time


class HoldTheModels(importlib.abc.MetaPathFinder):
    \"\"\"Loading's second stage waits as it imports the model's client until the test makes
    the file named by CHATBOT_TEST_GATE; it says it waits with that name + '.waiting'. (It
    waits in the module's own code: a finder runs under the lock every import takes.)\"\"\"

    def find_spec(self, name, path=None, target=None):
        gate = os.environ.get("CHATBOT_TEST_GATE")
        if not gate or name != "langchain_openai":
            return None
        if threading.current_thread().name != "chatbot-load":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        spec.loader = Held(spec.loader, gate)
        return spec


class Held(importlib.abc.Loader):
    def __init__(self, loader, gate):
        self.loader, self.gate = loader, gate

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        open(self.gate + ".waiting", "w").close()
        while not os.path.exists(self.gate):
            time.sleep(0.02)
        self.loader.exec_module(module)


sys.meta_path.insert(0, HoldTheModels())
"""


def test_ctrl_c_while_the_model_loads_stops_the_message_and_keeps_the_keys_typed_ahead(
    spawn: Any, tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    """Loading is held open at a gate (the import of the model's client, on the loading
    thread), so every key below lands while the model loads."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(LOADING_GATE)
    gate = tmp_path / "gate"
    openai_server.responder = echo_or_summary
    env = fake_model_env(openai_server, PYTHONPATH=str(hooks), CHATBOT_TEST_GATE=str(gate))
    term = spawn("chat", "--thread", "main", **env)
    term.expect_prompt("main")
    wait_until(lambda: Path(f"{gate}.waiting").exists(), TIMEOUT, "loading at the gate")

    # Enter, then Ctrl-C at once: it comes while the prompt still ends (the terminal takes
    # it as a key there, not as a signal), and it still stops the message.
    term.child.send("stopped at once\r\x03")
    term.expect(r"interrupted.*still loading; nothing was done", timeout=10)
    term.expect_prompt("main")

    # Ctrl-C while the message waits with the spinner: what was typed ahead stays.
    term.child.send("stopped waiting\r")
    term.expect(r"loading the model… \ds")
    term.child.send("draft")
    term.child.sendintr()
    term.expect(r"interrupted.*still loading; nothing was done")
    term.expect_prompt("main")
    term.expect("draft")  # the new prompt's input line, not sent
    term.child.send("\x7f" * 5)

    gate.touch()
    term.expect(r"main · fake-model · 0/6 messages")
    assert chat_requests(openai_server) == [], "no model call for a stopped message"

    # Loaded: Enter, then Ctrl-C at once, still stops the turn before the model is asked.
    term.child.send("stopped before the turn\r\x03")
    term.expect(r"interrupted.*your message was not saved")
    term.expect_prompt("main")
    assert chat_requests(openai_server) == []
    term.child.send("answered\r")
    term.expect("echo: answered")
    term.expect_prompt("main")
    assert term.leave() == 0
    assert_clean(term)
    assert [r.last_user_text for r in chat_requests(openai_server)] == ["answered"]
    document = cli_json(tmp_path / "chat.sqlite", "show", "main")
    assert texts(document) == ["answered", "echo: answered"]


def test_ctrl_c_before_the_first_token_returns_at_once_and_saves_nothing_late(
    spawn: Any, tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    term = spawn(
        "chat",
        "--thread",
        "slow",
        **fake_model_env(openai_server),
    )
    term.expect_prompt("slow")
    openai_server.script(Reply(text="late reply nobody waited for", delay=5))
    term.child.send("hello\r")
    wait_until(lambda: openai_server.requests, TIMEOUT, "the request")  # no token yet
    term.child.send("nex")  # typed ahead: Ctrl-C does not throw it away
    interrupted_at = time.monotonic()
    term.child.sendintr()
    term.expect(r"interrupted.*your message is kept")
    waited = time.monotonic() - interrupted_at
    term.expect_prompt("slow")
    assert waited < 3, f"'interrupted' came {waited:.1f} s after Ctrl-C"
    term.expect("nex")  # the new prompt's input line

    openai_server.script("the next reply")
    term.child.send("t\r")
    term.expect("the next reply", timeout=20)
    term.expect_prompt("slow")
    assert term.leave() == 0
    assert_clean(term)
    document = cli_json(tmp_path / "chat.sqlite", "show", "slow")
    assert texts(document) == ["hello", "next", "the next reply"]


def test_ctrl_c_stops_a_slash_command_and_the_repl_goes_on(spawn: Any, tmp_path: Path) -> None:
    # /export to a pipe nobody reads blocks until Ctrl-C; the REPL says so and carries on.
    pipe = tmp_path / "nobody-reads.md"
    os.mkfifo(pipe)
    term = spawn("chat", "--thread", "keep")
    term.started("keep")
    term.chat("hello there", "keep")
    term.child.send(f"/export {pipe}\r")
    wchan = Path(f"/proc/{term.child.pid}/wchan")
    wait_until(lambda: wchan.read_text() == "wait_for_partner", what="/export waiting")
    term.child.sendintr()
    assert "interrupted" in term.expect_prompt("keep")
    assert 'You said: "still here"' in term.chat("still here", "keep"), "the REPL goes on"
    assert term.leave() == 0
    assert_clean(term)


def test_ctrl_c_stops_ask_at_once_and_keeps_the_message(
    spawn: Any, tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    openai_server.script(Reply(text="a reply that comes too late", delay=10))
    term = spawn(
        "ask",
        "are you there?",
        "--thread",
        "asked",
        **fake_model_env(openai_server),
    )
    # start-up, then the request waits for the (slow) server
    wait_until(lambda: openai_server.requests, TIMEOUT, "the request to reach the server")
    interrupted_at = time.monotonic()
    term.child.sendintr()
    time.sleep(0.2)  # not a wait: the gap between two key presses
    term.child.sendintr()  # an impatient second Ctrl-C changes nothing
    term.expect(r"interrupted: your message stays in thread 'asked' without a reply")
    term.child.expect(pexpect.EOF, timeout=10)
    waited = time.monotonic() - interrupted_at
    term.child.close()
    assert term.child.exitstatus == 130
    assert waited < 4, f"ask took {waited:.1f} s to stop after Ctrl-C"
    assert "Traceback" not in term.tail()
    assert texts(cli_json(tmp_path / "chat.sqlite", "show", "asked")) == ["are you there?"]


RATE_LIMITED = Reply(
    status=429, error_message="Rate limit reached for requests", headers=(("Retry-After", "3"),)
)


def test_a_rate_limit_wait_counts_down_and_ctrl_c_stops_it_keeping_the_message(
    spawn: Any, tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    """The wait a 429 asks for is counted down where the spinner is, and Ctrl-C stops it as
    it stops a reply: at once, the message kept, nothing asked again."""
    env = fake_model_env(openai_server, CHATBOT_MAX_RETRIES="2")
    term = spawn("chat", "--thread", "limited", **env)
    term.started("limited", "fake-model")
    openai_server.script(RATE_LIMITED)
    term.child.send("hello\r")
    term.expect(
        r"rate limited by the server, retrying the reply in 3 s \(retry 1 of 2; Ctrl-C stops\)"
    )
    term.expect(r"retrying the reply in 2 s")  # counted down
    interrupted_at = time.monotonic()
    term.child.sendintr()
    term.expect(r"interrupted.*your message is kept; /retry regenerates the reply")
    waited = time.monotonic() - interrupted_at
    term.expect_prompt("limited")
    assert waited < 2, f"'interrupted' came {waited:.1f} s after Ctrl-C"
    openai_server.script("the next reply")
    term.child.send("next\r")
    term.expect("the next reply")
    term.expect_prompt("limited")
    assert term.leave() == 0
    assert_clean(term)
    assert len(chat_requests(openai_server)) == 2, "the stopped wait asked nothing again"
    document = cli_json(tmp_path / "chat.sqlite", "show", "limited")
    assert texts(document) == ["hello", "next", "the next reply"]


def test_ctrl_c_during_a_rate_limit_wait_stops_ask_and_keeps_the_message(
    spawn: Any, tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    openai_server.script(RATE_LIMITED)
    env = fake_model_env(openai_server, CHATBOT_MAX_RETRIES="1")
    term = spawn("ask", "are you there?", "--thread", "asked", **env)
    term.expect(
        r"rate limited by the server, retrying the reply in 3 s \(retry 1 of 1; Ctrl-C stops\)"
    )
    term.expect(r"retrying the reply in 2 s")  # ask's spinner counts down too
    interrupted_at = time.monotonic()
    term.child.sendintr()
    term.expect(r"interrupted: your message stays in thread 'asked' without a reply")
    term.child.expect(pexpect.EOF, timeout=10)
    waited = time.monotonic() - interrupted_at
    term.child.close()
    assert term.child.exitstatus == 130
    assert waited < 2, f"ask took {waited:.1f} s to stop after Ctrl-C"
    assert "Traceback" not in term.tail()
    assert len(chat_requests(openai_server)) == 1, "nothing was asked again"
    assert texts(cli_json(tmp_path / "chat.sqlite", "show", "asked")) == ["are you there?"]


def test_leaving_right_after_stopping_a_slow_reply_does_not_wait(
    spawn: Any, tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    term = spawn(
        "chat",
        "--thread",
        "bye",
        **fake_model_env(openai_server),
    )
    term.expect_prompt("bye")
    openai_server.script(Reply(text="too late", delay=15))
    term.child.send("hello\r")
    wait_until(lambda: openai_server.requests, TIMEOUT, "the request to reach the server")
    term.child.sendintr()
    time.sleep(0.1)  # not a wait: the gap between two key presses
    term.child.sendintr()  # a second Ctrl-C while the first is handled
    term.expect(r"interrupted")
    term.expect_prompt("bye")
    # The second Ctrl-C may have come after the prompt was up, where it is a key that clears
    # the line: the prompt ends and a new one is drawn, and a Ctrl-D sent before that went to
    # the prompt that was ending. Ctrl-L (clear the screen) is handled by the prompt reading
    # keys now, whichever it is: once the screen is cleared and the prompt drawn again, that
    # prompt is the one Ctrl-D reaches.
    term.child.sendcontrol("l")
    term.expect(re.escape("\x1b[2J"))
    term.expect_prompt("bye")
    left_at = time.monotonic()
    assert term.leave() == 0
    assert time.monotonic() - left_at < 5, "Ctrl-D waited for the stopped reply"
    assert "Traceback" not in term.tail()
    assert texts(cli_json(tmp_path / "chat.sqlite", "show", "bye")) == ["hello"]


def test_ctrl_c_mid_reply_closes_the_connection_and_the_server_stops_sending(
    spawn: Any, tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    words = " ".join(f"word{n:02d}" for n in range(60))
    openai_server.script(Reply(text=words, chunk_delay=0.15))
    term = spawn("chat", "--thread", "cut", **fake_model_env(openai_server))
    term.expect_prompt("cut")
    term.child.send("tell me\r")
    term.expect("word05")  # the reply is streaming
    term.child.sendintr()
    term.expect(r"interrupted.*your message is kept")
    wait_until(lambda: openai_server.disconnects, TIMEOUT, "the client to disconnect")
    (sent,) = openai_server.disconnects
    assert sent < 25, f"the server sent {sent} of 60 pieces: the request was not closed"

    openai_server.script("right away")  # the thread is usable at once: nothing to wait for
    term.child.send("next\r")
    term.expect("right away", timeout=10)
    term.expect_prompt("cut")
    assert term.leave() == 0
    document = cli_json(tmp_path / "chat.sqlite", "show", "cut")
    assert texts(document) == ["tell me", "next", "right away"], "nothing arrived late"


def test_ctrl_c_stops_a_streaming_ask_and_the_server_sees_it(
    spawn: Any, tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    words = " ".join(f"word{n:02d}" for n in range(60))
    openai_server.script(Reply(text=words, chunk_delay=0.15))
    term = spawn("ask", "tell me", "--thread", "asked", **fake_model_env(openai_server))
    term.expect("word05")
    term.child.sendintr()
    term.expect(r"interrupted: your message stays in thread 'asked' without a reply")
    term.child.expect(pexpect.EOF, timeout=10)
    term.child.close()
    assert term.child.exitstatus == 130
    wait_until(lambda: openai_server.disconnects, TIMEOUT, "the client to disconnect")
    assert openai_server.disconnects[0] < 25
    assert texts(cli_json(tmp_path / "chat.sqlite", "show", "asked")) == ["tell me"]


def test_a_spinner_with_words_while_thinking_and_while_folding(
    spawn: Any, tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    env = fake_model_env(
        openai_server, CHATBOT_SUMMARY_TRIGGER="messages:1", CHATBOT_SUMMARY_KEEP="messages:1"
    )
    term = spawn("chat", "--thread", "spin", **env)
    term.expect_prompt("spin")
    openai_server.script(
        Reply(text="here at last", delay=2.5),  # the reply: seconds before the first token
        Reply(text="SUMMARY: hi", delay=30),  # the summary after it: never comes
    )
    hello = worth_folding("hello")  # (folding it makes the context smaller)
    term.child.send(f"{hello}\r")
    shown = term.expect(r"thinking… 2s")
    assert "thinking… 0s" in shown or "thinking… 1s" in shown, "the seconds count up"
    term.expect("here at last")
    term.expect(r"folding 1 message into the summary… \ds")
    term.child.sendintr()  # Ctrl-C works while folding too
    term.expect(r"interrupted.*the reply is saved; the summary is made next turn")
    term.expect_prompt("spin")
    listed = plain(term.say("/history", "spin"))
    # (the note wraps in the table's column, the other columns between its lines)
    note = re.search(r"hello, and a few .*\(summary left for the\s.*next turn\)", listed, re.S)
    assert note, listed
    assert "unfinished" not in listed, "a turn whose reply was saved is finished"
    assert term.leave() == 0
    screen = term.transcript.getvalue()
    after = plain(screen[screen.rindex("here at last") :])
    assert "thinking…" not in after.split("interrupted")[-1], "the spinner is cleared"
    document = cli_json(tmp_path / "chat.sqlite", "show", "spin")
    assert texts(document) == [hello, "here at last"] and not document["summary"]


def test_ask_on_a_terminal_shows_the_spinner_until_the_reply_comes(
    spawn: Any, tmp_path: Path, openai_server: FakeOpenAI
) -> None:
    """`chatbot ask` says what it waits for, as the REPL does: the model loading (seconds of
    a blank screen on a busy machine), then the reply; the spinner is gone before the reply."""
    openai_server.script(Reply(text="here at last", delay=2.5))
    term = spawn("ask", "hello", "--thread", "asked", **fake_model_env(openai_server))
    term.expect(r"loading the model… \ds")
    term.expect(r"thinking… 2s")
    shown = term.expect("here at last")
    term.child.expect(pexpect.EOF, timeout=TIMEOUT)
    term.child.close()
    assert term.child.exitstatus == 0
    screen = term.transcript.getvalue()
    assert "thinking" not in plain(screen[screen.rindex("here at last") :])
    assert "Traceback" not in shown
    assert texts(cli_json(tmp_path / "chat.sqlite", "show", "asked")) == ["hello", "here at last"]


@pytest.mark.parametrize("redirect", ["| cat", "> reply.txt"])
def test_ask_into_a_pipe_or_a_file_shows_no_spinner(
    tmp_path: Path, openai_server: FakeOpenAI, redirect: str
) -> None:
    """With stdout not a terminal, nothing is drawn on the terminal's stderr either."""
    openai_server.script(Reply(text="here at last", delay=1.5))
    script = " ".join(console_script())
    child = pexpect.spawn(
        "sh",
        ["-c", f"{script} ask hello --thread asked {redirect}"],
        env=terminal_env(tmp_path, **fake_model_env(openai_server)),
        cwd=str(tmp_path),
        dimensions=(ROWS, COLUMNS),
        encoding="utf-8",
        timeout=TIMEOUT,
    )
    child.expect(pexpect.EOF)
    child.close()
    shown = plain(str(child.before))
    if ">" in redirect:
        shown += (tmp_path / "reply.txt").read_text()
    assert child.exitstatus == 0, shown
    assert "here at last" in shown
    assert "loading the model" not in shown and "thinking" not in shown


# --- listings on a narrow terminal: an id or a number is never broken ---------------------------

GENERATED_ID = "1124-2310-2f44"
LONG_MODEL = "llama-3.1-8b-instruct-q4_K_M-gguf"
"""A model name that fits 40 columns, but not with its mark after it."""


@pytest.mark.parametrize("columns", [40, 60, 80])
def test_listings_on_a_terminal_fit_it_and_never_break_an_id(
    tmp_path: Path, openai_server: FakeOpenAI, columns: int
) -> None:
    db = tmp_path / "chat.sqlite"
    made = runner.invoke(
        app,
        ["chat", "--db", str(db), "--thread", GENERATED_ID],
        input="a rather long first message that makes the title of this thread\n",
    )
    assert made.exit_code == 0, made.output
    assert runner.invoke(app, ["fork", GENERATED_ID, "--db", str(db)]).exit_code == 0
    checkpoints = cli_json(db, "history", GENERATED_ID, "--all")
    openai_server.models = [LONG_MODEL, "gpt-4o-mini"]

    def screen(*args: str, **env: str) -> list[str]:
        """The listing's lines (stdout: stderr's notes go to a file)."""
        command = " ".join(shlex.quote(word) for word in [*console_script(), *args])
        child = pexpect.spawn(
            "sh",
            ["-c", f"{command} 2>/dev/null"],
            env=terminal_env(tmp_path, **env),
            cwd=str(tmp_path),
            dimensions=(ROWS, columns),
            encoding="utf-8",
            timeout=TIMEOUT,
        )
        child.expect(pexpect.EOF)
        child.close()
        lines = plain(str(child.before)).splitlines()
        assert child.exitstatus == 0, lines
        assert all(len(line.rstrip()) <= columns for line in lines), "\n".join(lines)
        return lines

    threads = screen("threads")
    for token in (GENERATED_ID, f"{GENERATED_ID}-fork1", "2026-", ":"):
        assert any(token in line for line in threads), threads
    if columns < 80:  # (a table from 80 columns on, with shorter ids: tests/test_render.py)
        assert threads[0].split() == [f"{GENERATED_ID}-fork1", *threads[0].split()[1:]], threads
    every = screen("history", GENERATED_ID, "--all")
    for checkpoint in checkpoints:
        assert any(checkpoint["checkpoint_id"][-8:] in line for line in every), every
    assert any("conversation" in line for line in every) and "conversatio\n" not in every
    hits = screen("search", "rather long")
    found = cli_json(db, "search", "rather long")
    for hit in found:
        assert any(hit["checkpoint_id"] in line for line in hits), hits
    models = screen("models", **fake_model_env(openai_server, CHATBOT_MODEL=LONG_MODEL))
    assert any(LONG_MODEL in line for line in models), models
    assert "(CHATBOT_MODEL)" in " ".join(models)


@pytest.mark.parametrize("columns", [40, 60])
def test_the_repl_on_a_narrow_terminal_keeps_ids_whole_and_says_where_it_cuts(
    spawn: Any, columns: int
) -> None:
    """/threads stacks its rows rather than break a thread id; the status bar, cut at the
    edge, ends with '…'."""
    term = spawn("chat", "--thread", GENERATED_ID, columns=columns)
    shown = term.started(GENERATED_ID)
    shown += term.expect("…")  # (the status bar goes on after the model's name)
    bar = [line for line in shown.splitlines() if f" {GENERATED_ID} · offline · " in line][-1]
    assert len(bar.strip()) <= columns and "Alt-Enter" not in bar, bar
    term.child.send("hello there, a title long enough to be wrapped on a narrow screen\r")
    term.expect(r"real\s+answers")  # (the offline model's reply, wrapped at the edge)
    term.expect_prompt(GENERATED_ID)
    shown = term.say("/threads", GENERATED_ID)
    assert any(line.startswith(f"* {GENERATED_ID}  ") for line in shown.splitlines()), shown
    assert "messag\n" not in shown and "2 messages · no summary" in shown
    assert term.leave() == 0
    assert_clean(term)


def test_prune_leaves_a_thread_that_took_a_turn_while_it_asked(spawn: Any, tmp_path: Path) -> None:
    """``prune --inactive-days`` lists the threads, then asks: a thread that took a turn
    while the question waited is no longer inactive, and is left (it was deleted, the new
    turn with it)."""
    env = terminal_env(tmp_path)  # (the turns: in-process; the question: in the terminal)
    for thread in ("old", "keep"):
        made = runner.invoke(app, ["ask", "hello", "-t", thread], env=env)
        assert made.exit_code == 0, made.output
    term = spawn("prune", "--inactive-days", "0")
    term.expect(r"Delete these 2 threads")
    later = runner.invoke(app, ["ask", "important new message", "-t", "keep"], env=env)
    assert later.exit_code == 0, later.output
    term.child.send("y\r")
    said = term.expect(r"run prune again")
    term.child.expect(pexpect.EOF, timeout=TIMEOUT)
    term.child.close()
    assert term.child.exitstatus == 1, term.tail()
    assert "deleted 1 thread" in said and "'keep'" in said, said
    shown = cli_json(tmp_path / "chat.sqlite", "show", "keep")
    assert "important new message" in texts(shown)
