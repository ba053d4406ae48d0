"""The fault table: every failure a model server can throw at a turn, on the chat call and on
the summary call, and what the user sees and keeps.

Each row runs ``chatbot ask`` in-process against the local fake OpenAI server: two healthy
turns (the second one folds the first into a summary), then a turn whose chat or summary call
meets the fault, then a healthy turn. It asserts the exit code, the one line on stderr, the
messages and the summary before and after the fault, and that the next turn works.
docs/reliability.md publishes this table; a test keeps the two in step.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from chatbot.cli.commands import app
from tests.fake_openai import FakeOpenAI, RecordedRequest, Reply, context_length_exceeded
from tests.helpers import (
    CONTROL,
    ROOT,
    SECRET,
    Cli,
    chatbots_together,
    closed_port,
    is_summary_request,
    one_error,
    runner,
    wait_until,
    worth_folding,
)

ESCAPES = (
    "\x1b[2J\x1b[HHello \x1b]0;pwned\x07there \x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\"
)


@dataclass(frozen=True)
class Fault:
    """One row: the fault, where it strikes, and what must follow."""

    label: str
    replies: tuple[Reply, ...]
    """What the faulted call (and, for retries, the calls after it) gets."""
    exit_code: int = 1
    line: str = ""
    """What the one line on stderr must say ('' when the turn succeeds quietly)."""
    kept: Literal["message", "turn", "turn+fold"] = "message"
    """``message``: the user's message is kept without a reply; ``turn``: the reply is
    saved too; ``turn+fold``: the reply is saved and older messages were folded."""
    retries: int = 0
    env: dict[str, str] = field(default_factory=dict)


CUT = Reply(text="Hello! LLMock is here to help with everything", cut_after=3)
STALL = Reply(text="one two three four five six", chunk_delay=3.0)
HTML = Reply(raw=b"<html><body><h1>502 Bad Gateway</h1></body></html>")
EMPTY_STREAM = Reply(raw=b"", content_type="text/event-stream")
"""A stream that ends with nothing in it (a server past its window may answer so)."""
MALFORMED = Reply(
    raw=b'data: {"id": "x", "object": "chat.completion.chunk", "choices": [{"delta": {"con\n\n',
    content_type="text/event-stream",
)


def status(code: int, message: str, error_code: str | None = None) -> Reply:
    return Reply(status=code, error_message=message, error_code=error_code)


CHAT_FAULTS = [
    Fault(
        "400 context length",
        (context_length_exceeded(300, 450),),
        exit_code=0,
        kept="turn+fold",
    ),
    Fault(
        "401 bad key",
        (status(401, f"Incorrect API key provided: {SECRET}", "invalid_api_key"),),
        line="answered HTTP 401: Incorrect API key provided: [redacted] (the API key was "
        "refused: check the environment variable OPENAI_API_KEY)",
    ),
    Fault(
        "404 unknown model",
        (status(404, "The model `fake-chat-model-7` does not exist", "model_not_found"),),
        line="HTTP 404: The model `fake-chat-model-7` does not exist (the server does not know "
        "this model or path: check CHATBOT_MODEL",
    ),
    Fault(
        "429 then success",
        (status(429, "Rate limit reached for requests", "rate_limit_exceeded"),),
        exit_code=0,
        kept="turn+fold",
        retries=1,
    ),
    Fault(
        "429 out of retries",
        (status(429, "Rate limit reached for requests", "rate_limit_exceeded"),),
        line="HTTP 429: Rate limit reached for requests (rate limited or out of quota",
    ),
    Fault(
        "500 server error",
        (status(500, "The server had an error while processing your request."),),
        line="HTTP 500: The server had an error while processing your request. (the model "
        "server failed: try again in a moment with /retry)",
    ),
    Fault(
        "503 overloaded",
        (status(503, "The engine is currently overloaded"),),
        line="HTTP 503: The engine is currently overloaded (the model server failed",
    ),
    Fault(
        "timeout",
        (Reply(text="too late", delay=3.0),),
        line="stopped answering for longer than CHATBOT_TIMEOUT: try again (/retry), or raise "
        "CHATBOT_TIMEOUT",
    ),
    Fault(
        "connection refused",
        (),
        line="(the connection was refused): check OPENAI_BASE_URL and that the server is running",
        env={"OPENAI_BASE_URL": "refused"},
    ),
    Fault(
        "host not found",
        (),
        line="cannot find the model server at http://chatbot-test.invalid/v1: its host name does "
        "not resolve (check OPENAI_BASE_URL, and the network)",
        env={"OPENAI_BASE_URL": "http://chatbot-test.invalid/v1"},
    ),
    Fault(
        "connection dropped",
        (Reply(drop=True),),
        line="the model server closed the connection without finishing its answer",
    ),
    Fault(
        "stream cut",
        (CUT,),
        line="the connection closed before the reply was finished; it was not saved",
    ),
    Fault("stream stall", (STALL,), line="stopped answering for longer than CHATBOT_TIMEOUT"),
    Fault("malformed SSE", (MALFORMED,), line="sent data that is not valid JSON"),
    Fault(
        "HTML 200",
        (HTML, HTML),
        line="the model server sent no reply: a stream holding none, then, asked without "
        "streaming, a body that is not an answer (its earlier answers in this thread came "
        "through, so the address is right)",
    ),
    Fault("empty stream once", (EMPTY_STREAM,), exit_code=0, kept="turn+fold"),
    Fault("empty reply", (Reply(text=""),), line="the model returned an empty reply"),
    Fault(
        "finish_reason length",
        (Reply(text="A long answer that", finish_reason="length"),),
        exit_code=0,
        kept="turn+fold",
    ),
    Fault("escape codes", (Reply(text=ESCAPES),), exit_code=0, kept="turn+fold"),
]

SUMMARY_FAILED = "summary failed, nothing was removed (the next turn retries): "

SUMMARY_FAULTS = [
    Fault(
        "400 context length",
        (context_length_exceeded(300, 450),),
        exit_code=0,
        kept="turn+fold",
    ),
    Fault(
        "401 bad key",
        (status(401, f"Incorrect API key provided: {SECRET}", "invalid_api_key"),),
        exit_code=0,
        kept="turn",
        line=SUMMARY_FAILED + "the model server answered HTTP 401",
    ),
    Fault(
        "404 unknown model",
        (status(404, "The model `fake-chat-model-7` does not exist", "model_not_found"),),
        exit_code=0,
        kept="turn",
        line=SUMMARY_FAILED + "the model server answered HTTP 404",
    ),
    Fault(
        "429 then success",
        (status(429, "Rate limit reached for requests", "rate_limit_exceeded"),),
        exit_code=0,
        kept="turn+fold",
        retries=1,
    ),
    Fault(
        "500 server error",
        (status(500, "The server had an error while processing your request."),),
        exit_code=0,
        kept="turn",
        line=SUMMARY_FAILED + "the model server answered HTTP 500",
    ),
    Fault(
        "503 overloaded",
        (status(503, "The engine is currently overloaded"),),
        exit_code=0,
        kept="turn",
        line=SUMMARY_FAILED + "the model server answered HTTP 503",
    ),
    Fault(
        "timeout",
        (Reply(text="too late", delay=3.0),),
        exit_code=0,
        kept="turn",
        line=SUMMARY_FAILED + "the model server stopped answering",
    ),
    Fault(
        "connection dropped",
        (Reply(drop=True),),
        exit_code=0,
        kept="turn",
        line=SUMMARY_FAILED + "the model server closed the connection",
    ),
    Fault(
        "stream cut",
        (Reply(text="User: Lance. Facts: likes the", cut_after=3),),
        exit_code=0,
        kept="turn",
        line=SUMMARY_FAILED + "the connection closed before the summary was finished",
    ),
    Fault(
        "stream stall",
        (STALL,),
        exit_code=0,
        kept="turn",
        line=SUMMARY_FAILED + "the model server stopped answering",
    ),
    Fault(
        "malformed SSE",
        (MALFORMED,),
        exit_code=0,
        kept="turn",
        line=SUMMARY_FAILED + "the model server sent data that is not valid JSON",
    ),
    Fault(
        "HTML 200",
        (HTML, HTML),
        exit_code=0,
        kept="turn",
        line=SUMMARY_FAILED + "the model server answered with a body that is not an answer",
    ),
    Fault("empty stream once", (EMPTY_STREAM,), exit_code=0, kept="turn+fold"),
    Fault(
        "empty reply",
        (Reply(text=""),),
        exit_code=0,
        kept="turn",
        line=SUMMARY_FAILED + "the model returned an empty summary",
    ),
    Fault(
        "finish_reason length",
        (Reply(text="User: Lance. Facts: likes the", finish_reason="length"),),
        exit_code=0,
        kept="turn",
        line=SUMMARY_FAILED + "the summary was cut at the model's length limit",
    ),
    Fault("escape codes", (Reply(text="SUMMARY " + ESCAPES),), exit_code=0, kept="turn+fold"),
]


class Script:
    """Healthy replies (``echo: ...`` and numbered summaries), except that the first call of
    the faulted kind after :meth:`arm` gets the fault's replies."""

    def __init__(self) -> None:
        self.summaries = 0
        self.pending: list[Reply] = []
        self.target: str | None = None

    def arm(self, target: str, replies: tuple[Reply, ...]) -> None:
        self.target, self.pending = target, list(replies)

    def __call__(self, body: dict[str, Any]) -> str | Reply:
        kind = "summary" if is_summary_request(body) else "chat"
        if kind == self.target and self.pending:
            return self.pending.pop(0)
        if kind == "summary":
            self.summaries += 1
            return f"SUMMARY {self.summaries}: the user said one, two and three."
        return "echo: " + RecordedRequest("", None, body).last_user_text


