"""What the graph streams about folding (and recalling, and waiting to ask a model again), as
small typed records, and their form on the wire.

Each record goes to LangGraph's ``stream_mode="custom"`` as a plain dict (:func:`as_payload`),
which a server, Studio and the SDK pass on; :func:`from_payload` reads it back, for a local
graph and a server's stream alike. Imports nothing: readers of a stream need no graph.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

SUMMARY_TAG = "chatbot:summary"
"""The tag of the summary model's calls: their tokens are not the reply's."""


@dataclass(frozen=True)
class Folding:
    """A summary call is starting: ``messages`` are being folded (it can take a while), in
    ``parts`` calls of which this is the ``part``-th."""

    event: ClassVar[str] = "folding"
    messages: int
    reason: str = "trigger"
    part: int = 1
    parts: int = 1

    @property
    def words(self) -> str:
        """``folding 34 messages (part 2 of 5) into the summary…``"""
        from chatbot.plural import counted

        of = f" (part {self.part} of {self.parts})" if self.parts > 1 else ""
        return f"folding {counted(self.messages, 'message')}{of} into the summary…"


@dataclass(frozen=True)
class Summarized:
    """Older messages were folded into the summary, for ``reason`` (``trigger``, ``fit``,
    ``overflow`` or ``compact``); ``context_before``/``context_after``: tokens the chat model
    is sent (0 when a server did not say)."""

    event: ClassVar[str] = "summarized"
    messages: int
    tokens_in: int
    tokens_out: int
    calls: int = 1
    extended: bool = False
    reason: str = "trigger"
    context_before: int = 0
    context_after: int = 0


@dataclass(frozen=True)
class NothingToFold:
    """A fold was not made: nothing was safe to fold (the kept window holds everything), or
    folding ``messages`` of them would not make the context (``context`` tokens) smaller."""

    event: ClassVar[str] = "nothing_to_fold"
    context: int
    reason: str = "compact"
    messages: int = 0


@dataclass(frozen=True)
class SummaryFailed:
    """The summary call failed; nothing was removed and the next turn tries again."""

    event: ClassVar[str] = "summary_failed"
    error: str
    reason: str = "trigger"


@dataclass(frozen=True)
class Recalling:
    """The chat model recalled folded messages: ``found`` of them hold ``query``."""

    event: ClassVar[str] = "recalling"
    query: str
    found: int


@dataclass(frozen=True)
class RecallOff:
    """The chat model refused the recall tool: the turn was asked again without it, and
    recall stays off for this model until the program restarts."""

    event: ClassVar[str] = "recall_off"
    model: str
    error: str = ""


@dataclass(frozen=True)
class Retrying:
    """A model call failed in a way that may pass: it is asked again after ``seconds``, retry
    ``retry`` of ``retries``; ``reason`` as :data:`chatbot.engine.retries.Reason`, ``status``
    the HTTP status (0 for none), ``call`` ``reply`` or ``summary``."""

    event: ClassVar[str] = "retrying"
    seconds: float
    reason: str
    status: int = 0
    retry: int = 1
    retries: int = 1
    call: str = "reply"


FoldEvent = Folding | Summarized | NothingToFold | SummaryFailed | Recalling | RecallOff | Retrying


def as_payload(record: FoldEvent) -> dict[str, Any]:
    """The record as the graph streams it: a dict naming its ``event``."""
    return {"event": record.event, **asdict(record)}


def _number(value: Any) -> int:
    return int(value or 0)


def from_payload(payload: Any) -> FoldEvent | None:
    """The record a custom-stream payload stands for (``None`` for anything else); a field a
    payload lacks (another version of the graph on a server) takes its default."""
    if not isinstance(payload, dict):
        return None
    kind = payload.get("event")
    reason = str(payload.get("reason") or "")
    if kind == Summarized.event:
        return Summarized(
            messages=int(payload["messages"]),
            tokens_in=int(payload["tokens_in"]),
            tokens_out=int(payload["tokens_out"]),
            calls=int(payload.get("calls", 1)),
            extended=bool(payload.get("extended", False)),
            reason=reason or "trigger",
            context_before=_number(payload.get("context_before")),
            context_after=_number(payload.get("context_after")),
        )
    if kind == Folding.event:
        parts = max(1, _number(payload.get("parts") or 1))
        return Folding(
            messages=_number(payload.get("messages")),
            reason=reason,
            part=min(parts, max(1, _number(payload.get("part") or 1))),
            parts=parts,
        )
    if kind == NothingToFold.event:
        return NothingToFold(
            context=_number(payload.get("context")),
            reason=reason or "compact",
            messages=_number(payload.get("messages")),
        )
    if kind == SummaryFailed.event:
        return SummaryFailed(error=str(payload["error"]), reason=reason or "trigger")
    if kind == Recalling.event:
        query = str(payload.get("query") or "")
        return Recalling(query=query, found=_number(payload.get("found")))
    if kind == Retrying.event:
        retries = max(1, _number(payload.get("retries") or 1))
        return Retrying(
            seconds=max(0.0, float(payload.get("seconds") or 0)),
            reason=reason or "connection",
            status=_number(payload.get("status")),
            retry=min(retries, max(1, _number(payload.get("retry") or 1))),
            retries=retries,
            call=str(payload.get("call") or "reply"),
        )
    if kind == RecallOff.event:
        return RecallOff(
            model=str(payload.get("model") or ""), error=str(payload.get("error") or "")
        )
    return None
