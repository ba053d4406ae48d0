"""``chatbot db stats|vacuum|copy|adopt`` and ``chatbot prune``: the database, not a thread."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:  # the rest is imported on demand: `--help`, `--version` and reading stay fast
    from chatbot.store.base import SqlStore
    from chatbot.store.pruning import Branch


from chatbot.cli.app import (
    DbOption,
    JsonOption,
    YesOption,
    app_state,
    command,
    command_group,
    err,
    escape,
    fail,
    out,
    print_json,
)
from chatbot.plural import counted

# --- keeping the database small -----------------------------------------------------------

db_app = command_group(
    "db",
    "Look after the database: what it holds, copies of it, giving deleted threads' space back.",
    "Database",
    no_args_is_help=True,
)


def _local_store(
    ctx: typer.Context, db: str | None, what: str, *, read_only: bool = False
) -> SqlStore | None:
    """The local database for a maintenance command; ``None`` (said on stderr) if there is
    nothing in it yet. On a server the command is refused."""
    state = app_state(ctx, db)
    state.read_only = read_only
    if state.remote:
        fail(f"{what} works on local databases only (this session uses {state.where})", 2)
    if state.nothing_to_read():
        err.print(f"[dim]{escape(state.missing_said)}: nothing to do[/]")
        return None
    return state.store


def _size(count: int) -> str:
    """Bytes for people: ``412.3 MB``."""
    size = float(count)
    for unit in ("bytes", "KB", "MB"):
        if size < 1000:
            return f"{size:,.0f} {unit}" if unit == "bytes" else f"{size:,.1f} {unit}"
        size /= 1000
    return f"{size:,.1f} GB"


@contextlib.contextmanager
def _progress(doing: str, things: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr for ``total`` things (on a terminal, for 200 or more): yields
    what to call with how many more are done."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn(doing),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(things),
        console=err,
        transient=True,
        disable=not err.is_terminal or total < 200,
    ) as bar:
        task = bar.add_task(doing, total=total)

        def advance(count: int) -> None:
            bar.advance(task, count)

        yield advance


@command("stats", group=db_app)
def db_stats(ctx: typer.Context, as_json: JsonOption = False, db: DbOption = None) -> None:
    """Threads, checkpoints and bytes on disk of the database, by part and a turn."""
    from chatbot.store.base import PER_TURN_FROM

    store = _local_store(ctx, db, "db stats", read_only=True)
    if store is None:
        return
    stats = store.stats()
    if as_json:
        print_json(stats.record())
        return
    out.print(
        f"{escape(stats.location)}: {counted(stats.threads, 'thread', spec=',')}, "
        f"{counted(stats.checkpoints, 'checkpoint', spec=',')}, "
        f"{counted(stats.writes, 'pending write', spec=',')}, "
        f"{_size(stats.bytes)} on disk"
        + (
            f" ({_size(stats.free_bytes)} of it free: 'chatbot db vacuum' gives it back)"
            if stats.free_bytes
            else ""
        )
    )
    if any(size for _, size in stats.parts):
        out.print("  " + " · ".join(f"{part} {_size(size)}" for part, size in stats.parts))
    if stats.turns:
        turns = f"  {counted(stats.turns, 'turn', spec=',')}, {_size(stats.text_bytes)} of text: "
        if stats.per_turn is None:
            out.print(f"{turns}per-turn figures need at least {PER_TURN_FROM} turns")
            return
        times = f" ({stats.bytes / stats.text_bytes:,.0f}× the text)" if stats.text_bytes else ""
        out.print(f"{turns}{_size(round(stats.per_turn))} a turn{times}")


@command("vacuum", group=db_app)
def db_vacuum(ctx: typer.Context, db: DbOption = None) -> None:
    """Give deleted threads' space back to the disk (SQLite's VACUUM)."""
    store = _local_store(ctx, db, "db vacuum")
    if store is None:
        return
    before, after = store.vacuum()
    out.print(f"{escape(store.path)}: {_size(before)} → {_size(after)}")


@command("copy", group=db_app)
def db_copy(
    source: Annotated[str, typer.Argument(metavar="SRC", help="SQLite file or postgresql:// URL.")],
    target: Annotated[str, typer.Argument(metavar="DST", help="SQLite file or postgresql:// URL.")],
    threads: Annotated[
        list[str] | None,
        typer.Option("--thread", "-t", help="Copy this thread (repeat it; default: all)."),
    ] = None,
) -> None:
    """Copy threads with their whole history to another database: SQLite to PostgreSQL and
    back. Run it again to copy what is new; a thread that exists there with a different
    history is refused."""
    from chatbot.store.base import is_postgres_url
    from chatbot.store.copying import plan_copy, run_copy
    from chatbot.store.postgres import open_store

    if not is_postgres_url(source) and not Path(source).expanduser().is_file():
        fail(f"no database {source!r}: give a SQLite file or a postgresql:// URL", 2)
    with open_store(source, read_only=True) as src, open_store(target) as dst:
        if src.path == dst.path:
            fail("SRC and DST are the same database: give two", 2)
        plan = plan_copy(src, dst, threads or [])
        total = plan.checkpoints
        if total:
            with _progress("copying", "checkpoints", total) as advance:
                run_copy(src, dst, plan, progress=advance)
        else:  # (listing rows, search rows or the store's items alone)
            run_copy(src, dst, plan)
        copied, same = len(plan.copy), len(plan.skipped)
        items = len(plan.store_items)
        err.print(
            f"copied {counted(copied, 'thread')} ({counted(total, 'checkpoint', spec=',')}"
            + (f"; {counted(items, 'memory store item')}" if items else "")
            + f") from {escape(src.path)} to {escape(dst.path)}"
            + (f"; {same} already there with the same history" if same else "")
        )


@command("adopt", group=db_app)
def db_adopt(
    ctx: typer.Context,
    yes: YesOption = False,
    db: DbOption = None,
) -> None:
    """Take over another LangGraph program's database on purpose: chatbot adds its own tables
    and mark, then lists that program's threads, can write to them, and prune may delete
    them. Asks first; other programs' databases are refused."""
    from chatbot.store.postgres import database_owner, open_store

    state = app_state(ctx, db)
    if state.remote:
        fail(f"db adopt works on local databases only (this session uses {state.where})", 2)
    where = state.where
    if state.db_missing:
        fail(f"no database {where!r}: nothing to adopt (chatbot makes a new one when used)", 2)
    owner, threads = database_owner(state.places.db, state.places.pg_prepare_threshold)
    if owner.kind == "chatbot":
        err.print(f"{escape(where)} is already a chatbot database: nothing to do")
        return
    if owner.kind == "new":
        err.print(f"{escape(where)} is empty: chatbot sets it up when first used, nothing to adopt")
        return
    if owner.kind != "langgraph":
        fail(
            f"{where!r} is another program's database ({owner.what}, no chatbot mark): only a "
            "LangGraph program's database can be adopted; choose another --db",
            2,
        )
    if not yes and not sys.stdin.isatty():
        fail(f"adopting {where!r} needs confirmation: add --yes (or run it in a terminal)", 2)
    err.print(
        f"{escape(where)} is another LangGraph program's database: "
        f"{counted(threads, 'thread')} in its {escape(owner.what)}. Adopting it adds "
        "chatbot's tables (chatbot_threads, chatbot_leases, chatbot_messages, chatbot_indexed, "
        "chatbot_marks) and its mark, and indexes its messages for search; chatbot then lists "
        "those threads, can write to them, and 'chatbot prune' may delete them. Their "
        "checkpoints stay as they are, and chatbot writes its own there uncompressed."
    )
    if not yes and not typer.confirm("Adopt it?", default=False):
        err.print(f"left {escape(where)} untouched")
        raise typer.Exit(1)
    from chatbot.threads.backend import LocalBackend

    with open_store(state.places.db, state.places.pg_prepare_threshold, adopt=True) as store:
        store.note_adopted()
        listed = LocalBackend(None, store).list_unlisted()
        from chatbot.store.search import catch_up

        catch_up(store)
    err.print(
        f"adopted {escape(where)} ({counted(listed, 'thread')} listed): "
        f"{escape(state.threads_hint)}"
    )


