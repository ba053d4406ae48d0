"""The manual stays true: its embedding example runs, its tables name every command and setting.

The README is short; the details live in ``docs/`` (``tests/test_docs.py`` checks the README
itself and the links between the pages)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chatbot.cli.commands import app
from chatbot.config.settings import Settings
from chatbot.terminal.commands import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
COMMANDS_PAGE = (DOCS / "commands.md").read_text()
CONFIGURATION = (DOCS / "configuration.md").read_text()
DEVELOPMENT = (DOCS / "development.md").read_text()
STUDIO = (DOCS / "studio.md").read_text()


def test_embedding_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    (example,) = re.findall(r"```python\n(.*?)```", DEVELOPMENT, flags=re.S)
    exec(compile(example, "docs/development.md", "exec"), {})
    assert "You said:" in capsys.readouterr().out
    assert Path("threads.sqlite").exists()


def test_every_slash_command_is_in_the_commands_page() -> None:
    for name in COMMANDS:
        assert f"`/{name}" in COMMANDS_PAGE, f"/{name} is missing from docs/commands.md"


def test_every_cli_command_is_in_the_commands_page() -> None:
    """Every command and subcommand (`chatbot db copy`) of the Typer app, as `chatbot ...`."""
    import typer.main

    group = typer.main.get_command(app)
    ctx = group.make_context("chatbot", [], resilient_parsing=True)
    found = []

    def walk(parent: object, path: str) -> None:
        for name in parent.list_commands(ctx):  # type: ignore[attr-defined]
            command = parent.get_command(ctx, name)  # type: ignore[attr-defined]
            found.append(f"{path} {name}")
            if hasattr(command, "list_commands"):
                walk(command, f"{path} {name}")

    walk(group, "chatbot")
    assert "chatbot db copy" in found and "chatbot chat" in found
    for path in found:
        assert f"`{path}" in COMMANDS_PAGE, f"{path} is missing from docs/commands.md"


def test_every_setting_is_in_the_configuration_page() -> None:
    for field in Settings.model_fields:
        variable = field.upper() if field.startswith("openai_") else f"CHATBOT_{field.upper()}"
        assert f"`{variable}`" in CONFIGURATION, variable


def test_the_commands_said_to_take_db_after_them_do() -> None:
    """'Every thread command, `prune` and `db stats`/`vacuum`/`adopt` also take `--db` after them
    (`config`, `models` and `roles` only before)': as docs/commands.md says, both ways."""
    from tests.helpers import runner

    assert "`prune` and `db stats`/`vacuum`/`adopt` also take `--db` after them" in COMMANDS_PAGE
    after = [["threads"], ["history"], ["show"], ["search"], ["export"], ["fork"], ["compact"]]
    after += [["delete"], ["ask"], ["chat"], ["prune"], ["db", "stats"], ["db", "vacuum"]]
    after += [["db", "adopt"]]
    for args in after:
        result = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0 and "--db" in result.stdout, args
        assert "postgresql:// URL" in result.stdout, "--db takes either, as the docs say"
    for args in (["config"], ["models"], ["roles"]):
        result = runner.invoke(app, [*args, "--db", "x.sqlite"])
        assert result.exit_code == 2 and "no such option: --db" in result.output, args


def test_commands_from_the_dev_group_are_run_with_it() -> None:
    """`uv run` alone does not install the dev group (pyproject: default-groups = []), so a
    command in the README or docs/ that needs langgraph-cli, pytest, ruff, mypy or
    import-linter names the group, or follows docs/development.md's `uv sync --group dev`."""
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["uv"]["default-groups"] == []
    pages = {"README.md": README} | {
        f"docs/{page.name}": page.read_text() for page in sorted(DOCS.glob("*.md"))
    }
    synced = DEVELOPMENT.index("uv sync --locked --group dev")
    for name, text in pages.items():
        for match in re.finditer(r"uv run (langgraph|pytest|ruff|mypy|lint-imports)\b", text):
            assert name == "docs/development.md" and match.start() > synced, (
                f"{name}: {match.group(0)} needs --group dev"
            )
    assert "uv run --group dev langgraph dev" in STUDIO
