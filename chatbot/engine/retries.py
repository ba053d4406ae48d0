"""When a failed model call is asked again, and after how long.

The ``openai`` client would ask again in silence (a ``Retry-After: 60`` would be a minute of
``thinking…``), so its retries are off and :func:`chatbot.engine.folding.ask` asks again,
telling each wait (:class:`~chatbot.engine.stream.Retrying`), up to ``CHATBOT_MAX_RETRIES``.
The rules are the ``openai`` client's, which it keeps private:

- asked again: a timeout, a connection that failed (not one to a server that is not there:
  :class:`~chatbot.engine.clients.ServerUnreachable`, said at once), and the statuses 408,
  409, 429 and 500 or more; a server's ``x-should-retry: true`` or ``false`` decides first;
  a ``Retry-After`` of more than two minutes is not waited for;
- the wait: what the server asks (``retry-after-ms``, else ``Retry-After`` in seconds or as
  a date) when it is more than nothing and two minutes at most; else half a second doubled
  at each retry, eight seconds at most, less up to a quarter at random.

A reply that failed once it had begun to stream is not asked again: its words are on the
screen already (:class:`ReplyBegan`).
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.callbacks import BaseCallbackHandler

INITIAL_RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 8.0
MAX_RETRY_AFTER_DELAY = 120.0
"""The ``openai`` client's backoff and the longest ``Retry-After`` it waits for, in seconds."""

Reason = Literal["rate_limited", "server_failed", "status", "timeout", "connection"]
"""Why a call is asked again: a rate limit (429), a server error (5xx), another status the
server or the rules retry (408, 409, ``x-should-retry``), a timeout, a failed connection."""

_INFINITY = ("inf", "+inf", "infinity", "+infinity")
"""How a ``Retry-After`` of infinity is spelled (any other number that big overflowed)."""


@dataclass(frozen=True)
class Wait:
    """The wait before a call is asked again: how long, and why."""

    seconds: float
    reason: Reason
    status: int = 0
    """The HTTP status that failed (0: no answer came)."""


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asks to wait: ``retry-after-ms``, else ``Retry-After`` as seconds
    (a fraction too) or as an HTTP date; None when it says nothing readable."""
    for name, divisor in (("retry-after-ms", 1000), ("retry-after", 1)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            delay = float(value)
        except ValueError:
            continue
        if delay == math.inf and value.strip().lower() not in _INFINITY:
            return MAX_RETRY_AFTER_DELAY + 1  # (a number too big: too long, not malformed)
        return delay / divisor
    try:
        date = email.utils.parsedate_tz(headers.get("retry-after"))
        if date is None:
            return None
        return float(email.utils.mktime_tz(date) - time.time())
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def _asked_again(status: int, headers: Mapping[str, str]) -> bool:
    """The ``openai`` client's rule for an answer with an error status."""
    after = retry_after(headers)
    if after is not None and math.isfinite(after) and after > MAX_RETRY_AFTER_DELAY:
        return False
    said = headers.get("x-should-retry")
    if said in ("true", "false"):
        return said == "true"
    return status in (408, 409, 429) or status >= 500


def backoff(retries_taken: int, headers: Mapping[str, str] | None = None) -> float:
    """Seconds to wait before retry ``retries_taken + 1``: the server's word when it gives a
    usable one, else the backoff (see the module)."""
    after = retry_after(headers) if headers is not None else None
    if after is not None and math.isfinite(after) and 0 < after <= MAX_RETRY_AFTER_DELAY:
        return after
    delay = min(INITIAL_RETRY_DELAY * 2.0 ** min(retries_taken, 1000), MAX_RETRY_DELAY)
    return max(0.0, delay * (1 - 0.25 * random.random()))


def _unreachable(error: BaseException) -> bool:
    """A connection to a server that is not there (raised ``from`` by a library wrapping it)."""
    from chatbot.engine.clients import ServerUnreachable

    current: BaseException | None = error
    for _ in range(8):
        if current is None:
            return False
        if isinstance(current, ServerUnreachable):
            return True
        current = current.__cause__
    return False


def wait_before_retry(error: BaseException, retries_taken: int) -> Wait | None:
    """How long to wait before asking again after ``error``, ``retries_taken`` retries in;
    None when the call is not asked again (see the module)."""
    import openai  # (imported by the models already; not before a call has failed)

    if isinstance(error, openai.APIStatusError):
        response = error.response
        status, headers = response.status_code, response.headers
        if not _asked_again(status, headers):
            return None
        reason: Reason = (
            "rate_limited" if status == 429 else "server_failed" if status >= 500 else "status"
        )
        return Wait(backoff(retries_taken, headers), reason, status)
    if isinstance(error, openai.APITimeoutError):
        return Wait(backoff(retries_taken), "timeout")
    if isinstance(error, openai.APIConnectionError) and not _unreachable(error):
        return Wait(backoff(retries_taken), "connection")
    return None


class ReplyBegan(BaseCallbackHandler):
    """A call's callback that notes when its reply begins to stream (:attr:`began`): a
    failure after that is not asked again."""

    run_inline = True  # (a flag set on the event loop: no worker thread for it)

    def __init__(self) -> None:
        self.began = False

    def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        self.began = True
