"""The real HTTP path: ChatOpenAI and the ``chatbot`` CLI against a fake OpenAI server.

Nothing in the project is mocked; the only fake is the server at the edge
(``tests/fake_openai.py``), reached over real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from chatbot.config.settings import Settings
from chatbot.engine.models import make_model
from chatbot.memory.recall import NOTE as RECALL_NOTE
from tests.fake_openai import FakeOpenAI, Reply, content_text
from tests.helpers import (
    CHAT_MODEL,
    CREATE_PROMPT,
    EXTEND_PROMPT,
    SECRET,
    SUMMARY_TEXT,
    Cli,
    chat_requests,
    echo_or_summary,
    is_summary_request,
    ok,
    stored_bytes,
    summarizing,
    summary_requests,
    worth_folding,
)


def http_settings(server: FakeOpenAI, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "model": CHAT_MODEL,
        "openai_api_key": SECRET,
        "openai_base_url": server.base_url,
        "max_retries": 0,
        "timeout": 10,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_make_model_invoke_returns_the_scripted_text_and_sends_the_settings_model(
    openai_server: FakeOpenAI,
) -> None:
    settings = http_settings(openai_server)
    model = make_model(settings.model, settings, role="chat")
    openai_server.script("Hello from the fake server.")

    reply = model.invoke("hi there")

    assert reply.text == "Hello from the fake server."
    assert reply.usage_metadata and reply.usage_metadata["output_tokens"] > 0
    (request,) = openai_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == CHAT_MODEL
    assert request.body.get("stream") in (None, False)
    assert request.last_user_text == "hi there"
    assert request.authorization == f"Bearer {SECRET}"


def test_make_model_stream_returns_the_scripted_text_in_pieces_with_usage(
    openai_server: FakeOpenAI,
) -> None:
    settings = http_settings(openai_server)
    model = make_model(settings.model, settings, role="chat")
    openai_server.script("one two three four")

    chunks = list(model.stream("count please"))

    assert "".join(chunk.text for chunk in chunks) == "one two three four"
    assert len([chunk for chunk in chunks if chunk.text]) == 4
    merged = chunks[0]
    for chunk in chunks[1:]:
        merged += chunk
    assert merged.usage_metadata and merged.usage_metadata["total_tokens"] > 0
    (request,) = openai_server.requests
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}
    assert request.body["model"] == CHAT_MODEL


def test_the_models_of_a_turn_load_the_certificates_once(
    openai_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each model makes a blocking and an awaited HTTP client: all of them share one TLS
    context, so the certificates (SSL_CERT_FILE here, as tests/conftest.py sets it) are loaded
    once a process, not once a client; and the clients still answer."""
    import asyncio
    import ssl

    import langchain_openai  # noqa: F401  (its import makes a TLS context of its own, once)

    from chatbot.engine.clients import tls_context

    loads: list[str] = []
    real = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        loads.append(str(kwargs.get("cafile") or kwargs.get("capath") or ""))
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)
    tls_context.cache_clear()
    settings = http_settings(openai_server, summary_model="fake-summary-model")
    openai_server.script("a reply", "another", "a summary")

    chat = make_model(settings.model, settings, role="chat")
    summary = make_model(settings.summary_model_name, settings, role="summary")
    assert chat.invoke("hi").text == "a reply"
    assert asyncio.run(chat.ainvoke("again")).text == "another"
    assert summary.invoke("sum up").text == "a summary"

    assert loads == [str(Path(os.environ["SSL_CERT_FILE"]))]


def test_summary_model_is_called_at_temperature_zero(openai_server: FakeOpenAI) -> None:
    settings = http_settings(openai_server, summary_model="fake-summary-model", temperature=0.9)
    openai_server.script("a summary", "a reply")

    make_model(settings.summary_model_name, settings, role="summary").invoke("sum up")
    make_model(settings.model, settings, role="chat").invoke("hi")

    summary_call, chat_call = openai_server.requests
    assert (summary_call.body["model"], summary_call.body["temperature"]) == (
        "fake-summary-model",
        0,
    )
    assert (chat_call.body["model"], chat_call.body["temperature"]) == (CHAT_MODEL, 0.9)


# --- chatbot ask, end to end ----------------------------------------------------------------


def test_ask_prints_the_scripted_reply_and_exits_zero(cli: Cli) -> None:
    cli.server.script("Paris is the capital of France.")

    result = ok(cli.ask("What is the capital of France?"))

    assert result.stdout.strip() == "Paris is the capital of France."
    (request,) = cli.server.requests
    assert request.body["model"] == CHAT_MODEL
    assert request.last_user_text == "What is the capital of France?"
    assert request.authorization == f"Bearer {SECRET}"