def run_row(cli: Cli, server: FakeOpenAI, target: str, fault: Fault) -> dict[str, Any]:
    script = Script()
    server.responder = script
    env = {
        "CHATBOT_SUMMARY_TRIGGER": "messages:3",
        "CHATBOT_SUMMARY_KEEP": "messages:2",
        "CHATBOT_MAX_RETRIES": "0",
    }
    # The healthy turns around the faulted one keep the Cli's 10-second timeout: with 1 s, a
    # busy machine (parallel workers) made them time out too.
    for text in (worth_folding("one"), "two"):
        assert cli.ask(text, **env).exit_code == 0
    before = cli.show()
    assert before["summary"].startswith("SUMMARY 1") and len(before["messages"]) == 2

    script.arm(target, fault.replies)
    fault_env = {
        **env,
        # The timeout and stall rows wait out one second; the others keep the Cli's 10 (with
        # 1 s, a request to the in-process fake server on a busy machine timed out before it
        # arrived, and the row never met its fault).
        **({"CHATBOT_TIMEOUT": "1"} if fault.label in WAITED else {}),
        "CHATBOT_MAX_RETRIES": str(fault.retries),
        **fault.env,
    }
    with closed_port() as port:
        if fault_env.get("OPENAI_BASE_URL") == "refused":
            fault_env["OPENAI_BASE_URL"] = f"http://127.0.0.1:{port}/v1"
        result = cli.ask("three", **fault_env)
    after = cli.show()
    assert not script.pending, "the faulted turn met every reply of the fault"
    following = cli.ask("four", **env)
    return {
        "result": result,
        "before": before,
        "after": after,
        "following": following,
        "final": cli.show(),
    }


