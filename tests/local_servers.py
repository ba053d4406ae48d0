"""Fakes of the local model servers people run at home, as each behaves around its context
window: how it says its window (or does not), and what it does with a request past it.

Each is the OpenAI-compatible fake (:class:`tests.fake_openai.FakeOpenAI`) with the server's
own listing, its own API, and its own answer to an overflow, taken from the servers' sources:

- :class:`LlamaCpp` (``llama-server``): ``GET /props``, ``meta`` in the listing; a prompt of
  ``n_ctx`` tokens or more gets its 400 ``exceed_context_size_error``, streamed or not.
- :class:`LlamaCppPython` (llama-cpp-python's server): says nothing of its window; past it a
  stream is a ``200`` that ends with nothing, a plain call OpenAI's ``context_length_exceeded``.
- :class:`Ollama`: ``/api/show``, ``/api/ps`` (once the model is loaded by a first request);
  past ``num_ctx`` it drops the oldest messages and answers as if nothing happened.
- :class:`Vllm`: ``max_model_len`` in the listing; past it (the prompt, or the prompt and
  ``max_tokens``) a 400 in its own words.
- :class:`LmStudio`: ``/api/v0/models/{id}``; past ``loaded_context_length`` its 400 about
  ``n_keep``.

Every request the window cannot hold is counted in :attr:`LocalServer.past` (the server's own
count of its prompt), whatever the server did with it: a test that nothing passed the window
asserts it stays empty. Prompt tokens are counted with OpenAI's vocabulary (tools included).
"""

from __future__ import annotations

import json
from typing import Any

from tests.fake_openai import FakeOpenAI, Reply, Responder, prompt_tokens

MODEL = "local-model"


def request_tokens(body: dict[str, Any]) -> int:
    """The prompt as the server counts it: the messages, and the tools it was offered."""
    from tests.reference_tokenizer import count

    tools = body.get("tools")
    return prompt_tokens(body) + (count(json.dumps(tools)) if tools else 0)


def max_tokens_of(body: dict[str, Any]) -> int | None:
    value = body.get("max_tokens", body.get("max_completion_tokens"))
    return value if isinstance(value, int) else None


class LocalServer(FakeOpenAI):
    """What the local servers have in common: one model, one window."""

    name = "local"

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        window: int = 2048,
        model_max: int = 131072,
        model: str = MODEL,
    ) -> None:
        super().__init__(responder)
        self.window = window
        self.model_max = model_max
        self.model = model
        self.models = [model]
        self.past: list[int] = []
        """The server's count of each prompt its window could not hold."""
        self.max_tokens: list[int | None] = []
        """The ``max_tokens`` of each chat request (None: not sent)."""

    def past_window(self, body: dict[str, Any]) -> Reply | None:
        with self._lock:
            self.max_tokens.append(max_tokens_of(body))
        tokens = request_tokens(body)
        if not self.fits(tokens, max_tokens_of(body)):
            with self._lock:
                self.past.append(tokens)
            return self.overflow(body, tokens)
        return None

    def fits(self, tokens: int, max_tokens: int | None) -> bool:
        return tokens < self.window

    def overflow(self, body: dict[str, Any], tokens: int) -> Reply | None:
        raise NotImplementedError


