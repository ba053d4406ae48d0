"""Whether anything answers at a LangGraph server's address, asked before the server's client
is imported (a server that is down is said at once), and how to say that nothing does.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from chatbot.config.sources import without_password
from chatbot.errors import FriendlyError, causes, redact, unreachable_cause

DEV_SERVER_PORT = 2024
"""The port ``langgraph dev`` serves on unless told another."""
CONNECT_SECONDS = 3.0
"""How long a connection to the server may take to be made."""


class ServerUnreachable(FriendlyError, RuntimeError):
    """Nothing answers at the server's address; the message is one line for the user."""


def start_hint(url: str) -> str:
    """What to do when the server at ``url`` does not answer (here: the command to start it)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "is it running, at that address?"
    if parts.hostname not in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
        return "is it running, at that address?"
    wanted = port or (443 if parts.scheme == "https" else 80)
    option = "" if wanted == DEV_SERVER_PORT else f" --port {wanted}"
    return f"is it running? Start it: uv run --group dev langgraph dev{option}"


def unreachable_line(url: str, error: BaseException) -> str:
    """The line for a server at ``url`` that could not be reached (its password never shown)."""
    if any(isinstance(c, TimeoutError) or "Timeout" in type(c).__name__ for c in causes(error)):
        why = "no answer in time"
    else:
        why = unreachable_cause(error) or redact(str(error)) or type(error).__name__
    return (
        f"cannot reach the LangGraph server at {without_password(url.rstrip('/'))} "
        f"({why}): {start_hint(url)}"
    )


def check_connects(url: str, timeout: float = CONNECT_SECONDS) -> None:
    """Raise :class:`ServerUnreachable` when no TCP connection to ``url``'s host and port can
    be made within ``timeout``; through a proxy nothing is asked here."""
    import socket
    import urllib.request

    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return  # (said by the client, which reads the URL too)
    proxies = urllib.request.getproxies()
    proxied = parts.scheme.lower() in proxies or "all" in proxies
    if not host or (proxied and not urllib.request.proxy_bypass(host)):
        return
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        raise ServerUnreachable(unreachable_line(url, error)) from None
