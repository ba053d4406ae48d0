"""The README stays true: its embedding example runs, its tables name every command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chatbot.cli.commands import app
from chatbot.config.settings import Settings
from chatbot.terminal.commands import COMMANDS

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_embedding_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    (example,) = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    exec(compile(example, "README.md", "exec"), {})
    assert "You said:" in capsys.readouterr().out
    assert Path("threads.sqlite").exists()


def test_every_slash_command_is_in_the_readme() -> None:
    for name in COMMANDS:
        assert f"`/{name}" in README, f"/{name} is missing from the README's command table"


def test_every_cli_command_is_in_the_readme() -> None:
    for command in app.registered_commands:
        name = command.name or command.callback.__name__
        assert name == "chat" or f"`chatbot {name}" in README, name
    assert "`chatbot chat" in README


def test_every_setting_is_in_the_readme() -> None:
    for field in Settings.model_fields:
        variable = field.upper() if field.startswith("openai_") else f"CHATBOT_{field.upper()}"
        assert f"`{variable}`" in README, variable


def test_the_commands_said_to_take_db_after_them_do() -> None:
    """'Every thread command, `prune` and `db stats`/`vacuum` also take `--db` after them
    (`config`, `models` and `roles` only before)': as the README says, both ways."""
    from tests.helpers import runner

    assert "`prune` and `db stats`/`vacuum` also take `--db` after them" in README
    after = [["threads"], ["history"], ["show"], ["search"], ["export"], ["fork"], ["compact"]]
    after += [["delete"], ["ask"], ["chat"], ["prune"], ["db", "stats"], ["db", "vacuum"]]
    for args in after:
        result = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0 and "--db" in result.stdout, args
        assert "postgresql:// URL" in result.stdout, "--db takes either, as the README says"
    for args in (["config"], ["models"], ["roles"]):
        result = runner.invoke(app, [*args, "--db", "x.sqlite"])
        assert result.exit_code == 2 and "no such option: --db" in result.output, args


def test_commands_from_the_dev_group_are_run_with_it() -> None:
    """`uv run` alone does not install the dev group (pyproject: default-groups = []), so a
    README command that needs langgraph-cli, pytest or ruff names the group, or follows the
    Development section's `uv sync --group dev`."""
    import tomllib

    pyproject = tomllib.loads(
        (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    )
    assert pyproject["tool"]["uv"]["default-groups"] == []
    development = README.index("## Development")
    for match in re.finditer(r"uv run (langgraph|pytest|ruff)\b", README):
        assert match.start() > development, f"{match.group(0)} needs --group dev"
    assert "uv run --group dev langgraph dev" in README
