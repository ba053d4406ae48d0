"""Threads' messages, turns and checkpoints as JSON (``show``, ``history`` and ``export`` with
``--json``): plain dicts, without Rich, so that JSON output never imports it. (The thread
listing's record is :func:`chatbot.store.sqlite.thread_record`: ``threads --json`` imports nothing
of LangChain, which this module does.)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

if TYPE_CHECKING:
    from chatbot.history.timeline import HistoryRow, TurnEntry

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
