"""/memory: the user's memories across threads, seen and changed (what each is, where it came
from), and the view ``chatbot memory list`` shares (:func:`memories_table`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import RenderableType
from rich.table import Table

from chatbot.memory.facts import Memory
from chatbot.plural import counted
from chatbot.terminal.listings import Listing
from chatbot.terminal.registry import CommandError, command, confirmed
from chatbot.terminal.render import plain

if TYPE_CHECKING:
    from chatbot.terminal.repl import Repl

USAGE = "/memory [forget ID|TEXT | add TEXT | edit ID [TEXT] | off | on | all]"
"""Everything /memory takes (its errors say it)."""


def source(memory: Memory) -> str:
    """Where a memory came from, in a few words: its thread (and how), and when."""
    how = {"fold": "", "leave": "", "request": "asked", "added": "added"}[memory.origin]
    where = f"thread {memory.thread_id}" if memory.thread_id else "no thread"
    day = memory.created_at[:10]
    return " · ".join(part for part in (where, how, day) if part)


def memories_table(memories: Sequence[Memory]) -> RenderableType:
    """The memories as a listing: id, text, source; a table where it fits, else lines."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("id", no_wrap=True)
    table.add_column("memory", overflow="fold")
    table.add_column("from", no_wrap=True)
    lines: list[RenderableType] = []
    for memory in memories:
        text = (
            memory.text if memory.active else f"{memory.text} (replaced by {memory.superseded_by})"
        )
        table.add_row(memory.id, plain(text), plain(source(memory)))
        lines.append(plain(f"{memory.id}  {text}"))
        lines.append(plain(f"  {source(memory)}", style="dim"))
    from rich.console import Group

    return Listing(table, Group(*lines), needs=60)


@command(
    "memory",
    "/memory [ACTION]",
    "what is remembered about you: forget ID|TEXT, add TEXT, edit ID, off, on, all",
)
def _memory(repl: Repl, arg: str) -> None:
    word, _, rest = arg.strip().partition(" ")
    rest = rest.strip()
    book = repl.backend.memory_book()
    if word in ("", "all"):
        memories = book.all() if word == "all" else book.in_force()
        state = "" if book.thread_on(repl.thread_id) else " (off in this thread: /memory on)"
        if not memories:
            repl.say(f"nothing is remembered yet{state}", "dim")
            return
        repl.console.print(memories_table(memories))
        repl.say(f"{counted(len(memories), 'memory', 'memories')}{state}", "dim")
        return
    if word == "forget":
        for memory in book.forget(rest):
            repl.say(f"forgotten {memory.id}: {memory.text}")
        return
    if word == "add":
        memory = book.add(rest, repl.thread_id)
        repl.say(f"remembered {memory.id}: {memory.text}")
        return
    if word == "edit":
        memory_id, _, text = rest.partition(" ")
        if not memory_id:
            raise CommandError("say which memory: /memory edit ID [NEW TEXT]")
        if not text.strip():
            text = _edited(book.all(), memory_id)
        memory = book.edit(memory_id, text)
        repl.say(f"changed {memory.id}: {memory.text}")
        return
    if word in ("off", "on"):
        if rest:
            raise CommandError(f"/memory {word} takes no argument (CHATBOT_MEMORY sets it for all)")
        book.set_thread(repl.thread_id, word == "on")
        said = "uses and notes" if word == "on" else "neither uses nor notes"
        repl.say(f"thread {repl.thread_id} {said} your memories")
        return
    raise CommandError(f"unknown /memory {word!r}: {USAGE}")


def _edited(memories: Sequence[Memory], memory_id: str) -> str:
    """The memory's new text, written in $VISUAL/$EDITOR."""
    from chatbot.terminal.editor import EditorError, edit_text

    found = [memory for memory in memories if memory.id == memory_id.lower()]
    if not found:
        raise CommandError(f"no memory {memory_id!r}: '/memory' lists them with their ids")
    try:
        return edit_text(found[0].text)
    except EditorError as error:
        raise CommandError(str(error)) from None


def offer_to_forget(repl: Repl, thread_id: str) -> None:
    """After a thread is deleted: ask whether to forget the memories noted in it (kept unless
    the answer is yes); its own memory record goes with it."""
    book = repl.backend.memory_book()
    noted = book.from_thread(thread_id)
    if noted:
        many = counted(len(noted), "memory", "memories")
        if confirmed(repl, f"Forget the {many} that came from {thread_id} too? [y/N] "):
            book.forget_all(noted)
            repl.say(f"forgotten {many} from {thread_id}")
        else:
            repl.say(f"kept {many} from {thread_id} (/memory lists them)", "dim")
    book.forget_thread(thread_id)