class LlamaCpp(LocalServer):
    """llama.cpp's ``llama-server``. ``meta_n_ctx=False``: a build whose listing has no
    ``meta.n_ctx`` (only ``n_ctx_train``), so ``/props`` tells."""

    name = "llama.cpp"

    def __init__(self, *args: Any, meta_n_ctx: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.meta_n_ctx = meta_n_ctx

    def listing(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"vocab_type": 2, "n_vocab": 128256, "n_ctx_train": self.model_max}
        if self.meta_n_ctx:
            meta["n_ctx"] = self.window
        entry = {
            "id": self.model,
            "aliases": [],
            "tags": [],
            "object": "model",
            "created": 1_764_000_000,
            "owned_by": "llamacpp",
            "meta": {**meta, "n_embd": 4096, "n_params": 8_030_261_312, "size": 4_912_898_304},
        }
        models = [{"name": self.model, "model": self.model, "type": "model", "details": {}}]
        return {"models": models, "object": "list", "data": [entry]}

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any] | None:
        if method == "GET" and path.split("?")[0] == "/props":
            settings = {"params": {"n_predict": -1, "temperature": 0.8}, "n_ctx": self.window}
            return 200, {
                "default_generation_settings": settings,
                "total_slots": 1,
                "model_alias": self.model,
                "model_path": f"/models/{self.model}.gguf",
                "build_info": "b8681-fake",
            }
        return None

    def overflow(self, body: dict[str, Any], tokens: int) -> Reply:
        message = (
            f"request ({tokens} tokens) exceeds the available context size "
            f"({self.window} tokens), try increasing it"
        )
        error = {
            "code": 400,
            "message": message,
            "type": "exceed_context_size_error",
            "n_prompt_tokens": tokens,
            "n_ctx": self.window,
        }
        return Reply(status=400, document={"error": error})


