"""Errors as one line for people: what went wrong and how to fix it, with secrets removed."""

from __future__ import annotations

import re
import socket
from typing import NamedTuple


class FriendlyError(Exception):
    """An error whose message is already one line for people (shown without its class)."""


class ModelCallFailed(FriendlyError):
    """The chat model failed; the message says why, with secrets removed."""


_SECRETS: set[str] = set()
_KEY_SHAPE = re.compile(r"\b(sk|key)-[A-Za-z0-9*_\-]{4,}")


def remember_secret(secret: str | None) -> None:
    """Register a secret (the API key) so that :func:`redact` removes it from any text."""
    if secret and secret.strip():
        _SECRETS.add(secret)


def redact(text: str) -> str:
    """Remove registered secrets, and anything shaped like an API key, from text."""
    for secret in sorted(_SECRETS, key=len, reverse=True):  # a secret holding another: whole
        text = text.replace(secret, "[redacted]")
    return _KEY_SHAPE.sub(lambda m: f"{m.group(1)}-[redacted]", text)


_key_place = ""


def remember_key_place(place: str) -> None:
    """Where the API key was found, for the line of a key the model server refuses
    (``OPENAI_API_KEY in .env``, ``the environment variable OPENAI_API_KEY``; ``""``: not
    known). Set as the settings are read; never the key itself."""
    global _key_place
    _key_place = place


_LONG_WORD = 200
_LONG_LINE = 1000


def within_reach(line: str) -> str:
    """An error line cut to a length people read: a value echoed in it (an argument, a path,
    a command name, pasted by mistake at 130 KB) keeps its first 120 and last 40 characters
    past 200 without a space, and a line longer than 1,000 characters keeps its start and
    its end (where the hint is), with "…" where text was left out."""
    line = re.sub(
        rf"\S{{{_LONG_WORD + 1},}}", lambda word: f"{word[0][:120]}…{word[0][-40:]}", line
    )
    if len(line) > _LONG_LINE:
        line = f"{line[:700]} … {line[-(_LONG_LINE - 703) :]}"
    return line


_HINTS = {
    "AuthenticationError": "the API key was refused: check {key}",
    "PermissionDeniedError": "the API key may not use this model: check {key}",
    "NotFoundError": "the server does not know this model: check {model}",
    "RateLimitError": "rate limited or out of quota: wait, or check your plan",
    "APITimeoutError": "the model did not answer in time: raise CHATBOT_TIMEOUT",
    "APIConnectionError": "cannot reach the model server: check OPENAI_BASE_URL and the network",
}
_STATUS_HINTS = {
    400: "the server refused the request: check {model} and the model settings",
    401: _HINTS["AuthenticationError"],
    403: _HINTS["PermissionDeniedError"],
    404: "the server does not know this model or path: check {model}, and that "
    "OPENAI_BASE_URL ends in /v1",
    408: "the server gave up waiting: try again (/retry)",
    413: "the request is too large for the server",
    422: "the server could not process the request: check {model} and the model settings",
    429: _HINTS["RateLimitError"],
}
"""Hints for a failed model call; ``{model}`` is the setting naming the model that was called,
``{key}`` where the API key was found (:func:`remember_key_place`)."""
CHAT_MODEL_SETTING = "CHATBOT_MODEL"
SUMMARY_MODEL_SETTING = "CHATBOT_SUMMARY_MODEL"
_SERVER_FAILED = "the model server failed: try again in a moment with /retry"
_NOT_AN_ANSWER = "a body that is not an answer"
_NOT_AN_API = "check that OPENAI_BASE_URL is an OpenAI-compatible API (it usually ends in /v1)"


def _hint(hint: str, model_setting: str) -> str:
    """A hint of :data:`_HINTS` or :data:`_STATUS_HINTS` naming the model's setting and where
    the API key was found."""
    return hint.format(model=model_setting, key=_key_place or "OPENAI_API_KEY")


def causes(error: BaseException) -> list[BaseException]:
    """The error, what caused it, and what an exception group holds (anyio reports each
    address it tried), outermost first."""
    found: list[BaseException] = []
    waiting = [error]
    while waiting and len(found) < 32:
        current = waiting.pop(0)
        if current in found:
            continue
        found.append(current)
        if isinstance(current, BaseExceptionGroup):
            waiting.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                waiting.append(linked)
    return found


def unreachable_cause(error: BaseException) -> str | None:
    """Why a connection was never made, in words: nothing listens at the address, or its host
    name does not resolve. None for any other failure."""
    found = causes(error)
    if any(isinstance(cause, socket.gaierror) for cause in found):
        return "its host name does not resolve"
    if any(isinstance(cause, ConnectionRefusedError) for cause in found):
        return "the connection was refused"
    return None


def _named(chain: list[BaseException], *names: str) -> BaseException | None:
    for link in chain:
        if any(cls.__name__ in names for cls in type(link).__mro__):
            return link
    return None


