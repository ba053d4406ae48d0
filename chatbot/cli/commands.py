"""The ``chatbot`` command: the Typer app with every command registered. Here: the main
options (without a command: the REPL), ``chat``, ``fork`` and ``delete``; the others live by
concern in the modules imported below."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from chatbot.cli import completion
from chatbot.cli.app import (
    AppState,
    DbOption,
    ThreadArgument,
    UrlOption,
    YesOption,
    app,
    app_state,
    command,
    err,
    escape,
    fail,
    given_option,
    open_thread,
    out,
    show_version,
)
from chatbot.cli.config import config_app, models  # noqa: F401  (`chatbot config`, `models`)
from chatbot.cli.db import db_app, prune  # noqa: F401  (`chatbot db`, `prune`)
from chatbot.cli.memory import memory_app  # noqa: F401  (`chatbot memory`)
from chatbot.cli.read import history, search, show, threads  # noqa: F401  (reading)
from chatbot.cli.transfer import export, import_  # noqa: F401  (`chatbot export`, `import`)
from chatbot.cli.turns import ask, compact, roles  # noqa: F401  (`chatbot ask`, `compact`, `roles`)
from chatbot.sanitize import sanitize


@app.callback()
def main_options(
    ctx: typer.Context,
    db: DbOption = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Chat model (default: CHATBOT_MODEL).",
            autocompletion=completion.model_names,
            callback=given_option,
        ),
    ] = None,
    env_file: Annotated[
        str | None,
        typer.Option(
            "--env-file", help="Read settings from this file, not ./.env.", callback=given_option
        ),
    ] = None,
    url: UrlOption = None,
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread",
            "-t",
            help="Without a command: chat in this thread.",
            callback=given_option,
            autocompletion=completion.thread_ids,
        ),
    ] = None,
    new: Annotated[
        bool, typer.Option("--new", help="Without a command: chat in a fresh thread.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=show_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Chat with an LLM in the terminal; threads live in SQLite."""
    from chatbot.cli.core import configure_logging, started

    if ctx.invoked_subcommand not in (None, "chat"):
        started()  # (main turned collecting off for the REPL's start)
    if ctx.invoked_subcommand != "threads":  # (which sets it up only where something logs)
        configure_logging()
    ctx.obj = AppState(env_file=env_file or ".env", db=db, model=model, url=url)
    from chatbot.cli.core import leading_note

    leading_note(ctx.obj)
    ctx.call_on_close(ctx.obj.close)
    if ctx.invoked_subcommand is None:
        ctx.invoke(chat, ctx=ctx, thread=thread, new=new)
    elif thread or new:
        err.print(
            f"[red]error:[/] --thread and --new go after the command: "
            f"chatbot {ctx.invoked_subcommand} --thread ID"
        )
        raise typer.Exit(2)


# --- chatting ---------------------------------------------------------------------------------


@command(panel="Chat")
def chat(
    ctx: typer.Context,
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread",
            "-t",
            help="Thread to open (default: the most recent).",
            callback=given_option,
            autocompletion=completion.thread_ids,
        ),
    ] = None,
    new: Annotated[bool, typer.Option("--new", help="Start a fresh thread.")] = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Chat interactively (the default command). /help inside lists the slash commands."""
    from chatbot.cli.chat import run_chat

    raise typer.Exit(run_chat(app_state(ctx, db, url), thread, new))


# --- changing threads -----------------------------------------------------------------------------


@command(panel="Threads")
def fork(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    checkpoint: Annotated[
        str | None,
        typer.Option(
            "--checkpoint", "-c", help="Branch from this checkpoint.", callback=given_option
        ),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="Id of the new thread (default: THREAD-fork1, or the next free number).",
            callback=given_option,
        ),
    ] = None,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Branch a new thread from a checkpoint (default: the latest). Prints the new id."""
    from chatbot.history.lineage import find_checkpoint
    from chatbot.threadids import check_thread_id, next_fork_id

    backend = open_thread(ctx, thread_id, db, url)
    checkpoint_id = (
        find_checkpoint(backend.history(thread_id), checkpoint).checkpoint_id
        if (checkpoint)
        else None
    )
    try:
        new_id = check_thread_id(to) if to else next_fork_id(thread_id, backend.thread_exists)
    except ValueError as error:
        fail(str(error), 2)
    backend.fork(thread_id, checkpoint_id, new_id)
    out.print(new_id, markup=False)


@command(panel="Threads")
def delete(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    yes: YesOption = False,
    forget_memories: Annotated[
        bool,
        typer.Option("--forget-memories", help="Forget the memories that came from it too."),
    ] = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Delete a thread and its whole history (local threads only)."""
    backend = open_thread(ctx, thread_id, db, url, local_only="delete")
    if not yes:
        if not sys.stdin.isatty():
            fail("deleting needs confirmation: add --yes", 2)
        if not typer.confirm(f"Delete thread {thread_id} and all its history?", default=False):
            err.print(f"kept {escape(sanitize(thread_id))}")
            raise typer.Exit(1)
    backend.delete(thread_id)
    err.print(f"deleted {escape(sanitize(thread_id))}")
    book = backend.memory_book()
    noted = book.from_thread(thread_id)
    if noted:
        from chatbot.plural import counted

        many = counted(len(noted), "memory", "memories")
        if forget_memories or (
            not yes and typer.confirm(f"Forget the {many} that came from it too?", default=False)
        ):
            book.forget_all(noted)
            err.print(f"forgotten {many} from {escape(sanitize(thread_id))}")
        else:
            err.print(f"kept {many} from it: 'chatbot memory list' shows them")
    book.forget_thread(thread_id)
