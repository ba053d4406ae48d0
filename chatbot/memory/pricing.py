"""What a thread's model calls cost: a running usage record in the graph state, priced with
genai-prices (pydantic's maintained price table; it works offline from its wheel's snapshot).

Vocabulary:

- **usage record** (the state's :data:`USAGE_KEY`): the tokens the provider reported, per role
  and per the model that answered: ``{"chat": {model: {"calls": N, "input": N, "cached": N,
  "output": N, "priced": N, "usd": "0.0012"}}, "summary": {...}, "partial": bool}``
  (``input`` includes ``cached``). Each call is priced as it is recorded (``priced`` calls
  cost ``usd``): a price can depend on one call's size, so the sums cannot be priced as one.
- **partial**: the record started on a thread that already had replies without one.
- **spent**: what a thread has paid, which time travel cannot take back: ``/retry`` and
  ``/undo`` go back to an older record, so the newest is handed to the run as a floor and
  kept in an undo's checkpoint metadata (:data:`SPENT_KEY`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any, Literal

USAGE_KEY = "usage"
"""The graph's state key holding the usage record."""
SPENT_KEY = "chatbot_spent"
"""A run's ``configurable`` entry (and an undo checkpoint's metadata): the thread's newest
usage record, which the run's own record never falls below."""

Role = Literal["chat", "summary"]
ROLES: tuple[Role, ...] = ("chat", "summary")
FIELDS = ("calls", "input", "cached", "output", "priced")
USD = "usd"
OFFLINE = "offline"


# --- the record --------------------------------------------------------------------------------


def reply_usage(reply: Any) -> dict[str, int]:
    """The tokens a reply's provider reported (``usage_metadata``), zeros when it reported none."""
    usage = getattr(reply, "usage_metadata", None) or {}
    details = usage.get("input_token_details") or {}
    return {
        "input": int(usage.get("input_tokens") or 0),
        "cached": int(details.get("cache_read") or 0),
        "output": int(usage.get("output_tokens") or 0),
    }


def reply_model(reply: Any, asked: str) -> str:
    """The model that answered: the provider's ``model_name``, else the one asked for."""
    metadata = getattr(reply, "response_metadata", None) or {}
    answered = metadata.get("model_name")
    return str(answered) if isinstance(answered, str) and answered else asked or "unknown"


def is_record(value: Any) -> bool:
    """True for a usage record (a mapping with at least one role)."""
    return isinstance(value, Mapping) and any(isinstance(value.get(r), Mapping) for r in ROLES)


def merged(*records: Any) -> dict[str, Any] | None:
    """The records combined, field by field taking the larger (the newer of two records of one
    thread holds everything the older one does); ``None`` when none is a record."""
    found = [r for r in records if is_record(r)]
    if not found:
        return None
    out: dict[str, Any] = {"chat": {}, "summary": {}, "partial": False}
    for record in found:
        out["partial"] = out["partial"] or bool(record.get("partial"))
        for role in ROLES:
            for model, tokens in (record.get(role) or {}).items():
                into = out[role].setdefault(model, dict.fromkeys(FIELDS, 0))
                for name in FIELDS:
                    into[name] = max(into[name], int(tokens.get(name) or 0))
                if tokens.get(USD) is not None:
                    usd = max(Decimal(str(tokens[USD])), Decimal(str(into.get(USD) or 0)))
                    into[USD] = str(usd)
    return out


def with_calls(
    records: Sequence[Any],
    role: Role,
    calls: Sequence[tuple[str, Any]],
    *,
    earlier_turns: bool,
) -> dict[str, Any]:
    """The ``records`` merged (:func:`merged`), plus each ``(model, reply)`` call; a new record
    on a thread with ``earlier_turns`` (replies without a record) is partial."""
    out = merged(*records) or {"chat": {}, "summary": {}, "partial": earlier_turns}
    for model, reply in calls:
        _add_call(out, role, model, reply)
    return out


def _add_call(out: dict[str, Any], role: Role, model: str, reply: Any) -> None:
    tokens = out[role].setdefault(model, dict.fromkeys(FIELDS, 0))
    was_priced = tokens["priced"] == tokens["calls"]
    tokens["calls"] += 1
    usage = reply_usage(reply)
    for name, value in usage.items():
        tokens[name] += value
    amount = None
    if model.strip().lower() != OFFLINE:
        try:  # (a reply is never lost to its price: an unpriced call is priced from the sums)
            amount = _call_price(model, usage["input"], usage["cached"], usage["output"])
        except Exception:
            amount = None
    if amount is not None and was_priced:
        tokens["priced"] += 1
        tokens[USD] = str(Decimal(str(tokens.get(USD) or 0)) + amount)