def check_row(row: dict[str, Any], fault: Fault) -> None:
    result, before, after = row["result"], row["before"], row["after"]
    assert result.exit_code == fault.exit_code, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    if fault.line:
        assert len(lines) == 1, lines
        assert fault.line in lines[0], lines[0]
    elif fault.exit_code == 0:
        assert not [line for line in lines if "error" in line or "failed" in line], lines
    assert "Traceback" not in result.output and SECRET not in result.output

    texts = [m["content"] for m in after["messages"]]
    old = [m["content"] for m in before["messages"]]
    if fault.kept == "message":
        assert texts == [*old, "three"], "the message is kept, without a reply"
        assert after["summary"] == before["summary"]
    elif fault.kept == "turn":
        assert texts[:-1] == [*old, "three"] and after["messages"][-1]["type"] == "ai"
        assert after["summary"] == before["summary"], "a failed summary changes nothing"
    else:
        assert after["summary"] != before["summary"] and after["summary"].startswith("SUMMARY")
        assert texts[-2:-1] == ["three"] or texts[-1:] == ["three"]
        assert after["messages"][-1]["type"] == "ai"
    assert not CONTROL.search(result.stdout), "no escape code reaches the terminal"

    following = row["following"]
    assert following.exit_code == 0, following.output
    assert "echo: four" in following.stdout
    assert row["final"]["messages"][-1]["content"] == "echo: four"


