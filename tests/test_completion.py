"""Shell completion (``chatbot --install-completion``): subcommands, options, thread ids and
model names, through Typer's own protocol (``_CHATBOT_COMPLETE=complete_bash`` with
``COMP_WORDS`` and ``COMP_CWORD``, as the installed bash script calls it)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import Result

from tests.fake_openai import FakeOpenAI
from tests.helpers import ROOT, Cli, chatbot_argv, ok, runner

from chatbot.cli.commands import app  # isort: skip

_NO_MODELS = "chatbot.engine.models,chatbot.engine.graph,langchain_openai,openai,langgraph,rich"


def completing(line: str, **env: str) -> Result:
    """Bash asking for the completions of ``line``, the cursor at its end (in-process)."""
    words = line.split()
    cword = len(words) if line.endswith(" ") else len(words) - 1
    return runner.invoke(
        app,
        [],
        env={
            "_CHATBOT_COMPLETE": "complete_bash",
            "COMP_WORDS": line,
            "COMP_CWORD": str(cword),
            **env,
        },
    )


def complete(line: str, **env: str) -> list[str]:
    """What bash gets for the cursor at the end of ``line`` (in-process)."""
    result = completing(line, **env)
    assert result.exit_code == 0, result.output
    return result.stdout.split()


def complete_in_a_process(line: str, blocked: str = "", **env: str) -> subprocess.CompletedProcess:
    words = line.split()
    cword = len(words) if line.endswith(" ") else len(words) - 1
    return subprocess.run(
        chatbot_argv(blocked=blocked),  # the CLI refusing to import the named modules
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "_CHATBOT_COMPLETE": "complete_bash",
            "COMP_WORDS": line,
            "COMP_CWORD": str(cword),
            **env,
        },
    )


@pytest.fixture
def threads(cli: Cli) -> Path:
    """A database with threads alpha, beta and another."""
    for thread in ("alpha", "another", "beta"):
        cli.server.script("hi")
        ok(cli.ask("hello", thread=thread))
    return cli.db


def test_help_offers_installing_completion() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "--install-completion" in result.stdout and "--show-completion" in result.stdout


@pytest.mark.slow
def test_the_bash_script_calls_chatbot_back_with_its_variable() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "chatbot", "--show-completion", "bash"],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1",
        },
    )
    assert result.returncode == 0, result.stderr
    assert "_CHATBOT_COMPLETE=complete_bash" in result.stdout
    assert "COMP_WORDS" in result.stdout


def test_subcommands_and_options_complete() -> None:
    assert "history" in complete("chatbot hi")
    assert {"config", "models", "threads", "show", "export"} <= set(complete("chatbot "))
    assert complete("chatbot show --j") == ["--json"]
    assert "--install-completion" in complete("chatbot --")


def test_thread_ids_complete_for_thread_arguments_and_options(threads: Path) -> None:
    db = str(threads)
    assert set(complete(f"chatbot show --db {db} ")) == {"alpha", "another", "beta"}
    assert complete(f"chatbot history --db {db} a") == ["another", "alpha"]  # newest first
    assert complete(f"chatbot --db {db} export b") == ["beta"]
    assert complete(f"chatbot ask --db {db} --thread be") == ["beta"]
    assert complete(f"chatbot --db {db} --thread al") == ["alpha"]
    assert complete(f"chatbot chat --db {db} -t an") == ["another"]
    assert complete(f"chatbot search word --db {db} --thread b") == ["beta"]
    assert complete("chatbot show a", CHATBOT_DB=db) == ["another", "alpha"]


@pytest.mark.slow
def test_completing_thread_ids_reads_fast_without_models_or_langgraph(threads: Path) -> None:
    result = complete_in_a_process("chatbot show ", _NO_MODELS, CHATBOT_DB=str(threads))
    assert result.returncode == 0, result.stderr
    assert set(result.stdout.split()) == {"alpha", "another", "beta"}
    assert result.stderr == ""


@pytest.mark.parametrize(
    "env",
    [
        {"CHATBOT_URL": "localhost:2024"},  # not a URL
        {"CHATBOT_DB": "/"},  # a folder
        {"CHATBOT_DB": "postgresql://nobody@127.0.0.1:9/none"},  # nothing listens
        {"CHATBOT_PG_PREPARE_THRESHOLD": "lots"},
    ],
)
def test_a_problem_means_no_completions_never_a_traceback(env: dict[str, str]) -> None:
    result = completing("chatbot show ", **env)
    assert result.exit_code == 0, result.exception
    assert result.stdout.strip() == "" and result.stderr == ""


@pytest.mark.slow
def test_a_database_server_that_never_answers_does_not_hold_the_shell() -> None:
    # A PostgreSQL host that accepts connections and never answers: the commands give it 10 s
    # to connect, a Tab only psycopg's shortest wait (2 s); the bound below is generous.
    stop = threading.Event()
    held: list[socket.socket] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0.1)

        def accept_and_stay_silent() -> None:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    held.append(server.accept()[0])

        holder = threading.Thread(target=accept_and_stay_silent, daemon=True)
        holder.start()
        db = f"postgresql://nobody@127.0.0.1:{server.getsockname()[1]}/none"
        started = time.monotonic()
        try:
            result = complete_in_a_process("chatbot show ", CHATBOT_DB=db)
        finally:
            took = time.monotonic() - started
            stop.set()
            holder.join()
            for connection in held:
                connection.close()
    assert held, "the completion did connect"
    assert result.returncode == 0
    assert result.stdout.strip() == "" and result.stderr == ""
    assert took < 5, f"a Tab waited {took:.1f} s"


def test_a_missing_database_completes_nothing_and_is_not_created(tmp_path: Path) -> None:
    db = tmp_path / "never.sqlite"
    assert complete(f"chatbot show --db {db} ") == []
    assert not db.exists()


def test_model_names_complete_from_the_last_listing_and_the_settings(
    openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    env = {"OPENAI_API_KEY": "sk-test-key", "OPENAI_BASE_URL": openai_server.base_url}
    assert complete("chatbot --model ", **env) == ["offline"]  # nothing listed yet
    openai_server.models = ["gpt-test-large", "gpt-test-mini", "embed-test"]
    ok(runner.invoke(app, ["models"], env=env))
    assert complete("chatbot --model gpt-", **env) == ["gpt-test-large", "gpt-test-mini"]
    (tmp_path / ".env").write_text("CHATBOT_MODEL=my-configured-model\n")
    names = complete("chatbot -m ", **env)
    assert names == [
        "my-configured-model",
        "embed-test",
        "gpt-test-large",
        "gpt-test-mini",
        "offline",
    ]
    # Another endpoint's listing is not offered for this one.
    other = {**env, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    assert complete("chatbot -m ", **other) == ["my-configured-model", "offline"]


@pytest.mark.slow
def test_a_broken_model_cache_completes_the_configured_model_only(tmp_path: Path) -> None:
    from chatbot.engine.modellist import cache_path

    cache_path().parent.mkdir(parents=True)
    cache_path().write_text("{not json")
    result = complete_in_a_process("chatbot --model ", CHATBOT_MODEL="gpt-x")
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.split() == ["gpt-x", "offline"]
    cache_path().write_text(json.dumps({"endpoint": "https://api.openai.com/v1", "models": 3}))
    assert complete("chatbot --model ") == ["offline"]


class _LangGraphLike:
    """A tiny LangGraph-API-shaped server on 127.0.0.1: ``/ok``, and ``/threads/search``
    answering ``threads`` — or never answering when ``stuck`` (a server that hangs)."""

    def __init__(self, threads: list[dict[str, object]], stuck: bool = False) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.release = threading.Event()
        self.searches = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._answer({"ok": True})

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.searches += 1
                if stuck:
                    owner.release.wait(120)
                    return
                self._answer(threads)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(
            target=self.server.serve_forever,
            kwargs={"poll_interval": 0.05},  # (shutdown() waits for the next poll)
            daemon=True,
        ).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def test_thread_ids_complete_from_a_server_by_their_names() -> None:
    server = _LangGraphLike(
        [
            {
                "thread_id": "6f1c0d2e-0000-4000-8000-000000000001",
                "metadata": {"chatbot_name": "work"},
            },
            {"thread_id": "6f1c0d2e-0000-4000-8000-000000000002", "metadata": {}},
        ]
    )
    try:
        assert complete(f"chatbot --url {server.url} show ") == [
            "work",
            "6f1c0d2e-0000-4000-8000-000000000002",
        ]
        assert complete(f"chatbot history --url {server.url} w") == ["work"]
    finally:
        server.close()


@pytest.mark.slow
def test_a_stuck_server_does_not_hold_the_shell(tmp_path: Path) -> None:
    # Completion runs on every Tab: a server that accepts and never answers gets a second,
    # not the SDK's minutes (the subprocess's generous limit below is far above that second).
    server = _LangGraphLike([], stuck=True)
    try:
        result = complete_in_a_process(f"chatbot --url {server.url} show ")
    finally:
        server.close()
    assert result.returncode == 0
    assert result.stdout.strip() == "" and result.stderr == ""
    assert server.searches == 1  # asked once, no retries
