"""The user-level config: ``config.env`` read after the environment and ``./.env``, what
``chatbot config`` says about every setting, ``config init``, and a run from any folder."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import Result

from chatbot.config.settings import Settings, load_settings
from chatbot.config.sources import user_config_file
from tests.fake_openai import FakeOpenAI
from tests.helpers import ROOT, SECRET, chatbot_argv, one_error, runner

from chatbot.cli.commands import app  # isort: skip


def write_config(text: str, mode: int = 0o600) -> Path:
    path = user_config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def invoke(*args: str, **env: str) -> Result:
    return runner.invoke(app, list(args), env=env)


def config_json(*args: str, **env: str) -> dict[str, Any]:
    result = invoke(*args, "config", "--json", **env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def rows(document: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {row["name"]: row for row in document["settings"]}


def test_the_config_file_is_under_xdg_config_home(tmp_path: Path) -> None:
    assert user_config_file() == tmp_path / "config" / "chatbot" / "config.env"
    result = invoke("config", "path")
    assert result.exit_code == 0
    assert result.stdout.strip() == str(user_config_file())


def test_environment_beats_dot_env_beats_config_file_beats_default(tmp_path: Path) -> None:
    config = write_config(
        "CHATBOT_MODEL=from-config\nCHATBOT_LANGUAGE=zh\nCHATBOT_TIMEOUT=30\n"
        "CHATBOT_MAX_RETRIES=5\n"
    )
    (tmp_path / ".env").write_text("CHATBOT_MODEL=from-dotenv\nCHATBOT_TIMEOUT=20\n")
    document = config_json(CHATBOT_TIMEOUT="10")
    found = rows(document)
    assert found["CHATBOT_TIMEOUT"] | {} == {
        "name": "CHATBOT_TIMEOUT",
        "value": "10.0",
        "source": "environment",
        "where": "CHATBOT_TIMEOUT",
    }
    assert found["CHATBOT_MODEL"]["value"] == "from-dotenv"
    assert found["CHATBOT_MODEL"]["source"] == "env file"
    assert found["CHATBOT_MODEL"]["where"] == str(tmp_path / ".env")
    assert (found["CHATBOT_LANGUAGE"]["value"], found["CHATBOT_LANGUAGE"]["source"]) == (
        "zh",
        "config file",
    )
    assert found["CHATBOT_LANGUAGE"]["where"] == str(config)
    assert (found["CHATBOT_MAX_RETRIES"]["value"], found["CHATBOT_MAX_RETRIES"]["source"]) == (
        "5",
        "config file",
    )
    assert (found["CHATBOT_TEMPERATURE"]["value"], found["CHATBOT_TEMPERATURE"]["source"]) == (
        "0.7",
        "default",
    )
    assert document["config_file"] == str(config) and document["config_file_exists"]
    # The settings object itself agrees with what `config` reported.
    settings = load_settings()
    assert (settings.model, settings.language, settings.max_retries) == ("from-dotenv", "zh", 5)


def test_an_option_beats_everything_and_env_file_replaces_dot_env(tmp_path: Path) -> None:
    write_config("CHATBOT_MODEL=from-config\nCHATBOT_LANGUAGE=zh\n")
    other = tmp_path / "other.env"
    other.write_text("CHATBOT_LANGUAGE=en\n")
    (tmp_path / ".env").write_text("CHATBOT_LANGUAGE=zh\n")
    found = rows(config_json("--model", "from-option", "--env-file", str(other)))
    assert found["CHATBOT_MODEL"] == {
        "name": "CHATBOT_MODEL",
        "value": "from-option",
        "source": "option",
        "where": "--model",
    }
    assert (found["CHATBOT_LANGUAGE"]["value"], found["CHATBOT_LANGUAGE"]["where"]) == (
        "en",
        str(other),
    )


def test_the_key_and_a_database_password_are_redacted(tmp_path: Path) -> None:
    write_config(
        f"OPENAI_API_KEY={SECRET}\nCHATBOT_DB=postgresql://ada:hunter2pw@db.example/chat\n"
    )
    table = invoke("config")
    document = invoke("config", "--json")
    for result in (table, document):
        assert result.exit_code == 0, result.output
        assert SECRET not in result.output and "hunter2pw" not in result.output
    found = rows(json.loads(document.stdout))
    assert found["OPENAI_API_KEY"]["value"] == "[redacted]"
    assert found["OPENAI_API_KEY"]["source"] == "config file"
    assert found["CHATBOT_DB"]["value"] == "postgresql://ada:***@db.example/chat"
    assert "OPENAI_API_KEY" in table.stdout and "[redacted]" in table.stdout


def test_a_key_from_the_environment_is_redacted_too() -> None:
    found = rows(config_json(CHATBOT_OPENAI_API_KEY=SECRET))
    assert found["OPENAI_API_KEY"]["value"] == "[redacted]"
    assert found["OPENAI_API_KEY"]["where"] == "CHATBOT_OPENAI_API_KEY"


def test_dot_env_beats_the_config_file_whichever_name_of_a_setting_each_uses(
    tmp_path: Path,
) -> None:
    write_config("OPENAI_API_KEY=sk-from-config\nOPENAI_BASE_URL=http://config:1/v1\n")
    (tmp_path / ".env").write_text("CHATBOT_OPENAI_API_KEY=sk-from-dotenv\n")
    settings = load_settings()
    assert settings.openai_api_key is not None
    assert settings.openai_api_key.get_secret_value() == "sk-from-dotenv"
    found = rows(config_json())
    assert (found["OPENAI_API_KEY"]["source"], found["OPENAI_API_KEY"]["where"]) == (
        "env file",
        str(tmp_path / ".env"),
    )
    assert found["OPENAI_BASE_URL"]["source"] == "config file"


def test_a_bad_setting_in_the_config_file_is_shown_and_one_error_line(tmp_path: Path) -> None:
    write_config("CHATBOT_TIMEOUT=0\n")
    result = invoke("config", "--json")
    line = one_error(result, 2)
    assert "CHATBOT_TIMEOUT='0' is not valid" in line
    found = rows(json.loads(result.stdout))
    assert (found["CHATBOT_TIMEOUT"]["value"], found["CHATBOT_TIMEOUT"]["source"]) == (
        "0",
        "config file",
    )
    asked = invoke("ask", "hi", "--db", str(tmp_path / "db.sqlite"))
    assert "CHATBOT_TIMEOUT='0' is not valid" in one_error(asked, 2)
    assert not (tmp_path / "db.sqlite").exists()


def test_a_key_that_cannot_be_one_names_where_it_was_found(tmp_path: Path) -> None:
    bad = "sk-abc def"
    db = str(tmp_path / "db.sqlite")

    def refused(*args: str, **env: str) -> str:
        line = one_error(invoke(*args, "ask", "hi", "--db", db, **env), 2)
        assert line.startswith("error: OPENAI_API_KEY is not valid: it contains ")
        assert "sk-abc" not in line
        return line.rsplit(": check the key in ", 1)[1]

    config = write_config(f'OPENAI_API_KEY="{bad}"\n')
    assert refused() == str(config)
    (tmp_path / ".env").write_text(f'OPENAI_API_KEY="{bad}"\n')
    assert refused() == ".env"  # ./.env beats the config file
    other = tmp_path / "other.env"
    other.write_text(f'OPENAI_API_KEY="{bad}"\n')
    assert refused("--env-file", str(other)) == str(other)
    assert refused(CHATBOT_OPENAI_API_KEY=bad) == "the environment variable CHATBOT_OPENAI_API_KEY"
    assert refused(OPENAI_API_KEY="sk-abcé") == "the environment variable OPENAI_API_KEY"
    assert not (tmp_path / "db.sqlite").exists()


def test_a_misspelt_setting_in_either_file_and_the_offline_model_are_noted(
    tmp_path: Path,
) -> None:
    config_file = write_config("CHATBOT_MODLE=gpt-4o\nCHATBOT_FOO=1\n")
    (tmp_path / ".env").write_text("CHATBOT_SUMMARY_TRIGER=messages:6\nOTHER_APP=1\n")

    document = config_json()
    in_dot_env, *the_rest = document["notes"]
    assert in_dot_env.startswith("CHATBOT_SUMMARY_TRIGER in ")  # not OTHER_APP: not ours
    assert in_dot_env.endswith(
        ".env is not a setting, so it is not read (did you mean CHATBOT_SUMMARY_TRIGGER?)"
    )
    assert the_rest == [
        f"CHATBOT_MODLE in {config_file} is not a setting, so it is not read "
        "(did you mean CHATBOT_MODEL?)",
        f"CHATBOT_FOO in {config_file} is not a setting, so it is not read",
        "no OPENAI_API_KEY or OPENAI_BASE_URL is set: the offline model answers, not gpt-4o-mini",
    ]
    shown = invoke("config")
    assert shown.exit_code == 0
    assert "note: CHATBOT_MODLE in" in shown.stderr
    with_key = config_json(OPENAI_API_KEY="sk-test-key")
    assert not any("offline model" in note for note in with_key["notes"])


def test_config_init_creates_a_private_commented_file_once() -> None:
    result = invoke("config", "init")
    assert result.exit_code == 0, result.output
    path = user_config_file()
    assert result.stdout.strip() == str(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    text = path.read_text()
    assert "# CHATBOT_MODEL=gpt-4o-mini" in text and "# OPENAI_API_KEY=" in text
    assert all(not line or line.startswith("#") for line in text.splitlines())
    # Every setting is there, and as it is the file changes nothing.
    for name in Settings.model_fields:
        variable = name.upper() if name.startswith("openai_") else f"CHATBOT_{name.upper()}"
        assert f"# {variable}=" in text
    assert load_settings().model_dump() == load_settings(config_file=None).model_dump()
    path.write_text("CHATBOT_MODEL=mine\n")
    again = invoke("config", "init")
    assert "already exists" in one_error(again, 1)
    assert path.read_text() == "CHATBOT_MODEL=mine\n"


@pytest.mark.parametrize(
    ("text", "mode", "warned"),
    [
        (f"OPENAI_API_KEY={SECRET}\n", 0o644, True),
        (f"CHATBOT_OPENAI_API_KEY={SECRET}\n", 0o640, True),
        (f"OPENAI_API_KEY={SECRET}\n", 0o600, False),
        ("CHATBOT_MODEL=gpt-4o\n", 0o644, False),
        ("OPENAI_API_KEY=\n", 0o644, False),
    ],
)
def test_a_config_file_with_a_key_that_others_can_read_is_warned_about(
    text: str, mode: int, warned: bool, tmp_path: Path
) -> None:
    path = write_config(text, mode)
    result = invoke("threads")  # (the default database, not made yet)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    if warned:
        assert warnings == [
            f"warning: {path} holds an API key and others can read it: chmod 600 {path}"
        ]
    else:
        assert warnings == []
    assert SECRET not in result.output


@pytest.mark.slow
def test_installed_as_a_tool_it_reads_the_config_file_from_any_folder(
    openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    """`uv tool install .` then `chatbot` in a folder without .env: config.env is enough."""
    db = tmp_path / "data" / "tool.sqlite"
    db.parent.mkdir()
    write_config(
        f"OPENAI_API_KEY={SECRET}\nOPENAI_BASE_URL={openai_server.base_url}\n"
        f"CHATBOT_MODEL=fake-from-config\nCHATBOT_DB={db}\nCHATBOT_MAX_RETRIES=0\n"
    )
    openai_server.script("Hello from the configured server")
    elsewhere = tmp_path / "some" / "project"
    elsewhere.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "chatbot", "ask", "hi there"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "Hello from the configured server" in result.stdout
    (request,) = openai_server.requests
    assert request.body["model"] == "fake-from-config"
    assert request.authorization == f"Bearer {SECRET}"
    assert db.exists()
    assert not (elsewhere / ".env").exists() and list(elsewhere.iterdir()) == []
    listed = subprocess.run(
        [sys.executable, "-m", "chatbot", "threads", "--json"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert [t["thread_id"] for t in json.loads(listed.stdout)] == ["default"]


@pytest.mark.parametrize(
    ("where", "url"),
    [
        ("config", "http://ada:hunter2pw@example.com:99999"),  # a bad port
        ("environment", "ftp://ada:hunter2pw@example.com"),  # not http
        ("config", "http://ada:hunter2pw@[example.com"),  # too broken to parse
    ],
)
def test_a_bad_server_url_is_shown_without_its_password(
    where: str, url: str, tmp_path: Path
) -> None:
    env = {"CHATBOT_URL": url} if where == "environment" else {}
    if where == "config":
        write_config(f"CHATBOT_URL={url}\n")
    for args in (["config"], ["config", "--json"], ["threads"], ["ask", "hi"]):
        result = invoke(*args, **env)
        line = one_error(result, 2)
        assert "CHATBOT_URL=" in line and "is not valid" in line
        assert "ada:***@" in line
        assert "hunter2pw" not in result.output, args


def test_a_server_that_cannot_be_reached_is_named_without_its_password(refused_port: int) -> None:
    url = f"http://ada:hunter2pw@127.0.0.1:{refused_port}"  # nothing listens there
    for args in (["--url", url, "threads"], ["history", "t", "--url", url]):
        result = invoke(*args)
        line = one_error(result)
        assert line.startswith(
            "error: cannot reach the LangGraph server at http://ada:***@127.0.0.1"
        )
        assert "hunter2pw" not in result.output, args


def test_a_folder_where_config_env_goes_is_named_as_such(tmp_path: Path) -> None:
    user_config_file().mkdir(parents=True)
    shown = invoke("config")
    assert shown.exit_code == 0, shown.output
    assert "is a folder" in shown.stdout and "not created" not in shown.stdout
    assert config_json()["config_file_exists"] is False
    line = one_error(invoke("config", "init"), 2)
    assert (
        line
        == f"error: {user_config_file()} is a folder: remove it, then run 'chatbot config init'"
    )
    assert invoke("threads").exit_code == 0  # (the default database, not made yet)


@pytest.mark.slow
def test_lines_a_settings_file_cannot_hold_are_named_once_never_their_values(
    tmp_path: Path,
) -> None:
    (tmp_path / ".env").write_text(
        f"OPENAI_API_KEY {SECRET}\nCHATBOT_MODEL=gpt-4o-mini\nCHATBOT_DB='/tmp/unclosed\n"
        "hf_AKEYPASTEDALONE  on a line of its own\n",  # (never shown: it is no setting's name)
        encoding="utf-8",
    )
    config = write_config(  # readable by others: warned about too, still in one line each
        f"export CHATBOT_SUMMARY_KEEP messages:4\nOPENAI_API_KEY={SECRET}\n", mode=0o644
    )
    result = subprocess.run(
        chatbot_argv("threads"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_CONFIG_HOME": str(config.parent.parent)},
    )
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: {config} holds an API key and others can read it: chmod 600 {config}",
        "warning: .env: lines 1, 3, 4 are not NAME=value and skipped (OPENAI_API_KEY, "
        "CHATBOT_DB): write NAME=value, quoting a value with spaces or # in it",
        f"warning: {config}: line 1 is not NAME=value and skipped (CHATBOT_SUMMARY_KEEP): "
        "write NAME=value, quoting a value with spaces or # in it",
    ]
    assert "python-dotenv" not in result.stderr, "its own warning is not shown as well"
    assert SECRET not in result.stdout + result.stderr
    assert "AKEYPASTEDALONE" not in result.stderr


@pytest.mark.slow
def test_thousands_of_bad_lines_are_counted_not_listed(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("not a setting\n" * 3000, encoding="utf-8")
    result = subprocess.run(
        chatbot_argv("threads"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[:1] == [
        "warning: .env: lines 1, 2, 3, 4, 5 and 2,995 more are not NAME=value and skipped: "
        "write NAME=value, quoting a value with spaces or # in it"
    ]


@pytest.mark.parametrize("written", ["$HOME/chat.sqlite", "${HOME}/chat.sqlite", "~/chat.sqlite"])
def test_a_database_path_in_a_settings_file_may_start_from_home_as_a_shell_writes_it(
    tmp_path: Path, written: str
) -> None:
    """python-dotenv expands ``${HOME}`` but not ``$HOME``: that made a folder named "$HOME"
    in the current one, and kept the threads there."""
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / ".env").write_text(f"CHATBOT_DB={written}\n")
    result = invoke("ask", "hi", HOME=str(home))
    assert result.exit_code == 0, result.output
    assert (home / "chat.sqlite").is_file()
    assert not (tmp_path / "$HOME").exists() and not (tmp_path / "${HOME}").exists()
    shown = rows(config_json(HOME=str(home)))["CHATBOT_DB"]["value"]
    assert shown in (str(home / "chat.sqlite"), written), "where it is, or as it was written"


def test_a_database_path_from_a_shell_is_taken_as_it_is(tmp_path: Path) -> None:
    """A shell expanded what it meant to: a "$" left in an option or a variable is part of
    the name (a folder once made as "$HOME" by a settings file is still found)."""
    literal = tmp_path / "$HOME" / "x.sqlite"
    literal.parent.mkdir()
    for given in ({"--db": str(literal)}, {"CHATBOT_DB": str(literal)}):
        option = ["--db", given["--db"]] if "--db" in given else []
        env = {k: v for k, v in given.items() if not k.startswith("--")}
        result = invoke(*option, "ask", "hi", HOME=str(tmp_path / "home"), **env)
        assert result.exit_code == 0, result.output
        assert literal.is_file(), given
        literal.unlink()
