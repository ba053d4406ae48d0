"""The slash commands about a thread's past: its summary and history, a past state, and
what can be done from one: /summary, /history, /show, /fork, /undo, /retry, /export."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from chatbot.files import untracked_in
from chatbot.history.export import (
    FileExists,
    default_path,
    export_document,
    export_format,
    write_private,
)
from chatbot.history.export import render as render_export
from chatbot.history.lineage import find_checkpoint, lineage, short_id
from chatbot.history.summary import summary_timeline
from chatbot.history.turns import history_rows, turn_count, turn_entries
from chatbot.plural import counted
from chatbot.terminal import listings, render
from chatbot.terminal.contextcommands import check_model, describe_trigger
from chatbot.terminal.registry import (
    CommandError,
    checkpoints_of,
    command,
    confirmed,
    no_argument,
)
from chatbot.threadids import next_fork_id

if TYPE_CHECKING:
    from chatbot.terminal.repl import Repl


@command("summary", "/summary [history]", "the current summary; 'history': how it evolved")
def _summary(repl: Repl, arg: str) -> None:
    if arg == "history":
        changes = summary_timeline(checkpoints_of(repl), repl.counter())
        if not changes:
            repl.say("the summary has not changed yet in this thread", "dim")
            return
        repl.console.print(render.summary_timeline_view(changes))
        return
    if arg:
        raise CommandError(f"unknown argument {arg!r}: /summary or /summary history")
    snapshot = repl.backend.current(repl.thread_id)
    if snapshot is None or not snapshot.summary:
        run = repl.run_settings()
        if run is not None and not run.policy.automatic:
            repl.say("no summary yet: automatic folding is off; /compact makes one", "dim")
            return
        trigger = describe_trigger(run.policy) if run else "the server's trigger"
        repl.say(f"no summary yet: one is made when the conversation passes {trigger}", "dim")
        return
    tokenizer = repl.settings.tokenizer if repl.settings else "auto"
    window = repl.backend.context_window(snapshot, repl.context, tokenizer)  # (as /context)
    repl.console.print(render.summary_view(snapshot.summary, window.sent.summary))


@command(
    "history",
    "/history [all] [N]",
    "the thread's turns, newest first (default 20); 'all': every checkpoint",
)
def _history_command(repl: Repl, arg: str) -> None:
    words = arg.split()
    every = "all" in words
    numbers = [word for word in words if word != "all"]
    if len(numbers) > 1 or (numbers and (not numbers[0].isdigit() or int(numbers[0]) < 1)):
        what = "checkpoints" if every else "turns"
        given = " ".join(numbers)  # what is wrong: not the 'all' before it
        raise CommandError(f"/history takes a number of {what}, not {given!r}: /history [all] [N]")
    limit = int(numbers[0]) if numbers else 20
    history = checkpoints_of(repl)  # the index: each state is read only if a row needs it
    if every:
        repl.console.print(listings.history_table(history_rows(history, limit)))
        if len(history) > limit:
            older = counted(len(history) - limit, "older checkpoint")
            repl.say(f"... {older} (/history all {len(history)})", "dim")
        return
    repl.console.print(listings.turn_table(turn_entries(history, limit)))
    total = turn_count(history)
    if total > limit:
        repl.say(f"... {counted(total - limit, 'older turn')} (/history {total})", "dim")


@command("show", "/show CHECKPOINT", "the full state at a past checkpoint")
def _show(repl: Repl, arg: str) -> None:
    if not arg:
        raise CommandError("give a checkpoint id from /history: /show CHECKPOINT")
    history = checkpoints_of(repl)
    snapshot = find_checkpoint(history, arg)
    repl.console.print(render.state_view(snapshot, title=render.checkpoint_heading(snapshot)))


# --- branching -----------------------------------------------------------------------------------


@command(
    "fork",
    "/fork [CHECKPOINT]",
    "a new thread branched from a checkpoint (default: now)",
    writes=True,
)
def _fork(repl: Repl, arg: str) -> None:
    history = checkpoints_of(repl)
    source = find_checkpoint(history, arg) if arg else lineage(history)[-1]
    new_id = next_fork_id(repl.thread_id, repl.backend.thread_exists)
    repl.backend.fork(repl.thread_id, source.checkpoint_id, new_id)
    repl.say(
        f"forked {repl.thread_id} at checkpoint {short_id(source.checkpoint_id)} into {new_id}"
    )
    repl.open_thread(new_id)


@command(
    "undo", "/undo", "rewind the last turn (/history still lists it)", remote=False, writes=True
)
def _undo(repl: Repl, arg: str) -> None:
    no_argument("undo", arg)
    undone = repl.backend.undo(repl.thread_id)
    if undone.restored is None:  # the first turn: back to the empty thread
        where = "the empty thread"
    else:
        where = (
            f"checkpoint {short_id(undone.restored.checkpoint_id)} "
            f"({len(undone.restored.messages)} messages)"
        )
    repl.measure(repl.backend.current(repl.thread_id))
    left = short_id(undone.undone_checkpoint_id)
    repl.say(
        f"rewound the last turn: back to {where}. It stays in /history, marked undone, as "
        f"checkpoint {left} (/show {left} to see it, /fork {left} to carry on from it)"
    )


@command(
    "retry",
    "/retry [MODEL]",
    "regenerate the last reply, optionally with another model",
    writes=True,
)
def _retry(repl: Repl, arg: str) -> None:
    context = dict(repl.context)
    if arg:
        check_model(repl, arg)
        context["reply_model"] = arg  # (the summary model stays the session's)
    repl.stream(repl.backend.retry(repl.thread_id, context))


# --- export, tokens, model -----------------------------------------------------------------------


@command("export", "/export [PATH]", "save the conversation as Markdown (or JSON by extension)")
def _export(repl: Repl, arg: str) -> None:
    try:
        parts = shlex.split(arg) if arg else []
    except ValueError:
        raise CommandError('the path has an unclosed quote: /export "my file.md"') from None
    if len(parts) > 1:
        raise CommandError("/export takes one path (quote it if it has spaces)")
    path = Path(parts[0]) if parts else None
    fmt = export_format(path)
    document = export_document(repl.thread_id, checkpoints_of(repl))
    text = render_export(document, fmt)
    # (no path: in the working directory, said in full, and when git would see it there)
    target = path if path is not None else default_path(repl.thread_id, fmt).absolute()
    written = _write_asking(repl, target, text)
    if written is None:
        return
    checkout = untracked_in(written) if path is None else None
    note = f"; untracked in the git checkout at {checkout}" if checkout else ""
    folded, live = len(document["folded_messages"]), len(document["messages"])
    repl.say(
        f"exported {repl.thread_id} to {written} ({folded} folded + {live} live messages{note})"
    )


def _write_asking(repl: Repl, path: Path, text: str) -> Path | None:
    """Write the export; a file already there is replaced only if the user says so."""
    try:
        return write_private(path, text)
    except FileExists as exists:
        if not confirmed(repl, f"{exists.shown} exists: replace it? [y/N] "):
            repl.say(f"kept {exists.shown}: nothing was exported", "dim")
            return None
        return write_private(path, text, replace=True)
