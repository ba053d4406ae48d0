"""Running the ``chatbot`` CLI in-process against the fake OpenAI server, and reading what
the server was sent. Shared by the HTTP tests."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from chatbot.cli import app
from tests.fake_openai import FakeOpenAI, RecordedRequest

SECRET = "sk-test-SECRET-123456"
CHAT_MODEL = "fake-chat-model-7"
CREATE_PROMPT = "Create a summary of the conversation above:"
EXTEND_PROMPT = "Extend the summary by taking into account the new messages above:"
SUMMARY_TEXT = "SUMMARY: the user is Ada, she likes green tea."

runner = CliRunner()


def is_summary_request(request: RecordedRequest | dict[str, Any]) -> bool:
    """The chatbot's summary call: its last user message holds the folded ``<conversation>``."""
    if isinstance(request, dict):
        request = RecordedRequest("", None, request)
    return "<conversation>" in request.last_user_text


def summary_requests(server: FakeOpenAI) -> list[RecordedRequest]:
    return [r for r in server.requests if is_summary_request(r)]


def chat_requests(server: FakeOpenAI) -> list[RecordedRequest]:
    return [r for r in server.requests if not is_summary_request(r)]


def echo_or_summary(body: dict[str, Any]) -> str:
    """Replies ``echo: <last user text>`` to chat calls and ``SUMMARY_TEXT`` to summary calls."""
    if is_summary_request(body):
        return SUMMARY_TEXT
    return "echo: " + RecordedRequest("", None, body).last_user_text


@dataclass
class Cli:
    """Runs the ``chatbot`` CLI in-process against the fake server with one temp DB."""

    server: FakeOpenAI
    db: Path
    env: dict[str, str] = field(default_factory=dict)

    def invoke(self, *args: str, stdin: str | None = None, **env: str) -> Result:
        full_env = {
            "OPENAI_API_KEY": SECRET,
            "OPENAI_BASE_URL": self.server.base_url,
            "CHATBOT_MODEL": CHAT_MODEL,
            "CHATBOT_MAX_RETRIES": "0",
            "CHATBOT_TIMEOUT": "10",
            **self.env,
            **env,
        }
        return runner.invoke(app, list(args), env=full_env, input=stdin)

    def ask(self, text: str, thread: str = "t1", **env: str) -> Result:
        return self.invoke("ask", text, "--thread", thread, "--db", str(self.db), **env)

    def show(self, thread: str = "t1") -> dict[str, Any]:
        result = self.invoke("show", thread, "--json", "--db", str(self.db))
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    def db_bytes(self) -> bytes:
        """The database file and its WAL / shared-memory files, whichever exist."""
        files = [self.db, *(Path(f"{self.db}{suffix}") for suffix in ("-wal", "-shm"))]
        return b"".join(f.read_bytes() for f in files if f.exists())


def summarizing(**extra: str) -> dict[str, str]:
    """Summarize once a thread has more than 2 messages, keeping only the newest one."""
    return {"CHATBOT_SUMMARY_TRIGGER": "messages:2", "CHATBOT_SUMMARY_KEEP": "messages:1", **extra}


def ok(result: Result) -> Result:
    assert result.exit_code == 0, f"exit {result.exit_code}\n{result.output}"
    return result


# --- ChatOpenAI from make_model -------------------------------------------------------------
