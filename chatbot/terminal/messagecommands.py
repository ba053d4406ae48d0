"""The slash commands around a message: files attached to it (/file), writing it in an editor
(/edit), copying a reply (/copy)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from chatbot.plural import counted
from chatbot.terminal.registry import CommandError, command

if TYPE_CHECKING:
    from chatbot.terminal.repl import Repl


@command(
    "file",
    "/file [PATH...]",
    "attach files to the next message; alone: list them; clear: drop them",
)
def _file(repl: Repl, arg: str) -> None:
    from chatbot.threads.attachments import (
        AlreadyAttached,
        AttachmentError,
        expand_patterns,
        limits_for,
        load,
    )

    listed, sep, text = f" {arg} ".partition(" -- ")  # (spaces: "--" first or last too)
    try:
        paths = shlex.split(listed)
    except ValueError:
        raise CommandError('a path has an unclosed quote: /file "my notes.txt"') from None
    if not paths and not sep:
        if not repl.attachments:
            repl.say("no files attached: /file PATH attaches one to the next message", "dim")
        else:
            names = ", ".join(a.describe() for a in repl.attachments)
            repl.say(f"attached to the next message: {names} (/file clear drops them)")
        return
    if paths == ["clear"] and not sep:
        count = len(repl.attachments)
        repl.attachments = []
        if count:  # (nothing attached: nothing to say)
            repl.say(f"dropped {counted(count, 'attached file')}", "dim")
        return
    repl.ready()  # what the model takes is known once it is loaded
    limits = limits_for(repl.run_settings(), repl.model_name, repl.counter())
    failed = False
    for path in expand_patterns(paths):
        try:
            attachment = load(path, limits, repl.attachments)
        except AlreadyAttached as error:
            repl.say(str(error), "dim")
            continue
        except AttachmentError as error:
            repl.problem(str(error))
            failed = True
            continue
        repl.attachments.append(attachment)
        repl.say(f"attached {attachment.describe()} to the next message")
    if sep:
        if failed:
            raise CommandError("not sent: fix the file above, then send your message")
        if not text.strip() and not repl.attachments:
            raise CommandError("nothing to send: /file PATH -- TEXT")
        repl.chat(text.strip())


@command(
    "edit",
    "/edit [TEXT]",
    "write the message in $VISUAL/$EDITOR, then send it (Ctrl-X Ctrl-E too)",
)
def _edit(repl: Repl, arg: str) -> None:
    from chatbot.terminal.editor import EditorError, edit_text

    try:
        text = edit_text(arg)
    except EditorError as error:
        raise CommandError(str(error)) from None
    if not text.strip():
        repl.say("nothing sent: the editor left the message empty", "dim")
        return
    repl.echo(text)  # (the scrollback shows "/edit ...": the message sent follows it)
    repl.chat(text)


@command("copy", "/copy [N]", "copy the last reply (or the N-th last) to the clipboard")
def _copy(repl: Repl, arg: str) -> None:
    from chatbot.terminal.clipboard import copy_text

    if arg and (not (arg.isascii() and arg.isdigit()) or int(arg) < 1):
        raise CommandError(f"/copy takes a reply number, not {arg!r}: /copy [N] (1: the last)")
    number = int(arg) if arg else 1
    snapshot = repl.backend.current(repl.thread_id)
    messages = snapshot.messages if snapshot else ()
    replies = [m.text for m in messages if m.type == "ai" and m.text.strip()]
    if not replies:
        raise CommandError("no reply to copy in this thread yet")
    if number > len(replies):
        have = counted(len(replies), "reply", "replies")
        raise CommandError(f"no reply {number}: only {have} to copy (/copy 1 is the last)")
    text = replies[-number]
    terminal = repl.console.file if repl.console.is_terminal else None
    where = copy_text(text, terminal)
    if where is None:
        raise CommandError("nothing copied: no system clipboard here, and output is not a terminal")
    repl.say(f"copied reply {number} ({len(text):,} characters) {where}")