def test_ask_with_only_a_base_url_reaches_a_local_server_without_a_real_key(cli: Cli) -> None:
    cli.server.script("local model here")

    result = ok(cli.ask("hello", OPENAI_API_KEY=""))

    assert result.stdout.strip() == "local model here"
    assert "offline" not in result.output
    (request,) = cli.server.requests
    assert request.authorization == "Bearer not-needed"


def test_second_ask_on_the_same_thread_sends_the_previous_turn(cli: Cli) -> None:
    cli.server.script("Nice to meet you, Ada.", "Your name is Ada.")

    ok(cli.ask("Hi, I'm Ada."))
    result = ok(cli.ask("What's my name?"))

    assert result.stdout.strip() == "Your name is Ada."
    sent = [(m["role"], content_text(m["content"])) for m in cli.server.requests[1].messages]
    assert sent == [
        ("user", "Hi, I'm Ada."),
        ("assistant", "Nice to meet you, Ada."),
        ("user", "What's my name?"),
    ]


def test_other_threads_do_not_see_each_others_turns(cli: Cli) -> None:
    cli.server.script("reply a", "reply b")

    ok(cli.ask("first thread", thread="a"))
    ok(cli.ask("second thread", thread="b"))

    assert [content_text(m["content"]) for m in cli.server.requests[1].messages] == [
        "second thread"
    ]


def test_api_key_never_appears_in_cli_output_or_in_the_database(cli: Cli) -> None:
    cli.server.responder = echo_or_summary
    outputs = [ok(cli.ask(worth_folding(f"turn {n}"), **summarizing())).output for n in range(3)]
    shown = cli.invoke("show", "t1", "--json", "--db", str(cli.db))
    outputs.append(ok(shown).output)
    assert summary_requests(cli.server), "the summary path should have been exercised too"

    assert all(r.authorization == f"Bearer {SECRET}" for r in cli.server.requests)
    for output in outputs:
        assert SECRET not in output
    stored = cli.db_bytes()
    assert b"turn 2" in stored, "sanity: the database holds the conversation"
    assert SECRET.encode() not in stored
    assert b"SECRET-123456" not in stored


def test_database_file_is_created_private_0600(cli: Cli) -> None:
    cli.server.script("ok")

    ok(cli.ask("hello"))

    assert stat.S_IMODE(cli.db.stat().st_mode) == 0o600
    for suffix in ("-wal", "-shm"):
        side = Path(f"{cli.db}{suffix}")
        if side.exists():
            assert stat.S_IMODE(side.stat().st_mode) == 0o600, side.name


# --- summarization over HTTP ----------------------------------------------------------------


def test_summary_request_reaches_the_server_and_show_has_the_summary_and_fewer_messages(
    cli: Cli,
) -> None:
    cli.server.responder = echo_or_summary

    first = ok(cli.ask(worth_folding("I'm Ada and I like green tea."), **summarizing()))
    assert summary_requests(cli.server) == []
    assert "summarized" not in first.stderr
    second = ok(cli.ask("What do I like?", **summarizing()))

    assert second.stdout.strip() == "echo: What do I like?"
    assert "summarized 3 messages" in second.stderr
    (request,) = summary_requests(cli.server)
    asked = request.last_user_text
    assert "<conversation>" in asked and CREATE_PROMPT in asked
    assert "green tea" in asked
    assert "echo: What do I like?" not in asked, "the kept message must not be summarized"
    assert request.body["model"] == CHAT_MODEL
    assert request.body["temperature"] == 0
    state = cli.show()
    assert state["summary"] == SUMMARY_TEXT
    assert [(m["type"], m["content"]) for m in state["messages"]] == [
        ("ai", "echo: What do I like?")
    ]


def test_after_a_summary_the_chat_call_carries_it_and_the_next_summary_extends_it(
    cli: Cli,
) -> None:
    cli.server.responder = echo_or_summary
    for text in (worth_folding("I'm Ada."), "I like green tea.", "And oolong."):
        ok(cli.ask(text, **summarizing()))

    first_chat, *_, third_chat = chat_requests(cli.server)
    assert third_chat.messages[0] == {
        "role": "system",
        "content": f"Summary of conversation earlier: {SUMMARY_TEXT}\n\n{RECALL_NOTE['en']}",
    }
    # With a summary the model is offered the recall tool; before it, no tool and no note.
    assert [tool["function"]["name"] for tool in third_chat.body["tools"]] == ["recall"]
    assert "tools" not in first_chat.body
    assert [content_text(m["content"]) for m in third_chat.messages[1:]] == [
        "echo: I like green tea.",
        "And oolong.",
    ]
    first, second = summary_requests(cli.server)
    assert CREATE_PROMPT in first.last_user_text
    assert EXTEND_PROMPT in second.last_user_text
    assert SUMMARY_TEXT in second.last_user_text
    assert "I'm Ada." not in second.last_user_text, "only the new messages are folded in"
    assert len(cli.show()["messages"]) == 1


