"""The graph on LangGraph's dev server, driven by langgraph-sdk and by the REPL in remote mode.

One ``langgraph dev`` per module, offline model, on a free port of 127.0.0.1. The server is
given a copy of langgraph.json without its ``env`` entry (so a developer's .env with real keys
is never used) and runs in a temporary directory.
"""

from __future__ import annotations

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from chatbot.cli import app

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 90.0
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DevServer:
    """A running ``langgraph dev`` and the address it really listens on."""

    def __init__(self, workdir: Path) -> None:
        config = json.loads((ROOT / "langgraph.json").read_text())
        config.pop("env", None)
        config["dependencies"] = [str(ROOT)]
        config["graphs"] = {
            name: str(ROOT / spec.removeprefix("./")) for name, spec in config["graphs"].items()
        }
        (workdir / "langgraph.json").write_text(json.dumps(config))
        self.requested_port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OPENAI_"))}
        env.update(
            LANGGRAPH_CLI_NO_ANALYTICS="1",
            LANGGRAPH_NO_VERSION_CHECK="true",
            CHATBOT_MODEL="offline",
            CHATBOT_SUMMARY_TRIGGER="messages:4",
            CHATBOT_SUMMARY_KEEP="messages:2",
            PYTHONUNBUFFERED="1",
        )
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
        self.url = self._wait_until_ready()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(ANSI.sub("", line))

    def _wait_until_ready(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT
        url = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("langgraph dev exited:\n" + "".join(self.output[-40:]))
            if url is None:
                reported = re.search(r"API: (http://127\.0\.0\.1:\d+)", "".join(self.output))
                url = reported.group(1) if reported else None
            if url is not None:
                try:
                    with urllib.request.urlopen(f"{url}/ok", timeout=2) as response:
                        if response.status == 200:
                            return url
                except OSError:
                    pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError("langgraph dev did not become ready:\n" + "".join(self.output[-40:]))

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    running = DevServer(tmp_path_factory.mktemp("langgraph-dev"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def client(server: DevServer) -> Any:
    from langgraph_sdk import get_sync_client

    return get_sync_client(url=server.url, timeout=30)


def run_turn(client: Any, thread_id: str, text: str, **kwargs: Any) -> list[Any]:
    return list(
        client.runs.stream(
            thread_id,
            "chatbot",
            input={"messages": [{"role": "user", "content": text}]},
            stream_mode=["messages-tuple", "custom", "updates"],
            **kwargs,
        )
    )


def test_server_reports_the_port_it_bound_and_serves_the_graph(
    server: DevServer, client: Any
) -> None:
    assert server.url.startswith("http://127.0.0.1:")
    (assistant,) = client.assistants.search(graph_id="chatbot", limit=5)
    schema = client.assistants.get_schemas(assistant["assistant_id"])["context_schema"]
    for field in ("chat_model", "summary_model", "summary_trigger", "summary_keep"):
        assert schema["properties"][field]["description"], f"{field} is described for Studio"
    assert {"system_prompt", "language"} <= set(schema["properties"])


def test_turns_on_the_server_fold_messages_into_a_summary(client: Any) -> None:
    thread = client.threads.create()
    for text in ["hi, I'm Ada", "I like tea", "and biscuits"]:
        run_turn(client, thread["thread_id"], text)
    state = client.threads.get_state(thread["thread_id"])
    assert "- hi, I'm Ada" in state["values"]["summary"]
    assert len(state["values"]["messages"]) == 2

    history = client.threads.get_history(thread["thread_id"], limit=50)
    counts = [len((h["values"] or {}).get("messages", [])) for h in history]
    assert max(counts) == 6, "an older checkpoint still holds the messages later folded"


def test_reply_stream_has_no_summary_tokens(client: Any) -> None:
    thread = client.threads.create()
    run_turn(client, thread["thread_id"], "first message")
    run_turn(client, thread["thread_id"], "another message")
    parts = run_turn(client, thread["thread_id"], "second message")
    streamed = "".join(
        part.data[0]["content"]
        for part in parts
        if part.event == "messages" and isinstance(part.data[0].get("content"), str)
    )
    assert 'You said: "second message"' in streamed
    assert "extractive summary" not in streamed
    assert any(p.event == "custom" and p.data.get("event") == "summarized" for p in parts)
    nodes = {p.data[1].get("langgraph_node") for p in parts if p.event == "messages"}
    assert nodes == {"conversation"}


def test_a_per_run_context_overrides_the_trigger(client: Any) -> None:
    thread = client.threads.create()
    run_turn(
        client,
        thread["thread_id"],
        "summarize me at once",
        context={"summary_trigger": "messages:1", "summary_keep": "messages:1"},
    )
    values = client.threads.get_state(thread["thread_id"])["values"]
    assert "- summarize me at once" in values["summary"]
    assert len(values["messages"]) == 1

    other = client.threads.create()
    run_turn(client, other["thread_id"], "no override")
    assert not client.threads.get_state(other["thread_id"])["values"].get("summary")


def test_remote_repl_session_and_ask(server: DevServer) -> None:
    runner = CliRunner()
    script = "\n".join(
        [
            "hello from the terminal",
            "second line",
            "third line",
            "/threads",
            "/summary",
            "/history 3",
            "/fork",
            "/undo",
            "/thread remote-main",
            "/retry",
            "/tokens",
            "/model offline",
            "after switching",
            "/model gpt-4o",
            "needs a key",
            "/exit",
        ]
    )
    result = runner.invoke(
        app, ["chat", "--url", server.url, "--thread", "remote-main"], input=script + "\n"
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert 'You said: "hello from the terminal"' in out
    assert "remote-main" in out and "hello from the terminal" in out
    assert "summarized 4 messages" in out, "the server's summary event reaches the REPL"
    assert "summary (" in out, "/summary shows the server's summary"
    assert "forked remote-main" in out and "remote-main-fork1" in out
    assert "/undo works on local threads only" in out
    assert "set by the server's settings" in out, "/tokens does not claim the local trigger"
    assert "chat model is now offline for this session (on the server)" in out
    assert 'You said: "after switching"' in out
    (failed,) = [line for line in out.splitlines() if line.startswith("error:")][-1:]
    assert "model 'gpt-4o' needs OPENAI_API_KEY" in failed, "the server's error, in one line"

    asked = runner.invoke(app, ["ask", "one more", "--url", server.url, "-t", "remote-main"])
    assert asked.exit_code == 0, asked.output
    assert 'You said: "one more"' in asked.stdout
    shown = runner.invoke(app, ["show", "remote-main", "--url", server.url, "--json"])
    document = json.loads(shown.stdout)
    assert document["thread_id"] == "remote-main"
    assert "- hello from the terminal" in document["summary"]
    listing = runner.invoke(app, ["threads", "--url", server.url, "--json"])
    names = {t["thread_id"] for t in json.loads(listing.stdout)}
    assert {"remote-main", "remote-main-fork1"} <= names


def test_unreachable_server_is_one_clear_line() -> None:
    result = CliRunner().invoke(app, ["threads", "--url", f"http://127.0.0.1:{free_port()}"])
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert "cannot reach the LangGraph server" in line


def test_delete_with_a_server_url_refuses_and_keeps_the_local_thread(
    server: DevServer, tmp_path: Path
) -> None:
    runner = CliRunner()
    db = str(tmp_path / "local.sqlite")
    assert runner.invoke(app, ["ask", "precious", "-t", "work", "--db", db]).exit_code == 0
    refused = runner.invoke(app, ["--url", server.url, "--db", db, "delete", "work", "--yes"])
    assert refused.exit_code == 2
    assert "delete works on local threads only" in refused.stderr
    listing = json.loads(runner.invoke(app, ["threads", "--json", "--db", db]).stdout)
    assert [t["thread_id"] for t in listing] == ["work"], "the local thread is still there"


def test_remote_compact_and_retry_after_it(server: DevServer) -> None:
    runner = CliRunner()
    for text in ["first fact: the cat is Tom", "second fact: the dog is Rex"]:
        asked = runner.invoke(app, ["ask", text, "--url", server.url, "-t", "remote-compact"])
        assert asked.exit_code == 0, asked.output

    compacted = runner.invoke(
        app, ["compact", "remote-compact", "--focus", "keep the pets", "--url", server.url]
    )
    assert compacted.exit_code == 0, compacted.output
    assert "compacted: folded" in compacted.stdout
    shown = json.loads(
        runner.invoke(app, ["show", "remote-compact", "--url", server.url, "--json"]).stdout
    )
    assert "the cat is Tom" in shown["summary"]
    kept = [m["content"] for m in shown["messages"]]
    assert len(kept) == 2, "the keep window (messages:2) stays verbatim"

    retried = runner.invoke(
        app, ["chat", "--url", server.url, "--thread", "remote-compact"], input="/retry\n/exit\n"
    )
    assert retried.exit_code == 0, retried.output
    assert 'You said: "second fact: the dog is Rex"' in retried.stdout
    after = json.loads(
        runner.invoke(app, ["show", "remote-compact", "--url", server.url, "--json"]).stdout
    )
    assert after["summary"] == shown["summary"], "/retry keeps the compaction"
    assert [m["content"] for m in after["messages"]] == kept