class LlamaCppPython(LocalServer):
    """llama-cpp-python's server: a listing with nothing about the window."""

    name = "llama-cpp-python"

    def listing(self) -> dict[str, Any]:
        entry = {"id": self.model, "object": "model", "owned_by": "me", "permissions": []}
        return {"object": "list", "data": [entry]}

    def fits(self, tokens: int, max_tokens: int | None) -> bool:
        return tokens < self.window  # (a max_tokens past the window is cut silently)

    def overflow(self, body: dict[str, Any], tokens: int) -> Reply:
        if body.get("stream"):  # the error is raised after the 200 and the stream's start
            return Reply(raw=b"", content_type="text/event-stream")
        completion = max_tokens_of(body)
        message = (
            f"This model's maximum context length is {self.window} tokens. However, you "
            f"requested {tokens + (completion or 0)} tokens ({tokens} in the messages, "
            f"{completion} in the completion). Please reduce the length of the messages or "
            "completion."
        )
        error = {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
        return Reply(status=400, document={"error": error})


class Ollama(LocalServer):
    """Ollama: ``num_ctx`` set in the model's Modelfile, else the server's default; the
    model is loaded by its first chat request (``/api/ps`` lists it from then on).
    ``answers_tagged``: its replies name the model with the ``:latest`` tag the request
    left out."""

    name = "Ollama"

    def __init__(
        self,
        *args: Any,
        num_ctx: int | None = None,
        default_ctx: int = 4096,
        answers_tagged: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.num_ctx = num_ctx
        self.answers_tagged = answers_tagged
        self.window = num_ctx or min(default_ctx, self.model_max)
        self.loaded = False
        self.truncated = 0
        """Requests whose oldest messages were dropped to fit, without a word."""

    @property
    def tagged(self) -> str:
        return self.model if ":" in self.model else f"{self.model}:latest"

    def answered_model(self, body: dict[str, Any]) -> str:
        return self.tagged if self.answers_tagged else super().answered_model(body)

    def listing(self) -> dict[str, Any]:
        entry = {"id": self.tagged, "object": "model", "created": 1_764_000_000}
        return {"object": "list", "data": [{**entry, "owned_by": "library"}]}

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any] | None:
        if method == "POST" and path == "/api/show":
            name = (body or {}).get("model") or (body or {}).get("name")
            if name not in (self.model, self.tagged):
                return 404, {"error": f"model '{name}' not found"}
            parameters = 'stop                           "<|eot_id|>"'
            if self.num_ctx:
                parameters += f"\nnum_ctx                        {self.num_ctx}"
            return 200, {
                "modelfile": f"FROM {self.tagged}",
                "parameters": parameters,
                "template": "{{ .Prompt }}",
                "details": {"family": "llama", "parameter_size": "8.0B"},
                "model_info": {
                    "general.architecture": "llama",
                    "general.parameter_count": 8_030_261_248,
                    "llama.context_length": self.model_max,
                    "llama.embedding_length": 4096,
                },
                "capabilities": ["completion", "tools"],
            }
        if method == "GET" and path == "/api/ps":
            if not self.loaded:
                return 200, {"models": []}
            running = {"name": self.tagged, "model": self.tagged, "size": 6_654_289_920}
            return 200, {"models": [{**running, "context_length": self.window}]}
        return None

    def past_window(self, body: dict[str, Any]) -> Reply | None:
        self.loaded = True
        tokens = request_tokens(body)
        with self._lock:
            self.max_tokens.append(max_tokens_of(body))
        if tokens >= self.window:
            with self._lock:
                self.past.append(tokens)
                self.truncated += 1
            messages = body["messages"]
            while request_tokens(body) >= self.window and len(messages) > 2:
                keep_system = 1 if messages[0].get("role") == "system" else 0
                del messages[keep_system]  # the oldest after the system prompt goes
            while request_tokens(body) >= self.window:  # ("truncating input prompt")
                first = messages[1 if len(messages) > 1 else 0]
                text = first.get("content")
                if not isinstance(text, str) or len(text) < 8:
                    break
                first["content"] = text[len(text) // 4 :]
        return None


class Vllm(LocalServer):
    """vLLM: the prompt and ``max_tokens`` (when sent) must fit ``max_model_len``."""

    name = "vLLM"

    def listing(self) -> dict[str, Any]:
        entry = {
            "id": self.model,
            "object": "model",
            "created": 1_764_000_000,
            "owned_by": "vllm",
            "root": self.model,
            "parent": None,
            "max_model_len": self.window,
            "permission": [{"id": "modelperm-1", "object": "model_permission"}],
        }
        return {"object": "list", "data": [entry]}

    def fits(self, tokens: int, max_tokens: int | None) -> bool:
        return tokens + (max_tokens or 1) <= self.window

    def overflow(self, body: dict[str, Any], tokens: int) -> Reply:
        asked = max_tokens_of(body)
        if tokens < self.window and asked:
            message = (
                f"'max_tokens' or 'max_completion_tokens' is too large: {asked}. This model's "
                f"maximum context length is {self.window} tokens and your request has {tokens} "
                f"input tokens ({asked} > {self.window} - {tokens})."
            )
        else:
            message = (
                f"This model's maximum context length is {self.window} tokens. However, your "
                f"request has {tokens} input tokens. Please reduce the length of the input "
                "messages."
            )
        error = {"message": message, "type": "BadRequestError", "param": None, "code": 400}
        return Reply(status=400, document={"error": error})


class LmStudio(LocalServer):
    """LM Studio with the model loaded at ``window`` tokens (of ``model_max``)."""

    name = "LM Studio"

    def listing(self) -> dict[str, Any]:
        entry = {"id": self.model, "object": "model", "owned_by": "organization_owner"}
        return {"object": "list", "data": [entry]}

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any] | None:
        if method == "GET" and path == f"/api/v0/models/{self.model}":
            return 200, {
                "id": self.model,
                "object": "model",
                "type": "llm",
                "publisher": "lmstudio-community",
                "arch": "llama",
                "compatibility_type": "gguf",
                "quantization": "Q4_K_M",
                "state": "loaded",
                "max_context_length": self.model_max,
                "loaded_context_length": self.window,
            }
        return None

    def overflow(self, body: dict[str, Any], tokens: int) -> Reply:
        message = (
            "The number of tokens to keep from the initial prompt is greater than the context "
            f"length (n_keep: {tokens}>= n_ctx: {self.window}). Try to load the model with a "
            "larger context length, or provide a shorter input."
        )
        return Reply(status=400, document={"error": message})


SERVERS: dict[str, type[LocalServer]] = {
    kind.name: kind for kind in (LlamaCpp, LlamaCppPython, Ollama, Vllm, LmStudio)
}
"""Every kind of local server, by name."""