def _status_message(error: BaseException) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        message = inner.get("message") if isinstance(inner, dict) else None
        if isinstance(message, str) and message.strip():
            return message
    return re.sub(r"^Error code: \d+(?: - |$)", "", str(error))


def _timeout_shown(chain: list[BaseException]) -> str:
    """`` (0.5 s)``: the connect timeout the failed request had (httpx keeps it with the
    request), or nothing when no link of ``chain`` says."""
    for link in chain:
        try:
            request = getattr(link, "request", None)  # (httpx raises when it has none)
        except RuntimeError:
            continue
        timeout = getattr(request, "extensions", {}).get("timeout")
        seconds = timeout.get("connect") if isinstance(timeout, dict) else None
        if isinstance(seconds, int | float):
            return f" ({seconds:g} s)"
    return ""


_SQLITE_FULL = 13
_PG_DISK_FULL = "53100"
_NO_SPACE = (28, 122)  # ENOSPC, EDQUOT


def is_disk_full(error: BaseException) -> bool:
    """True when ``error`` (or what caused it) says the disk is full: SQLite's "database or
    disk is full", PostgreSQL's ``disk_full``, or an OS write without space or quota left."""
    for link in causes(error):
        if getattr(link, "sqlite_errorcode", None) == _SQLITE_FULL:
            return True
        if getattr(link, "sqlstate", None) == _PG_DISK_FULL:
            return True
        if isinstance(link, OSError) and link.errno in _NO_SPACE:
            return True
        if type(link).__name__ == "OperationalError" and "database or disk is full" in str(link):
            return True
    return False


def _known_failure(error: BaseException, model_setting: str) -> str | None:
    """One line for the failures every user meets: a full disk, and the network and protocol
    failures of a model server (a hint about the model names ``model_setting``)."""
    if is_disk_full(error):
        return "the disk is full (free some space)"
    chain = causes(error)
    if _named(chain, "JSONDecodeError"):
        return f"the model server sent data that is not valid JSON: {_NOT_AN_API}"
    if empty_answer(error) == _NOT_AN_ANSWER:
        return f"the model server answered with {_NOT_AN_ANSWER}: {_NOT_AN_API}"
    if any("No generations found" in str(link) for link in chain):
        return (
            "the model server answered without a reply (an HTML page, an empty body or no "
            f"choices): {_NOT_AN_API}"
        )
    if _named(chain, "gaierror"):
        return (
            "cannot find the model server: the host name in OPENAI_BASE_URL does not resolve "
            "(check it, and the network)"
        )
    if _named(chain, "ConnectionRefusedError"):
        return (
            "cannot reach the model server (the connection was refused): check "
            "OPENAI_BASE_URL and that the server is running"
        )
    if _named(chain, "ConnectTimeout"):  # (CHATBOT_TIMEOUT bounds the connection too)
        return (
            f"the model server did not answer within CHATBOT_TIMEOUT{_timeout_shown(chain)}: "
            "no connection was made in that time; raise CHATBOT_TIMEOUT, or check "
            "OPENAI_BASE_URL and the network"
        )
    if _named(chain, "ConnectError"):
        return "cannot reach the model server: check OPENAI_BASE_URL and the network"
    if _named(chain, "RemoteProtocolError", "ReadError", "ConnectionResetError"):
        return (
            "the model server closed the connection without finishing its answer: try again "
            "(/retry); if it keeps happening, check the server"
        )
    if _named(chain, "APITimeoutError", "TimeoutException"):
        return (
            "the model server stopped answering for longer than CHATBOT_TIMEOUT: try again "
            "(/retry), or raise CHATBOT_TIMEOUT"
        )
    status = getattr(error, "status_code", None)
    if isinstance(status, int) and status >= 400:
        message = " ".join(_status_message(error).split())
        if len(message) > 240:
            message = message[:239] + "…"
        hint = _hint(_STATUS_HINTS.get(status, ""), model_setting) or (
            _SERVER_FAILED if status >= 500 else ""
        )
        line = f"the model server answered HTTP {status}" + (f": {message}" if message else "")
        return f"{line} ({hint})" if hint else line
    return None


def empty_answer(error: BaseException) -> str | None:
    """What came back, when a model call failed because the server's answer held no reply at
    all: a stream that ended with nothing in it, an empty body, a body with no choices or not
    shaped as an answer (an HTML page). ``None`` for any other failure."""
    chain = causes(error)
    if any("No generations found" in str(link) for link in chain):
        return "a stream holding none"
    decoding = _named(chain, "JSONDecodeError")
    if decoding is not None and getattr(decoding, "pos", None) == 0:
        empty = not str(getattr(decoding, "doc", "x")).strip()
        return "an empty body" if empty else "a page that is not JSON"
    if any("Unexpected response type" in str(link) for link in chain):
        return _NOT_AN_ANSWER
    return None


