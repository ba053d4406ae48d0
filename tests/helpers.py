"""The tests' shared helpers, in one place.

- the CLI in-process (:data:`runner`, :class:`Cli` against the fake OpenAI server), what the
  server was sent, and the one error line a failed command prints;
- the offline model's reply, free ports and refusing ones, waiting for a condition (never a
  fixed sleep);
- :class:`DevServer`: a real ``langgraph dev`` serving the graph.

The fakes at the edge have their own modules: ``tests.scripted`` (a chat model) and
``tests.fake_openai`` (an OpenAI-compatible server).
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import typer.main
import typer.testing
from typer.testing import CliRunner, Result

from chatbot.cli.commands import app
from tests.fake_openai import FakeOpenAI, RecordedRequest

ROOT = Path(__file__).resolve().parent.parent
"""The repository."""

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""A control character a terminal would act on (newline and tab are text)."""

SECRET = "sk-test-SECRET-123456"
CHAT_MODEL = "fake-chat-model-7"
CREATE_PROMPT = "Create a summary of the conversation above:"
EXTEND_PROMPT = "Extend the summary by taking into account the new messages above:"
SUMMARY_TEXT = "SUMMARY: the user is Ada, she likes green tea."

# Typer's CliRunner builds the app's Click command afresh at every invoke (0.1 s: Typer reads
# every command's signature and type hints); a chatbot process builds it once, and so does each
# test process now, for every CliRunner. The command holds no state of an invocation (each one
# gets its own Click context).
typer.testing._get_command = functools.cache(typer.main.get_command)  # type: ignore[attr-defined]

runner = CliRunner()


slow_on_postgres = pytest.mark.parametrize(
    "any_db", ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)], indirect=True
)
"""For a test on ``any_db`` that takes a second or more on PostgreSQL: that run is ``slow``."""


def offline_echo(text: str) -> str:
    """The start of the offline model's reply to ``text``."""
    return f'You said: "{text}"'


def one_error(result: Result, code: int = 1) -> str:
    """The single ``error:`` line a failed command prints on stderr (its exit code checked)."""
    assert result.exit_code == code, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ")
    assert "Traceback" not in result.output
    return line


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections while the block runs: bound, never
    listening, so that no other process (another xdist worker's server) can take it meanwhile,
    as it could take a port :func:`free_port` found free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def wait_until(condition: Callable[[], Any], timeout: float = 30.0, what: str = "") -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds. Tests wait for what
    they need to have happened, never for a fixed time."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what or condition}"
        time.sleep(0.05)


def is_summary_request(request: RecordedRequest | dict[str, Any]) -> bool:
    """The chatbot's summary call: its last user message holds the folded ``<conversation>``."""
    if isinstance(request, dict):
        request = RecordedRequest("", None, request)
    return "<conversation>" in request.last_user_text


def summary_requests(server: FakeOpenAI) -> list[RecordedRequest]:
    return [r for r in server.requests if is_summary_request(r)]


def chat_requests(server: FakeOpenAI) -> list[RecordedRequest]:
    return [r for r in server.requests if not is_summary_request(r)]


def echo_or_summary(body: dict[str, Any]) -> str:
    """Replies ``echo: <last user text>`` to chat calls and ``SUMMARY_TEXT`` to summary calls."""
    if is_summary_request(body):
        return SUMMARY_TEXT
    return "echo: " + RecordedRequest("", None, body).last_user_text


@dataclass
class Cli:
    """Runs the ``chatbot`` CLI in-process against the fake server with one temp DB."""

    server: FakeOpenAI
    db: Path
    env: dict[str, str] = field(default_factory=dict)

    def invoke(self, *args: str, stdin: str | None = None, **env: str) -> Result:
        full_env = {
            "OPENAI_API_KEY": SECRET,
            "OPENAI_BASE_URL": self.server.base_url,
            "CHATBOT_MODEL": CHAT_MODEL,
            "CHATBOT_MAX_RETRIES": "0",
            "CHATBOT_TIMEOUT": "10",
            **self.env,
            **env,
        }
        return runner.invoke(app, list(args), env=full_env, input=stdin)

    def ask(self, text: str, thread: str = "t1", **env: str) -> Result:
        return self.invoke("ask", text, "--thread", thread, "--db", str(self.db), **env)

    def show(self, thread: str = "t1") -> dict[str, Any]:
        result = self.invoke("show", thread, "--json", "--db", str(self.db))
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    def db_bytes(self) -> bytes:
        """The database file and its WAL / shared-memory files, whichever exist, followed by
        every compressed value in it decompressed (a search of these bytes for a secret
        looks inside the checkpoints too)."""
        return stored_bytes(self.db)


def stored_bytes(db: Path) -> bytes:
    """A SQLite database's files as bytes, then each of its zstd-compressed values (type
    ``...+zstd`` in LangGraph's ``checkpoints`` and ``writes``) decompressed."""
    import sqlite3

    import zstandard

    files = [db, *(Path(f"{db}{suffix}") for suffix in ("-wal", "-shm"))]
    raw = b"".join(f.read_bytes() for f in files if f.exists())
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT type, checkpoint FROM checkpoints UNION ALL SELECT type, value FROM writes"
        ).fetchall()
    finally:
        conn.close()
    unpack = zstandard.ZstdDecompressor()
    inside = [unpack.decompress(data) for kind, data in rows if str(kind).endswith("+zstd")]
    return b"".join([raw, *inside])


