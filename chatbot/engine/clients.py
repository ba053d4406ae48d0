"""The HTTP clients of the calls to the model server: chat, summary and the model list.

A failed connection is asked again with a backoff, as a rate limit or a server error is
(``CHATBOT_MAX_RETRIES`` times: :mod:`chatbot.engine.retries`): with nothing listening at the
address, the user would wait through every backoff to be told so. A refused connection and a
host name that does not resolve are not a busy server, and asking again does not help: these
clients raise them as :class:`ServerUnreachable`, an ``openai.APIConnectionError`` that is
never asked again, and its line names the address (without its password). Every other failure
keeps its retries.

Every client of a process shares one TLS context (:func:`tls_context`): the HTTP library would
make one per client, loading the system's certificates each time, and the models of a turn make
four clients (a blocking and an awaited one for the chat model and for the summary
model).
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import openai

from chatbot.config.sources import endpoint_of, without_password
from chatbot.errors import FriendlyError, unreachable_cause


class ServerUnreachable(openai.APIConnectionError, FriendlyError):
    """Nothing answers at the model server's address, or its host name does not resolve: one
    line for people, and no retry (:func:`chatbot.engine.retries.wait_before_retry`; the
    ``openai`` client passes its own errors on too)."""

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
    """The TLS context every model client of this process uses: the one ``openai``'s HTTP
    library (``httpx2``) would make for each client (the certificates ``SSL_CERT_FILE`` or
    ``SSL_CERT_DIR`` name, else the system's), made once. An ``ssl.SSLContext`` is made to be
    shared by connections and threads."""
    import httpx2

    return httpx2.create_ssl_context()


def http_client(base_url: str | None) -> Any:
    """An HTTP client for the ``openai`` client of the server at ``base_url`` (None: OpenAI's)."""
    return _FailFastClient(without_password(endpoint_of(base_url)), verify=tls_context())


def async_http_client(base_url: str | None) -> Any:
    """:func:`http_client` for awaited calls."""
    return _AsyncFailFastClient(without_password(endpoint_of(base_url)), verify=tls_context())
