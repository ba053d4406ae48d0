"""A model call the server may answer later is asked again, and every wait of a few seconds
or more is told: why, what is asked again, for how long, and that Ctrl-C stops it.

In-process, ``chatbot ask`` against the local fake OpenAI server (its output is not a
terminal: one line on stderr for each wait), and the view that draws the REPL's spinner
(counted down there). The rules of when to ask again and how long to wait are the ``openai``
client's own: the server's ``Retry-After`` (or ``retry-after-ms``) up to two minutes, else a
short backoff; ``x-should-retry`` obeyed; 408, 409, 429 and 5xx asked again, other statuses
not. The Ctrl-C rows are in tests/test_pty.py.
"""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from chatbot.terminal.display import THINKING, ReplyView, WaitSpinner
from chatbot.threads.events import Retrying
from tests.fake_openai import FakeOpenAI, Reply
from tests.helpers import Cli, echo_or_summary, is_summary_request, summarizing, worth_folding


def failing(status: int, *headers: tuple[str, str], message: str = "busy") -> Reply:
    return Reply(status=status, error_message=message, headers=headers)


def texts(cli: Cli) -> list[str]:
    return [message["content"] for message in cli.show()["messages"]]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "line", "seconds"),
    [
        (
            failing(429, ("Retry-After", "3"), message="Rate limit reached for requests"),
            "rate limited by the server, retrying the reply in 3 s (retry 1 of 2; Ctrl-C stops)",
            3.0,
        ),
        (
            failing(503, ("retry-after-ms", "2000"), message="The engine is overloaded"),
            "the server failed with 503, retrying the reply in 2 s (retry 1 of 2; Ctrl-C stops)",
            2.0,
        ),
    ],
    ids=["429 Retry-After", "503 retry-after-ms"],
)
def test_a_wait_the_server_asks_for_is_told_and_the_turn_then_succeeds(
    cli: Cli, openai_server: FakeOpenAI, fault: Reply, line: str, seconds: float
) -> None:
    openai_server.script(fault, Reply(text="at last"))
    started = time.monotonic()
    result = cli.ask("hi", CHATBOT_MAX_RETRIES="2")
    waited = time.monotonic() - started
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "at last"
    assert result.stderr.splitlines() == [line], "one line for the wait, no countdown"
    assert len(openai_server.requests) == 2, "asked again exactly once"
    assert waited >= seconds, "the wait the server asked for"
    assert texts(cli) == ["hi", "at last"]