def worth_folding(text: str) -> str:
    """``text`` with words enough after it that folding it into a first summary makes the
    context smaller: a fold is made only then, and a first summary brings its message and the
    recall tool's definition to every call (some 60 tokens)."""
    return f"{text}, " + "and a few more words about it " * 10


def summarizing(**extra: str) -> dict[str, str]:
    """Summarize once a thread has more than 2 messages, keeping only the newest one."""
    return {"CHATBOT_SUMMARY_TRIGGER": "messages:2", "CHATBOT_SUMMARY_KEEP": "messages:1", **extra}


def ok(result: Result) -> Result:
    assert result.exit_code == 0, f"exit {result.exit_code}\n{result.output}"
    return result


# --- ChatOpenAI from make_model -------------------------------------------------------------


# --- a real LangGraph server -----------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class DevServer:
    """A running ``langgraph dev`` (offline model, ``messages:4`` / ``messages:2``) and the
    address it really listens on.

    The server gets a copy of langgraph.json without its ``env`` entry (so a developer's .env
    with real keys is never used) and runs in ``workdir``.
    """

    START_TIMEOUT = 90.0

    def __init__(self, workdir: Path, env: dict[str, str] | None = None) -> None:
        """Start it in ``workdir``; ``env``: settings of its own (``CHATBOT_LOG``...)."""
        config = json.loads((ROOT / "langgraph.json").read_text())
        config.pop("env", None)
        config["dependencies"] = [str(ROOT)]
        config["graphs"] = {
            name: str(ROOT / spec.removeprefix("./")) for name, spec in config["graphs"].items()
        }
        (workdir / "langgraph.json").write_text(json.dumps(config))
        self.requested_port = free_port()
        extra = env or {}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OPENAI_"))}
        env.update(
            LANGGRAPH_CLI_NO_ANALYTICS="1",
            LANGGRAPH_NO_VERSION_CHECK="true",
            CHATBOT_MODEL="offline",
            CHATBOT_SUMMARY_TRIGGER="messages:4",
            CHATBOT_SUMMARY_KEEP="messages:2",
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        self.output: list[str] = []
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "langgraph"),
                "dev",
                "--no-browser",
                "--no-reload",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.requested_port),
            ],
            cwd=workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = ""  # the address it really listens on, once it answers
        self._wait_until_ready()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(_ANSI.sub("", line))

    def _answers(self) -> bool:
        """True once the address it printed answers ``/ok`` (it may pick another port)."""
        if self.process.poll() is not None:
            raise RuntimeError("langgraph dev exited:\n" + "".join(self.output[-40:]))
        reported = re.search(r"API: (http://127\.0\.0\.1:\d+)", "".join(self.output))
        if reported is None:
            return False
        try:
            with urllib.request.urlopen(f"{reported.group(1)}/ok", timeout=2) as response:
                self.url = reported.group(1)
                return response.status == 200
        except OSError:
            return False

    def _wait_until_ready(self) -> None:
        try:
            wait_until(self._answers, self.START_TIMEOUT, "langgraph dev to answer /ok")
        except AssertionError:
            self.stop()
            raise RuntimeError(
                "langgraph dev did not become ready:\n" + "".join(self.output[-40:])
            ) from None

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)