# --- prices ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Price:
    """What some calls cost: ``amount`` in USD (``None`` if no call's price is known), and the
    models the price table does not know (their calls are not in ``amount``)."""

    amount: Decimal | None
    unknown: tuple[str, ...] = ()
    free: bool = False
    """Every call was the offline model's."""
    calls: int = 0


_loading = threading.Lock()
_loaded = threading.Event()
_warming = threading.Lock()


@lru_cache(maxsize=4096)
def _call_price(model: str, input_tokens: int, cached: int, output: int) -> Decimal | None:
    """What genai-prices charges for one call (or these sums); ``None`` for a model it does not
    know. ``provider/model`` is looked up as that provider's model, then as OpenRouter's."""
    from genai_prices import Usage, calc_price  # imported on demand: it loads a price table

    usage = Usage(input_tokens=input_tokens, cache_read_tokens=cached, output_tokens=output)
    provider, _, name = model.partition("/")
    tries: list[tuple[str, str | None]] = [(model, None)]
    if name:
        tries += [(name, provider.lower()), (model, "openrouter")]
    with _loading:  # (the table is loaded once, by the first caller)
        try:
            for model_ref, provider_id in tries:
                try:
                    return calc_price(usage, model_ref, provider_id=provider_id).total_price
                except LookupError:
                    continue
            return None
        finally:
            _loaded.set()


def warm_up() -> None:
    """Load the price table on a daemon thread (once), so the status line need not wait."""
    if _loaded.is_set() or not _warming.acquire(blocking=False):
        return
    threading.Thread(
        target=lambda: _call_price("gpt-4o-mini", 0, 0, 0), name="chatbot-prices", daemon=True
    ).start()


def needs_table(record: Any) -> bool:
    """True when pricing ``record`` needs the price table (it has calls of a paid model)."""
    record = merged(record) or {}
    return any(
        model.strip().lower() != OFFLINE and not _priced(tokens)
        for role in ROLES
        for model, tokens in record.get(role, {}).items()
    )


def _priced(tokens: Mapping[str, Any]) -> bool:
    """True when every call of a model in a record was priced as it was made."""
    return tokens.get(USD) is not None and tokens.get("priced") == tokens.get("calls")


def price_of(by_model: Mapping[str, Any]) -> Price:
    """The price of one role's calls (``record["chat"]`` or ``record["summary"]``)."""
    total, unknown, calls, paid = Decimal(0), [], 0, False
    for model, tokens in by_model.items():
        calls += int(tokens.get("calls") or 0)
        if model.strip().lower() == OFFLINE:
            continue
        paid = True
        if _priced(tokens):
            amount: Decimal | None = Decimal(str(tokens[USD]))  # each call priced as made
        else:
            amount = _call_price(
                model,
                int(tokens.get("input") or 0),
                int(tokens.get("cached") or 0),
                int(tokens.get("output") or 0),
            )
        if amount is None:
            unknown.append(model)
        else:
            total += amount
    known = not unknown or len(unknown) < len(by_model)
    return Price(
        amount=total if known else None,
        unknown=tuple(sorted(unknown)),
        free=not paid and calls > 0,
        calls=calls,
    )


def format_usd(amount: Decimal) -> str:
    """``$1.23``, ``$0.000435`` (six decimals at most below a dollar), ``$0``."""
    if amount == 0:
        return "$0"
    if amount >= 1:
        return f"${amount:,.2f}"
    text = f"{amount:.6f}".rstrip("0").rstrip(".")
    return f"${text}" if text != "0" else "<$0.000001"


def describe(price: Price) -> str:
    """One price in words: ``$0.0021``, ``free (offline model)``, ``unknown (no price for X)``."""
    if price.free:
        return "free (offline model)"
    if price.amount is None:
        return f"unknown (no price for {', '.join(price.unknown)})"
    text = format_usd(price.amount)
    if price.unknown:
        text += f" + unknown (no price for {', '.join(price.unknown)})"
    return text