@pytest.mark.slow
def test_a_server_that_keeps_failing_shows_each_wait_then_one_error_line(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    error = failing(500, ("Retry-After", "2"), message="The server had an error")
    openai_server.script(error, error, error)
    result = cli.ask("hi", CHATBOT_MAX_RETRIES="2")
    assert result.exit_code == 1, result.output
    waits, (last,) = result.stderr.splitlines()[:-1], result.stderr.splitlines()[-1:]
    assert waits == [
        f"the server failed with 500, retrying the reply in 2 s (retry {n} of 2; Ctrl-C stops)"
        for n in (1, 2)
    ]
    assert last.startswith("error: the model server answered HTTP 500: The server had an error")
    assert "Traceback" not in result.output
    assert len(openai_server.requests) == 3, "CHATBOT_MAX_RETRIES bounds the retries"
    assert texts(cli) == ["hi"], "the message is kept"


@pytest.mark.slow
def test_a_wait_before_the_summary_is_asked_again_names_the_summary(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    limited = [failing(429, ("Retry-After", "2"))]

    def answer(body: dict[str, object]) -> str | Reply:
        if is_summary_request(body) and limited:
            return limited.pop()
        return echo_or_summary(body)

    openai_server.responder = answer
    env = summarizing(CHATBOT_MAX_RETRIES="1")
    assert cli.ask(worth_folding("one"), **env).exit_code == 0
    result = cli.ask("two", **env)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "echo: two"
    assert (
        "rate limited by the server, retrying the summary in 2 s (retry 1 of 1; Ctrl-C stops)"
        in result.stderr.splitlines()
    )
    assert cli.show()["summary"], "the summary asked again was made"


@pytest.mark.slow
def test_compact_tells_a_wait_before_its_summary_is_asked_again(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    limited = [failing(429, ("Retry-After", "2"))]

    def answer(body: dict[str, object]) -> str | Reply:
        if is_summary_request(body) and limited:
            return limited.pop()
        return echo_or_summary(body)

    openai_server.responder = answer
    env = {"CHATBOT_SUMMARY_KEEP": "messages:1", "CHATBOT_MAX_RETRIES": "1"}
    for text in (worth_folding("one"), "two"):
        assert cli.ask(text, **env).exit_code == 0
    result = cli.invoke("compact", "t1", "--db", str(cli.db), **env)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "rate limited by the server, retrying the summary in 2 s (retry 1 of 1; Ctrl-C stops)"
    ]
    assert result.stdout.startswith("compacted: folded 3 messages"), result.stdout


def test_a_short_backoff_passes_without_a_line(cli: Cli, openai_server: FakeOpenAI) -> None:
    """Without a Retry-After the first wait is half a second: under the spinner's words."""
    openai_server.script(failing(503), Reply(text="at last"))
    result = cli.ask("hi", CHATBOT_MAX_RETRIES="1")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert len(openai_server.requests) == 2


@pytest.mark.parametrize(
    ("fault", "requests"),
    [
        (failing(503, ("x-should-retry", "false")), 1),
        (failing(429, ("Retry-After", "121")), 1),  # past the two minutes waited at most
        (failing(400, ("x-should-retry", "true"), ("retry-after-ms", "10")), 2),
        (failing(404), 1),
        (failing(409, ("retry-after-ms", "10")), 2),
        (failing(408, ("retry-after-ms", "10")), 2),
    ],
    ids=[
        "x-should-retry false",
        "Retry-After too long",
        "x-should-retry true",
        "404",
        "409",
        "408",
    ],
)
def test_what_is_asked_again_follows_the_openai_clients_rules(
    cli: Cli, openai_server: FakeOpenAI, fault: Reply, requests: int
) -> None:
    openai_server.script(fault, Reply(text="at last"))
    result = cli.ask("hi", CHATBOT_MAX_RETRIES="1")
    assert len(openai_server.requests) == requests
    assert result.exit_code == (0 if requests == 2 else 1), result.output


@pytest.mark.slow
def test_a_call_that_timed_out_is_asked_again(cli: Cli, openai_server: FakeOpenAI) -> None:
    openai_server.script(Reply(text="too late", delay=3.0), Reply(text="at last"))
    result = cli.ask("hi", CHATBOT_MAX_RETRIES="1", CHATBOT_TIMEOUT="1")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "at last"


@pytest.mark.slow
def test_a_reply_that_began_to_stream_is_not_asked_again(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    """Its first words are on the screen: asked again, they would be there twice."""
    openai_server.script(Reply(text="one two three", chunk_delay=4.0), Reply(text="again"))
    result = cli.ask("hi", CHATBOT_MAX_RETRIES="2", CHATBOT_TIMEOUT="2")
    assert result.exit_code == 1, result.output
    assert "stopped answering for longer than CHATBOT_TIMEOUT" in result.stderr
    assert len(openai_server.requests) == 1


# --- the REPL's spinner: a countdown --------------------------------------------------------


def test_the_spinner_counts_a_wait_down_then_thinks_again(monkeypatch: pytest.MonkeyPatch) -> None:
    import chatbot.terminal.display as display

    clock = [1000.0]
    monkeypatch.setattr(display.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    console = Console(file=out, width=120, height=12, force_terminal=True, color_system=None)
    view = ReplyView(console, live=True)
    view.start()
    view.show(Retrying(seconds=58.0, reason="rate_limited", status=429, retry=1, retries=2))
    view.tick()
    assert (
        "rate limited by the server, retrying the reply in 58 s (retry 1 of 2; Ctrl-C stops)"
        in out.getvalue()
    )
    clock[0] += 20.5
    view.tick()
    assert "retrying the reply in 38 s" in out.getvalue(), "counted down"
    clock[0] += 38
    view.tick()
    assert view.status == THINKING, "the wait is over: the call is made again"
    view.finish()
    assert "retrying the reply in" not in out.getvalue().split("38 s")[-1]


def test_a_wait_of_a_moment_keeps_the_spinners_words() -> None:
    console = Console(file=io.StringIO(), width=120, force_terminal=True, color_system=None)
    view = ReplyView(console, live=True)
    view.start()
    view.show(Retrying(seconds=0.5, reason="server_failed", status=503, retry=1, retries=2))
    assert view.status == THINKING
    view.finish()


def test_ask_on_a_terminal_counts_the_wait_down_in_its_spinner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import chatbot.terminal.display as display

    clock = [1000.0]
    monkeypatch.setattr(display.time, "monotonic", lambda: clock[0])
    screen = io.StringIO()
    err = Console(file=screen, width=120, force_terminal=True, color_system=None)
    spinner = WaitSpinner(err, "loading the model…")
    view = ReplyView(Console(file=io.StringIO()), live=True, plain=True, notes_to=err)
    view.spinner = spinner
    view.start()
    view.show(Retrying(seconds=3.0, reason="connection", retry=2, retries=3, call="summary"))
    clock[0] += 1.2
    err.print(spinner)
    assert (
        "cannot reach the server, retrying the summary in 2 s (retry 2 of 3; Ctrl-C stops)"
        in screen.getvalue()
    )
    assert screen.getvalue().count("retrying") == 1, "counted down, not printed as a line too"