WAITED = {"timeout", "stream stall"}
"""The rows that wait out CHATBOT_TIMEOUT."""


def table(faults: list[Fault]) -> list[Any]:
    """The rows as parameters; those that wait out CHATBOT_TIMEOUT (a second) are slow."""
    return [pytest.param(f, marks=pytest.mark.slow) if f.label in WAITED else f for f in faults]


@pytest.mark.parametrize("fault", table(CHAT_FAULTS), ids=lambda f: f.label)
def test_a_fault_on_the_chat_call(fault: Fault, cli: Cli, openai_server: FakeOpenAI) -> None:
    row = run_row(cli, openai_server, "chat", fault)
    check_row(row, fault)
    result = row["result"]
    if fault.exit_code:
        assert "your message is kept in thread 't1'" in result.stderr
        assert "echo: three" not in result.stdout
    if fault.label == "finish_reason length":
        assert result.stdout.strip() == "A long answer that\n\n(cut at the model's length limit)"
        assert row["after"]["messages"][-1]["content"].endswith("(cut at the model's length limit)")
    if fault.label == "escape codes":
        assert "Hello there link" in result.stdout.replace("  ", " ")


@pytest.mark.parametrize("fault", table(SUMMARY_FAULTS), ids=lambda f: f.label)
def test_a_fault_on_the_summary_call(fault: Fault, cli: Cli, openai_server: FakeOpenAI) -> None:
    row = run_row(cli, openai_server, "summary", fault)
    check_row(row, fault)
    assert "echo: three" in row["result"].stdout, "the reply is shown whatever the summary does"
    assert row["final"]["summary"].startswith("SUMMARY"), "the next turn folds again"


def test_the_readme_publishes_every_row() -> None:
    doc = (ROOT / "docs" / "reliability.md").read_text()
    section = doc.split("## Faults on the model calls", 1)[1].split("\n## ", 1)[0]
    for fault in CHAT_FAULTS + SUMMARY_FAULTS:
        assert f"| {fault.label} |" in section, fault.label


# --- kill -9 in the middle of a fold ------------------------------------------------------------


@pytest.mark.slow
def test_kill_during_the_summary_keeps_the_reply_and_no_false_note(
    openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    script = Script()
    openai_server.responder = script
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OPENAI_"))},
        "OPENAI_API_KEY": SECRET,
        "OPENAI_BASE_URL": openai_server.base_url,
        "CHATBOT_MODEL": "fake-chat-model-7",
        "CHATBOT_DB": str(tmp_path / "c.sqlite"),
        "CHATBOT_SUMMARY_TRIGGER": "messages:3",
        "CHATBOT_SUMMARY_KEEP": "messages:2",
    }
    chatbot = [sys.executable, "-m", "chatbot"]
    # (the turns before, and after, the killed one: in-process)
    for text in (worth_folding("one"), "two"):
        done = runner.invoke(app, ["ask", text], env=env)
        assert done.exit_code == 0, done.output
    script.arm("summary", (Reply(text="never", delay=60.0),))
    process = subprocess.Popen(
        [*chatbot, "ask", "three"],
        stdin=subprocess.DEVNULL,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    def summarizing() -> bool:
        assert process.poll() is None, "ask ended before its summary call"
        return sum(map(is_summary_request, openai_server.requests)) >= 2

    wait_until(summarizing, 60, "the summary call")
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)

    done = runner.invoke(app, ["ask", "four"], env=env)
    assert done.exit_code == 0, done.output
    assert "never got a reply" not in done.stderr, "the reply to 'three' had been saved"
    shown = runner.invoke(app, ["show", "default", "--json"], env=env)
    assert "echo: three" in shown.stdout and "echo: four" in shown.stdout


# --- the same faults in the REPL, and the pieces behind the table -------------------------------


