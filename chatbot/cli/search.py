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
    guarded,
)


@app.command(cls=Command, rich_help_panel="Search and export")
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
    """Search the messages of local threads, folded ones too: every message ever written,
    newest first, with the checkpoint to show or fork."""
    from chatbot.cli.read import run_search

    run_search(app_state(ctx, db, url), text, thread, limit, as_json)
