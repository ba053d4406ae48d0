"""Threads' messages, turns and checkpoints as JSON (``show``, ``history`` and ``export`` with
``--json``): plain dicts, without Rich, so that JSON output never imports it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

if TYPE_CHECKING:
    from chatbot.history.turns import HistoryRow, TurnEntry

ROLE_NAMES = {"human": "you", "ai": "assistant", "tool": "tool", "system": "system"}
"""A message's role as people read it (the REPL, ``show``, an export)."""


def message_record(message: BaseMessage) -> dict[str, Any]:
    """A message as JSON: its type, text and id (plus tool calls when there are any)."""
    record: dict[str, Any] = {"type": message.type, "content": message.content, "id": message.id}
    if isinstance(message, AIMessage) and message.tool_calls:
        record["tool_calls"] = message.tool_calls
    if isinstance(message, ToolMessage):
        record["tool_call_id"] = message.tool_call_id
    return record


class RecordError(ValueError):
    """A message record that cannot be read back; the message says what is wrong with it,
    as words that follow the record's name (``messages[3] has no 'content'``)."""


_MESSAGE_CLASSES: dict[str, type[BaseMessage]] = {
    "human": HumanMessage,
    "ai": AIMessage,
    "tool": ToolMessage,
    "system": SystemMessage,
}


def json_kind(value: Any) -> str:
    """What a JSON value is, as a message about a file names it: ``text``, ``a number``..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _tool_calls(calls: Any) -> list[dict[str, Any]]:
    """An ``ai`` record's tool calls, checked: each an object with a name, its arguments (an
    object) and an id."""
    if not isinstance(calls, list):
        raise RecordError(f"has 'tool_calls' that are {json_kind(calls)}, not a list")
    for number, call in enumerate(calls):
        if not isinstance(call, dict):
            raise RecordError(f"has tool_calls[{number}] that is {json_kind(call)}, not a call")
        if not isinstance(call.get("name"), str):
            raise RecordError(f"has tool_calls[{number}] without a 'name' (text)")
        if not isinstance(call.get("args", {}), dict):
            raise RecordError(f"has tool_calls[{number}] whose 'args' are not an object")
        if call.get("id") is not None and not isinstance(call["id"], str):
            raise RecordError(f"has tool_calls[{number}] whose 'id' is not text")
    return [{"args": {}, "id": None, **call} for call in calls]


def message_from_record(record: Any) -> BaseMessage:
    """The message a :func:`message_record` record holds (a record without an id gets a new
    one; keys it does not know are left out); :class:`RecordError` says what is wrong with a
    record that is not one."""
    import uuid

    if not isinstance(record, dict):
        raise RecordError(f"is {json_kind(record)}, not a message (an object)")
    kind = record.get("type")
    cls = _MESSAGE_CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        shown = "no 'type'" if kind is None else f"the type {kind!r:.40}"
        raise RecordError(f"has {shown}: a message is one of {', '.join(_MESSAGE_CLASSES)}")
    if "content" not in record:
        raise RecordError("has no 'content'")
    content = record["content"]
    if not isinstance(content, str) and not (
        isinstance(content, list) and all(isinstance(part, str | dict) for part in content)
    ):
        raise RecordError(
            f"has content that is {json_kind(content)}: it is text or a list of content blocks"
        )
    message_id = record.get("id")
    if message_id is not None and not isinstance(message_id, str):
        raise RecordError(f"has an 'id' that is {json_kind(message_id)}, not text")
    fields: dict[str, Any] = {"content": content, "id": message_id or str(uuid.uuid4())}
    if record.get("name") is not None:
        if not isinstance(record["name"], str):
            raise RecordError(f"has a 'name' that is {json_kind(record['name'])}, not text")
        fields["name"] = record["name"]
    if "tool_calls" in record:
        if kind != "ai":
            raise RecordError(f"has 'tool_calls', which only an ai message has, not a {kind} one")
        fields["tool_calls"] = _tool_calls(record["tool_calls"])
    if kind == "tool":
        call_id = record.get("tool_call_id")
        if not isinstance(call_id, str):
            raise RecordError("is a tool message without a 'tool_call_id' (text)")
        fields["tool_call_id"] = call_id
    try:
        return cls(**fields)
    except (ValueError, TypeError) as error:  # (pydantic's, in several lines)
        words = " ".join(str(error).split())
        raise RecordError(f"cannot be read: {words[:200]}") from None


def turn_record(entry: TurnEntry) -> dict[str, Any]:
    """A history entry as JSON (``chatbot history --json``; the README lists the fields)."""
    return {
        "checkpoint_id": entry.checkpoint_id,
        "first_checkpoint_id": entry.first_checkpoint_id,
        "kind": entry.kind,
        "time": entry.created_at.isoformat() if entry.created_at else None,
        "text": entry.text,
        "messages_before": entry.messages_before,
        "messages_after": entry.messages_after,
        "folded": entry.folded,
        "summary_changed": entry.summary_changed,
        "finished": entry.finished,
        "fate": entry.fate or None,
        "origin": entry.origin or None,
        "fold_left": entry.fold_left,
    }


def history_record(row: HistoryRow) -> dict[str, Any]:
    """A checkpoint as JSON (``chatbot history --all --json``)."""
    return {
        "checkpoint_id": row.checkpoint_id,
        "parent_id": row.parent_id,
        "step": row.step,
        "node": row.node,
        "next": list(row.next),
        "messages": row.messages,
        "summary_chars": row.summary_chars,
        "time": row.created_at.isoformat() if row.created_at else None,
    }