def test_in_the_repl_a_cut_reply_is_not_saved_and_retry_regenerates_it(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    openai_server.script(CUT, Reply(text="A long answer that", finish_reason="length"))
    openai_server.responder = Script()
    result = cli.invoke(
        "chat", "--thread", "t1", "--db", str(cli.db), stdin="hello\n/retry\n/exit\n"
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert (
        "the connection closed before the reply was finished; it was not saved - your message "
        "is kept; /retry tries again" in " ".join(out.split())
    )
    assert "(cut at the model's length limit)" in out, "the note shows in the REPL too"
    messages = cli.show()["messages"]
    assert [m["content"] for m in messages] == [
        "hello",
        "A long answer that\n\n(cut at the model's length limit)",
    ]


@pytest.mark.parametrize(
    ("metadata", "text", "tool_calls", "expected"),
    [
        ({"finish_reason": "stop", "model_provider": "openai"}, "hi", [], "complete"),
        ({"model_provider": "openai"}, "Hello! LLMock is", [], "cut"),
        ({}, "a fake model reports nothing", [], "complete"),
        ({"finish_reason": "length"}, "cut", [], "length"),
        ({"stop_reason": "max_tokens"}, "anthropic", [], "length"),
        ({"done_reason": "length"}, "ollama", [], "length"),
        ({"finish_reason": "content_filter"}, "partial", [], "filtered"),
        ({"finish_reason": "stop"}, "  ", [], "empty"),
        (
            {"finish_reason": "tool_calls", "model_provider": "openai"},
            "",
            [{"name": "f", "args": {}, "id": "1"}],
            "empty",  # a tool call with no text is no answer (the chatbot calls no tools)
        ),
    ],
)
def test_how_a_reply_ended(
    metadata: dict[str, str], text: str, tool_calls: list[Any], expected: str
) -> None:
    from langchain_core.messages import AIMessage

    from chatbot.memory.finish import finish_of

    message = AIMessage(content=text, response_metadata=metadata, tool_calls=tool_calls)
    assert finish_of(message) == expected


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        (
            "OPENAI_API_KEY",
            "sk-abc\ndef",
            "OPENAI_API_KEY is not valid: it contains a space or a line break",
        ),
        (
            "OPENAI_API_KEY",
            "sk-abcé€",
            "OPENAI_API_KEY is not valid: it contains characters no API key has",
        ),
        (
            "CHATBOT_TIMEOUT",
            "inf",
            "CHATBOT_TIMEOUT='inf' is not valid: Input should be a finite number",
        ),
        ("CHATBOT_TIMEOUT", "1e30", "CHATBOT_TIMEOUT='1e30' is not valid"),
        (
            "OPENAI_BASE_URL",
            "localhost:11434/v1",
            "OPENAI_BASE_URL is not valid: use an http:// or https:// address, e.g. "
            "http://localhost:11434/v1",
        ),
        ("OPENAI_BASE_URL", "http://[::1/v1", "OPENAI_BASE_URL is not valid: use an http://"),
    ],
)
def test_settings_that_would_fail_mid_request_are_refused_at_start(
    cli: Cli, variable: str, value: str, problem: str
) -> None:
    result = cli.ask("hello", **{variable: value})
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {problem}")
    assert "sk-abc" not in result.output, "the key is never shown"
    assert not cli.db.exists() or not cli.show()["messages"], "nothing was sent or saved"


def test_a_key_pasted_with_a_trailing_line_break_just_works(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    openai_server.responder = Script()
    result = cli.ask("hello", OPENAI_API_KEY=SECRET + "\n")
    assert result.exit_code == 0, result.output
    assert openai_server.requests[-1].authorization == f"Bearer {SECRET}"


def _env(server: FakeOpenAI, db: Path) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OPENAI_"))},
        "OPENAI_API_KEY": SECRET,
        "OPENAI_BASE_URL": server.base_url,
        "CHATBOT_MODEL": "fake-chat-model-7",
        "CHATBOT_DB": str(db),
    }


