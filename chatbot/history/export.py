"""Export a thread as Markdown or JSON: the summary, the messages folded into it (recovered from
the checkpoint history) and the live messages. Nothing is hidden from the user."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from chatbot.errors import FriendlyError
from chatbot.files import replace_private
from chatbot.history.lineage import lineage
from chatbot.history.records import ROLE_NAMES, message_record
from chatbot.history.snapshots import Snapshot
from chatbot.history.summary import summary_story
from chatbot.parts import fenced as verbatim  # text as written: Markdown keeps it so
from chatbot.parts import read_parts
from chatbot.sanitize import escape_json_controls, sanitize

Format = Literal["md", "json"]
FORMATS: dict[str, Format] = {".md": "md", ".markdown": "md", ".json": "json"}


class ExportError(FriendlyError, ValueError):
    """An export that cannot be written; one line for the user."""


def export_format(path: Path | None, explicit: str | None = None) -> Format:
    """The format from ``--format``, else from the file extension, else Markdown."""
    if explicit:
        if explicit not in ("md", "json"):
            raise ExportError(f"unknown format {explicit!r}: use md or json")
        return explicit  # type: ignore[return-value]
    if path is None or not path.suffix:
        return "md"
    try:
        return FORMATS[path.suffix.lower()]
    except KeyError:
        raise ExportError(
            f"cannot tell the format of {path.name!r}: end the name in .md or .json"
        ) from None


def default_path(thread_id: str, fmt: Format, now: datetime | None = None) -> Path:
    """``chatbot-<thread>-<YYYYmmdd-HHMMSS>.<ext>`` in the current directory."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in thread_id)
    return Path(f"chatbot-{safe}-{stamp}.{fmt}")


def export_document(
    thread_id: str, history: Sequence[Snapshot], memories: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """Everything about a thread's current lineage as a JSON-ready document, with the user's
    memories noted in this thread (``memories``: their records; no other thread's)."""
    chain = lineage(history)
    head = chain[-1] if chain else None
    changes, folded = summary_story(history)  # one pass over the lineage's checkpoints
    unanswered = head.state.pending if head else ()  # (saved by a run stopped before it
    document = {  # took them in: sent, not answered yet)
        "thread_id": thread_id,
        "exported_at": datetime.now(tz=UTC).isoformat(timespec="seconds"),
        "checkpoint_id": head.checkpoint_id if head else None,
        "system_prompt": head.system_prompt if head else "",
        "system_role": head.system_role if head else "",
        "summary": head.summary if head else "",
        "summary_history": [
            {
                "checkpoint_id": change.checkpoint_id,
                "step": change.step,
                "time": change.created_at.isoformat() if change.created_at else None,
                "folded_messages": change.folded,
                "summary": change.summary,
            }
            for change in changes
        ],
        "folded_messages": [message_record(m) for m in folded],
        "messages": [message_record(m) for m in (head.messages if head else ())],
    }
    if unanswered:
        document["unanswered"] = [message_record(m) for m in unanswered]
    if memories:
        document["memories"] = list(memories)
    return document


def _attached_markdown(content: list[Any]) -> str:
    """A message with attached files: typed text fenced as written, a text file as its name
    and its fenced content (already so in the message), anything else as a marker."""
    shown: list[str] = []
    for part in read_parts(content):
        if part.kind == "text":
            shown.append(verbatim(part.text))
        elif part.kind == "file text":
            shown.append(part.text)
        else:
            shown.append(f"_{part.marker()}_")
    return "\n\n".join(shown)


def _markdown_messages(messages: Sequence[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for message in messages:
        role = ROLE_NAMES.get(message["type"], message["type"])
        content = message["content"]
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        if isinstance(content, list) and message["type"] == "human":  # with attached files
            text = _attached_markdown(content)
        elif text and message["type"] != "ai":  # people's text is plain, as on the screen
            text = verbatim(text)
        lines += [f"**{role}:**", "", text or "_(no text)_", ""]
        for call in message.get("tool_calls", []):
            lines += [f"> tool call `{call['name']}` {json.dumps(call.get('args', {}))}", ""]
    return lines


def to_markdown(document: dict[str, Any]) -> str:
    """The document as Markdown: summary, its timeline, folded messages, live messages. Control
    and bidi characters are removed, as on the screen (an editor obeys a bidi control as a
    terminal does); the JSON export keeps them, escaped."""
    lines = [f"# Thread {document['thread_id']}", "", f"Exported {document['exported_at']}.", ""]
    if document.get("system_prompt"):
        role = document.get("system_role")
        lines += [f"## System prompt{f' (role {role})' if role else ''}", ""]
        lines += [verbatim(document["system_prompt"]), ""]
    lines += ["## Summary", "", document["summary"] or "_(no summary yet)_", ""]
    if document["summary_history"]:
        lines += ["## How the summary evolved", ""]
        for number, change in enumerate(document["summary_history"], start=1):
            lines += [
                f"### {number}. step {change['step']}, {change['time'] or '?'}: "
                f"{change['folded_messages']} messages folded",
                "",
                change["summary"],
                "",
            ]
    if document["folded_messages"]:
        lines += ["## Messages folded into the summary", ""]
        lines += _markdown_messages(document["folded_messages"])
    lines += ["## Conversation", ""]
    lines += _markdown_messages(document["messages"]) or ["_(no messages)_", ""]
    if document.get("unanswered"):
        lines += ["## Sent, not answered yet", ""]
        lines += _markdown_messages(document["unanswered"])
    return sanitize("\n".join(lines)).rstrip() + "\n"


def render(document: dict[str, Any], fmt: Format) -> str:
    """The document in the chosen format."""
    if fmt == "json":
        return escape_json_controls(json.dumps(document, ensure_ascii=False, indent=2)) + "\n"
    return to_markdown(document)


class FileExists(ExportError):
    """The file to export to exists and replacing it was not asked for (nothing was written)."""

    def __init__(self, shown: str) -> None:
        super().__init__(f"{shown} exists")
        self.shown = shown


def write_private(path: Path, text: str, *, replace: bool = False) -> Path:
    """Write a file holding a conversation (0600), whole or not at all: a failed write leaves
    the file that was there as it was. A file there is replaced only with ``replace``, else
    :class:`FileExists`; a device or a pipe is written as it is; the folder must exist."""
    from chatbot.threadids import quoted

    def shown(place: Path) -> str:  # (a page pasted as a path is not echoed back whole)
        return quoted(str(place), 300)

    path = path.expanduser()
    if "\x00" in str(path):  # (the system refuses it: "embedded null byte")
        raise ExportError(f"{shown(path)} holds a NUL character: give another file name")
    folder = path.parent
    existed = False
    try:
        if path.is_dir():
            raise ExportError(f"{shown(path)} is a folder: give a file name")
        if not folder.is_dir():
            if folder.exists():
                raise ExportError(f"{shown(folder)} is a file, not a folder: nothing was written")
            raise ExportError(
                f"the folder {shown(folder)} does not exist: create it first (nothing was written)"
            )
        existed = path.is_file()
        if existed and not replace:
            raise FileExists(shown(path))
        if path.exists() and not existed:  # a device or a pipe: nothing to replace
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
        else:
            replace_private(Path(os.path.realpath(path)), text)
    except OSError as error:
        kept = "the file is as it was" if existed else "nothing was written"
        raise ExportError(
            f"cannot write {shown(path)}: {error.strerror or error} ({kept})"
        ) from None
    return path
