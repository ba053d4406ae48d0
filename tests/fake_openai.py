"""A tiny OpenAI-compatible chat-completions server for tests: standard library only.

It listens on 127.0.0.1 on a free port and serves ``GET /v1/models`` (the names in
``models``; ``models_status`` other than 200 answers that error) and
``POST /v1/chat/completions``, plain
(a ``chat.completion`` JSON body) and streaming (``"stream": true``: ``chat.completion.chunk``
server-sent events, a usage chunk when ``stream_options.include_usage`` is set, then
``data: [DONE]``), in the wire format the ``openai`` package parses.

Every request is recorded (parsed JSON body and ``Authorization`` header). Replies are
scripted: queued :class:`Reply` objects (or plain strings) are used first, in order; when the
queue is empty the ``responder`` callable, given the request body, returns a string or a
:class:`Reply`. With neither, the server answers 500 so that a missing script fails loudly.
:func:`completion` makes a reply holding any assistant message (tool calls, reasoning fields).

Like OpenAI, it counts prompt tokens with the real o200k_base vocabulary (tiktoken, see
``tests/reference_tokenizer.py``) and reports them as usage; with ``context_limit`` set it
refuses a longer request with OpenAI's own 400 ``context_length_exceeded`` error.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One scripted answer: the reply text, or an HTTP error, optionally after a delay."""

    text: str = ""
    status: int = 200
    delay: float = 0.0
    """Seconds to wait before answering (a slow or hanging server)."""
    error_message: str | None = None
    """The ``error.message`` of an error response (default: a generic one)."""
    chunk_delay: float = 0.0
    """Streaming only: seconds between one piece of the reply and the next (a slow stream)."""
    error_code: str | None = None
    """The ``error.code`` of an error response (e.g. ``context_length_exceeded``)."""
    finish_reason: str = "stop"
    """The ``finish_reason`` of the answer (``length``: cut by the token limit)."""
    cut_after: int | None = None
    """Streaming only: close the connection after this many pieces, with no finish reason
    and no ``[DONE]`` (a connection cut mid-reply)."""
    raw: bytes | None = None
    """Send exactly these bytes as a 200 response instead of a well-formed answer (an HTML
    page, malformed server-sent events, a body with no choices)."""
    content_type: str = "text/html; charset=utf-8"
    """The Content-Type sent with ``raw``."""
    drop: bool = False
    """Close the connection without answering at all (a server that crashed on the request)."""
    document: Any = None
    """An error's whole JSON body, sent with ``status``, instead of OpenAI's error shape (the
    way another server words its errors)."""
    headers: tuple[tuple[str, str], ...] = ()
    """Headers sent with an error response (``Retry-After``, ``x-should-retry``)."""


@dataclass(frozen=True)
class RecordedRequest:
    """What the client sent."""

    path: str
    authorization: str | None
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    @property
    def last_user_text(self) -> str:
        """The text of the last user message ('' if there is none)."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return content_text(message.get("content"))
        return ""


Responder = Callable[[dict[str, Any]], "str | Reply"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}


def content_text(content: Any) -> str:
    """A message's content as text (a string, or a list of ``{"type": "text"}`` parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up
            super().handle_error(request, client_address)


def prompt_tokens(body: dict[str, Any]) -> int:
    """The request's prompt tokens, counted as OpenAI counts them (o200k_base)."""
    from tests.reference_tokenizer import count_chat

    return count_chat(list(body.get("messages", [])))


def context_length_exceeded(limit: int, requested: int) -> Reply:
    """OpenAI's answer to a request longer than the model's context."""
    return Reply(
        status=400,
        error_code="context_length_exceeded",
        error_message=(
            f"This model's maximum context length is {limit} tokens. However, your messages "
            f"resulted in {requested} tokens. Please reduce the length of the messages."
        ),
    )