# --- failure safety over HTTP ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "env"),
    [
        pytest.param(Reply(status=500, error_message="upstream exploded"), {}, id="http-500"),
        pytest.param(
            Reply(text="too late", delay=3.0),
            {"CHATBOT_TIMEOUT": "1"},
            id="slower-than-timeout",
            marks=pytest.mark.slow,  # (it waits out the timeout)
        ),
    ],
)
def test_failed_summary_call_keeps_every_message_and_a_later_turn_summarizes(
    cli: Cli, failure: Reply, env: dict[str, str]
) -> None:
    broken = {"on": True}

    def responder(body: dict[str, Any]) -> str | Reply:
        if is_summary_request(body) and broken["on"]:
            return failure
        return echo_or_summary(body)

    cli.server.responder = responder
    cli.env = summarizing()
    ada = worth_folding("I'm Ada.")
    ok(cli.ask(ada))

    # (the failure's own settings for the failing turn alone: a healthy turn on a busy machine
    # may take longer than the 1 s timeout)
    result = ok(cli.ask("I like green tea.", **env))

    assert result.stdout.strip() == "echo: I like green tea."
    assert "summary failed" in result.stderr
    assert "Traceback" not in result.output
    assert SECRET not in result.output
    assert len(summary_requests(cli.server)) == 1
    state = cli.show()
    assert state["summary"] == ""
    assert [m["content"] for m in state["messages"]] == [
        ada,
        f"echo: {ada}",
        "I like green tea.",
        "echo: I like green tea.",
    ]

    broken["on"] = False
    later = ok(cli.ask("And oolong."))

    # The trigger held before the new message too: the fold is made before answering.
    assert "summary failed" not in later.stderr
    assert "summarized 4 messages" in later.stderr
    retried = summary_requests(cli.server)[-1].last_user_text
    assert "I'm Ada." in retried and "I like green tea." in retried
    assert "And oolong." not in retried
    answered = chat_requests(cli.server)[-1]
    assert SUMMARY_TEXT in content_text(answered.messages[0]["content"])
    state = cli.show()
    assert state["summary"] == SUMMARY_TEXT
    assert [m["content"] for m in state["messages"]] == ["And oolong.", "echo: And oolong."]


def test_http_401_on_the_chat_call_exits_nonzero_with_one_redacted_error_line(
    cli: Cli,
) -> None:
    # A server that echoes the key back in its error message: the CLI must still not show it.
    cli.server.script(
        Reply(
            status=401,
            error_message=f"Incorrect API key provided: {SECRET}. Find your key in settings.",
        )
    )

    result = cli.ask("hello?")

    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:")
    assert "401" in lines[0]
    assert "Traceback" not in result.output
    assert SECRET not in result.output
    assert "SECRET-123456" not in result.output
    assert len(cli.server.requests) == 1, "a 401 must not be retried"
    assert b"SECRET-123456" not in cli.db_bytes(), "the failed task's stored error is redacted"
    assert b"Incorrect API key provided" in cli.db_bytes(), "the error itself is kept"


@pytest.mark.parametrize("source", ["env file", "config file", "environment"])
def test_a_refused_key_names_where_it_was_found_and_never_the_key(
    source: str, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    from chatbot.cli.commands import app
    from chatbot.config.sources import user_config_file
    from tests.helpers import one_error, runner

    wrong = "sk-wrong-7f3a9c1e5b"
    openai_server.script(Reply(status=401, error_message="Incorrect API key provided"))
    env = {"OPENAI_BASE_URL": openai_server.base_url, "CHATBOT_MODEL": CHAT_MODEL}
    if source == "env file":
        (tmp_path / ".env").write_text(f"OPENAI_API_KEY={wrong}\n")
        said = "check OPENAI_API_KEY in .env"
    elif source == "config file":
        user_config_file().parent.mkdir(parents=True)
        user_config_file().write_text(f"OPENAI_API_KEY={wrong}\n")
        user_config_file().chmod(0o600)  # (else a warning says others can read it)
        said = f"check OPENAI_API_KEY in {user_config_file()}"
    else:
        env["OPENAI_API_KEY"] = wrong
        said = "check the environment variable OPENAI_API_KEY"
    db = tmp_path / "c.sqlite"
    result = runner.invoke(app, ["ask", "hi", "--db", str(db)], env=env)
    line = one_error(result)
    assert line.startswith("error: the model server answered HTTP 401"), line
    assert f"(the API key was refused: {said})" in line
    assert openai_server.requests[-1].authorization == f"Bearer {wrong}", "that key was sent"
    assert wrong not in result.output and wrong.encode() not in stored_bytes(db)