def _wrapped_friendly(error: BaseException) -> FriendlyError | None:
    """``error`` when it is a :class:`FriendlyError`, else the first one it was raised
    ``from`` (its ``__cause__`` chain, not what it merely happened during)."""
    current: BaseException | None = error
    for _ in range(8):
        if current is None or isinstance(current, FriendlyError):
            return current
        current = current.__cause__
    return None


def describe_error(error: BaseException, model_setting: str = CHAT_MODEL_SETTING) -> str:
    """One line for an unexpected error (a model or network failure), with a hint if known;
    a hint about the model names ``model_setting``, the setting of the model called
    (:data:`SUMMARY_MODEL_SETTING` for a summary call). An error raised ``from`` one of ours
    (a library classifying it: langchain-openai wraps a connection error in its own) says
    ours."""
    friendly = _wrapped_friendly(error)
    if friendly is not None:
        return redact(" ".join(str(friendly).split()))
    known = _known_failure(error, model_setting)
    if known is not None:
        return redact(known)
    text = " ".join(str(error).split()) or type(error).__name__
    if len(text) > 300:
        text = text[:299] + "…"
    hint = next((_HINTS[c.__name__] for c in type(error).__mro__ if c.__name__ in _HINTS), "")
    hint = _hint(hint, model_setting)
    line = f"{type(error).__name__}: {text}"
    return redact(f"{line} ({hint})" if hint else line)


# --- the provider says the context is too long -----------------------------------------------

# Patterns, not compiled ones: re compiles (and caches) them at the first error that needs them,
# not in every command's start (this alternation, ignoring case, takes about half a millisecond).
_OVERFLOW_WORDS = (
    r"context_length_exceeded|maximum context length|context length exceeded"
    r"|exceeds? (?:the )?(?:maximum )?context (?:length|window|size)"
    r"|context window exceeded|contextwindowexceeded|exceed_context_size"
    r"|exceeds the available context size|prompt is too long|input is too long"
    r"|input prompt \(\d+ tokens\) is too long|range of input length should be"
    r"|input tokens exceed|input token count \(\d+\) exceeds|too many input tokens"
    r"|reduce the length of the messages|input length \d+ exceeds"
    r"|greater than the context length|context length of only|context length is only"
    r"|context size has been exceeded|longer than the context length"
    r"|exceed context window of"
)
_LIMIT_PATTERNS = (
    r"maximum context length is (\d+)",
    r"range of input length should be \[\d+,\s*(\d+)\]",
    r"maximum number of tokens allowed \((\d+)\)",
    r"exceeds (?:the )?(?:maximum )?(?:context )?(?:length|limit|window|size) of (\d+)",
    r"exceeds context length (\d+)",
    r"limit of (\d+)",
    r"\d+ tokens? > (\d+) maximum",
    r"""['"]n_ctx['"]\s*:\s*(\d+)""",
    r"available context size \((\d+) tokens\)",
    r"n_ctx: (\d+)",
    r"context length (?:of|is) only (\d+)",
    r"exceed context window of (\d+)",
)
_REQUESTED_PATTERNS = (
    r"\((\d+) in the messages",
    r"resulted in (?:over )?(\d+) tokens",
    r"requested (\d+) tokens",
    r"input prompt \((\d+) tokens\)",
    r"input token count \((\d+)\)",
    r"input length (\d+)",
    r"prompt is too long: (\d+) tokens",
    r"""['"]n_prompt_tokens['"]\s*:\s*(\d+)""",
    r"request \((\d+) tokens\) exceeds",
    r"your request has (\d+) input tokens",
    r"you passed (\d+) input tokens",
    r"n_keep: (\d+)",
    r"requested tokens \((\d+)\)",
)


class ContextOverflow(NamedTuple):
    """A provider refused a request as longer than the model's context; numbers if it said."""

    limit: int | None = None
    requested: int | None = None


def _first_number(patterns: tuple[str, ...], text: str) -> int | None:
    for pattern in patterns:
        found = re.search(pattern, text, re.IGNORECASE)
        if found:
            return int(found.group(1))
    return None


def context_overflow(error: BaseException) -> ContextOverflow | None:
    """The error as a context-length refusal (OpenAI, Ollama, vLLM, DeepSeek, DashScope,
    llama.cpp, LM Studio, Gemini and Anthropic wordings, or HTTP 413), else None."""
    from langchain_core.exceptions import ContextOverflowError

    status = getattr(error, "status_code", None)
    if status == 429:  # "Request too large ... tokens per min" is a rate limit, not the context
        return None
    body = getattr(error, "body", None)
    text = f"{error} {body if body is not None else ''}"
    if not (
        isinstance(error, ContextOverflowError)
        or status == 413
        or re.search(_OVERFLOW_WORDS, text, re.I)
    ):
        return None
    return ContextOverflow(
        limit=_first_number(_LIMIT_PATTERNS, text),
        requested=_first_number(_REQUESTED_PATTERNS, text),
    )


class ContextTooLong(FriendlyError):
    """A request that cannot fit the model's input even after folding; the message is kept."""