def completion(message: dict[str, Any], finish: str = "stop") -> Callable[[dict[str, Any]], Reply]:
    """A raw answer whose assistant message is ``message`` (tool calls, reasoning fields),
    streamed or not as the request asks."""

    def reply(body: dict[str, Any]) -> Reply:
        base = {"id": "chatcmpl-raw", "created": 1, "model": body.get("model", "fake")}
        if not body.get("stream"):
            document = {
                **base,
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", **message},
                        "finish_reason": finish,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens(body),
                    "completion_tokens": 1,
                    "total_tokens": prompt_tokens(body) + 1,
                },
            }
            return Reply(raw=json.dumps(document).encode(), content_type="application/json")
        delta = dict(message)
        if "tool_calls" in delta:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
        events = [
            {**base, "object": "chat.completion.chunk", "choices": [choice]}
            for choice in (
                {"index": 0, "delta": {"role": "assistant", **delta}, "finish_reason": None},
                {"index": 0, "delta": {}, "finish_reason": finish},
            )
        ]
        data = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return Reply(raw=data.encode(), content_type="text/event-stream")

    return reply


class FakeOpenAI:
    """The server; use as a context manager or call :meth:`start` and :meth:`stop`."""

    def __init__(self, responder: Responder | None = None) -> None:
        self.responder = responder
        self.context_limit: int | None = None
        """Refuse requests of more prompt tokens than this, as OpenAI does."""
        self.refused: list[int] = []
        """Prompt tokens of each request refused for the context limit."""
        self.requests: list[RecordedRequest] = []
        self.disconnects: list[int] = []
        """For each stream the client abandoned: how many reply pieces had been sent."""
        self.models: list[str] = ["fake-chat-model-7", "fake-summary-model"]
        """What ``GET /v1/models`` lists."""
        self.models_status = 200
        """The status ``GET /v1/models`` answers with (401: a refused key)."""
        self.model_listings: list[str | None] = []
        """The ``Authorization`` header of each ``GET /v1/models`` (not in ``requests``)."""
        self.log: list[tuple[str, str]] = []
        """Every request, in order, as ``(method, path)``: chat calls, listings, the
        server's own API (``requests`` holds the chat calls alone)."""
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- scripting ----------------------------------------------------------------------

    def script(self, *replies: str | Reply) -> None:
        """Queue replies, used one per request in order before the responder is asked."""
        with self._lock:
            self._queue.extend(r if isinstance(r, Reply) else Reply(text=r) for r in replies)

    # --- what a kind of server does differently (tests.local_servers) ----------------------

    def listing(self) -> dict[str, Any]:
        """The document ``GET /v1/models`` answers."""
        data = [
            {"id": name, "object": "model", "created": 1_700_000_000, "owned_by": "fake"}
            for name in self.models
        ]
        return {"object": "list", "data": data}

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any] | None:
        """The status and JSON document for a path besides the OpenAI API (None: 404)."""
        return None

    def past_window(self, body: dict[str, Any]) -> Reply | None:
        """What the server answers a chat request its window cannot hold (None: it fits)."""
        return None

    def answered_model(self, body: dict[str, Any]) -> str:
        """The model a reply names: the one the request asked for."""
        return str(body.get("model", "fake"))

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        refused = self.past_window(body)
        if refused is not None:
            return refused
        if self.context_limit is not None:
            requested = prompt_tokens(body)
            if requested > self.context_limit:
                with self._lock:
                    self.refused.append(requested)
                return context_length_exceeded(self.context_limit, requested)
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.responder is not None:
            reply = self.responder(body)
            return reply if isinstance(reply, Reply) else Reply(text=reply)
        return Reply(status=500, error_message="fake_openai: no scripted reply left")

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the server is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeOpenAI:
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-openai",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases handlers still waiting out a delay
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- handling -----------------------------------------------------------------------

    def _record(self, path: str, authorization: str | None, body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(RecordedRequest(path, authorization, body))


def _handler_for(server: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: with Nagle's algorithm the body waited for the
        # client's delayed acknowledgement of the headers.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

        def do_GET(self) -> None:
            with server._lock:
                server.log.append(("GET", self.path))
            if self.path.rstrip("/") != "/v1/models":
                self._other("GET", None)
                return
            with server._lock:
                server.model_listings.append(self.headers.get("Authorization"))
            if server.models_status != 200:
                self._send_error(server.models_status, f"HTTP {server.models_status}")
                return
            self._send_json(200, server.listing())

        def _other(self, method: str, body: Any) -> None:
            answered = server.answer(method, self.path, body)
            if answered is None:
                self._send_error(404, f"fake_openai: no route {self.path}")
            else:
                self._send_json(*answered)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            with server._lock:
                server.log.append(("POST", self.path))
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._send_error(400, "fake_openai: the body is not JSON")
                return
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._other("POST", body)
                return
            server._record(self.path, self.headers.get("Authorization"), body)
            reply = server._next_reply(body)
            if reply.delay and server._stopping.wait(reply.delay):
                return
            if reply.drop:
                self.close_connection = True
                return
            if reply.status != 200 and reply.document is not None:
                self._send_json(reply.status, reply.document, reply.headers)
            elif reply.status != 200:
                self._send_error(
                    reply.status,
                    reply.error_message or f"HTTP {reply.status}",
                    reply.error_code,
                    reply.headers,
                )
            elif reply.raw is not None:
                self._send_raw(reply.raw, reply.content_type)
            elif body.get("stream"):
                self._send_stream(body, reply)
            else:
                self._send_completion(body, reply.text, reply.finish_reason)

        def _send_json(
            self, status: int, document: Any, headers: tuple[tuple[str, str], ...] = ()
        ) -> None:
            data = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _send_error(
            self,
            status: int,
            message: str,
            code: str | None = None,
            headers: tuple[tuple[str, str], ...] = (),
        ) -> None:
            self._send_json(
                status,
                {
                    "error": {
                        "message": message,
                        "type": _ERROR_TYPES.get(status, "server_error"),
                        "param": "messages" if code else None,
                        "code": code,
                    }
                },
                headers,
            )

        def _usage(self, body: dict[str, Any], text: str) -> dict[str, int]:
            from tests.reference_tokenizer import count

            prompt = prompt_tokens(body)
            completion = max(1, count(text))
            return {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }

        def _send_raw(self, data: bytes, content_type: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send_completion(self, body: dict[str, Any], text: str, finish: str = "stop") -> None:
            self._send_json(
                200,
                {
                    "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": server.answered_model(body),
                    "system_fingerprint": "fp_fake",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text, "refusal": None},
                            "logprobs": None,
                            "finish_reason": finish,
                        }
                    ],
                    "usage": self._usage(body, text),
                },
            )

        def _send_stream(self, body: dict[str, Any], reply: Reply) -> None:
            text, chunk_delay = reply.text, reply.chunk_delay
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            base = {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": server.answered_model(body),
                "system_fingerprint": "fp_fake",
            }

            def choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
                return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            extra = {"usage": None} if include_usage else {}
            pieces = re.findall(r"\S+\s*|\s+", text)
            events = [{**base, "choices": [choice({"role": "assistant", "content": ""})], **extra}]
            for piece in pieces:
                events.append({**base, "choices": [choice({"content": piece})], **extra})
            if reply.cut_after is not None:  # the connection drops mid-reply
                events = events[: 1 + reply.cut_after]
                include_usage = False
            else:
                events.append({**base, "choices": [choice({}, reply.finish_reason)], **extra})
            if include_usage:
                events.append({**base, "choices": [], "usage": self._usage(body, text)})
            for number, event in enumerate(events):
                # events[1] is the first piece; a slow stream pauses before each later piece
                if (
                    chunk_delay
                    and 2 <= number <= len(pieces)
                    and server._stopping.wait(chunk_delay)
                ):
                    return
                try:
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):  # the client went away
                    with server._lock:
                        server.disconnects.append(max(0, number - 1))
                    self.close_connection = True
                    return
            if reply.cut_after is not None:
                return  # Connection: close, and no [DONE]
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler
