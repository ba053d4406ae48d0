"""Faults during a turn: a full disk, text that is not valid Unicode, a call log that cannot be
written (or must not block a server's event loop), Ctrl-C during start-up, another window's
turn, and a process ended by SIGTERM or SIGHUP.

docs/reliability.md ("During a turn") publishes what each row of these tests pins. The CLI runs
as a real process wherever signals, leases or a full disk are involved; the model is the local
fake OpenAI server (or the offline model); the stores are SQLite and the real PostgreSQL.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg

from tests.fake_openai import FakeOpenAI, RecordedRequest
from tests.helpers import (
    CHAT_MODEL,
    SECRET,
    Cli,
    is_summary_request,
)

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


def messages(db: str, thread: str) -> list[tuple[str, str]]:
    """The thread's messages as ``(type, text)``, read by ``chatbot show --json``."""
    shown = run(["show", thread, "--json", "--db", db], process_env(None, db))
    assert shown.returncode == 0, shown.stderr
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
