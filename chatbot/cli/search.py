"""``chatbot search``: every message of every local thread, folded into a summary or not."""

from __future__ import annotations

from typing import Annotated

import typer

from chatbot.cli import completion
from chatbot.cli.app import (
    Command,
    DbOption,
    JsonOption,
    UrlOption,
    app,
    app_state,
    err,
    escape,
    fail,
    guarded,
    out,
    print_json,
)


@app.command(cls=Command)
@guarded
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
    """Search every message ever written in local threads, including those folded into a
    summary: newest first, with the checkpoint to show or fork."""
    from chatbot.cli.app import valid_text
    from chatbot.store.search import (
        SearchError,
        hit_record,
        hits_view,
        lacks_past_messages,
        parse_query,
    )
    from chatbot.store.search import search as run_search

    text = valid_text(text)
    try:
        parse_query(text)
    except SearchError as error:
        fail(str(error), 2)
    state = app_state(ctx, db, url)
    state.read_only = True
    if state.remote:
        fail(
            "search works on local threads only "
            f"(this session uses the LangGraph server at {state.places.url})",
            2,
        )
    if state.db_missing:
        hits = []
    else:
        store = state.store
        if thread is not None and not store.thread_exists(thread):
            from chatbot.threadids import quoted

            fail(f"no thread {quoted(thread)} in {state.where} ({state.threads_hint})")
        if lacks_past_messages(store):
            err.print(
                "[yellow]note:[/] messages saved before this database had its search index are "
                "not searched until '/search' in 'chatbot chat' indexes them (once)"
            )
        hits = run_search(store, text, thread_id=thread, limit=limit + 1)
    more = len(hits) > limit
    hits = hits[:limit]
    if as_json:
        print_json([hit_record(hit) for hit in hits])
        return
    if not hits:
        shown = text if len(text) <= 80 else text[:79] + "…"  # (not a pasted page back)
        err.print(f"[dim]nothing found for {escape(repr(shown))} in {escape(state.where)}[/]")
        return
    out.print(hits_view(hits))
    err.print(
        "[dim]"
        + (f"newest {limit} shown: --limit {limit * 2} for more; " if more else "")
        + "chatbot show THREAD --checkpoint ID shows one in full[/]"
    )
