"""Reading commands start fast: they never build models or the graph, and `threads` never
imports LangGraph. Checked in a fresh process where those modules cannot be imported at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatbot.config.settings import load_settings
from chatbot.config.sources import SettingsError, prepare_threshold, read_places
from tests.helpers import chatbot_argv, offline_threads

# The CLI run with an import hook that makes the named modules fail to import: a command that
# made a chat model (langchain_openai, openai) or built the graph (langgraph.graph) fails.
_NO_MODELS = "langchain_openai,openai,langgraph.graph"


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
        "langgraph,langchain_core,pydantic_settings,rich,logging",
        "threads",
        "--json",
        "--db",
        str(db),
        env=env,
    )
    assert listed.returncode == 0, listed.stderr
    assert [t["thread_id"] for t in json.loads(listed.stdout)] == ["t1"]
    # search reads the index alone: no LangChain, no LangGraph, no settings
    found = _run(
        "langgraph,langchain_core,pydantic_settings",
        "search",
        "three",
        "--json",
        "--db",
        str(db),
        env=env,
    )
    assert found.returncode == 0, found.stderr
    assert {hit["thread_id"] for hit in json.loads(found.stdout)} == {"t1"}


@pytest.mark.slow
def test_a_command_that_runs_the_graph_still_checks_the_settings(db: Path) -> None:
    result = _run(
        "", "ask", "hi", "--thread", "t1", "--db", str(db), env={"CHATBOT_SUMMARY_KEEP": "lots"}
    )
    assert result.returncode == 2
    assert "CHATBOT_SUMMARY_KEEP='lots' is not valid" in result.stderr


@pytest.mark.parametrize(
    ("environment", "env_file", "overrides"),
    [
        ({}, "", {}),
        ({"CHATBOT_DB": "/tmp/a.sqlite"}, "", {}),
        ({"chatbot_db": "/tmp/lower.sqlite"}, "", {}),
        ({}, "CHATBOT_DB=\n", {}),
        ({}, "CHATBOT_DB=/tmp/from-file.sqlite\nCHATBOT_URL=http://127.0.0.1:2024\n", {}),
        ({"CHATBOT_DB": "/tmp/env.sqlite"}, "CHATBOT_DB=/tmp/file.sqlite\n", {}),
        ({"CHATBOT_DB": "/tmp/env.sqlite"}, "", {"db": "/tmp/option.sqlite"}),
        ({}, "export CHATBOT_DB='/tmp/quoted x.sqlite'  # a comment\n", {}),
        ({"CHATBOT_URL": ""}, "CHATBOT_URL=http://x:1\n", {}),
        ({}, "", {"url": "https://example.com:8123"}),
        ({"CHATBOT_PG_PREPARE_THRESHOLD": "none"}, "", {}),
        ({}, "CHATBOT_PG_PREPARE_THRESHOLD=0\n", {}),
    ],
)
def test_places_are_read_as_the_settings_read_them(
    environment: dict[str, str],
    env_file: str,
    overrides: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "settings.env"
    path.write_text(env_file, encoding="utf-8")
    settings = load_settings(path, **overrides)
    places = read_places(path, **overrides)
    assert (places.db, places.url) == (settings.db, settings.url)
    assert places.pg_prepare_threshold == prepare_threshold(settings.pg_prepare_threshold)


@pytest.mark.parametrize(
    ("environment", "env_file", "config", "overrides"),
    [
        ({}, "", "CHATBOT_DB=/tmp/config.sqlite\n", {}),
        ({}, "CHATBOT_DB=/tmp/dotenv.sqlite\n", "CHATBOT_DB=/tmp/config.sqlite\n", {}),
        ({"CHATBOT_DB": "/tmp/env.sqlite"}, "", "CHATBOT_DB=/tmp/config.sqlite\n", {}),
        ({}, "", "chatbot_url=http://127.0.0.1:2024\nCHATBOT_DB=/tmp/c.sqlite\n", {}),
        ({}, "CHATBOT_URL=\n", "CHATBOT_URL=http://127.0.0.1:2024\n", {}),
        ({}, "", "CHATBOT_DB=/tmp/config.sqlite\n", {"db": "/tmp/option.sqlite"}),
        ({}, "", "CHATBOT_PG_PREPARE_THRESHOLD=none\n", {}),
        ({}, "CHATBOT_PG_PREPARE_THRESHOLD=3\n", "CHATBOT_PG_PREPARE_THRESHOLD=none\n", {}),
    ],
)
def test_places_read_the_user_config_file_as_the_settings_do(
    environment: dict[str, str],
    env_file: str,
    config: str,
    overrides: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chatbot.config.sources import user_config_file

    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    (tmp_path / ".env").write_text(env_file, encoding="utf-8")
    config_file = user_config_file()  # under the test's XDG_CONFIG_HOME
    config_file.parent.mkdir(parents=True)
    config_file.write_text(config, encoding="utf-8")
    settings = load_settings(**overrides)
    places = read_places(**overrides)
    assert (places.db, places.url) == (settings.db, settings.url)
    assert places.pg_prepare_threshold == prepare_threshold(settings.pg_prepare_threshold)
    ignored = read_places(config_file=None, **overrides)
    assert ignored.db == load_settings(config_file=None, **overrides).db


def test_a_bad_url_is_the_same_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATBOT_URL", "ftp://x")
    with pytest.raises(SettingsError) as fast:
        read_places(None)
    with pytest.raises(SettingsError) as full:
        load_settings(None)
    assert str(fast.value) == str(full.value)


@pytest.mark.parametrize(
    ("environment", "overrides"),
    [({"CHATBOT_DB": "  "}, {}), ({"chatbot_db": ""}, {}), ({}, {"db": ""}), ({}, {"db": "a\nb"})],
)
def test_a_blank_database_is_the_same_one_line(
    environment: dict[str, str], overrides: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as fast:
        read_places(None, **overrides)
    with pytest.raises(SettingsError) as full:
        load_settings(None, **overrides)
    assert str(fast.value) == str(full.value)
    assert str(fast.value).startswith("CHATBOT_DB=")


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
