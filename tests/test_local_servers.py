"""Local model servers out of the box: with only the URL, a key and the model set, chatbot
learns each server's window (or from its refusals), keeps room for the reply, and no request
passes the window; a thread is never stuck.

The servers are the fakes of :mod:`tests.local_servers`, each behaving as its real one does.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from chatbot.config.settings import Settings
from chatbot.engine import windows
from chatbot.engine.modelcache import cache_path
from chatbot.engine.servers import Unknown, ask_server
from chatbot.engine.windows import Window, WindowBook
from tests.fake_openai import FakeOpenAI, Reply
from tests.helpers import (
    SECRET,
    SUMMARY_TEXT,
    Cli,
    chat_requests,
    echo_or_summary,
    is_summary_request,
    ok,
    one_error,
    summary_requests,
    wait_until,
)
from tests.local_servers import (
    MODEL,
    SERVERS,
    LlamaCpp,
    LlamaCppPython,
    LmStudio,
    LocalServer,
    Ollama,
    Vllm,
    request_tokens,
)

ONLY = {"CHATBOT_MODEL": MODEL}
"""What a user sets besides the URL and the key (the harness's own retries and timeout)."""


def turn_text(number: int) -> str:
    return f"turn {number}: " + "the tomatoes and the basil grow well in my garden this year. " * 3


def local(kind: type[LocalServer], **options: Any) -> LocalServer:
    return kind(echo_or_summary, **options).start()


@pytest.fixture
def servers() -> Any:
    started: list[LocalServer] = []

    def start(kind: type[LocalServer], **options: Any) -> LocalServer:
        server = local(kind, **options)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def a_new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the next ``chatbot`` process knows: only what the model cache holds."""
    monkeypatch.setattr(windows, "BOOK", WindowBook())


@pytest.mark.slow  # (30 turns, seconds each)
@pytest.mark.parametrize("kind", list(SERVERS))
def test_thirty_turns_with_only_the_url_key_and_model_answer_fold_and_fit(
    kind: str, servers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = servers(SERVERS[kind], window=2048)
    if kind == "Ollama":
        server = servers(Ollama, num_ctx=2048)
    cli = Cli(server, tmp_path / "chat.sqlite")
    for number in range(30):  # (it folds at turns 11, 20 and 29)
        if number == 15:
            a_new_process(monkeypatch)  # (later processes read the window from the cache)
        result = ok(cli.ask(turn_text(number), **ONLY))
        assert result.stdout.strip() == "echo: " + turn_text(number).strip()

    assert server.past == [], "no request passed the server's window"
    assert len(summary_requests(server)) >= 4, "the conversation folded, again and again"
    for request, room in zip(server.requests, server.max_tokens, strict=True):
        assert room is not None, "every call says how long its answer may be"
        assert request_tokens(request.body) + room <= server.window
    state = cli.show()
    assert state["summary"], "the older turns are in the summary"
    assert state["messages"][-1]["content"].strip() == "echo: " + turn_text(29).strip()
    if isinstance(server, Ollama):
        assert server.truncated == 0, "Ollama never had to cut a request silently"


@pytest.mark.parametrize(
    ("kind", "options", "expected"),
    [
        (LlamaCpp, {}, Window(2048, "server", "llama.cpp", "meta.n_ctx of /v1/models", 131072)),
        (
            LlamaCpp,
            {"meta_n_ctx": False},
            Window(2048, "server", "llama.cpp", "n_ctx of /props", 131072),
        ),
        (Vllm, {}, Window(2048, "server", "vLLM", "max_model_len of /v1/models")),
        (
            LmStudio,
            {"model_max": 32768},
            Window(2048, "server", "LM Studio", "loaded_context_length", 32768),
        ),
        (
            Ollama,
            {"num_ctx": 8192},
            Window(8192, "server", "Ollama", "num_ctx of the model", 131072),
        ),
        (
            Ollama,
            {},
            Window(
                4096,
                "server",
                "Ollama",
                "its smallest default until the model is loaded",
                131072,
                assumed=True,
                until_loaded=True,
            ),
        ),
        (
            LlamaCppPython,
            {},
            Window(
                2048,
                "server",
                "llama-cpp-python",
                "its default n_ctx",
                assumed=True,
            ),
        ),
    ],
    ids=["llama.cpp", "llama.cpp-props", "vLLM", "LM Studio", "Ollama", "Ollama-default", "lcp"],
)
def test_each_server_says_its_window_its_own_way(
    servers: Any, kind: type[LocalServer], options: dict[str, Any], expected: Window
) -> None:
    server = servers(kind, **options)
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, openai_base_url=server.base_url, openai_api_key=SECRET
    )
    assert ask_server(settings, MODEL) == expected


def test_ollama_says_what_a_loaded_model_really_runs_with(servers: Any, tmp_path: Path) -> None:
    server = servers(Ollama, default_ctx=32768)  # (a server with much video memory)
    server.loaded = True
    settings = Settings(_env_file=None, openai_base_url=server.base_url)  # type: ignore[call-arg]
    window = ask_server(settings, MODEL)
    assert isinstance(window, Window)
    assert (window.tokens, window.detail, window.assumed) == (
        32768,
        "context_length of /api/ps",
        False,
    )


def test_a_server_without_a_window_api_says_nothing_and_one_not_there_is_unknown(
    openai_server: FakeOpenAI, refused_port: int
) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, openai_base_url=openai_server.base_url
    )
    assert ask_server(settings, "fake-chat-model-7") is None
    asked = [path for _, path in openai_server.log]
    assert asked == [
        "/v1/models",
        "/api/show",
        "/props?model=fake-chat-model-7",
        "/api/v0/models/fake-chat-model-7",
        "/api/v1/models",
    ]
    gone = Settings(  # type: ignore[call-arg]
        _env_file=None, openai_base_url=f"http://127.0.0.1:{refused_port}/v1"
    )
    assert isinstance(ask_server(gone, "m"), Unknown)


def test_a_turn_that_knows_the_window_sends_one_request_and_nothing_else(
    servers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = servers(Ollama, num_ctx=2048)
    cli = Cli(server, tmp_path / "chat.sqlite")
    ok(cli.ask("hello", **ONLY))
    assert ("POST", "/api/show") in server.log, "the first process asked"
    for fresh_process in (False, True):
        if fresh_process:
            a_new_process(monkeypatch)
        server.log.clear()
        ok(cli.ask("and again", **ONLY))
        assert server.log == [("POST", "/v1/chat/completions")]


def test_the_window_is_kept_per_url_and_model_with_its_age(
    servers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = servers(Vllm, window=4096)
    cli = Cli(server, tmp_path / "chat.sqlite")
    ok(cli.ask("hello", **ONLY))
    stored = json.loads(cache_path().read_text())["windows"][server.base_url][MODEL]
    assert stored["window"]["tokens"] == 4096 and stored["window"]["server"] == "vLLM"
    assert time.time() - stored["asked_at"] < 60
    assert SECRET not in cache_path().read_text()
    # A day later the server is asked again (it may have been restarted with another window).
    document = json.loads(cache_path().read_text())
    document["windows"][server.base_url][MODEL]["asked_at"] -= windows.MAX_AGE + 1
    cache_path().write_text(json.dumps(document))
    server.window = 8192
    a_new_process(monkeypatch)
    server.log.clear()
    ok(cli.ask("later", **ONLY))
    assert server.log[0] == ("GET", "/v1/models")
    assert windows.BOOK.lookup(server.base_url, MODEL).tokens == 8192  # type: ignore[union-attr]


def test_room_for_the_reply_is_a_quarter_of_a_small_window_and_a_setting(
    servers: Any, tmp_path: Path
) -> None:
    server = servers(LlamaCpp, window=2048)
    cli = Cli(server, tmp_path / "chat.sqlite")
    ok(cli.ask("hello", **ONLY))
    ok(cli.ask("hello", CHATBOT_REPLY_TOKENS="300", **ONLY))
    assert server.max_tokens == [512, 300]
    assert [r.body["max_tokens"] for r in server.requests] == [512, 300]
    assert "max_completion_tokens" not in server.requests[0].body, "Ollama reads max_tokens"
    ok(cli.ask("hello", CHATBOT_REPLY_TOKENS="1800", **ONLY))
    assert server.max_tokens[-1] == 1024, "at most half the window: the request keeps the rest"
    assert server.past == []


def test_a_model_with_a_profile_is_never_asked_about_nor_limited(
    openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    openai_server.responder = echo_or_summary
    openai_server.models = ["gpt-4o-mini"]
    cli = Cli(openai_server, tmp_path / "chat.sqlite")
    ok(cli.ask("hello", CHATBOT_MODEL="gpt-4o-mini"))
    assert openai_server.log == [("POST", "/v1/chat/completions")]
    body = openai_server.requests[0].body
    assert "max_tokens" not in body and "max_completion_tokens" not in body


@pytest.mark.slow
def test_a_refusal_that_states_the_window_is_learned_and_the_next_process_folds_first(
    openai_server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server with no window API (a hosted one, or any other) refuses a request as too
    long in OpenAI's words: the turn folds and succeeds, and the window it stated is kept, so
    later turns (in later processes) fold before they send."""
    openai_server.responder = echo_or_summary
    cli = Cli(openai_server, tmp_path / "chat.sqlite")
    for number in range(8):
        ok(cli.ask(turn_text(number)))
    openai_server.context_limit = 600
    first = ok(cli.ask(turn_text(8)))
    assert "the model said the context was too long" in first.stderr
    assert len(openai_server.refused) == 1
    for number in range(9, 20):
        a_new_process(monkeypatch)
        ok(cli.ask(turn_text(number)))
    assert len(openai_server.refused) == 1, "never one more request past the window"
    learned = windows.BOOK.lookup(openai_server.base_url, "fake-chat-model-7")
    assert learned is not None and (learned.tokens, learned.source) == (600, "refusal")


@pytest.mark.slow
def test_llama_cpp_python_past_its_window_is_asked_without_streaming_and_learned(
    servers: Any, tmp_path: Path
) -> None:
    """The issue's server started with a smaller window than its default: a stream past it
    ends with nothing. chatbot asks the same once without streaming, gets the server's own
    error with the window, folds and answers; from then on nothing passes the window."""
    server = servers(LlamaCppPython, window=1024)
    cli = Cli(server, tmp_path / "chat.sqlite")
    for number in range(25):
        result = ok(cli.ask(turn_text(number), **ONLY))
        assert result.stdout.strip() == "echo: " + turn_text(number).strip()
    (refused,) = set(server.past)
    assert server.past == [refused, refused], "once streamed, once not; then never again"
    learned = windows.BOOK.lookup(server.base_url, MODEL)
    assert learned is not None and (learned.tokens, learned.source) == (1024, "refusal")


@pytest.mark.slow
def test_an_empty_answer_near_the_window_folds_and_tries_again(
    openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    """A server that ends the stream with nothing when a request passes its real window,
    which is smaller than the one set: near the window that is taken as an overflow."""

    def empty_past_1500(body: dict[str, Any]) -> str | Reply:
        if not is_summary_request(body) and request_tokens(body) > 1500:
            return Reply(raw=b"", content_type="text/event-stream")
        return echo_or_summary(body)

    openai_server.responder = empty_past_1500
    cli = Cli(openai_server, tmp_path / "chat.sqlite")
    env = {"CHATBOT_MAX_INPUT_TOKENS": "1900", "CHATBOT_SUMMARY_TRIGGER": "off"}
    for number in range(30):
        result = ok(cli.ask(turn_text(number), **env))
        assert result.stdout.strip() == "echo: " + turn_text(number).strip()
    assert summary_requests(openai_server), "it folded"
    unstreamed = [r for r in chat_requests(openai_server) if not r.body.get("stream")]
    assert unstreamed == [], "near the window nothing is asked again unstreamed: it folds"


def test_ollama_running_a_model_smaller_than_it_takes_is_said_once(
    servers: Any, tmp_path: Path
) -> None:
    server = servers(Ollama, num_ctx=2048)
    cli = Cli(server, tmp_path / "chat.sqlite")
    first = ok(cli.ask("hello", **ONLY))
    note = (
        "note: Ollama runs this model with a 2,048-token window (the model takes 131,072): "
        "chatbot keeps every request within it; to give it more, start Ollama with "
        "OLLAMA_CONTEXT_LENGTH=32768, or set num_ctx in a Modelfile"
    )
    assert [line for line in first.stderr.splitlines() if line.startswith("note:")] == [note]
    second = ok(cli.ask("hello again", **ONLY))
    assert "note:" not in second.stderr


def test_chatbot_models_shows_the_window_and_where_it_came_from(
    servers: Any, tmp_path: Path
) -> None:
    server = servers(LlamaCpp, window=4096)
    cli = Cli(server, tmp_path / "chat.sqlite")
    listed = ok(cli.invoke("models", **ONLY))
    assert listed.stdout.strip() == (
        "local-model  (CHATBOT_MODEL)  window 4,096 tokens, from the server (llama.cpp: "
        "meta.n_ctx of /v1/models), just now"
    )
    assert "start llama-server with a larger -c" in listed.stderr
    as_json = json.loads(ok(cli.invoke("models", "--json", **ONLY)).stdout)
    assert as_json[0]["window"]["tokens"] == 4096
    assert as_json[0]["window"]["source"] == "server"
    server.window = 8192  # restarted with more: `chatbot models` asks again
    assert "window 8,192 tokens" in ok(cli.invoke("models", **ONLY)).stdout


def test_context_in_the_repl_shows_the_servers_window_and_the_room_kept_for_the_reply(
    servers: Any, tmp_path: Path
) -> None:
    server = servers(LlamaCpp, window=2048)
    cli = Cli(server, tmp_path / "chat.sqlite")
    result = ok(cli.invoke("chat", "--db", str(cli.db), stdin="hello\n/context\n", **ONLY))
    text = " ".join(result.stdout.split())
    assert "of 1,536 tokens" in text, "what a request may hold: the window less the reply's room"
    assert (
        "the model's window: 2,048 tokens, from the server (llama.cpp: meta.n_ctx of "
        "/v1/models), just now; 512 kept for the reply (a quarter of the window; "
        "CHATBOT_REPLY_TOKENS sets it), so a request holds at most 1,536"
    ) in text


@pytest.mark.slow
def test_a_thread_whose_turn_failed_for_size_folds_before_its_next_message(
    openai_server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refused turn could not fold (its summary call failed): it ends with one line and
    the message kept. The next message, in a later process, is folded first: never one more
    request of that size."""
    failing = {"summary": True}

    def summaries_fail_once(body: dict[str, Any]) -> str | Reply:
        if is_summary_request(body) and failing["summary"]:
            failing["summary"] = False
            return Reply(status=500, error_message="the summarizer is down")
        return echo_or_summary(body)

    openai_server.responder = summaries_fail_once
    cli = Cli(openai_server, tmp_path / "chat.sqlite")
    for number in range(10):
        ok(cli.ask(turn_text(number)))
    openai_server.context_limit = 600
    failed = cli.ask(turn_text(10))
    assert failed.exit_code == 1 and "folding the history failed" in failed.stderr
    assert len(openai_server.refused) == 1
    a_new_process(monkeypatch)
    result = ok(cli.ask("and now?"))
    assert result.stdout.strip() == "echo: and now?"
    assert len(openai_server.refused) == 1, "folded before it was sent"
    assert cli.show()["summary"] == SUMMARY_TEXT, "the older turns were folded"


def test_a_refused_key_or_a_failing_server_is_asked_again_at_the_next_start(
    openai_server: FakeOpenAI,
) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, openai_base_url=openai_server.base_url
    )
    for status in (401, 503):
        openai_server.models_status = status
        assert isinstance(ask_server(settings, "fake-chat-model-7"), Unknown), status


@pytest.mark.slow
@pytest.mark.parametrize("answers_tagged", [False, True], ids=["as-asked", "tagged"])
def test_ollama_restarted_with_a_smaller_window_is_caught_at_its_first_silent_cut(
    answers_tagged: bool, servers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache says 4,096 (fresh: asked minutes ago); Ollama now runs the model at 2,048
    and cuts what does not fit without a word, then reports what it kept. chatbot sees the
    server read fewer tokens than it would have: it asks the server again, which says 2,048;
    no later request passes the window, and the next start says so. A reply naming the
    model with its ``:latest`` tag is the same model's count."""
    server = servers(Ollama, num_ctx=4096, answers_tagged=answers_tagged)
    cli = Cli(server, tmp_path / "chat.sqlite")
    ok(cli.ask(turn_text(0), **ONLY))
    server.num_ctx = server.window = 2048  # (restarted with OLLAMA_CONTEXT_LENGTH=2048)
    said = []
    for number in range(1, 30):
        a_new_process(monkeypatch)
        result = ok(cli.ask(turn_text(number), **ONLY))
        said += [line for line in result.stderr.splitlines() if "2,048-token window" in line]
        if server.past:
            wait_until(lambda: windows.BOOK.lookup(server.base_url, MODEL).tokens == 2048)  # type: ignore[union-attr]
    assert len(server.past) == 1, "one request was cut; none after it"
    assert server.truncated == 1
    learned = windows.BOOK.lookup(server.base_url, MODEL)
    assert learned is not None and (learned.tokens, learned.source) == (2048, "server")
    assert len(said) == 1 and said[0].startswith("note: Ollama runs this model with a 2,048")


@pytest.mark.slow
def test_a_model_ollama_had_not_loaded_is_asked_again_after_the_first_reply(
    servers: Any, tmp_path: Path
) -> None:
    server = servers(Ollama, default_ctx=2048)  # (OLLAMA_CONTEXT_LENGTH=2048, nothing loaded)
    cli = Cli(server, tmp_path / "chat.sqlite")
    assert "Ollama has not loaded this model yet" in ok(cli.ask("hello", **ONLY)).stderr

    def asked_again() -> bool:
        known = windows.BOOK.lookup(server.base_url, MODEL)
        return known is not None and not known.assumed

    wait_until(asked_again, what="the server asked again once the model is loaded")
    for number in range(25):
        ok(cli.ask(turn_text(number), **ONLY))
    assert server.past == []


def test_vllm_restarted_with_a_smaller_window_answers_the_first_turn(
    servers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache says 8,192 (fresh); vLLM now runs at 1,024 and refuses a short prompt whose
    room for the reply (2,048 tokens) passes its window. The refusal states the window: the
    same request is sent again with the smaller room, with no fold and no error."""
    server = servers(Vllm, window=8192)
    cli = Cli(server, tmp_path / "chat.sqlite")
    ok(cli.ask("hello", **ONLY))
    server.window = 1024
    a_new_process(monkeypatch)
    result = ok(cli.ask("and now?", **ONLY))
    assert result.stdout.strip() == "echo: and now?"
    assert server.max_tokens[-2:] == [2048, 256]
    assert summary_requests(server) == [], "nothing needed folding"
    assert "error" not in result.stderr


def test_a_system_prompt_that_fills_a_small_window_is_named_and_not_folded_around(
    servers: Any, tmp_path: Path
) -> None:
    server = servers(LlamaCpp, window=1024)
    cli = Cli(server, tmp_path / "chat.sqlite")
    rules = "Always answer in the voice of a careful librarian who cites sources. " * 50
    ok(cli.invoke("ask", "hi", "--system", rules, "--db", str(cli.db), "-t", "t1", **ONLY))
    question = "what do you think of " + "the weather and the garden " * 35
    result = cli.ask(question, **ONLY)
    line = one_error(result)
    assert "the system prompt is about" in line and "shorten the system prompt (/system)" in line
    assert "folded" not in result.stderr, "folding two short messages would not make room"
    assert summary_requests(server) == []
    assert server.past == []


def test_models_knows_an_ollama_model_named_without_its_latest_tag(
    servers: Any, tmp_path: Path
) -> None:
    server = servers(Ollama, num_ctx=2048)
    cli = Cli(server, tmp_path / "chat.sqlite")
    listed = ok(cli.invoke("models", **ONLY))
    assert listed.stdout.startswith("local-model:latest  (CHATBOT_MODEL)  window 2,048 tokens")
    assert [r["current"] for r in json.loads(ok(cli.invoke("models", "--json", **ONLY)).stdout)]
    server.num_ctx = server.window = 4096  # (restarted with more: `chatbot models` asks again)
    ok(cli.invoke("models", **ONLY))
    assert windows.BOOK.lookup(server.base_url, MODEL).tokens == 4096  # type: ignore[union-attr]


def test_a_max_input_setting_past_the_servers_window_gives_way_to_it(
    servers: Any, tmp_path: Path
) -> None:
    server = servers(LlamaCpp, window=1024)
    cli = Cli(server, tmp_path / "chat.sqlite")
    env = {**ONLY, "CHATBOT_MAX_INPUT_TOKENS": "4000"}
    for number in range(12):
        ok(cli.ask(turn_text(number), **env))
    assert server.past == [], "the server's window holds, not the setting"
    assert [
        room
        for r, room in zip(server.requests, server.max_tokens, strict=True)
        if not is_summary_request(r)
    ] == [256] * 12
    listed = ok(cli.invoke("models", **env))
    assert "window 1,024 tokens, from the server" in listed.stdout
    assert "CHATBOT_MAX_INPUT_TOKENS=4000 is more than the server's 1,024-token window" in (
        listed.stderr
    )
    small = {**ONLY, "CHATBOT_MAX_INPUT_TOKENS": "500"}  # (less than the server's: the setting)
    ok(cli.ask("hello", **small))
    chats = [
        room
        for r, room in zip(server.requests, server.max_tokens, strict=True)
        if not is_summary_request(r)
    ]
    assert chats[-1] is None, "the chat call keeps no room for the reply"


@pytest.mark.slow
def test_a_tight_window_with_the_recall_tool_answers_every_turn(
    servers: Any, tmp_path: Path
) -> None:
    """A server that counts the recall tool's definition higher than chatbot does (its own
    rendering of the tools) in a window the reply takes half of: a refused turn folds to
    what the server's window holds less the reply's room, and answers."""
    server = servers(Vllm, window=1024)
    cli = Cli(server, tmp_path / "chat.sqlite")
    words = "the river and the hills and the long road home in the evening light " * 9
    for number in range(10):
        result = ok(cli.ask(f"{number}: {words}", CHATBOT_REPLY_TOKENS="700", **ONLY))
        assert result.stdout.strip() == f"echo: {number}: {words}".strip()
    assert any(r.body.get("tools") for r in server.requests), "the recall tool was offered"


@pytest.mark.slow
def test_a_server_too_slow_to_say_its_window_is_not_waited_for_at_every_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatbot.engine import servers as asking

    class SlowListing(FakeOpenAI):
        def listing(self) -> dict[str, Any]:
            self._stopping.wait(asking.ASK_TIMEOUT + 1)  # (longer than a question may take)
            return super().listing()

    with SlowListing(echo_or_summary) as server:
        cli = Cli(server, tmp_path / "chat.sqlite")
        assert ok(cli.ask("hello")).stdout.strip() == "echo: hello", "it answers, windowless"
        assert ("GET", "/v1/models") in server.log
        for _ in range(2):
            a_new_process(monkeypatch)
            server.log.clear()
            ok(cli.ask("again"))
            assert server.log == [("POST", "/v1/chat/completions")], "not asked again yet"


def test_a_server_that_says_nothing_is_not_asked_again_turn_after_turn(
    openai_server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    openai_server.responder = echo_or_summary
    cli = Cli(openai_server, tmp_path / "chat.sqlite")
    ok(cli.ask("hello"))
    for fresh_process in (False, True, True):
        if fresh_process:
            a_new_process(monkeypatch)
        openai_server.log.clear()
        ok(cli.ask("and again"))
        assert openai_server.log == [("POST", "/v1/chat/completions")]


HINDI = "मेरा नाम अदा है, मैं पुणे में रहती हूँ और मुझे हरी चाय और पुरानी किताबें पसंद हैं। " * 12
"""Text a server's tokenizer reads in about half the tokens chatbot's estimate counts."""


@pytest.mark.parametrize("kind", ["Ollama", "llama.cpp"])
def test_text_the_server_counts_lower_is_never_taken_for_a_cut(
    kind: str, servers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = servers(Ollama, num_ctx=8192) if kind == "Ollama" else servers(LlamaCpp, window=8192)
    cli = Cli(server, tmp_path / "chat.sqlite")
    divider = "=" * 60 + "\n"
    for number in range(8):
        a_new_process(monkeypatch)
        text = f"{number}: {HINDI}" if number % 2 else f"{number}:\n{divider * 6}{turn_text(1)}"
        result = ok(cli.ask(text, **ONLY))
        assert result.stdout.strip() == f"echo: {text}".strip()
        assert "error" not in result.stderr
    wait_until(lambda: not any(t.name == "chatbot-window" for t in threading.enumerate()))
    learned = windows.BOOK.lookup(server.base_url, MODEL)
    assert learned is not None and (learned.tokens, learned.source) == (8192, "server")
    assert server.past == []


@pytest.mark.slow
def test_a_big_silent_cut_is_caught_and_its_usage_set_aside(
    servers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ollama restarted from 16,384 to 2,048 without OLLAMA_CONTEXT_LENGTH: a request of
    thousands of tokens is cut to a quarter of it. Its usage does not shrink later counts,
    the server is asked again, and the next turn folds to fit."""
    server = servers(Ollama, num_ctx=16384)
    cli = Cli(server, tmp_path / "chat.sqlite")
    story = "a long account of the voyage and the weather at sea " * 70
    for number in range(5):
        ok(cli.ask(f"{number}: {story}", **ONLY))
    server.num_ctx = server.window = 2048
    a_new_process(monkeypatch)
    ok(cli.ask(f"5: {story}", **ONLY))  # (cut; and the fold after it, in the same turn)
    cut = len(server.past)
    assert cut in (1, 2)
    wait_until(lambda: windows.BOOK.lookup(server.base_url, MODEL).tokens == 2048)  # type: ignore[union-attr]
    a_new_process(monkeypatch)
    result = ok(cli.ask("and the harbour?", **ONLY))
    assert "before answering, so the request fits the model" in result.stderr
    assert len(server.past) == cut, "nothing passes the window from then on"
    record = cli.show()
    assert record["messages"][-1]["content"] == "echo: and the harbour?"


def test_a_window_a_refusal_taught_is_asked_again_within_the_hour(
    servers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = servers(Vllm, window=1024)
    cli = Cli(server, tmp_path / "chat.sqlite")
    ok(cli.ask("hello", **ONLY))
    server.window = 8192
    ok(cli.ask(turn_text(0) * 3, **ONLY))
    assert windows.BOOK.lookup(server.base_url, MODEL).tokens == 1024  # type: ignore[union-attr]
    document = json.loads(cache_path().read_text())
    document["windows"][server.base_url][MODEL]["asked_at"] -= windows.WINDOW_AGE + 1
    cache_path().write_text(json.dumps(document))
    a_new_process(monkeypatch)
    ok(cli.ask("and now?", **ONLY))
    assert windows.BOOK.lookup(server.base_url, MODEL).tokens == 8192  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_model_known_by_name_on_a_small_local_server_learns_the_servers_window(
    servers: Any, tmp_path: Path
) -> None:
    """A local server serving a model under a name LangChain has a profile for (128k): the
    first refusal teaches the server's window, which wins over the profile from then on."""
    server = servers(LlamaCpp, window=1024, model="gpt-4o-mini")
    cli = Cli(server, tmp_path / "chat.sqlite")
    env = {"CHATBOT_MODEL": "gpt-4o-mini"}
    for number in range(24):
        ok(cli.ask(turn_text(number), **env))
    assert len(server.past) == 1, "refused once; the window it stated holds from then on"


def test_a_long_running_process_asks_again_at_most_once_a_minute(
    servers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A LangGraph server runs for days: a server restarted twice meanwhile is asked again
    each time it may have cut a request, though never more than once a minute."""
    from chatbot.engine import servers as asking

    server = servers(Ollama, num_ctx=2048)
    settings = Settings(_env_file=None, openai_base_url=server.base_url)  # type: ignore[call-arg]

    def shown() -> int:
        return sum(1 for _, path in server.log if path == "/api/show")

    asking.ask_again(settings, MODEL)
    wait_until(lambda: shown() == 1)
    asking.ask_again(settings, MODEL)
    monkeypatch.setattr(asking, "ASK_AGAIN_EVERY", 0.0)  # (a minute later)
    asking.ask_again(settings, MODEL)
    wait_until(lambda: shown() == 2)
    wait_until(lambda: not any(t.name == "chatbot-window" for t in threading.enumerate()))
    assert shown() == 2
