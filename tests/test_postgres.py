"""CHATBOT_DB=postgresql://...: the commands work on PostgreSQL as on SQLite, and the URL's
password is never shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chatbot.config.sources import without_password
from tests.test_cli import invoke


def _with_password(url: str, password: str = "hunter2-secret") -> str:
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{password}@")


def test_the_commands_work_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    db = _with_password(postgres_url)  # trust auth: the password is not checked, only carried
    env = {
        "CHATBOT_DB": db,
        "CHATBOT_SUMMARY_TRIGGER": "messages:4",
        "CHATBOT_SUMMARY_KEEP": "messages:2",
    }
    for text in ("one", "two", "three"):
        result = invoke("ask", text, "--thread", "work", env=env)
        assert result.exit_code == 0, result.output
    outputs = [result.output]

    listed = invoke("threads", "--json", env=env)
    (thread,) = json.loads(listed.stdout)
    assert thread["thread_id"] == "work" and thread["title"] == "one" and thread["has_summary"]
    history = invoke("history", "work", "--json", env=env)
    turns = json.loads(history.stdout)
    assert [t["text"] for t in turns] == ["three", "two", "one"]
    shown = json.loads(invoke("show", "work", "--json", env=env).stdout)
    assert shown["summary"] and shown["messages"][-2]["content"] == "three"
    past = invoke("show", "work", "-c", turns[-1]["checkpoint_id"][-8:], "--json", env=env)
    assert json.loads(past.stdout)["messages"][0]["content"] == "one"
    exported = invoke("export", "work", "-o", str(tmp_path / "work.md"), env=env)
    assert exported.exit_code == 0 and "one" in (tmp_path / "work.md").read_text()
    forked = invoke("fork", "work", env=env)
    assert forked.stdout.strip() == "work-fork1"
    compacted = invoke("compact", "work-fork1", env=env)
    assert compacted.exit_code in (0, 1), compacted.output
    chat = invoke("chat", "--thread", "work", input="/undo\n/history\n/tokens\n", env=env)
    assert chat.exit_code == 0 and "rewound the last turn" in chat.stdout, chat.output
    deleted = invoke("delete", "work-fork1", "--yes", env=env)
    assert deleted.exit_code == 0
    outputs += [listed.output, history.output, exported.output, chat.output, deleted.output]
    assert not any("hunter2" in text for text in outputs), "the password is never printed"
    assert "postgresql://postgres:***@127.0.0.1" in chat.stdout, "where threads live, redacted"


def test_a_database_that_does_not_exist_is_one_line_without_the_password(
    postgres_url: str,
) -> None:
    missing = _with_password(postgres_url.rsplit("/", 1)[0] + "/chatbot_no_such_database")
    result = invoke("threads", "--db", missing)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: cannot use the PostgreSQL database postgresql://postgres:***@")
    assert "chatbot_no_such_database" in line and "hunter2" not in result.output


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:p%40ss@h:5432/d", "postgresql://u:***@h:5432/d"),
        ("postgresql://u@h/d", "postgresql://u@h/d"),
        ("postgres://h/d", "postgres://h/d"),
        (
            "postgresql://u@h/d?password=s3cret&sslmode=disable",
            "postgresql://u@h/d?password=***&sslmode=disable",
        ),
        (
            "postgresql://h/d?sslmode=require&PASSWORD=x%26y",
            "postgresql://h/d?sslmode=require&PASSWORD=***",
        ),
        ("postgresql://u:p@h/d?sslpassword=k", "postgresql://u:***@h/d?sslpassword=***"),
        ("postgresql://u@h/d?user=password", "postgresql://u@h/d?user=password"),
    ],
)
def test_the_password_is_redacted_from_the_location(url: str, shown: str) -> None:
    assert without_password(url) == shown


def test_a_password_in_the_query_string_is_never_printed() -> None:
    url = "postgresql://u@127.0.0.1:1/x?password=s3cr%65t-pw&sslmode=disable"
    for args in (["threads", "--db", url], ["config", "--db", url]):
        result = invoke(*args)
        assert "s3cr" not in result.output, result.output
    refused = invoke("threads", "--db", url)
    assert refused.exit_code == 2 and "password=***" in refused.stderr
