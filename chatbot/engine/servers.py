"""What each local model server says of a model's context window, asked over HTTP.

An OpenAI-compatible endpoint has no standard way to say its window; each server has its own.
:func:`ask_server` reads the endpoint's model listing first (``GET /v1/models``: vLLM puts
``max_model_len`` there, llama.cpp ``meta.n_ctx``, and the entry's owner tells llama.cpp,
llama-cpp-python and LM Studio apart), then the server's own API:

- llama.cpp ``llama-server``: ``GET /props`` → ``default_generation_settings.n_ctx`` (the window
  of one slot); the model's own is ``meta.n_ctx_train`` of the listing.
- Ollama: ``POST /api/show`` → ``parameters`` (a ``num_ctx`` line, when the Modelfile sets one)
  and ``model_info`` (``<arch>.context_length``, the model's own); ``GET /api/ps`` →
  ``context_length`` of a loaded model (what it really runs with). A model not loaded yet runs
  with the server's default (``OLLAMA_CONTEXT_LENGTH``; 4,096 unless the server has much video
  memory), which no API tells: the smallest default is assumed until it is loaded.
- vLLM: ``max_model_len`` of the listing.
- LM Studio: ``GET /api/v0/models/{model}`` → ``loaded_context_length`` (or, 0.4 and later,
  ``GET /api/v1/models`` → ``loaded_instances[].config.context_length``); the model's own is
  ``max_context_length``. A model not loaded yet loads with LM Studio's default, 4,096.
- llama-cpp-python's server says nothing: its default (``n_ctx`` 2,048) is assumed.

Every question is bounded by a short deadline; a server that cannot be reached, refuses the
key or fails is :class:`Unknown` (nothing is kept: the next start asks again), one that
answers without a window is ``None``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from typing import TYPE_CHECKING, Any

from chatbot.engine import windows
from chatbot.engine.windows import Window
from chatbot.logs import logger

if TYPE_CHECKING:
    from chatbot.config.settings import Settings

log = logger("models")

DEADLINE = 4.0
"""Seconds all the questions about one model may take together."""
ASK_TIMEOUT = 2.0
"""Seconds one question may take (a local server answers in milliseconds)."""
OLLAMA_DEFAULT = 4096
LM_STUDIO_DEFAULT = 4096
LLAMA_CPP_PYTHON_DEFAULT = 2048


class Unknown(Exception):
    """The server could not be asked (not there, too slow, refused the key): raised by a
    question, answered by :func:`ask_server`. ``slow``: it did not answer in time (asked again
    some minutes later, not at every start, which would wait for it each time)."""

    def __init__(self, slow: bool = False) -> None:
        super().__init__()
        self.slow = slow


class _Asker:
    """GET and POST as JSON against one server, within one deadline."""

    def __init__(self, client: Any, key: str, deadline: float) -> None:
        self.client = client
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.deadline = deadline

    def json(self, method: str, url: str, body: dict[str, Any] | None = None) -> Any:
        """The answer's JSON document; None for a path the server lacks or a body not JSON.
        Raises :class:`Unknown` when the server cannot be reached in time, refuses the key
        or fails (then nothing it said is kept)."""
        import httpx2

        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Unknown(slow=True)
        try:
            response = self.client.request(
                method, url, headers=self.headers, json=body, timeout=min(left, ASK_TIMEOUT)
            )
        except (httpx2.TransportError, OSError) as error:
            from chatbot.config.sources import without_password

            log.debug("asking %s failed: %s", without_password(url), type(error).__name__)
            raise Unknown(slow=isinstance(error, httpx2.TimeoutException)) from None
        except Exception as error:  # (the client's own "not there": ServerUnreachable)
            if type(error).__name__ == "ServerUnreachable":
                raise Unknown from None
            raise
        if response.status_code in (401, 403) or response.status_code >= 500:
            raise Unknown  # (a refused key, a server still loading: ask another time)
        if response.status_code != 200:
            return None
        try:
            return json.loads(response.content)
        except ValueError:
            return None


def server_root(endpoint: str) -> str:
    """The server's own address: the endpoint without its ``/v1``."""
    return re.sub(r"/v1/?$", "", endpoint.rstrip("/"))


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _named(entries: Any, model: str, *fields: str) -> dict[str, Any] | None:
    """The entry of ``entries`` naming ``model`` in one of ``fields`` (Ollama's names may
    carry a ``:latest`` the setting leaves out)."""
    if not isinstance(entries, list):
        return None
    names = {model, f"{model}:latest"} if ":" not in model else {model}
    for entry in entries:
        if isinstance(entry, dict) and any(entry.get(field) in names for field in fields):
            return entry
    return None


