"""Errors as one line for people: what went wrong and how to fix it, with secrets removed."""

from __future__ import annotations

import re


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
    for secret in _SECRETS:
        text = text.replace(secret, "[redacted]")
    return _KEY_SHAPE.sub(lambda m: f"{m.group(1)}-[redacted]", text)


_HINTS = {
    "AuthenticationError": "the API key was refused: check OPENAI_API_KEY",
    "PermissionDeniedError": "the API key may not use this model: check OPENAI_API_KEY",
    "NotFoundError": "the server does not know this model: check CHATBOT_MODEL",
    "RateLimitError": "rate limited or out of quota: wait, or check your plan",
    "APITimeoutError": "the model did not answer in time: raise CHATBOT_TIMEOUT",
    "APIConnectionError": "cannot reach the model server: check OPENAI_BASE_URL and the network",
}


def describe_error(error: BaseException) -> str:
    """One line for an unexpected error (a model or network failure), with a hint if known."""
    if isinstance(error, FriendlyError):
        return redact(" ".join(str(error).split()))
    text = " ".join(str(error).split()) or type(error).__name__
    if len(text) > 300:
        text = text[:299] + "…"
    hint = next((_HINTS[c.__name__] for c in type(error).__mro__ if c.__name__ in _HINTS), "")
    line = f"{type(error).__name__}: {text}"
    return redact(f"{line} ({hint})" if hint else line)
