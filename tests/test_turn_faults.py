"""Faults during a turn: a full disk, text that is not valid Unicode, a call log that cannot be
written (or must not block a server's event loop), Ctrl-C during start-up, another window's
turn, and a process ended by SIGTERM or SIGHUP.

docs/reliability.md ("During a turn") publishes what each row of these tests pins. The CLI runs
as a real process wherever signals, leases or a full disk are involved (the steps around it, a
first turn or the thread read back, run in-process); the model is the local fake OpenAI server
(or the offline model); the stores are SQLite and the real PostgreSQL.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from typer.testing import Result

from chatbot.cli.commands import app
from chatbot.config.settings import Settings
from chatbot.engine.graph import DURABILITY, build_graph
from chatbot.errors import ModelCallFailed
from chatbot.threads.runner import blocking, blocking_iter
from tests.conftest import POSTGRES_ADMIN_URL, _postgres_or_skip
from tests.fake_openai import FakeOpenAI, RecordedRequest, Reply, completion
from tests.helpers import (
    CHAT_MODEL,
    SECRET,
    Cli,
    DevServer,
    is_summary_request,
    runner,
    wait_until,
)
from tests.scripted import ScriptedChatModel

CHATBOT = [sys.executable, "-m", "chatbot"]


# --- the pieces the tests share ---------------------------------------------------------------


class Gate:
    """A fake model whose chat replies wait until the test lets them through: ``asked`` is
    set when a chat call arrives; the reply (``text``) goes out once ``opened`` is set.
    Summary calls are answered at once."""

    def __init__(self, text: str = "the reply") -> None:
        self.text = text
        self.asked = threading.Event()
        self.opened = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str:
        if is_summary_request(body):
            return "SUMMARY: what was said."
        self.asked.set()
        self.opened.wait(120)
        return self.text


def echo(body: dict[str, Any]) -> str:
    if is_summary_request(body):
        return "SUMMARY: what was said."
    return "echo: " + RecordedRequest("", None, body).last_user_text


def process_env(server: FakeOpenAI | None, db: str, **extra: str) -> dict[str, str]:
    """The environment of a ``chatbot`` process: the fake server (or the offline model) and
    the database, nothing from the machine running the tests."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OPENAI_"))}
    env["CHATBOT_DB"] = db
    if server is not None:
        env.update(
            OPENAI_API_KEY=SECRET,
            OPENAI_BASE_URL=server.base_url,
            CHATBOT_MODEL=CHAT_MODEL,
            CHATBOT_MAX_RETRIES="0",
        )
    env.update(extra)
    return env


def start(args: list[str], env: dict[str, str], **options: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CHATBOT, *args],
        stdin=options.pop("stdin", subprocess.DEVNULL),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
        **options,
    )


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CHATBOT, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        text=True,
        timeout=120,
    )


def here(args: list[str], env: dict[str, str], stdin: str | None = None) -> Result:
    """``chatbot ARGS`` in this process (Typer's CliRunner) with the settings of ``env``: the
    steps around the process a test is about (a first turn, another command meeting it, the
    thread read back), where no signal, lease or disk of their own is the point."""
    return runner.invoke(app, args, env=env, input=stdin)


def chat_piped(thread: str, lines: str, env: dict[str, str]) -> Result:
    """The REPL on ``thread``, reading ``lines`` from a pipe (in this process)."""
    return here(["chat", "-t", thread], env, lines)


def messages(db: str, thread: str) -> list[tuple[str, str]]:
    """The thread's messages as ``(type, text)``, read by ``chatbot show --json``."""
    shown = here(["show", thread, "--json", "--db", db], process_env(None, db))
    assert shown.exit_code == 0, shown.output
    return [(m["type"], m["content"]) for m in json.loads(shown.stdout)["messages"]]


def lease_holders(db: str, thread: str) -> list[str]:
    """Who holds the thread's lease, as the table says (an expired row counts: it still
    makes the next turn wait until its time is up)."""
    if db.startswith("postgresql://"):
        with psycopg.connect(db) as connection:
            rows = connection.execute(
                "SELECT holder FROM chatbot_leases WHERE thread_id = %s", (thread,)
            ).fetchall()
    else:
        with sqlite3.connect(db) as connection:
            rows = connection.execute(
                "SELECT holder FROM chatbot_leases WHERE thread_id = ?", (thread,)
            ).fetchall()
    return [row[0] for row in rows]


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


# --- a small disk that fills up ----------------------------------------------------------------


@dataclass
class SmallDisk:
    """A tmpfs of a few megabytes: :meth:`fill` leaves no byte free, :meth:`free` undoes it."""

    path: Path

    def fill(self) -> None:
        filler = self.path / "filler"
        with open(filler, "ab", buffering=0) as file:
            try:
                while True:
                    file.write(b"\0" * 65536)
            except OSError:
                pass
            try:  # the last pages, a block at a time
                while True:
                    file.write(b"\0" * 512)
            except OSError:
                pass

    def free(self) -> None:
        (self.path / "filler").unlink(missing_ok=True)


