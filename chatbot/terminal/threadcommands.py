"""The slash commands that pick and manage threads: /thread, /threads, /new, /rename, /delete."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from chatbot.store.base import ThreadInfo
from chatbot.terminal import listings
from chatbot.terminal.memorycommands import offer_to_forget
from chatbot.terminal.registry import (
    CommandError,
    checked_thread_id,
    command,
    confirmed,
    no_argument,
)
from chatbot.terminal.repl import thread_line
from chatbot.threadids import new_thread_id

if TYPE_CHECKING:
    from chatbot.terminal.repl import Repl


@command("thread", "/thread [ID]", "switch to a thread (created if new); alone: show the current")
def _thread(repl: Repl, arg: str) -> None:
    if not arg:
        snapshot = repl.backend.current(repl.thread_id)
        count = len(snapshot.messages) if snapshot else 0
        repl.say(thread_line(repl.thread_id, count, bool(snapshot and snapshot.summary)))
        return
    repl.open_thread(checked_thread_id(arg))


@command("threads", "/threads", "list threads: id, messages, summary, last active, title")
def _threads(repl: Repl, arg: str) -> None:
    no_argument("threads", arg)
    threads = repl.backend.threads()
    if all(info.thread_id != repl.thread_id for info in threads):
        # The current thread, new and empty (nothing stored yet): listed, as the prompt names it.
        threads = [ThreadInfo(repl.thread_id, 0, None, "", 0, False), *threads]
    repl.console.print(listings.threads_table(threads, current=repl.thread_id))


@command("new", "/new", "start a fresh thread with a generated id")
def _new(repl: Repl, arg: str) -> None:
    no_argument("new", arg)
    repl.open_thread(new_thread_id())


@command("rename", "/rename NEW", "rename the current thread", remote=False, writes=True)
def _rename(repl: Repl, arg: str) -> None:
    if not arg:
        raise CommandError("give the new name: /rename NEW")
    new_id = checked_thread_id(arg)
    if repl.backend.thread_exists(repl.thread_id):
        repl.backend.rename(repl.thread_id, new_id)
    elif repl.backend.thread_exists(new_id):  # a new thread: only its name changes
        raise CommandError(f"thread {new_id!r} already exists: /thread {new_id} opens it")
    old = repl.thread_id
    repl.thread_id = new_id
    repl.say(f"renamed {old} to {new_id}")


@command(
    "delete",
    "/delete ID",
    "delete a thread and its history (asks first)",
    remote=False,
    writes=True,
)
def _delete(repl: Repl, arg: str) -> None:
    if not arg:
        raise CommandError("give the thread to delete: /delete ID (/threads lists them)")
    thread_id = checked_thread_id(arg)
    if not repl.backend.thread_exists(thread_id):
        if thread_id != repl.thread_id:
            raise CommandError(f"no thread {thread_id!r} (/threads lists them)")
        # The current thread, new and empty: nothing is stored, so nothing to ask about.
        repl.say(f"deleted {thread_id} (it had no messages yet)")
        repl.open_thread(new_thread_id())
        return
    if not confirmed(repl, f"Delete thread {thread_id} and all its history? [y/N] "):
        unasked = _delete_command(repl, thread_id)
        repl.say(f"kept {thread_id}: {unasked} deletes it without asking", "dim")
        return
    repl.backend.delete(thread_id)
    repl.say(f"deleted {thread_id}")
    offer_to_forget(repl, thread_id)
    if thread_id == repl.thread_id:
        repl.open_thread(new_thread_id())


def _delete_command(repl: Repl, thread_id: str) -> str:
    """``'chatbot delete ID --yes'``, with ``--db`` unless the database is the default one."""
    from chatbot.config.sources import default_db_path

    words = ["chatbot", "delete", thread_id, "--yes"]
    if repl.backend.location != str(default_db_path()):
        words += ["--db", repl.backend.location]
    return f"'{shlex.join(words)}'"