def ask_server(
    settings: Settings, model: str, listing: list[dict[str, Any]] | None = None
) -> Window | Unknown | None:
    """What the server at ``OPENAI_BASE_URL`` says of ``model``'s window (see the module);
    ``listing``: the entries of ``GET /v1/models`` when they were just read."""
    from chatbot.config.sources import endpoint_of
    from chatbot.engine.clients import http_client

    endpoint = endpoint_of(settings.openai_base_url)
    key = settings.openai_api_key.get_secret_value().strip() if settings.openai_api_key else ""
    deadline = time.monotonic() + min(DEADLINE, settings.timeout)
    try:
        with http_client(endpoint) as client:
            return _ask(_Asker(client, key, deadline), endpoint, model, listing)
    except Unknown as error:
        return Unknown(error.slow)  # (a fresh one: no traceback holding the client)


def _ask(
    asker: _Asker, endpoint: str, model: str, listed: list[dict[str, Any]] | None
) -> Window | None:
    root = server_root(endpoint)
    if listed is None:
        listing = asker.json("GET", f"{endpoint}/models")
        listed = listing.get("data") if isinstance(listing, dict) else None
    entry = _named(listed, model, "id")
    owner = entry.get("owned_by") if entry else None
    if entry and _number(entry.get("max_model_len")):
        return Window(entry["max_model_len"], "server", "vLLM", "max_model_len of /v1/models")
    if owner == "llamacpp" or (entry and isinstance(entry.get("meta"), dict)):
        return _llama_cpp(asker, root, model, entry or {})
    if owner == "me" and entry is not None and "permissions" in entry:
        default = LLAMA_CPP_PYTHON_DEFAULT
        return Window(default, "server", "llama-cpp-python", "its default n_ctx", assumed=True)
    if owner == "organization_owner":
        return _lm_studio(asker, root, model)
    for ask in (_ollama, _llama_cpp_props, _lm_studio):
        window = ask(asker, root, model)
        if window is not None:
            return window
    return None


def _llama_cpp(asker: _Asker, root: str, model: str, entry: dict[str, Any]) -> Window | None:
    meta: dict[str, Any] = entry["meta"] if isinstance(entry.get("meta"), dict) else {}
    trained = _number(meta.get("n_ctx_train"))
    listed = _number(meta.get("n_ctx"))
    if listed:
        return Window(listed, "server", "llama.cpp", "meta.n_ctx of /v1/models", trained)
    window = _llama_cpp_props(asker, root, model)
    if window is not None and trained:
        return Window(window.tokens, "server", "llama.cpp", window.detail, trained)
    return window


def _llama_cpp_props(asker: _Asker, root: str, model: str) -> Window | None:
    from urllib.parse import quote

    props = asker.json("GET", f"{root}/props?model={quote(model, safe='')}")
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    tokens = _number(settings.get("n_ctx")) if isinstance(settings, dict) else None
    if tokens is None:
        return None  # (a router without the model loaded says 0)
    return Window(tokens, "server", "llama.cpp", "n_ctx of /props")


def _ollama(asker: _Asker, root: str, model: str) -> Window | None:
    shown = asker.json("POST", f"{root}/api/show", {"model": model})
    if not isinstance(shown, dict) or not isinstance(shown.get("model_info"), dict):
        return None
    info = shown["model_info"]
    arch = info.get("general.architecture")
    trained = _number(info.get(f"{arch}.context_length")) if isinstance(arch, str) else None
    if trained is None:
        trained = next(
            (_number(v) for k, v in info.items() if k.endswith(".context_length") and _number(v)),
            None,
        )
    running = asker.json("GET", f"{root}/api/ps")
    loaded = _named(running.get("models") if isinstance(running, dict) else None, model, "name")
    if loaded is None and isinstance(running, dict):
        loaded = _named(running.get("models"), model, "model")
    if loaded is not None and _number(loaded.get("context_length")):
        tokens = loaded["context_length"]
        return Window(tokens, "server", "Ollama", "context_length of /api/ps", trained)
    parameters = shown.get("parameters")
    parameters = parameters if isinstance(parameters, str) else ""
    found = re.search(r"^num_ctx\s+(\d+)", parameters, re.M)
    if found:
        return Window(int(found.group(1)), "server", "Ollama", "num_ctx of the model", trained)
    default = min(OLLAMA_DEFAULT, trained) if trained else OLLAMA_DEFAULT
    detail = "its smallest default until the model is loaded"
    return Window(default, "server", "Ollama", detail, trained, assumed=True, until_loaded=True)