@contextmanager
def mounted_small_disk(megabytes: int) -> Iterator[SmallDisk]:
    """A fresh tmpfs of ``megabytes`` (skips the test where mounting is not allowed)."""
    path = Path(tempfile.mkdtemp(prefix="chatbot-small-disk-"))
    path.chmod(0o755)  # (the PostgreSQL server's user reaches its tablespace through it)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m,mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        path.rmdir()
        pytest.skip(f"a small disk needs 'mount -t tmpfs' (root): {mounted.stderr.strip()}")
    try:
        yield SmallDisk(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
        path.rmdir()


@pytest.fixture
def small_disk() -> Iterator[SmallDisk]:
    with mounted_small_disk(4) as disk:
        yield disk


@pytest.fixture
def postgres_on_small_disk() -> Iterator[tuple[str, SmallDisk]]:
    """A fresh PostgreSQL database whose tables live on a small disk (a tablespace on a
    tmpfs; the server's write-ahead log stays on its own disk), and that disk."""
    _postgres_or_skip()
    try:
        owner = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no 'postgres' user to own a tablespace")
    with mounted_small_disk(64) as disk:
        space = disk.path / "tablespace"
        space.mkdir()
        os.chown(space, owner.pw_uid, owner.pw_gid)
        name = f"chatbot_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f"CREATE TABLESPACE {name} LOCATION '{space}'")  # type: ignore[arg-type]
            admin.execute(f"CREATE DATABASE {name} TABLESPACE {name}")  # type: ignore[arg-type]
        try:
            yield f"postgresql://postgres@127.0.0.1:5432/{name}", disk
        finally:
            disk.free()
            with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # type: ignore[arg-type]
                admin.execute(f"DROP TABLESPACE IF EXISTS {name}")  # type: ignore[arg-type]


# --- a full disk --------------------------------------------------------------------------------

KEPT_AGAIN = "'chatbot chat -t t1' then /retry asks again"


@pytest.mark.slow
def test_a_disk_that_fills_while_the_model_answers_keeps_the_message_and_says_so(
    small_disk: SmallDisk, openai_server: FakeOpenAI
) -> None:
    db = str(small_disk.path / "chat.sqlite")
    env = process_env(openai_server, db)
    openai_server.responder = echo
    assert here(["ask", "first", "-t", "t1"], env).exit_code == 0
    gate = Gate("the second reply")
    openai_server.responder = gate
    asking = start(["ask", "second", "-t", "t1"], env)
    try:
        assert gate.asked.wait(60), "the chat call"
        wait_until(lambda: ("human", "second") in messages(db, "t1"), 60, "the message saved")
        small_disk.fill()
    finally:
        gate.opened.set()
    out, err = asking.communicate(timeout=120)
    small_disk.free()

    assert asking.returncode == 1, err
    assert out.strip() == "the second reply", "the reply stays on the screen"
    assert error_lines(err) == [
        "error: the disk is full (free some space) - this reply was not saved; your message "
        f"is kept in thread 't1': {KEPT_AGAIN}"
    ]
    assert "Traceback" not in err
    assert messages(db, "t1") == [("human", "first"), ("ai", "echo: first"), ("human", "second")]


@pytest.mark.slow
def test_a_full_disk_before_the_turn_says_the_message_was_not_saved(
    small_disk: SmallDisk, openai_server: FakeOpenAI
) -> None:
    """The last message of the thread is waiting for its reply (a turn that failed): the
    line once said "your message is kept" about it, of the new one that was never saved."""
    db = str(small_disk.path / "chat.sqlite")
    env = process_env(openai_server, db)
    openai_server.script(Reply(status=500))
    assert here(["ask", "first", "-t", "t1"], env).exit_code == 1
    with sqlite3.connect(db) as held:  # (its WAL and shared-memory files stay, as a REPL's)
        held.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        small_disk.fill()
        asked = len(openai_server.requests)
        result = run(["ask", "second", "-t", "t1"], env)
        small_disk.free()

    assert result.returncode == 1, result.stderr
    assert error_lines(result.stderr) == [
        "error: the disk is full (free some space) - your message was not saved"
    ]
    assert "Traceback" not in result.stderr
    assert len(openai_server.requests) == asked, "the model was not asked"
    assert messages(db, "t1") == [("human", "first")]


@pytest.mark.slow
def test_on_postgresql_a_disk_that_fills_while_the_model_answers(
    postgres_on_small_disk: tuple[str, SmallDisk], openai_server: FakeOpenAI
) -> None:
    url, disk = postgres_on_small_disk
    env = process_env(openai_server, url)
    openai_server.responder = echo
    assert here(["ask", "first", "-t", "t1"], env).exit_code == 0
    reply = secrets.token_hex(100_000)  # (it does not compress: its rows need new pages)
    gate = Gate(reply)
    openai_server.responder = gate
    asking = start(["ask", "second", "-t", "t1"], env)
    try:
        assert gate.asked.wait(60), "the chat call"
        wait_until(lambda: ("human", "second") in messages(url, "t1"), 60, "the message saved")
        disk.fill()
    finally:
        gate.opened.set()
    out, err = asking.communicate(timeout=120)

    assert asking.returncode == 1, err
    assert out.strip() == reply, "the reply stays on the screen"
    assert error_lines(err) == [
        "error: the disk is full (free some space) - this reply was not saved; your message "
        f"is kept in thread 't1': {KEPT_AGAIN}"
    ]
    assert lease_holders(url, "t1") == [], "the lease is given back (it needs no new page)"
    disk.free()
    assert messages(url, "t1") == [("human", "first"), ("ai", "echo: first"), ("human", "second")]
    openai_server.responder = echo
    following = here(["ask", "third", "-t", "t1"], env)
    assert following.exit_code == 0 and "waiting" not in following.stderr, following.stderr


def test_call_log_lines_dropped_on_a_full_disk_are_said_once(
    cli: Cli, openai_server: FakeOpenAI, small_disk: SmallDisk
) -> None:
    openai_server.responder = echo
    log = small_disk.path / "calls.jsonl"
    small_disk.fill()  # (a new file needs no block: the log opens, its lines cannot be written)
    result = cli.invoke(
        "chat", "-t", "t1", "--db", str(cli.db), stdin="one\ntwo\n", CHATBOT_LOG=str(log)
    )
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: CHATBOT_LOG={str(log)!r} cannot be written (no space left on device): the "
        "call log's lines are dropped until it can"
    ]
    assert "echo: one" in result.output and "echo: two" in result.output, "the turns go on"
    assert log.read_bytes() == b""