@dataclass(frozen=True)
class ThreadCost:
    """A thread's cost as /tokens and the status line tell it."""

    chat: Price
    summary: Price
    partial: bool
    recorded: bool
    """False for a thread with replies but no record."""

    @property
    def total(self) -> Price:
        amounts = [p.amount for p in (self.chat, self.summary) if p.calls]
        known = [a for a in amounts if a is not None]
        return Price(
            amount=sum(known, Decimal(0)) if known else (None if amounts else Decimal(0)),
            unknown=tuple(sorted({*self.chat.unknown, *self.summary.unknown})),
            free=(self.chat.free or not self.chat.calls)
            and (self.summary.free or not self.summary.calls)
            and bool(self.chat.calls or self.summary.calls),
            calls=self.chat.calls + self.summary.calls,
        )


def thread_cost(record: Any, *, has_turns: bool) -> ThreadCost:
    """The cost of a thread with this record; ``has_turns``: it has replies or a summary."""
    record = merged(record)
    if record is None:
        nothing = Price(Decimal(0))
        return ThreadCost(nothing, nothing, partial=has_turns, recorded=not has_turns)
    return ThreadCost(
        chat=price_of(record["chat"]),
        summary=price_of(record["summary"]),
        partial=bool(record.get("partial")),
        recorded=True,
    )


OLDER = "older turns not recorded"


def cost_rows(cost: ThreadCost) -> list[tuple[str, str]]:
    """The /tokens rows: the thread's cost (chat calls and summaries) and the summaries'."""
    if not cost.recorded:
        return [("cost", f"unknown ({OLDER})")]
    older = f" ({OLDER})" if cost.partial else ""
    total = cost.total
    calls = f"{cost.chat.calls} chat call{'s' * (cost.chat.calls != 1)}"
    folds = f"{cost.summary.calls} summary call{'s' * (cost.summary.calls != 1)}"
    return [
        ("cost", f"{describe(total)}{older}, {calls} and {folds}"),
        ("summaries", describe(cost.summary) if cost.summary.calls else "$0 (none made)"),
    ]


def cost_meter(cost: ThreadCost) -> str:
    """The status line's cost: ``$0.0021``, ``free``, ``cost unknown``; ``+`` when partial."""
    if not cost.recorded:
        return "cost unknown"
    total = cost.total
    if total.free:
        return "free"
    if total.amount is None:
        return "cost unknown"
    more = "+" if cost.partial or total.unknown else ""
    return f"{format_usd(total.amount)}{more}"


def has_turns(messages: Any, summary: str) -> bool:
    """True when a thread already holds replies or a summary (so someone paid for them)."""
    return bool(summary) or any(getattr(m, "type", "") == "ai" for m in messages or ())


def spent_left(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record an /undo (or the change after one) left in a checkpoint's metadata, if any."""
    left = metadata.get(SPENT_KEY)
    if isinstance(left, str):  # (LangGraph keeps only plain values in metadata: JSON text)
        try:
            left = json.loads(left)
        except ValueError:
            left = None
    return merged(left)


def run_floor(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record a run's own never falls below (:data:`SPENT_KEY`): in its ``configurable``
    locally, in its metadata as JSON text from a server's client."""
    configurable = config.get("configurable") or {}
    return merged(configurable.get(SPENT_KEY), spent_left(config.get("metadata") or {}))


def spent(snapshot: Any) -> dict[str, Any] | None:
    """What a thread had spent at a checkpoint (a snapshot or ``None``): its state's record, or
    the newer one an /undo left in its metadata."""
    if snapshot is None:
        return None
    return merged(snapshot.state.usage, spent_left(snapshot.metadata))


def spent_metadata(snapshot: Any) -> dict[str, str]:
    """The metadata an /undo's checkpoint keeps the thread's spend in (none if nothing was)."""
    record = spent(snapshot)
    return {SPENT_KEY: json.dumps(record, separators=(",", ":"))} if record else {}


def status_meter(snapshot: Any) -> str:
    """The status line's cost of a thread at a checkpoint; empty for a new thread and while
    the price table loads (which this starts)."""
    if snapshot is None:
        return ""
    record = spent(snapshot)
    if needs_table(record) and not _loaded.is_set():
        warm_up()
        return ""
    return cost_meter(snapshot_cost(snapshot))


def snapshot_cost(snapshot: Any) -> ThreadCost:
    """The cost of a thread at a checkpoint (``None``: a new thread, which has cost nothing)."""
    if snapshot is None:
        return thread_cost(None, has_turns=False)
    return thread_cost(spent(snapshot), has_turns=has_turns(snapshot.messages, snapshot.summary))
