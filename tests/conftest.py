"""Shared fixtures. Every test runs with a clean configuration: no CHATBOT_* or OPENAI_*
variable from the machine, no ./.env, and a data directory under tmp_path."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAI]:
    """A fake OpenAI-compatible server on 127.0.0.1: ``.base_url``, ``.requests``,
    ``.script(...)`` for queued replies and ``.responder`` for a callable."""
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No setting leaks in from the machine running the tests."""
    for name in list(os.environ):
        if name.startswith(("CHATBOT_", "OPENAI_", "LANGSMITH_", "LANGCHAIN_")):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