@command(panel="Database")
def prune(
    ctx: typer.Context,
    inactive_days: Annotated[
        float | None,
        typer.Option(
            "--inactive-days", min=0, help="Delete threads with no activity for this many days."
        ),
    ] = None,
    abandoned_days: Annotated[
        float | None,
        typer.Option(
            "--abandoned-days",
            min=0,
            help="Remove side branches (undone turns, replies /retry replaced, abandoned "
            "forks) last written to this many days ago or more; each thread's line of history "
            "stays as it is.",
        ),
    ] = None,
    thread: Annotated[
        str | None,
        typer.Option("--thread", "-t", help="Only this thread (with --abandoned-days)."),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Delete them (else: only list).")
    ] = False,
    db: DbOption = None,
) -> None:
    """Delete inactive threads, or abandoned side branches of histories. --inactive-days N
    deletes whole threads; --abandoned-days N removes the side branches of threads' histories
    (undone turns, replies /retry replaced, abandoned forks), each thread's line of history
    kept. Lists what would go, and deletes it with --yes (or after asking)."""
    if (inactive_days is None) == (abandoned_days is None):
        fail(
            "give one of --inactive-days N (delete whole threads) or --abandoned-days N "
            "(remove side branches of threads' histories)",
            2,
        )
    if thread is not None and abandoned_days is None:
        fail("--thread goes with --abandoned-days (--inactive-days looks at every thread)", 2)
    store = _local_store(ctx, db, "prune")
    if store is None:
        return
    if abandoned_days is not None:
        _prune_branches(store, abandoned_days, thread, yes)
        return
    assert inactive_days is not None
    from chatbot.terminal.listings import threads_table

    stale = store.inactive_threads(inactive_days)
    days = counted(inactive_days, "day", spec="g")
    if not stale:
        err.print(f"no thread in {escape(store.path)} has been inactive for {days}")
        return
    out.print(threads_table(stale))
    count = counted(len(stale), "thread")
    if not _confirmed(
        yes,
        f"{count} inactive for {days}; nothing deleted: add --yes to delete them",
        f"Delete these {count} and all their history?",
    ):
        return
    from chatbot.store.base import checkpoint_time

    listed = {info.thread_id: info.last_active for info in stale}

    def delete_unchanged(thread_id: str) -> int | None:
        latest = store.latest_checkpoint_id(thread_id)  # (a turn may have ended on it since)
        if latest is None or checkpoint_time(latest) != listed[thread_id]:
            return None
        return store.delete_thread(thread_id)

    _under_leases(store, listed, delete_unchanged, lambda n: f"deleted {counted(n, 'thread')}")