def _lm_studio(asker: _Asker, root: str, model: str) -> Window | None:
    from urllib.parse import quote

    entry = asker.json("GET", f"{root}/api/v0/models/{quote(model, safe='')}")
    if isinstance(entry, dict) and "max_context_length" in entry:
        most = _number(entry.get("max_context_length"))
        loaded = _number(entry.get("loaded_context_length"))
        if loaded:
            return Window(loaded, "server", "LM Studio", "loaded_context_length", most)
        return _lm_studio_default(most)
    listing = asker.json("GET", f"{root}/api/v1/models")
    found = _named(listing.get("models") if isinstance(listing, dict) else None, model, "key")
    if found is None:
        return None
    most = _number(found.get("max_context_length"))
    for instance in found.get("loaded_instances") or []:
        config = instance.get("config") if isinstance(instance, dict) else None
        loaded = _number(config.get("context_length")) if isinstance(config, dict) else None
        if loaded:
            detail = "context_length of a loaded instance"
            return Window(loaded, "server", "LM Studio", detail, most)
    return _lm_studio_default(most)


def _lm_studio_default(most: int | None) -> Window:
    default = min(LM_STUDIO_DEFAULT, most) if most else LM_STUDIO_DEFAULT
    detail = "its default context length until the model is loaded"
    return Window(default, "server", "LM Studio", detail, most, assumed=True, until_loaded=True)


def learn_from_server(
    settings: Settings,
    model_name: str,
    *,
    force: bool = False,
    listing: list[dict[str, Any]] | None = None,
) -> None:
    """Ask the server for ``model_name``'s window unless the model cache knows it (``force``:
    ask anyway, with the ``listing`` just read). Inside an event loop it is asked from a thread
    of its own: this run goes on with what is known, the next one has it."""
    from chatbot.config.sources import endpoint_of

    if not settings.openai_base_url or not model_name:
        return  # (OpenAI's own API has no window API: its models have profiles)
    endpoint = endpoint_of(settings.openai_base_url)
    if not force and (
        windows.BOOK.fresh(endpoint, model_name) or windows.BOOK.asked(endpoint, model_name)
    ):
        return
    _ask_and_record(settings, endpoint, model_name, listing, in_thread=windows.in_event_loop())


def _ask_and_record(
    settings: Settings,
    endpoint: str,
    model_name: str,
    listing: list[dict[str, Any]] | None = None,
    *,
    in_thread: bool = False,
) -> None:
    """Ask the server and keep what it said (``in_thread``: from a daemon thread of its own)."""
    if in_thread:
        arguments = (settings, endpoint, model_name, listing)
        threading.Thread(
            target=_ask_and_record, args=arguments, name="chatbot-window", daemon=True
        ).start()
        return
    answer = ask_server(settings, model_name, listing)
    if isinstance(answer, Unknown):
        if answer.slow:
            windows.BOOK.record_slow(endpoint, model_name)
    else:
        windows.BOOK.record(endpoint, model_name, answer)


ASK_AGAIN_EVERY = 60.0
"""Seconds between two questions a process asks again after replies."""
_asked_again: dict[tuple[str, str], float] = {}
_asking_again = threading.Lock()


def ask_again(settings: Settings, model_name: str) -> None:
    """Ask the server for ``model_name``'s window once more, from a thread of its own, at most
    every :data:`ASK_AGAIN_EVERY` seconds (after a reply: see ``overflow.after_reply``)."""
    from chatbot.config.sources import endpoint_of

    endpoint = endpoint_of(settings.openai_base_url)
    now = time.monotonic()
    with _asking_again:
        last = _asked_again.get((endpoint, model_name))
        if last is not None and now - last < ASK_AGAIN_EVERY:
            return
        _asked_again[(endpoint, model_name)] = now
    _ask_and_record(settings, endpoint, model_name, in_thread=True)