def fake_wl_copy(folder: Path) -> tuple[Path, Path]:
    """A folder with ``wl-copy`` (writes its input to the returned file) and ``wl-paste``: a
    system clipboard for pyperclip, once the folder is on PATH and WAYLAND_DISPLAY is set."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    clip = folder / "clipboard.txt"
    (bin_dir / "wl-copy").write_text(f'#!/bin/sh\ncat > "{clip}"\n')
    (bin_dir / "wl-paste").write_text(f'#!/bin/sh\ncat "{clip}"\n')
    for program in ("wl-copy", "wl-paste"):
        (bin_dir / program).chmod(0o755)
    return bin_dir, clip


def offline_threads(path: Path, first: tuple[str, ...] = ("one", "two", "three")) -> Path:
    """A SQLite file of two threads made through the real graph by the offline model: ``t1``
    of the ``first`` messages (folded from 4 messages, keeping 2), then ``t2`` of one."""
    from chatbot.config.settings import Settings
    from chatbot.engine.graph import build_graph
    from chatbot.engine.models import OfflineChatModel
    from chatbot.store.sqlite import Store
    from chatbot.threads.backend import LocalBackend

    settings = Settings(_env_file=None, summary_trigger="messages:4", summary_keep="messages:2")  # type: ignore[call-arg]
    with Store(path) as store:
        graph = build_graph(
            OfflineChatModel(), OfflineChatModel(role="summary"), settings, store.saver
        )
        backend = LocalBackend(graph, store)
        for text in first:
            list(backend.send("t1", text))
        list(backend.send("t2", "other"))
    return path


_GUARDED_ENTRY = """
import sys
blocked = set(filter(None, sys.argv[1].split(",")))

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name in blocked or any(name.startswith(b + ".") for b in blocked):
            raise ImportError(f"{name} must not be imported by this command")
        return None

sys.meta_path.insert(0, Refuse())
sys.argv = ["chatbot", *sys.argv[2:]]
from chatbot.cli.main import main
main()
"""


def chatbot_argv(*args: str, blocked: str = "") -> list[str]:
    """The command line that runs ``chatbot ARGS`` in a fresh Python through the console
    script's entry point (:mod:`chatbot.cli.main`), with the modules ``blocked`` names
    (comma-separated, and their submodules) failing to import."""
    return [sys.executable, "-c", _GUARDED_ENTRY, blocked, *args]


_FORKED_ENTRIES = """
import json, os, sys
import chatbot.cli.main, chatbot.engine.graph, chatbot.store.postgres, chatbot.threads.backend
import langchain_openai
argvs, folder = json.loads(sys.argv[1]), sys.argv[2]
ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()
children = []
for n, argv in enumerate(argvs):
    pid = os.fork()
    if pid:
        children.append(pid)
        continue
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, kind in ((1, "out"), (2, "err")):
        path = os.path.join(folder, f"{n}.{kind}")
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    os.write(ready_w, b"r")
    os.read(go_r, 1)
    sys.argv = ["chatbot", *argv]
    chatbot.cli.main.main()  # (its exit, with the exit handlers of a process that ends)
    sys.exit(0)
for _ in children:
    os.read(ready_r, 1)
os.write(go_w, b"g" * len(children))
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
print(json.dumps(codes))
"""


@dataclass
class Ended:
    """How a ``chatbot`` process ended: its exit code and what it wrote."""

    returncode: int
    stdout: str
    stderr: str


def chatbots_together(
    folder: Path, *argvs: list[str], env: dict[str, str] | None = None, timeout: float = 300
) -> list[Ended]:
    """``chatbot ARGV`` for each of ``argvs``, each a process of its own (stdin empty) forked
    from one Python that imported what the entry point and a turn import, an OpenAI model's
    too (once, not in each: no test of what a command imports runs here),
    all let go at the same moment; how each ended. ``folder`` keeps what they wrote."""
    folder.mkdir(parents=True, exist_ok=True)
    parent = subprocess.Popen(
        [sys.executable, "-c", _FORKED_ENTRIES, json.dumps(argvs), str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # (its group: on a timeout, it and every process it forked)
    )
    try:
        out, err = parent.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.communicate()
        raise AssertionError(f"still running after {timeout} s: {argvs}") from None
    assert parent.returncode == 0, err[-2000:]
    codes = json.loads(out)
    return [
        Ended(
            code,
            (folder / f"{n}.out").read_text(encoding="utf-8", errors="replace"),
            (folder / f"{n}.err").read_text(encoding="utf-8", errors="replace"),
        )
        for n, code in enumerate(codes)
    ]
