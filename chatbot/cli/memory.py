"""``chatbot memory list|forget|export``: the user's memories across threads (what the model is
told about the user in every thread), outside the REPL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from chatbot.cli.app import (
    DbOption,
    ForceOption,
    JsonOption,
    OutputOption,
    UrlOption,
    app_state,
    command,
    command_group,
    err,
    escape,
    fail,
    out,
    print_json,
    write_output,
)
from chatbot.plural import counted
from chatbot.sanitize import sanitize

if TYPE_CHECKING:
    from chatbot.threads.memorybook import MemoryBook

memory_app = command_group(
    "memory",
    "What is remembered about you across threads: list, forget, export.",
    "Threads",
    no_args_is_help=True,
)


def _book(
    ctx: typer.Context, db: str | None, url: str | None, *, reading: bool
) -> MemoryBook | None:
    """The memories of the database or server; None when the database does not exist yet."""
    state = app_state(ctx, db, url)
    state.read_only = reading
    if state.db_missing:
        return None
    return state.reader().memory_book()


@command("list", group=memory_app)
def list_(
    ctx: typer.Context,
    as_json: JsonOption = False,
    everything: Annotated[
        bool, typer.Option("--all", help="Superseded memories too (replaced by newer ones).")
    ] = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """List the memories: id, text, the thread they came from."""
    book = _book(ctx, db, url, reading=True)
    memories = [] if book is None else book.all() if everything else book.in_force()
    if as_json:
        print_json([memory.record() for memory in memories])
    elif memories:
        from chatbot.terminal.memorycommands import memories_table

        out.print(memories_table(memories))
    else:
        err.print("[dim]nothing is remembered yet[/]")


@command(group=memory_app)
def forget(
    ctx: typer.Context,
    what: Annotated[str, typer.Argument(metavar="ID|TEXT", help="A memory's id, or its text.")],
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Forget a memory: removed from the store and from every request after."""
    book = _book(ctx, db, url, reading=False)
    if book is None:
        fail("nothing is remembered yet: there is no database", 1)
    for memory in book.forget(what):
        err.print(f"forgotten {escape(memory.id)}: {escape(sanitize(memory.text))}")


@command(group=memory_app)
def export(
    ctx: typer.Context,
    output: OutputOption = None,
    force: ForceOption = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Export every memory, superseded ones too, as JSON."""
    import json

    book = _book(ctx, db, url, reading=True)
    records = [memory.record() for memory in ([] if book is None else book.all())]
    if output is None:
        print_json(records)
        return
    written = write_output(output, json.dumps(records, ensure_ascii=False, indent=2) + "\n", force)
    err.print(f"exported {counted(len(records), 'memory', 'memories')} to {written}")
