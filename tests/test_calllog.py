"""CHATBOT_LOG: one JSON line per model call (chat and summary), never the key, file 0600;
a path that cannot be written is one line at start-up."""

from __future__ import annotations

import json
import stat
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tests.fake_openai import FakeOpenAI, Reply, prompt_tokens
from tests.helpers import (
    CHAT_MODEL,
    SECRET,
    Cli,
    echo_or_summary,
    is_summary_request,
    ok,
    one_error,
    summarizing,
    worth_folding,
)
from tests.reference_tokenizer import count


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_chat_and_summary_calls_are_logged_with_roles_and_reported_tokens(
    cli: Cli, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    openai_server.responder = echo_or_summary
    log = tmp_path / "logs" / "calls.jsonl"
    for text in (worth_folding("one"), "two"):
        ok(cli.ask(text, CHATBOT_LOG=str(log), **summarizing()))
    entries = lines(log)
    assert len(entries) == len(openai_server.requests) >= 3
    for entry, request in zip(entries, openai_server.requests, strict=True):
        role = "summary" if is_summary_request(request) else "chat"
        assert entry["role"] == role
        assert entry["model"] == CHAT_MODEL
        assert entry["thread"] == "t1"
        assert entry["input_tokens"] == prompt_tokens(request.body)
        assert entry["output_tokens"] == max(1, count(echo_or_summary(request.body)))
        assert entry["latency_ms"] >= 0 and "error" not in entry
        assert datetime.fromisoformat(entry["time"]).utcoffset() == timedelta(0)
    assert {e["role"] for e in entries} == {"chat", "summary"}
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    text = log.read_text()
    assert "one" not in text and "two" not in text  # never what was said
    assert SECRET not in text


def test_a_failed_call_is_logged_as_one_line_without_the_key(
    cli: Cli, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    openai_server.script(
        Reply(status=401, error_message=f"Incorrect API key provided: {SECRET}. Check it.")
    )
    log = tmp_path / "calls.jsonl"
    result = cli.ask("hello", CHATBOT_LOG=str(log))
    assert result.exit_code != 0
    (entry,) = lines(log)
    assert entry["role"] == "chat" and "AuthenticationError: Error code: 401" in entry["error"]
    assert "input_tokens" not in entry
    assert SECRET not in log.read_text()
    assert "hello" not in log.read_text()


def test_a_password_in_the_model_servers_url_is_never_shown_or_logged(
    cli: Cli, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    password = "proxy-pass-5r7w"
    base_url = openai_server.base_url.replace("http://", f"http://proxy-user:{password}@")
    openai_server.script(Reply(status=403, error_message=f"bad proxy login {password} refused"))
    log = tmp_path / "calls.jsonl"
    result = cli.ask("hello", CHATBOT_LOG=str(log), OPENAI_BASE_URL=base_url)

    assert result.exit_code != 0
    assert "bad proxy login [redacted] refused" in result.output
    assert password not in result.output
    (entry,) = lines(log)
    assert "bad proxy login [redacted] refused" in entry["error"]
    assert password not in log.read_text()


def test_a_log_path_that_cannot_be_written_is_one_line(cli: Cli, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = cli.ask("hello", CHATBOT_LOG=str(blocker / "calls.jsonl"))
    message = one_error(result, 2)
    assert "CHATBOT_LOG=" in message and "cannot be written" in message


def test_the_offline_model_is_logged_too(cli: Cli, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    ok(cli.ask("hello", CHATBOT_LOG=str(log), CHATBOT_MODEL="offline"))
    (entry,) = lines(log)
    assert entry["model"] == "offline" and entry["role"] == "chat"
    assert entry["input_tokens"] > 0 and entry["output_tokens"] > 0


def test_a_log_file_others_could_read_is_made_private_and_missing_folders_are_0700(
    cli: Cli, tmp_path: Path
) -> None:
    made_earlier = tmp_path / "calls.jsonl"
    made_earlier.write_text('{"earlier": true}\n')
    made_earlier.chmod(0o644)
    ok(cli.ask("hello", CHATBOT_LOG=str(made_earlier), CHATBOT_MODEL="offline"))
    assert stat.S_IMODE(made_earlier.stat().st_mode) == 0o600
    assert [set(e) >= {"model"} for e in lines(made_earlier)] == [False, True], "appended"

    deep = tmp_path / "new" / "deeper" / "calls.jsonl"
    ok(cli.ask("hello", CHATBOT_LOG=str(deep), CHATBOT_MODEL="offline"))
    for folder in (tmp_path / "new", tmp_path / "new" / "deeper"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_secret_that_holds_another_is_redacted_whole() -> None:
    from chatbot.errors import redact, remember_secret

    remember_secret("pw-77")  # e.g. a proxy password, a prefix of the key
    remember_secret("pw-77-and-the-rest-of-the-key")
    assert redact("refused pw-77-and-the-rest-of-the-key, then pw-77") == (
        "refused [redacted], then [redacted]"
    )