def _confirmed(yes: bool, piped: str, question: str) -> bool:
    """Whether to go on deleting: ``--yes``, or a yes to ``question`` on a terminal (a no exits
    1); piped without ``--yes``, says ``piped``."""
    if yes:
        return True
    if not sys.stdin.isatty():
        err.print(piped)
        return False
    if not typer.confirm(question, default=False):
        err.print("kept")
        raise typer.Exit(1)
    return True


def _prune_branches(store: SqlStore, days: float, only: str | None, yes: bool) -> None:
    """``prune --abandoned-days``: what each thread would lose, then each thread pruned."""
    from chatbot.store.pruning import abandoned_branches, prune_branches
    from chatbot.threadids import quoted
    from chatbot.threads.backend import LocalBackend

    if only is not None and not store.thread_exists(only):
        fail(f"no thread {quoted(only)} in {store.path}: 'chatbot threads' lists them", 1)
    threads = [only] if only is not None else [info.thread_id for info in store.list_threads()]
    reader = LocalBackend(None, store)
    plans = []
    for thread_id in threads:
        branches = abandoned_branches(store, thread_id, days)
        if branches:
            plans.append((thread_id, branches))
            out.print(_pruned_view(thread_id, branches, reader.history(thread_id)))
    ago = counted(days, "day", spec="g")
    where = quoted(only) if only is not None else escape(store.path)
    if not plans:
        err.print(f"no side branch in {where} was last written to {ago} ago or more")
        return
    checkpoints = sum(len(b.checkpoints) for _, branches in plans for b in branches)
    what = (
        f"{counted(sum(len(b) for _, b in plans), 'side branch', 'side branches')} "
        f"({counted(checkpoints, 'checkpoint')}) in {counted(len(plans), 'thread')}"
    )
    if not _confirmed(
        yes,
        f"{what} abandoned for {ago}; nothing removed: add --yes to remove them",
        f"Remove these {what}?",
    ):
        return
    _under_leases(  # (the branches found again: a turn may have moved the line since)
        store,
        [thread_id for thread_id, _ in plans],
        lambda thread: prune_branches(store, thread, abandoned_branches(store, thread, days)),
        lambda n: f"removed {counted(n, 'checkpoint')} of side branches",
    )


