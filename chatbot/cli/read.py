"""The reading commands: ``threads``, ``history``, ``show`` and ``search``. They open the
database read-only and never build models or the graph."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from chatbot.cli import completion
from chatbot.cli.app import (
    DbOption,
    JsonOption,
    ThreadArgument,
    UrlOption,
    app_state,
    command,
    err,
    escape,
    fail,
    given_option,
    out,
    print_json,
    thread_reader,
    valid_text,
)
from chatbot.cli.core import configure_logging


@command(panel="Threads")
def threads(
    ctx: typer.Context, as_json: JsonOption = False, db: DbOption = None, url: UrlOption = None
) -> None:
    """List threads: id, messages, summary, last active, title."""
    from chatbot.store.base import is_postgres_url

    state = app_state(ctx, db, url)
    if state.remote or is_postgres_url(state.places.db):
        configure_logging()  # (the client libraries log; sqlite3 and the store never do)
    state.read_only = True
    # (locally plain SQL: nothing of LangGraph is imported)
    listing = [] if state.nothing_to_read() else state.reader().threads()
    if as_json:
        from chatbot.store.base import thread_record

        print_json([thread_record(t) for t in listing])
    elif listing:
        from chatbot.terminal.listings import threads_table

        out.print(threads_table(listing))
    else:
        err.print(f"[dim]no threads in {escape(state.where)}[/]")


@command(panel="Threads")
def history(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, help="Newest N turns (checkpoints with --all).")
    ] = 50,
    every: Annotated[
        bool,
        typer.Option("--all", "-a", help="Every checkpoint, instead of one row per turn."),
    ] = False,
    as_json: JsonOption = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Show a thread's history: one row per turn (message, reply, summary change, the
    checkpoint it left), newest first; --all lists every checkpoint."""
    from chatbot.history.turns import history_rows, turn_entries

    reader = thread_reader(app_state(ctx, db, url), thread_id)
    history = reader.history(thread_id)  # the index: only the rows shown read their states
    if every:
        rows = history_rows(history, limit)
        if as_json:
            from chatbot.history.records import history_record

            print_json([history_record(r) for r in rows])
        else:
            from chatbot.terminal.listings import history_table

            out.print(history_table(rows))
        return
    entries = turn_entries(history, limit)
    if as_json:
        from chatbot.history.records import turn_record

        print_json([turn_record(e) for e in entries])
    else:
        from chatbot.terminal.listings import turn_table

        out.print(turn_table(entries))


@command(panel="Threads")
def show(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    checkpoint: Annotated[
        str | None,
        typer.Option(
            "--checkpoint", "-c", help="A past checkpoint (see history).", callback=given_option
        ),
    ] = None,
    as_json: JsonOption = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Show a thread's summary and messages, now or at a past checkpoint."""
    reader = thread_reader(app_state(ctx, db, url), thread_id)
    if checkpoint:
        from chatbot.history.lineage import find_checkpoint

        snapshot = find_checkpoint(reader.history(thread_id), checkpoint)
    else:
        current = reader.current(thread_id)
        assert current is not None
        snapshot = current
    if as_json:
        from chatbot.history.records import message_record

        document: dict[str, Any] = {
            "thread_id": thread_id,
            "system_prompt": snapshot.system_prompt,
            "system_role": snapshot.system_role,
            "summary": snapshot.summary,
            "messages": [message_record(m) for m in snapshot.messages],
        }
        if snapshot.state.pending:  # (saved by a run stopped before it took them in)
            document["unanswered"] = [message_record(m) for m in snapshot.state.pending]
        if checkpoint:
            document["checkpoint_id"] = snapshot.checkpoint_id
        print_json(document)
        return
    from chatbot.terminal.render import checkpoint_heading, state_view

    out.print(state_view(snapshot, title=checkpoint_heading(snapshot) if checkpoint else ""))


@command(panel="Search and export")
def search(
    ctx: typer.Context,
    text: Annotated[
        str, typer.Argument(metavar="TEXT", help='Words to find (all of them); "a phrase".')
    ],
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread",
            "-t",
            help="Search this thread only.",
            autocompletion=completion.thread_ids,
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="At most N hits.")] = 20,
    as_json: JsonOption = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Search the messages of local threads, folded ones too: every message ever written,
    newest first, with the checkpoint to show or fork."""
    from chatbot.store.search import SearchError, hit_record, parse_query

    state = app_state(ctx, db, url)
    text = valid_text(text)
    try:
        parse_query(text)
    except SearchError as error:
        fail(str(error), 2)
    state.read_only = True
    if state.remote:
        fail(
            "search works on local threads only "
            f"(this session uses the LangGraph server at {state.where})",
            2,
        )
    if state.nothing_to_read():
        hits = []
    else:
        reader = state.local_reader()
        if thread is not None and not reader.thread_exists(thread):
            from chatbot.threadids import quoted

            fail(f"no thread {quoted(thread)} in {state.where} ({state.threads_hint})")
        # (a reading command writes nothing: what the index lags behind is read as it is)
        hits = reader.search(text, thread_id=thread, limit=limit + 1, index=False)
    more = len(hits) > limit
    hits = hits[:limit]
    if as_json:
        print_json([hit_record(hit) for hit in hits])
        return
    if not hits:
        shown = text if len(text) <= 80 else text[:79] + "…"  # (not a pasted page back)
        err.print(f"[dim]nothing found for {escape(repr(shown))} in {escape(state.where)}[/]")
        return
    from chatbot.terminal.listings import Listing, hits_view

    out.print(Listing(hits_view(hits)))  # (piped: a hit's heading and its snippet, a line each)
    err.print(
        "[dim]"
        + (f"newest {limit} shown: --limit {limit * 2} for more; " if more else "")
        + "chatbot show THREAD --checkpoint ID shows one in full[/]"
    )
