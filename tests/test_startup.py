"""Reading commands start fast: they never build models or the graph, and `threads` never
imports LangGraph. Checked in a fresh process where those modules cannot be imported at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatbot.cli.commands import app
from tests.helpers import chatbot_argv, offline_threads, runner

# The CLI run with an import hook that makes the named modules fail to import: a command that
# made a chat model (langchain_openai, openai) or built the graph (langgraph.graph) fails.
_NO_MODELS = "langchain_openai,openai,chatbot.engine.graph,chatbot.engine.models"
"""What making a model or the graph imports."""


def _run(
    blocked: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        chatbot_argv(*args, blocked=blocked),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return offline_threads(tmp_path_factory.mktemp("startup") / "db.sqlite")


@pytest.mark.slow
def test_reading_commands_never_make_a_model_or_the_graph(db: Path, tmp_path: Path) -> None:
    # A chat model that cannot be made: a real model name, a key that settings refuse.
    env = {"CHATBOT_MODEL": "gpt-4o", "OPENAI_API_KEY": "sk-bad key"}
    for args in (
        ["history", "t1"],
        ["history", "t1", "--all", "--json"],
        ["history", "t1", "--limit", "1"],
        ["show", "t1"],
        ["show", "t1", "--json"],
        ["export", "t1", "-f", "json"],
        ["export", "t1", "-o", str(tmp_path / "t1.md")],
    ):
        result = _run(_NO_MODELS, *args, "--db", str(db), env=env)
        assert result.returncode == 0, (args, result.stderr)
        assert "Traceback" not in result.stderr
    shown = json.loads(_run(_NO_MODELS, "show", "t1", "--json", "--db", str(db)).stdout)
    assert shown["messages"][-2]["content"] == "three"
    assert 'You said: "three"' in shown["messages"][-1]["content"]
    deleted = _run(_NO_MODELS, "delete", "t2", "--yes", "--db", str(db), env=env)
    assert deleted.returncode == 0, deleted.stderr
    asked = _run(_NO_MODELS, "ask", "hi", "-t", "t1", "--db", str(db))
    assert asked.returncode != 0, "the hook blocks what a turn needs: the checks above count"
    listed = _run(
        "langgraph,langchain_core,chatbot.config.settings,rich",
        "threads",
        "--json",
        "--db",
        str(db),
        env=env,
    )
    assert listed.returncode == 0, listed.stderr
    assert [t["thread_id"] for t in json.loads(listed.stdout)] == ["t1"]
    table = _run(
        "langgraph,langchain_core,chatbot.config.settings,markdown_it", "threads", "--db", str(db)
    )
    assert table.returncode == 0, table.stderr  # (the table: Rich, nothing of LangChain)
    assert "t1" in table.stdout
    # search reads the index alone: no LangChain, no LangGraph, no settings
    found = _run(
        "langgraph,langchain_core,chatbot.config.settings",
        "search",
        "three",
        "--json",
        "--db",
        str(db),
        env=env,
    )
    assert found.returncode == 0, found.stderr
    assert {hit["thread_id"] for hit in json.loads(found.stdout)} == {"t1"}


_NO_RUNNING = "chatbot.threads.backend"
"""What running a turn imports and reading a checkpoint does not need: the backend that runs
turns."""


@pytest.mark.slow
def test_reading_a_folded_thread_imports_nothing_of_what_runs_a_turn(db: Path) -> None:
    """``history``, ``show`` and ``export`` read a thread whose writes add and remove messages
    (a fold) with the saver and its channels, not the backend that runs turns."""
    rows = json.loads(_run(_NO_MODELS, "history", "t1", "--all", "--json", "--db", str(db)).stdout)
    older = rows[len(rows) // 2]["checkpoint_id"]
    for args in (
        ["history", "t1"],
        ["history", "t1", "--all", "--json"],
        ["show", "t1"],
        ["show", "t1", "--checkpoint", older],
        ["export", "t1", "-f", "md"],
    ):
        result = _run(_NO_RUNNING, *args, "--db", str(db))
        assert result.returncode == 0, (args, result.stderr)
    history = _run(_NO_RUNNING + ",markdown_it,rich.markdown", "history", "t1", "--db", str(db))
    assert history.returncode == 0, history.stderr  # (a table of turns: no Markdown drawn)
    shown = _run(_NO_RUNNING, "show", "t1", "--json", "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["summary"]
    assert [m["content"] for m in document["messages"]][-2] == "three"


def test_a_command_that_runs_the_graph_still_checks_the_settings(db: Path) -> None:
    result = runner.invoke(
        app, ["ask", "hi", "--thread", "t1", "--db", str(db)], env={"CHATBOT_SUMMARY_KEEP": "lots"}
    )
    assert result.exit_code == 2
    assert "CHATBOT_SUMMARY_KEEP='lots' is not valid" in result.stderr


@pytest.mark.slow
def test_the_library_logs_nowhere_unless_the_application_says_where() -> None:
    """chatbot's loggers hang under ``chatbot``, which has a NullHandler as soon as a module
    that logs is imported (a library logs; the application decides where logs go)."""
    probe = (
        "import logging, chatbot.engine.graph; "
        "print([type(h).__name__ for h in logging.getLogger('chatbot').handlers])"
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert shown.stdout.strip() == "['NullHandler']"