@pytest.mark.slow
def test_kill_during_the_chat_call_keeps_the_message_and_says_so(
    openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    script = Script()
    openai_server.responder = script
    env = _env(openai_server, tmp_path / "c.sqlite")
    chatbot = [sys.executable, "-m", "chatbot"]
    script.arm("chat", (Reply(text="never", delay=60.0),))
    process = subprocess.Popen(
        [*chatbot, "ask", "one"], stdin=subprocess.DEVNULL, env=env, stderr=subprocess.PIPE
    )

    def asking() -> bool:
        assert process.poll() is None, "ask ended before its chat call"
        return bool(openai_server.requests)

    wait_until(asking, 60, "the chat call")
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)

    done = runner.invoke(app, ["ask", "two"], env=env)  # (the next turn: in-process)
    assert done.exit_code == 0, done.output
    assert "the previous turn in this thread never got a reply" in done.stderr
    shown = runner.invoke(app, ["show", "default", "--json"], env=env)
    texts = [m["content"] for m in json.loads(shown.stdout)["messages"]]
    assert texts == ["one", "two", "echo: two"]


@pytest.mark.slow
def test_concurrent_asks_on_one_database_all_land(
    openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    """Eight asks let go at the same moment on a file none of them finds: each sets the
    database up (LangGraph's tables and migrations, chatbot's schema, the memories' store)
    as the others do, and every one lands; three rounds, each on a new file."""
    openai_server.responder = Script()
    for round_ in range(3):
        db = tmp_path / f"c{round_}.sqlite"
        env = _env(openai_server, db)
        asks = [["ask", f"hello {n}", "--thread", f"t{n}"] for n in range(8)]
        for n, ended in enumerate(chatbots_together(tmp_path / f"r{round_}", *asks, env=env)):
            assert ended.returncode == 0, ended.stderr
            assert f"echo: hello {n}" in ended.stdout
        listing = runner.invoke(app, ["threads", "--json"], env=env)
        threads = {t["thread_id"]: t["messages"] for t in json.loads(listing.stdout)}
        assert threads == {f"t{n}": 2 for n in range(8)}
        with sqlite3.connect(db) as connection:
            assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def _raised(make: Any) -> BaseException:
    """An exception raised the way httpx raises it, with its cause chain."""
    try:
        make()
    except BaseException as error:
        return error
    raise AssertionError("nothing raised")


def _connect_error(cause: BaseException) -> None:
    import httpx

    try:
        raise cause
    except OSError as error:
        raise httpx.ConnectError(str(error)) from error


@pytest.mark.parametrize(
    ("cause", "expected"),
    [
        (
            socket.gaierror(-2, "Name or service not known"),
            "cannot find the model server: the host name in OPENAI_BASE_URL does not resolve",
        ),
        (
            ConnectionRefusedError(111, "Connection refused"),
            "cannot reach the model server (the connection was refused)",
        ),
        (OSError(101, "Network is unreachable"), "cannot reach the model server: check"),
    ],
)
def test_why_a_connection_failed_is_named(cause: OSError, expected: str) -> None:
    from chatbot.errors import describe_error

    assert describe_error(_raised(lambda: _connect_error(cause))).startswith(expected)


# --- a server that is not there fails at once; a busy one is asked again ----------------------

_attempts: list[tuple[str, Any]] | None = None
"""Where the audit hook writes the connections and name lookups this process starts (None:
nowhere)."""


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _attempts is not None and event in ("socket.connect", "socket.getaddrinfo"):
        _attempts.append((event, args[1] if event == "socket.connect" else args[0]))


sys.addaudithook(_audit)  # (for the life of the process: it records only while asked to)


def attempts_of(action: Any) -> tuple[Any, list[tuple[str, Any]]]:
    """Run ``action``; its result, and each connection (``socket.connect``, the address) and
    name lookup (``socket.getaddrinfo``, the host) made meanwhile, by any thread."""
    global _attempts
    _attempts = []
    try:
        return action(), list(_attempts)
    finally:
        _attempts = None


def test_a_refused_connection_fails_at_once_naming_the_server(cli: Cli) -> None:
    """A server that is not running is not a busy one: no backoff and retries (9 s on a busy
    machine before the line), one attempt, and the line names the address it tried, without
    its password."""
    with closed_port() as port:
        base = f"http://ada:pw-9931@127.0.0.1:{port}/v1"
        result, tried = attempts_of(
            lambda: cli.ask("hi", OPENAI_BASE_URL=base, CHATBOT_MAX_RETRIES="2")
        )
        (line,) = result.stderr.strip().splitlines()
        assert result.exit_code == 1
        assert line.startswith(
            f"error: cannot reach the model server at http://ada:***@127.0.0.1:{port}/v1 (the "
            "connection was refused): check OPENAI_BASE_URL and that the server is running"
        ), line
        assert "pw-9931" not in result.output
        assert [address for event, address in tried if event == "socket.connect"] == [
            ("127.0.0.1", port)
        ] * 2, "one attempt to ask the model's window, one for the message: no retries"
        assert cli.show()["messages"][0]["content"] == "hi", "the message is kept"
        models, tried = attempts_of(
            lambda: cli.invoke("models", OPENAI_BASE_URL=base, CHATBOT_MAX_RETRIES="2")
        )
        assert one_error(models).startswith(
            f"error: cannot reach the model server at http://ada:***@127.0.0.1:{port}/v1 "
        )
        assert [address for event, address in tried if event == "socket.connect"] == [
            ("127.0.0.1", port)
        ]


def test_a_host_name_that_does_not_resolve_fails_at_once(cli: Cli) -> None:
    base = "http://chatbot-test.invalid/v1"
    result, tried = attempts_of(
        lambda: cli.ask("hi", OPENAI_BASE_URL=base, CHATBOT_MAX_RETRIES="2")
    )
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(
        "error: cannot find the model server at http://chatbot-test.invalid/v1: its host name "
        "does not resolve (check OPENAI_BASE_URL, and the network)"
    ), line
    lookups = [
        host.decode() if isinstance(host, bytes) else host
        for event, host in tried
        if event == "socket.getaddrinfo"
    ]
    assert lookups.count("chatbot-test.invalid") == 2, "the window's question, the message's"


@pytest.mark.parametrize("status_code", [429, 503])
def test_a_busy_or_failing_server_is_still_asked_again(
    cli: Cli, openai_server: FakeOpenAI, status_code: int
) -> None:
    """Rate limits and server errors keep the client's retries (CHATBOT_MAX_RETRIES)."""
    openai_server.script(status(status_code, "busy, try again"), Reply(text="at last"))
    result = cli.ask("hi", CHATBOT_MAX_RETRIES="1")
    assert result.exit_code == 0, result.output
    assert "at last" in result.stdout
    assert len(openai_server.requests) == 2


KEPT_IN_E4 = "your message is kept in thread 'e4': 'chatbot chat -t e4' then /retry asks again"


def test_a_context_refusal_says_once_that_the_message_is_kept(cli: Cli) -> None:
    def last_line(result: Any) -> str:  # (a fold's own line comes before it)
        assert result.exit_code == 1, result.output
        line: str = result.stderr.strip().splitlines()[-1]
        assert line.startswith("error: ") and line.count("kept") == 1, line
        return line

    refused = context_length_exceeded(300, 450)
    cli.server.script(refused)
    alone = last_line(cli.ask("hello " * 50, thread="e4"))  # one message: nothing to fold
    assert alone.startswith("error: your message is about ") and alone.endswith(KEPT_IN_E4)
    assert "stays in the thread" not in alone
    assert [m["content"] for m in cli.show("e4")["messages"]] == ["hello " * 50]

    def answer(body: dict[str, Any]) -> Reply | str:
        return "SUMMARY of it" if is_summary_request(body) else refused

    cli.server.script("one answer", "two answer")
    for text in ("one", "two"):
        assert cli.ask(text, thread="e5", CHATBOT_SUMMARY_TRIGGER="off").exit_code == 0
    cli.server.responder = answer  # folded, then refused again
    again = last_line(cli.ask("three", thread="e5", CHATBOT_SUMMARY_KEEP="messages:1"))
    assert "too long again after folding" in again
    assert again.endswith(KEPT_IN_E4.replace("e4", "e5"))

    cli.server.responder = lambda body: refused  # the fold's own call refused as well
    failed = last_line(cli.ask("four", thread="e5", CHATBOT_SUMMARY_KEEP="messages:1"))
    assert "folding the history failed" in failed
    assert failed.endswith(KEPT_IN_E4.replace("e4", "e5"))