# --- text that is not valid Unicode ---------------------------------------------------------------

LONE = "lone\ud800surrogate END"
MADE_VALID = "lone\ufffdsurrogate END"


def test_a_reply_with_a_lone_surrogate_is_stored_and_shown_as_made_valid(
    cli: Cli, openai_server: FakeOpenAI, any_db: str
) -> None:
    openai_server.script(LONE)
    result = cli.invoke("ask", "hello", "-t", "t1", "--db", any_db)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == MADE_VALID
    assert result.stderr == ""
    shown = cli.invoke("show", "t1", "--json", "--db", any_db)
    stored = [m["content"] for m in json.loads(shown.stdout)["messages"]]
    assert stored == ["hello", MADE_VALID], "what is stored is what was shown"


@pytest.mark.slow
def test_in_the_repl_a_streamed_reply_with_a_lone_surrogate_shows_what_is_stored(
    openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    """The REPL on a console Rich takes for a terminal (FORCE_COLOR): the reply as it streams."""
    openai_server.script(LONE)
    db = str(tmp_path / "chat.sqlite")
    env = process_env(openai_server, db, FORCE_COLOR="1", NO_COLOR="", TERM="dumb")
    chat = start(["chat", "-t", "t1"], env, stdin=subprocess.PIPE)
    out, err = chat.communicate("hello\n", timeout=120)
    assert chat.returncode == 0, err
    assert MADE_VALID in out and "lone?surrogate" not in out
    assert messages(db, "t1") == [("human", "hello"), ("ai", MADE_VALID)]


# --- the call log -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/dev/full", "/proc/version"])
def test_a_call_log_that_refuses_every_write_is_refused_at_start(cli: Cli, path: str) -> None:
    result = cli.ask("hello", CHATBOT_LOG=path)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: CHATBOT_LOG={path!r} cannot be written: ")
    assert line.endswith("; give a file path in a folder you can write to, or unset it")
    assert not cli.db.exists(), "nothing was sent or saved"


@pytest.mark.slow
def test_a_call_log_on_a_pipe_that_nothing_reads_is_refused_at_start(tmp_path: Path) -> None:
    """A FIFO with no reader: opening it to write waited for a reader for ever (the
    subprocess's timeout is only the safety net for that hang)."""
    fifo = tmp_path / "calls.fifo"
    os.mkfifo(fifo)
    db = tmp_path / "chat.sqlite"
    done = run(["ask", "hello", "-t", "t1"], process_env(None, str(db), CHATBOT_LOG=str(fifo)))
    assert done.returncode == 2, done.stderr
    assert error_lines(done.stderr) == [
        f"error: CHATBOT_LOG={str(fifo)!r} cannot be written: it is a named pipe that nothing "
        "reads; give a file path in a folder you can write to, or unset it"
    ]
    assert "Traceback" not in done.stderr
    assert not db.exists(), "nothing was sent or saved"


def log_lines(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.slow
@pytest.mark.integration
def test_the_call_log_is_written_under_langgraph_dev(tmp_path: Path) -> None:
    """The dev server forbids blocking I/O on its event loop, where model calls end: every
    line was refused (BlockingError) and the log stayed empty."""
    log = tmp_path / "calls.jsonl"
    workdir = tmp_path / "server"
    workdir.mkdir()
    server = DevServer(workdir, env={"CHATBOT_LOG": str(log)})
    try:
        env = process_env(None, str(tmp_path / "unused.sqlite"))
        for n in range(2):
            asked = here(["ask", f"hello {n}", "--url", server.url, "-t", "logged"], env)
            assert asked.exit_code == 0, asked.stderr
        wait_until(lambda: len(log_lines(log)) >= 2, 30, "two lines in the call log")
        chats = [line for line in log_lines(log) if line["role"] == "chat"]
        assert len(chats) == 2 and all(line["model"] == "offline" for line in chats)
        assert "BlockingError" not in "".join(server.output)
    finally:
        server.stop()


# --- Ctrl-C during start-up ---------------------------------------------------------------------


def start_up_markers(args: list[str], env: dict[str, str], count: int) -> tuple[str, ...]:
    """``count`` moments spread over ``chatbot ARGS``'s start-up, named by the modules it
    imports then (Python's import-time report, in the order they finish): the first is the
    entry point's first import (before it Python is still starting), the others chatbot's own
    modules and the libraries they import, evenly spaced up to the command's last import."""
    report = run(args, {**env, "PYTHONPROFILEIMPORTTIME": "1"}).stderr.splitlines()
    names = [line.rsplit("|", 1)[-1].strip() for line in report if line.startswith("import time:")]
    first = names.index("chatbot.interrupts")
    later = [n for n in names[first + 1 :] if "." not in n or n.startswith("chatbot.")]
    step = max(1, len(later) // (count - 1))
    return ("chatbot.interrupts", *later[step - 1 :: step][: count - 1])


def interrupted_once(args: list[str], env: dict[str, str], marker: str) -> tuple[int, str, str]:
    """Run ``chatbot ARGS`` and press Ctrl-C as soon as it has imported ``marker`` (Python's
    import-time report says when, as it happens; the first marker is imported by chatbot's
    entry point itself: before it, Python is still starting); its exit code, stdout and
    stderr (without the report)."""
    process = start(args, {**env, "PYTHONPROFILEIMPORTTIME": "1"})
    assert process.stderr is not None
    seen: list[str] = []
    for line in process.stderr:
        seen.append(line)
        if line.startswith("import time:") and line.rsplit("|", 1)[-1].strip() == marker:
            process.send_signal(signal.SIGINT)
            break
    out, rest = process.communicate(timeout=120)
    lines = "".join([*seen, rest]).splitlines()
    err = "\n".join(line for line in lines if not line.startswith("import time:"))
    return process.returncode, out, err


@pytest.mark.parametrize(
    ("args", "count"),
    [(["ask", "hi", "-t", "t1"], 10), (["history", "t1"], 4)],
    ids=["ask", "history"],
)
@pytest.mark.slow
def test_ctrl_c_at_any_moment_of_start_up_says_interrupted(
    args: list[str], count: int, tmp_path: Path
) -> None:
    env = process_env(None, str(tmp_path / "chat.sqlite"))
    assert here(["ask", "first", "-t", "t1"], env).exit_code == 0
    markers = start_up_markers(args, env, count)
    assert len(markers) == count, markers
    interrupted = 0
    for marker in markers:
        code, out, err = interrupted_once(args, env, marker)
        assert "Traceback" not in err and "Exception ignored" not in err, (marker, err)
        said = [line for line in err.splitlines() if line and not line.startswith("note:")]
        if code == 130:
            interrupted += 1
            assert said and said[-1].split(":")[0] in ("interrupted", "error"), (marker, err)
            assert "interrupted" in said[-1], (marker, err)
        else:  # it had finished before the signal arrived
            assert code == 0 and out.strip(), (marker, code, err)
    assert interrupted >= len(markers) // 2, "most signals land during start-up"


CTRL_C_INSIDE_EVAL = """
import sys


class CtrlCInsideEval:
    \"\"\"Ctrl-C as it lands while a namedtuple or dataclass is being made: inside code run
    from a string by eval/exec, as ``typer`` starts being imported.\"\"\"

    done = False

    def find_spec(self, name, path=None, target=None):
        if name == "typer" and not self.done:
            self.done = True
            eval("exec('raise KeyboardInterrupt')")
        return None


sys.meta_path.insert(0, CtrlCInsideEval())
"""


@pytest.mark.slow
def test_ctrl_c_inside_code_run_from_a_string_still_exits_130(tmp_path: Path) -> None:
    """CPython kills ``python -m`` with SIGINT at exit (-2) after a KeyboardInterrupt ended an
    eval'd string, however it was handled; the interruption is said and the code is 130."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(CTRL_C_INSIDE_EVAL)
    env = {**process_env(None, str(tmp_path / "chat.sqlite")), "PYTHONPATH": str(hooks)}
    result = run(["ask", "hi", "-t", "t1"], env)
    assert result.returncode == 130, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "interrupted"
    assert "Traceback" not in result.stderr


# --- another window, and a process ended mid-turn -----------------------------------------------


@pytest.mark.slow
def test_a_turn_waiting_for_another_window_never_says_the_previous_turn_got_no_reply(
    any_db: str, openai_server: FakeOpenAI
) -> None:
    gate = Gate("answered")
    openai_server.responder = gate
    env = process_env(openai_server, any_db)
    first = start(["ask", "one", "-t", "shared"], env)
    second = None
    try:
        assert gate.asked.wait(60), "the first window's chat call"
        second = start(["ask", "two", "-t", "shared"], env)
        assert second.stderr is not None
        said: list[str] = []
        while not said or "answering in another window" not in said[-1]:
            said.append(second.stderr.readline())
            assert said[-1], f"ask ended without saying it waits: {said}"
        gate.opened.set()
        _, rest = second.communicate(timeout=120)
        _, first_err = first.communicate(timeout=120)
    finally:
        gate.opened.set()
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
    err = "".join(said) + rest
    assert first.returncode == 0, first_err
    assert second.returncode == 0, err
    assert "never got a reply" not in err, "the first window's turn was running, not dead"
    assert messages(any_db, "shared") == [
        ("human", "one"),
        ("ai", "answered"),
        ("human", "two"),
        ("ai", "answered"),
    ]


@pytest.mark.slow
def test_a_thread_taking_a_turn_in_another_process_is_not_renamed_deleted_or_pruned(
    any_db: str, openai_server: FakeOpenAI
) -> None:
    """Renaming or deleting a thread under a running turn lost its reply: the turn's next
    checkpoint went under the old id, after a parent that was gone."""
    env = process_env(openai_server, any_db)
    openai_server.responder = echo
    assert here(["ask", "one", "-t", "busy"], env).exit_code == 0
    gate = Gate("answered")
    openai_server.responder = gate
    turn = start(["ask", "two", "-t", "busy"], env)
    try:
        assert gate.asked.wait(60), "the turn's chat call"
        for args in (["delete", "busy", "--yes"], ["prune", "--inactive-days", "0", "--yes"]):
            refused = here(args, env)
            assert refused.exit_code == 1, (args, refused.stderr)
            said = refused.stderr.strip().splitlines()[-1]
            assert "taking a turn" in said and "busy" in said, (args, refused.stderr)
            assert "Traceback" not in refused.stderr
        repl = chat_piped("busy", "/rename elsewhere\n/exit\n", env)
        assert "another window or process is taking a turn in this thread now" in (
            repl.stdout.lower()
        ), repl.stdout
        assert "did not finish" not in repl.stdout, "the turn is running, not cut short"
        assert "taking a turn in another window or process" in repl.stdout + repl.stderr
        offline = process_env(None, any_db)
        assert here(["ask", "hi", "-t", "other"], offline).exit_code == 0
        onto = chat_piped("other", "/rename busy\n/exit\n", offline)
        assert "thread 'busy' already exists: pick another name" in onto.stdout + onto.stderr
        gate.opened.set()
        _, err = turn.communicate(timeout=120)
    finally:
        gate.opened.set()
        if turn.poll() is None:
            turn.kill()
    assert turn.returncode == 0, err
    assert messages(any_db, "busy") == [
        ("human", "one"),
        ("ai", "echo: one"),
        ("human", "two"),
        ("ai", "answered"),
    ]
    openai_server.responder = echo
    renamed = chat_piped("busy", "/rename elsewhere\n/exit\n", env)
    assert "renamed busy to elsewhere" in renamed.stdout, "free again once the turn ended"
    assert here(["delete", "elsewhere", "--yes"], env).exit_code == 0


@pytest.mark.parametrize(
    ("command", "ending"),
    [("ask", signal.SIGTERM), ("ask", signal.SIGHUP), ("chat", signal.SIGHUP)],
    ids=["ask-SIGTERM", "ask-SIGHUP", "chat-SIGHUP"],
)
@pytest.mark.slow
def test_a_process_ended_mid_turn_gives_the_thread_back_and_keeps_the_message(
    any_db: str, openai_server: FakeOpenAI, command: str, ending: signal.Signals
) -> None:
    gate = Gate()
    openai_server.responder = gate
    env = process_env(openai_server, any_db)
    if command == "ask":
        process = start(["ask", "one", "-t", "t1"], env)
    else:  # the REPL, reading its lines from a pipe
        process = start(["chat", "-t", "t1"], env, stdin=subprocess.PIPE)
        assert process.stdin is not None
        process.stdin.write("one\n")
        process.stdin.flush()
    try:
        assert gate.asked.wait(60), "the chat call"
        process.send_signal(ending)
        _, err = process.communicate(timeout=60)
    finally:
        openai_server.responder = echo
        gate.opened.set()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + ending, err
    assert "Traceback" not in err
    assert lease_holders(any_db, "t1") == [], "the lease was given back"

    following = here(["ask", "two", "-t", "t1"], env)
    assert following.exit_code == 0, following.stderr
    assert "waiting" not in following.stderr, "nothing to wait for"
    assert "the previous turn in this thread never got a reply" in following.stderr
    assert messages(any_db, "t1") == [("human", "one"), ("human", "two"), ("ai", "echo: two")]


# --- a reply with nothing to read ---------------------------------------------------------------

TOOL_CALL = {"name": "lookup", "args": {"q": "x"}, "id": "call_1", "type": "tool_call"}
WITHOUT_TEXT = {
    "tool call": (AIMessage("", tool_calls=[TOOL_CALL]), "answered your message with a tool call"),
    "reasoning_content": (
        AIMessage("", additional_kwargs={"reasoning_content": "Let me think."}),
        "returned only its reasoning, no reply",
    ),
    "reasoning block": (
        AIMessage([{"type": "reasoning", "reasoning": "Let me think."}]),
        "returned only its reasoning, no reply",
    ),
    "thinking block": (
        AIMessage([{"type": "thinking", "thinking": "Hmm."}, {"type": "text", "text": " \n"}]),
        "returned only its reasoning, no reply",
    ),
    "think prefix": (AIMessage("<think>Let me see.</think>\n\n"), "only its reasoning, no reply"),
    "whitespace": (AIMessage(" \n\t "), "returned an empty reply"),
    "invisible": (AIMessage("\u200b\ufeff\u3000"), "returned an empty reply"),
    "cut at length, reasoning only": (
        AIMessage("", response_metadata={"finish_reason": "length"}),
        "the reply was cut at the model's length limit",
    ),
}


@pytest.mark.parametrize("shape", list(WITHOUT_TEXT), ids=list(WITHOUT_TEXT))
def test_a_reply_without_text_fails_the_turn_and_keeps_the_message(shape: str) -> None:
    reply, reason = WITHOUT_TEXT[shape]
    chat = ScriptedChatModel(script=[reply], default="the real answer")
    settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    graph = build_graph(chat, settings=settings, checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t1"}}

    with pytest.raises(ModelCallFailed) as failed:
        blocking(graph.ainvoke({"messages": [HumanMessage("hello")]}, config))

    assert reason in str(failed.value) and str(failed.value).endswith("; it was not saved")
    assert [m.type for m in graph.get_state(config).values["messages"]] == ["human"]
    state = blocking(graph.ainvoke(None, config))  # what /retry does: the message is answered again
    assert [(m.type, m.text) for m in state["messages"]] == [
        ("human", "hello"),
        ("ai", "the real answer"),
    ]


def test_a_reply_after_its_reasoning_is_still_an_answer() -> None:
    chat = ScriptedChatModel(script=["<think>Let me see.</think>\nHello!"])
    settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    graph = build_graph(chat, settings=settings, checkpointer=InMemorySaver())
    state = blocking(
        graph.ainvoke({"messages": [HumanMessage("hello")]}, {"configurable": {"thread_id": "t"}})
    )
    assert [m.type for m in state["messages"]] == ["human", "ai"]


TOOL_CALL_ONLY = completion(
    {
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    },
    finish="tool_calls",
)


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (TOOL_CALL_ONLY, "the model answered your message with a tool call, no text"),
        (
            Reply(text="<think>Let me see.</think>\n"),
            "the model returned only its reasoning, no reply",
        ),
        (Reply(text="\u200b\u200b"), "the model returned an empty reply"),
    ],
    ids=["tool call", "think block", "invisible"],
)
def test_ask_with_a_reply_without_text_says_so_and_keeps_the_message(
    cli: Cli, reply: Any, reason: str
) -> None:
    cli.server.responder = reply if callable(reply) else lambda _: reply
    result = cli.ask("hello")
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: {reason}; it was not saved - your message is kept in thread 't1': {KEPT_AGAIN}"
    ]
    assert result.stdout == "", "nothing is shown as a reply"
    assert [m["type"] for m in cli.show()["messages"]] == ["human"]


_HOLD_AND_WAIT = """
import sys, time
from chatbot.store.leases import Lease
from chatbot.store.postgres import open_store
Lease(open_store(sys.argv[1]), "t1").acquire()
print("held", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_lease_left_by_a_killed_process_on_this_machine_is_taken_at_once(
    any_db: str,
) -> None:
    """The holder is gone (kill -9: it could not give the lease back); the next turn no longer
    waits out the lease's 30 s, and prune does not take the thread for one taking a turn."""
    env = process_env(None, any_db)
    assert here(["ask", "one", "-t", "t1"], env).exit_code == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_AND_WAIT, any_db], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        (held,) = lease_holders(any_db, "t1")
        holder.send_signal(signal.SIGKILL)
        holder.wait(60)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert lease_holders(any_db, "t1") == [held], "the dead process's lease is still there"

    following = here(["ask", "two", "-t", "t1"], env)

    assert following.exit_code == 0, following.stderr
    assert "waiting" not in following.stderr, following.stderr
    assert [text for kind, text in messages(any_db, "t1") if kind == "human"] == ["one", "two"]

    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_AND_WAIT, any_db], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        holder.send_signal(signal.SIGKILL)
        holder.wait(60)
    finally:
        if holder.poll() is None:
            holder.kill()
    deleted = here(["prune", "--inactive-days", "0", "--yes"], env)  # (prune takes it as a turn)
    assert deleted.exit_code == 0, deleted.stderr
    assert "deleted 1 thread" in deleted.stderr


def test_the_users_message_is_in_the_database_before_the_model_is_called(any_db: str) -> None:
    """Each step's checkpoint is saved before the next step starts: when the model is asked,
    another connection already reads the message it answers, every turn, without waiting
    (``graph.ainvoke`` and a turn's ``astream`` alike)."""
    from chatbot.store.base import thread_config
    from chatbot.store.checkpoints import read_checkpoint
    from chatbot.store.postgres import open_store
    from chatbot.threads.backend import LocalBackend

    seen: list[list[str]] = []
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, model="offline", summary_trigger="messages:4", summary_keep="messages:2"
    )
    with open_store(any_db) as store, open_store(any_db) as other:

        def answer(sent: list[Any]) -> str:
            seen.append([m.text for m in read_checkpoint(other, "t").state.messages])
            return f"reply to {sent[-1].text}"

        chat = ScriptedChatModel(default=answer)
        graph = build_graph(chat, ScriptedChatModel(default="SUMMARY"), settings, store.saver)
        backend = LocalBackend(graph, store)
        for n in range(8):
            if n % 2:
                list(backend.send("t", f"message {n}"))
            else:
                said = {"messages": [HumanMessage(f"message {n}")]}
                blocking(graph.ainvoke(said, thread_config("t"), durability=DURABILITY))
    assert len(seen) == 8
    for n, read in enumerate(seen):
        assert read[-1] == f"message {n}", (n, read)


def test_a_message_saved_as_its_run_started_is_kept_said_and_answered(any_db: str) -> None:
    """Ctrl-C just as a turn starts can stop the run after its input is saved, before its
    first step takes the message in: LangGraph keeps the message in the run's ``__start__``
    channel, not in the state's messages. The thread holds it all the same: ``ask`` said
    "your message was not saved", the REPL said only the summary was unfinished, and the next
    message replaced it (LangGraph's ``__start__`` holds one input)."""
    from chatbot.store.base import thread_config
    from chatbot.store.postgres import open_store
    from chatbot.threads.backend import LocalBackend
    from chatbot.threads.events import Unanswered, kept_of

    settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    with open_store(any_db) as store:
        chat = ScriptedChatModel(default=lambda sent: f"reply to {sent[-1].text}")
        graph = build_graph(chat, ScriptedChatModel(default="SUMMARY"), settings, store.saver)
        backend = LocalBackend(graph, store)
        list(backend.send("t", "first"))
        before = backend.current("t")
        assert before is not None
        stream = blocking_iter(
            graph.astream(
                {"messages": [HumanMessage("second", id="second")]},
                thread_config("t"),
                stream_mode="checkpoints",
            )
        )
        next(stream)  # the input checkpoint is saved ...
        stream.close()  # ... and the run stops before its first step, as Ctrl-C stops it
        after = backend.current("t")
        assert after is not None and after.next == ("__start__",)
        assert [m.text for m in after.messages] == ["first", "reply to first"]
        for started_from in (before.checkpoint_id, None):  # (None: a new thread's first turn)
            kept = kept_of(after, "second", started_from)
            assert kept.message and not kept.reply, "saved, without a reply"
        assert after.awaiting_reply, "the REPL says the turn did not finish: /retry resumes it"
        from chatbot.history.summary import compact_refusal
        from chatbot.history.turns import turn_entries

        assert turn_entries(backend.history("t"), limit=1)[0].text == "second"
        refusal = compact_refusal(after)
        assert refusal is not None and "no reply yet" in refusal, "/compact would answer it"
        env = process_env(None, any_db)
        document = json.loads(here(["show", "t", "--json"], env).stdout)
        assert [m["content"] for m in document["unanswered"]] == ["second"]
        shown = here(["show", "t"], env).stdout
        assert "not answered yet" in shown and "second" in shown, shown
        exported = json.loads(here(["export", "t", "-f", "json"], env).stdout)
        assert [m["content"] for m in exported["unanswered"]] == ["second"]
        assert [m["content"] for m in exported["messages"]] == ["first", "reply to first"]
        markdown = here(["export", "t", "-f", "md"], env).stdout
        assert markdown.split("## Sent, not answered yet")[1].split() == [
            "**you:**",
            "```text",
            "second",
            "```",
        ]

        events = list(backend.send("t", "third"))
        assert any(isinstance(event, Unanswered) for event in events)
        now = backend.current("t")
        assert now is not None
        assert [m.text for m in now.messages] == [
            "first",
            "reply to first",
            "second",
            "third",
            "reply to third",
        ]


def _stopped_before_its_first_step(graph: Any, thread: str, text: str) -> None:
    """Send ``text`` and stop the run once its input checkpoint is saved, before its first
    step takes the message in (as Ctrl-C at that moment stops it)."""
    from chatbot.store.base import thread_config

    run = blocking_iter(
        graph.astream(
            {"messages": [HumanMessage(text, id=text)]},
            thread_config(thread),
            stream_mode="checkpoints",
        )
    )
    next(run)
    run.close()


def test_a_message_its_run_never_took_in_survives_a_system_prompt_and_titles_a_new_thread(
    any_db: str,
) -> None:
    """A new checkpoint written by ``update_state`` (/system, /role) left such a message
    behind, and a first turn killed that way was titled by the next message."""
    from chatbot.store.postgres import open_store
    from chatbot.threads.backend import LocalBackend

    settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    with open_store(any_db) as store:
        chat = ScriptedChatModel(default=lambda sent: f"reply to {sent[-1].text}")
        graph = build_graph(chat, ScriptedChatModel(default="SUMMARY"), settings, store.saver)
        backend = LocalBackend(graph, store)
        _stopped_before_its_first_step(graph, "t", "the real first message")
        store.write(("DELETE FROM chatbot_threads WHERE thread_id = ?", ("t",)))  # (killed)
        assert backend.set_system_prompt("t", "Be terse.")
        now = backend.current("t")
        assert now is not None and now.awaiting_reply, "still waiting for its reply"
        assert [m.text for m in now.messages] == ["the real first message"]
        list(backend.send("t", "second one"))
        now = backend.current("t")
        assert now is not None
        assert [m.text for m in now.messages] == [
            "the real first message",
            "second one",
            "reply to second one",
        ]
        (info,) = [info for info in backend.threads() if info.thread_id == "t"]
        assert info.title == "the real first message"


def test_a_nul_character_in_a_message_a_reply_or_a_system_prompt_is_kept_and_searched(
    any_db: str,
) -> None:
    """PostgreSQL's text and JSONB cannot hold a NUL character, which a paste or a model's
    reply can: the search index's row failed the turn ("DataError"), the thread got no
    title, and a system prompt with one could not be set. SQLite's search stopped reading at
    one. The messages keep it (their checkpoints are binary); the search index and the title
    hold U+FFFD in its place, and on PostgreSQL the system prompt too."""
    from chatbot.store.postgres import open_store
    from chatbot.threads.backend import LocalBackend

    kept = "\ufffd" if any_db.startswith("postgresql://") else "\x00"  # (in a system prompt)
    settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    with open_store(any_db) as store:
        chat = ScriptedChatModel(default="before\x00after")
        graph = build_graph(chat, ScriptedChatModel(default="SUMMARY"), settings, store.saver)
        backend = LocalBackend(graph, store)
        assert backend.set_system_prompt("t", "be\x00brief")
        list(backend.send("t", "pasted\x00text"))
        now = backend.current("t")
        assert now is not None
        assert [m.text for m in now.messages] == ["pasted\x00text", "before\x00after"]
        assert now.system_prompt == f"be{kept}brief"
        (info,) = [info for info in backend.threads() if info.thread_id == "t"]
        assert info.title == "pasted\ufffdtext"
        assert [hit.text for hit in backend.search("after")] == ["before\ufffdafter"]
        assert [hit.text for hit in backend.search("pasted\x00text")] == ["pasted\ufffdtext"]


def test_a_first_turn_killed_before_its_listing_row_is_titled_by_its_own_message(
    any_db: str,
) -> None:
    """``kill -9`` just after the first reply is saved, before the thread's listing row is
    written, left the thread untitled, and the next message became its title."""
    from chatbot.store.postgres import open_store
    from chatbot.threads.backend import LocalBackend

    settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    with open_store(any_db) as store:
        graph = build_graph(ScriptedChatModel(default="ok"), None, settings, store.saver)
        backend = LocalBackend(graph, store)
        list(backend.send("t", "the first words"))
        store.write(("DELETE FROM chatbot_threads WHERE thread_id = ?", ("t",)))  # (killed)
        list(backend.send("t", "later words"))
        (info,) = [info for info in backend.threads() if info.thread_id == "t"]
        assert info.title == "the first words"
