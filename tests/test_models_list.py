"""Knowing the models: ``chatbot models`` and ``/models`` list what the endpoint serves
(``GET /v1/models``), and the listing feeds Tab completion of ``/model`` and ``/retry``."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from chatbot.config.settings import Settings
from chatbot.engine.modellist import ModelCatalog, cache_path
from chatbot.terminal.lineinput import SlashCompleter
from tests.fake_openai import FakeOpenAI
from tests.helpers import SECRET, Cli, DevServer, offline_echo, ok, one_error


def test_models_lists_what_the_endpoint_serves_with_the_key(cli: Cli) -> None:
    cli.server.models = ["zeta-model", "fake-chat-model-7", "alpha-model"]
    listed = ok(cli.invoke("models", "--json"))
    records = json.loads(listed.stdout)
    assert [r["id"] for r in records] == ["alpha-model", "fake-chat-model-7", "zeta-model"]
    assert [r["current"] for r in records] == [False, True, False]  # CHATBOT_MODEL
    assert records[0]["owned_by"] == "fake"
    assert cli.server.model_listings == [f"Bearer {SECRET}"]
    assert cli.server.requests == []  # no chat call
    plain = ok(cli.invoke("models"))
    assert plain.stdout.splitlines() == [
        "alpha-model",
        "fake-chat-model-7  (CHATBOT_MODEL)",
        "zeta-model",
    ]
    assert SECRET not in plain.output + listed.output


def test_the_listing_is_cached_privately_for_completion(cli: Cli) -> None:
    ok(cli.invoke("models"))
    path = cache_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    cached = json.loads(path.read_text())
    assert {key: cached[key] for key in ("endpoint", "models")} == {
        "endpoint": cli.server.base_url,
        "models": ["fake-chat-model-7", "fake-summary-model"],
    }
    asked = cached["windows"][cli.server.base_url]["fake-chat-model-7"]
    assert asked["window"] is None, "the model's window was asked too: this server has no API"
    assert SECRET not in path.read_text()


def test_the_offline_model_lists_offline_without_asking_anyone(openai_server: FakeOpenAI) -> None:
    from tests.helpers import runner

    from chatbot.cli.commands import app  # isort: skip

    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in json.loads(result.stdout)] == ["offline"]
    assert json.loads(result.stdout)[0]["current"] is True  # it answers, not gpt-4o-mini
    plain = runner.invoke(app, ["models"])
    assert plain.stdout.splitlines() == ["offline  (no key or server set)"]
    assert openai_server.model_listings == []


def test_a_refused_key_is_one_line(cli: Cli) -> None:
    cli.server.models_status = 401
    line = one_error(cli.invoke("models"), 1)
    assert "API key was refused" in line and "check the environment variable OPENAI_API_KEY" in line
    assert SECRET not in line
    assert not cache_path().exists()


def test_an_unreachable_endpoint_is_one_line(cli: Cli, refused_port: int) -> None:
    dead = f"http://127.0.0.1:{refused_port}/v1"
    line = one_error(cli.invoke("models", OPENAI_BASE_URL=dead), 1)
    assert "cannot reach the model server" in line


def test_slash_models_in_the_repl(cli: Cli) -> None:
    cli.server.models = ["model-b", "model-a"]
    result = ok(cli.invoke("chat", "--db", str(cli.db), stdin="/models\n/model model-a\n"))
    lines = result.stdout.splitlines()
    assert "model-a" in lines and "model-b" in lines
    assert "2 models · /model NAME switches (Tab completes)" in result.stdout
    assert "chat model is now model-a for this session" in result.stdout
    help_text = ok(cli.invoke("chat", "--db", str(cli.db), stdin="/help models\n")).stdout
    assert "/models  list the models the endpoint serves" in help_text


def test_a_model_the_known_list_lacks_is_taken_with_a_warning_naming_the_closest(
    cli: Cli,
) -> None:
    cli.server.models = ["gpt-4o-mini", "gpt-4o", "model-a"]
    ok(cli.invoke("chat", "--db", str(cli.db), stdin="/models\n"))  # (the list is now known)

    script = "/model gpt-4o-mimi\n/model nonexistent-model-x\n/model model-a\n/model\n"
    result = ok(cli.invoke("chat", "--db", str(cli.db), stdin=script))

    lines = result.stdout.splitlines()
    endpoint = cli.server.base_url
    assert (
        lines.count(
            f"warning: gpt-4o-mimi is not in the model list of {endpoint} (/models): "
            "used anyway, as a list may be partial; did you mean gpt-4o-mini or gpt-4o?"
        )
        == 1
    ), result.stdout
    assert (
        f"warning: nonexistent-model-x is not in the model list of {endpoint} (/models): "
        "used anyway, as a list may be partial"
    ) in lines
    assert "chat model is now gpt-4o-mimi for this session" in lines
    assert "chat model is now nonexistent-model-x for this session" in lines
    assert "chat model is now model-a for this session" in lines
    assert sum("warning:" in line for line in lines) == 2  # (model-a is listed)
    assert "chat model: model-a" in lines


def test_a_model_is_taken_without_a_word_while_no_list_is_known(cli: Cli) -> None:
    result = ok(cli.invoke("chat", "--db", str(cli.db), stdin="/model nonexistent-model-x\n"))

    assert "warning" not in result.stdout
    assert "chat model is now nonexistent-model-x for this session" in result.stdout


def test_slash_models_of_one_model_says_one_model(cli: Cli) -> None:
    cli.server.models = ["only-model"]
    result = ok(cli.invoke("chat", "--db", str(cli.db), stdin="/models\n"))
    assert "1 model · /model NAME switches (Tab completes)" in result.stdout


def test_slash_models_offline_and_a_failure_in_the_repl(cli: Cli) -> None:
    cli.server.models_status = 401
    cli.server.script("yes, still here")
    failed = ok(cli.invoke("chat", "--db", str(cli.db), stdin="/models\nstill here\n"))
    shown = " ".join(failed.stdout.split())
    assert "error: the model server answered HTTP 401" in shown
    assert "the API key was refused: check the environment variable OPENAI_API_KEY" in shown
    assert "yes, still here" in shown  # the REPL carried on
    offline = ok(
        cli.invoke(
            "chat",
            "--db",
            str(cli.db),
            stdin="/models\nhello\n",
            OPENAI_API_KEY="",
            OPENAI_BASE_URL="",
            CHATBOT_MODEL="offline",
        )
    )
    assert "offline  (current)" in offline.stdout
    assert offline_echo("hello") in offline.stdout


def completions(completer: SlashCompleter, text: str) -> list[str]:
    document = Document(text, cursor_position=len(text))
    return [c.text for c in completer.get_completions(document, CompleteEvent())]


def test_tab_completes_model_and_retry_from_the_endpoints_listing(
    openai_server: FakeOpenAI,
) -> None:
    openai_server.models = ["gpt-large", "gpt-mini", "other-model"]
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        model="gpt-mini",
        openai_api_key=SECRET,
        openai_base_url=openai_server.base_url,
        max_retries=0,
    )
    catalog = ModelCatalog()
    completer = SlashCompleter(
        commands=lambda: ["model", "models", "retry"],
        thread_ids=lambda: [],
        checkpoint_ids=lambda: [],
        model_names=catalog.names,
    )
    assert completions(completer, "/model ") == []  # nothing known before the settings
    catalog.refresh(settings)
    catalog.join(30)
    assert openai_server.model_listings == [f"Bearer {SECRET}"]
    assert completions(completer, "/model gpt-") == ["gpt-mini", "gpt-large"]
    assert completions(completer, "/retry o") == ["other-model", "offline"]
    assert completions(completer, "/mod") == ["model", "models"]
    catalog.refresh(settings)  # once per session
    assert len(openai_server.model_listings) == 1


def test_a_failed_fetch_is_silent_and_keeps_the_last_listing(openai_server: FakeOpenAI) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        model="fake-chat-model-7",
        openai_api_key=SECRET,
        openai_base_url=openai_server.base_url,
        max_retries=0,
    )
    first = ModelCatalog()
    first.refresh(settings)
    first.join(30)
    openai_server.models_status = 500
    later = ModelCatalog()
    later.refresh(settings)
    later.join(30)
    completer = SlashCompleter(lambda: [], lambda: [], lambda: [], model_names=later.names)
    assert completions(completer, "/model fake-") == ["fake-chat-model-7", "fake-summary-model"]


@pytest.mark.slow
@pytest.mark.integration
def test_on_a_server_slash_models_says_it_does_not_apply(cli: Cli, dev_server: DevServer) -> None:
    result = ok(cli.invoke("chat", "--url", dev_server.url, "--new", stdin="/models\n"))
    (line,) = [line for line in result.stdout.splitlines() if "/models" in line]
    assert line.startswith("error: /models lists this machine's endpoint")
    assert dev_server.url in " ".join(result.stdout.split())
    assert cli.server.model_listings == []
    listed = ok(cli.invoke("--url", dev_server.url, "models"))
    assert "fake-chat-model-7" in listed.stdout
    assert "runs models from its own" in " ".join(listed.stderr.split())


class _OddModelServer:
    """A server on 127.0.0.1 answering every GET with ``body`` (``status``, ``content_type``)."""

    def __init__(self, body: bytes, status: int = 200, content_type: str = "application/json"):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                owner.paths.append(self.path)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(
            target=self.server.serve_forever,
            kwargs={"poll_interval": 0.05},  # (shutdown() waits for the next poll)
            daemon=True,
        ).start()

    def __enter__(self) -> _OddModelServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_server_without_a_model_list_says_so_in_one_line(cli: Cli) -> None:
    cli.server.models_status = 404  # e.g. a server that only serves /v1/chat/completions
    line = one_error(cli.invoke("models"), 1)
    assert line == (
        f"error: {cli.server.base_url} has no model list (GET /models answered 404): check "
        "that OPENAI_BASE_URL ends in /v1, or name the model yourself (CHATBOT_MODEL, "
        "/model NAME)"
    )


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"<html><body>Welcome to nginx</body></html>", "text/html"),
        (b'[{"id": "a-model"}]', "application/json"),  # a bare list, not {"data": [...]}
    ],
)
def test_an_answer_that_is_not_a_model_list_is_one_line(
    cli: Cli, body: bytes, content_type: str
) -> None:
    with _OddModelServer(body, content_type=content_type) as server:
        result = cli.invoke("models", OPENAI_BASE_URL=server.base_url)
    line = one_error(result, 1)
    assert line == (
        f"error: the answer of {server.base_url}/models is not a model list: check that "
        "OPENAI_BASE_URL is an OpenAI-compatible API (it usually ends in /v1)"
    )
    assert server.paths == ["/v1/models"]


def test_unusable_names_are_left_out_and_an_empty_list_is_said(cli: Cli) -> None:
    listing = {
        "object": "list",
        "data": [
            {"id": "good-model", "object": "model", "owned_by": "me", "created": 1},
            {"id": "\x1b[31mred", "object": "model"},  # a terminal escape
            {"id": "two words", "object": "model"},
            {"object": "model"},  # no id
            {"id": None, "object": "model"},
        ],
    }
    with _OddModelServer(json.dumps(listing).encode()) as server:
        listed = ok(cli.invoke("models", "--json", OPENAI_BASE_URL=server.base_url))
        plain = ok(cli.invoke("models", OPENAI_BASE_URL=server.base_url))
    assert [record["id"] for record in json.loads(listed.stdout)] == ["good-model"]
    assert plain.stdout == "good-model\n"
    assert json.loads(cache_path().read_text())["models"] == ["good-model"]
    with _OddModelServer(b'{"object": "list", "data": []}') as server:
        empty = ok(cli.invoke("models", OPENAI_BASE_URL=server.base_url))
        as_json = ok(cli.invoke("models", "--json", OPENAI_BASE_URL=server.base_url))
    assert empty.stdout == "" and json.loads(as_json.stdout) == []
    assert empty.stderr.strip() == (
        f"{server.base_url} lists no models: name one yourself (CHATBOT_MODEL)"
    )


def test_a_cache_folder_that_cannot_be_made_still_lists(cli: Cli, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = ok(cli.invoke("models", XDG_CACHE_HOME=str(blocker)))
    assert result.stdout.split() == ["fake-chat-model-7", "(CHATBOT_MODEL)", "fake-summary-model"]


def test_a_trailing_slash_names_the_same_endpoint_for_completion(cli: Cli) -> None:
    ok(cli.invoke("models", OPENAI_BASE_URL=cli.server.base_url + "/"))
    assert json.loads(cache_path().read_text())["endpoint"] == cli.server.base_url