def _under_leases(
    store: SqlStore,
    threads: Iterable[str],
    work: Callable[[str], int | None],
    done: Callable[[int], str],
) -> None:
    """``work`` on each thread under its lease (a killed process's is taken at once, as a
    turn does), then what was ``done`` in all; the threads left alone, because a turn held
    them or ``work`` found one changed (``None``), are named in an error line (exit 1)."""
    from chatbot.store.leases import Lease
    from chatbot.threadids import quoted

    total, busy = 0, []
    for thread_id in threads:
        lease = Lease(store, thread_id)
        if not lease.try_acquire():
            busy.append(thread_id)
            continue
        try:
            count = work(thread_id)
        finally:
            lease.release()
        if count is None:
            busy.append(thread_id)
        else:
            total += count
    err.print(f"{done(total)}; 'chatbot db vacuum' gives their space back to the disk")
    if busy:
        fail(
            f"{counted(len(busy), 'thread')} taking a turn now or since listed, left as "
            f"{'it was' if len(busy) == 1 else 'they were'}: "
            f"{', '.join(quoted(t) for t in busy)}; run prune again to look at "
            f"{'it' if len(busy) == 1 else 'them'} anew",
            1,
        )


def _pruned_view(thread_id: str, branches: Sequence[Branch], history: Sequence[Any]) -> Any:
    """What pruning a thread's branches takes away, as its history's entries (a run whose start
    stays on the line, as one whose reply /retry replaced, loses only its reply)."""
    from rich.console import Group
    from rich.text import Text

    from chatbot.history.lineage import short_id
    from chatbot.history.turns import turn_entries
    from chatbot.terminal.listings import describe_entry
    from chatbot.terminal.render import plain, preview
    from chatbot.threadids import quoted

    gone = {checkpoint for branch in branches for checkpoint in branch.checkpoints}
    lines: list[Any] = [
        Text.assemble(
            (quoted(thread_id), "bold cyan"),
            f": {counted(len(branches), 'side branch', 'side branches')}, "
            f"{counted(len(gone), 'checkpoint')}",
        )
    ]
    for entry in reversed(turn_entries(history)):
        if entry.checkpoint_id not in gone:
            continue
        when = entry.created_at.astimezone().strftime("%Y-%m-%d %H:%M") if entry.created_at else ""
        if entry.first_checkpoint_id in gone:
            said = describe_entry(entry)
        else:
            said = Text.assemble(("the reply to ", "dim"), plain(preview(entry.text)))
            said.append(
                " (replaced by /retry)" if entry.fate == "retried" else " (on a side branch)",
                style="yellow",
            )
        lines.append(
            Text.assemble("  ", (short_id(entry.checkpoint_id), "bold"), f"  {when}  ", said)
        )
    return Group(*lines)
