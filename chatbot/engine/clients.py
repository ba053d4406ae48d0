"""The HTTP clients of the calls to the model server: chat, summary and the model list.

A refused connection and a host name that does not resolve are not a busy server, so asking
again (:mod:`chatbot.engine.retries`) would only make the user wait through every backoff: these
clients raise them as :class:`ServerUnreachable`, never asked again, its line naming the address
without its password. Every client shares one TLS context (:func:`tls_context`), so the
system's certificates are loaded once, not once per client.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import openai

from chatbot.config.sources import endpoint_of, without_password
from chatbot.errors import FriendlyError, unreachable_cause


class ServerUnreachable(openai.APIConnectionError, FriendlyError):
    """Nothing answers at the model server's address, or its host name does not resolve."""

    def __init__(self, line: str, request: Any) -> None:
        super().__init__(message=line, request=request)


def unreachable_line(error: BaseException, shown: str) -> str | None:
    """The line for a connection to ``shown`` that failed because nothing listens there or its
    host name does not resolve; None for any other failure (those are retried)."""
    cause = unreachable_cause(error)
    if cause == "its host name does not resolve":
        return (
            f"cannot find the model server at {shown}: its host name does not resolve (check "
            "OPENAI_BASE_URL, and the network)"
        )
    if cause is not None:
        return (
            f"cannot reach the model server at {shown} ({cause}): check "
            "OPENAI_BASE_URL and that the server is running"
        )
    return None


class _FailFastClient(openai.DefaultHttpxClient):
    """The ``openai`` client's own HTTP client (proxies from the environment and all), but a
    server that is not there is said at once (see the module)."""

    def __init__(self, shown: str, **options: Any) -> None:
        super().__init__(**options)
        self._shown = shown

    def send(self, request: Any, **options: Any) -> Any:
        try:
            return super().send(request, **options)
        except Exception as error:
            line = unreachable_line(error, self._shown)
            if line is None:
                raise
            raise ServerUnreachable(line, request) from error


class _AsyncFailFastClient(openai.DefaultAsyncHttpxClient):
    """:class:`_FailFastClient` for awaited calls."""

    def __init__(self, shown: str, **options: Any) -> None:
        super().__init__(**options)
        self._shown = shown

    async def send(self, request: Any, **options: Any) -> Any:
        try:
            return await super().send(request, **options)
        except Exception as error:
            line = unreachable_line(error, self._shown)
            if line is None:
                raise
            raise ServerUnreachable(line, request) from error


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context ``httpx2`` would make for each client (``SSL_CERT_FILE``,
    ``SSL_CERT_DIR``, else the system's), made once for every model client of the process."""
    import httpx2

    return httpx2.create_ssl_context()


def http_client(base_url: str | None) -> Any:
    """An HTTP client for the ``openai`` client of the server at ``base_url`` (None: OpenAI's)."""
    return _FailFastClient(without_password(endpoint_of(base_url)), verify=tls_context())


def async_http_client(base_url: str | None) -> Any:
    """:func:`http_client` for awaited calls."""
    return _AsyncFailFastClient(without_password(endpoint_of(base_url)), verify=tls_context())
