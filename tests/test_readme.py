"""The README stays true: its embedding example runs, its tables name every command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chatbot.cli import app
from chatbot.commands import COMMANDS
from chatbot.settings import Settings

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
