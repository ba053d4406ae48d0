"""The REPL's slash commands. Each handler gets the REPL and the text after the command."""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rich.markup import escape
from rich.table import Table

from chatbot.config.settings import SettingsError
from chatbot.engine.models import MissingCredentials
from chatbot.files import untracked_in
from chatbot.history.export import (
    ExportError,
    FileExists,
    default_path,
    export_document,
    export_format,
    write_private,
)
from chatbot.history.export import render as render_export
from chatbot.history.timeline import (
    compact_refusal,
    find_checkpoint,
    history_rows,
    lineage,
    short_id,
    summary_savings,
    summary_timeline,
    turn_count,
    turn_entries,
)
from chatbot.memory.policy import TRIGGER_OFF, SummaryPolicy
from chatbot.memory.pricing import cost_rows, snapshot_cost
from chatbot.plural import counted
from chatbot.store.base import ThreadInfo
from chatbot.terminal import render
from chatbot.terminal.repl import thread_line
from chatbot.threadids import check_thread_id, new_thread_id, next_fork_id
from chatbot.threads.backend import BackendError

if TYPE_CHECKING:
    from chatbot.terminal.repl import Repl

Outcome = Literal["exit"] | None
Handler = Callable[["Repl", str], Outcome]


class CommandError(ValueError):
    """Bad arguments or an impossible request: one line for the user."""


@dataclass(frozen=True)
class Command:
    """A slash command: its handler, usage and one-line help."""

    name: str
    handler: Handler
    usage: str
    help: str
    remote: bool = True
    writes: bool = False
    """Changes a thread: waits first for a turn stopped with Ctrl-C to end."""


COMMANDS: dict[str, Command] = {}


def command(
    name: str, usage: str, help: str, *, remote: bool = True, writes: bool = False
) -> Callable[[Handler], Handler]:
    """Register a slash command."""

    def register(handler: Handler) -> Handler:
        COMMANDS[name] = Command(name, handler, usage, help, remote, writes)
        return handler

    return register


ALIASES = {"quit": "exit", "q": "exit", "h": "help", "?": "help"}


_COMMAND_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
"""What a command's name looks like: a word, with no ``/``, ``*``, ``.`` or ``^`` in it."""


def _known(word: str) -> str | None:
    """The command a typed name (or alias) means, whatever its case."""
    name = ALIASES.get(word.lower(), word.lower())
    return name if name in COMMANDS else None


def nearest_command(word: str) -> str | None:
    """The command a mistyped name was most likely meant to be (``hisotry``: ``history``)."""
    close = difflib.get_close_matches(word.lower(), list(COMMANDS), n=1, cutoff=0.6)
    return close[0] if close else None


def command_words(line: str) -> tuple[str, str] | None:
    """A line starting with ``/`` as a command's name and argument, or ``None`` when it is a
    message that happens to start with ``/``.

    A command is a known name (``/history 3``, ``/system`` with a prompt of several lines), or
    a word that looks like one on a line of its own (``/hisotry``, ``/foo bar``: said to be
    unknown, with the nearest command). A path, code or a regex (``/usr/bin/env``, ``/* x */``,
    ``/^\\d+$/``) is a message, and so is a paste of several lines unless it starts with a
    command or a near miss of one. ``//`` starts a message that starts with ``/``.
    """
    found = re.match(r"/(\S*)\s*(.*)\Z", line, re.DOTALL)
    if found is None or line.startswith("//"):
        return None
    word, arg = found.group(1), found.group(2).strip()
    if _known(word) is not None or (word == "" and not arg):
        return word, arg
    if _COMMAND_WORD.fullmatch(word) is None:
        return None
    if "\n" in line and nearest_command(word) is None:
        return None
    return word, arg


def dispatch(repl: Repl, line: str) -> Outcome:
    """Run a line that starts with ``/``: a slash command, or a message (see
    :func:`command_words`); every problem becomes one clear line."""
    words = command_words(line)
    if words is None:
        repl.chat(line[1:] if line.startswith("//") else line)
        return None
    word, arg = words
    name = _known(word)
    found = COMMANDS.get(name) if name else None
    if name is None or found is None:
        nearest = nearest_command(word)
        hint = f"did you mean /{nearest}?" if nearest else "/help lists the commands"
        repl.problem(f"unknown command /{word}: {hint} (//{word} sends it as a message)")
        return None
    if not found.remote and repl.backend.local_only_note:
        repl.problem(f"/{name} works on local threads only ({repl.backend.local_only_note})")
        return None
    try:
        return found.handler(repl, arg)
    except (CommandError, BackendError, ExportError, LookupError) as error:
        repl.problem(str(error))
    except Exception as error:  # never a traceback in the REPL
        from chatbot.errors import describe_error

        repl.problem(describe_error(error))
    return None


def _no_argument(name: str, arg: str) -> None:
    if arg:
        raise CommandError(f"/{name} takes no argument: {COMMANDS[name].usage}")


def _thread_id(value: str) -> str:
    try:
        return check_thread_id(value)
    except ValueError as error:
        raise CommandError(str(error)) from None


def _history(repl: Repl) -> list:
    history = repl.backend.history(repl.thread_id)
    if not history:
        raise CommandError(f"thread {repl.thread_id} has no checkpoints yet: say something first")
    return history


# --- help and leaving ----------------------------------------------------------------------------


@command("help", "/help [COMMAND]", "list the commands, or explain one")
def _help(repl: Repl, arg: str) -> Outcome:
    if arg:
        name = ALIASES.get(arg.lstrip("/").lower(), arg.lstrip("/").lower())
        if name not in COMMANDS:
            nearest = nearest_command(name)
            hint = f"did you mean /help {nearest}?" if nearest else "/help lists them"
            raise CommandError(f"no command /{name}: {hint}")
        found = COMMANDS[name]
        note = "" if found.remote or not repl.backend.local_only_note else " (local only)"
        repl.say(f"{found.usage}  {found.help}{note}")
        return None
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for item in COMMANDS.values():
        note = "" if item.remote or not repl.backend.local_only_note else " (local only)"
        table.add_row(escape(item.usage), escape(item.help + note))
    repl.console.print(table)
    repl.say(
        "Enter sends; Alt-Enter (or Esc then Enter) inserts a newline; a paste stays one "
        "message. Ctrl-C stops a reply or clears the line; Ctrl-D leaves. A message that "
        "starts with / goes as typed unless it starts with a command: //text sends /text.",
        "dim",
    )
    return None


@command("exit", "/exit", "leave (Ctrl-D does too)")
def _exit(repl: Repl, arg: str) -> Outcome:
    _no_argument("exit", arg)
    return "exit"


@command("clear", "/clear", "clear the screen")
def _clear(repl: Repl, arg: str) -> Outcome:
    _no_argument("clear", arg)
    repl.console.clear()
    return None


# --- threads -------------------------------------------------------------------------------------


@command("thread", "/thread [ID]", "switch to a thread (created if new); alone: show the current")
def _thread(repl: Repl, arg: str) -> Outcome:
    if not arg:
        snapshot = repl.backend.current(repl.thread_id)
        count = len(snapshot.messages) if snapshot else 0
        repl.say(thread_line(repl.thread_id, count, bool(snapshot and snapshot.summary)))
        return None
    repl.open_thread(_thread_id(arg))
    return None


@command("threads", "/threads", "list threads: id, messages, summary, last active, title")
def _threads(repl: Repl, arg: str) -> Outcome:
    _no_argument("threads", arg)
    threads = repl.backend.threads()
    if all(info.thread_id != repl.thread_id for info in threads):
        # The current thread, new and empty (nothing stored yet): listed, as the prompt names it.
        threads = [ThreadInfo(repl.thread_id, 0, None, "", 0, False), *threads]
    repl.console.print(render.threads_table(threads, current=repl.thread_id))
    return None


@command("new", "/new", "start a fresh thread with a generated id")
def _new(repl: Repl, arg: str) -> Outcome:
    _no_argument("new", arg)
    repl.open_thread(new_thread_id())
    return None


@command("rename", "/rename NEW", "rename the current thread", remote=False, writes=True)
def _rename(repl: Repl, arg: str) -> Outcome:
    if not arg:
        raise CommandError("give the new name: /rename NEW")
    new_id = _thread_id(arg)
    if repl.backend.thread_exists(repl.thread_id):
        repl.backend.rename(repl.thread_id, new_id)
    elif repl.backend.thread_exists(new_id):  # a new thread: only its name changes
        raise CommandError(f"thread {new_id!r} already exists: /thread {new_id} opens it")
    old = repl.thread_id
    repl.thread_id = new_id
    repl.say(f"renamed {old} to {new_id}")
    return None


@command(
    "delete",
    "/delete ID",
    "delete a thread and its history (asks first)",
    remote=False,
    writes=True,
)
def _delete(repl: Repl, arg: str) -> Outcome:
    if not arg:
        raise CommandError("give the thread to delete: /delete ID (/threads lists them)")
    thread_id = _thread_id(arg)
    if not repl.backend.thread_exists(thread_id):
        if thread_id != repl.thread_id:
            raise CommandError(f"no thread {thread_id!r} (/threads lists them)")
        # The current thread, new and empty (only its name, as /rename can give it): nothing
        # is stored, so nothing to ask about.
        repl.say(f"deleted {thread_id} (it had no messages yet)")
        repl.open_thread(new_thread_id())
        return None
    try:
        answer = repl.reader.read(f"Delete thread {thread_id} and all its history? [y/N] ")
    except (EOFError, KeyboardInterrupt):
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):  # (piped input: its next line answers)
        unasked = _delete_command(repl, thread_id)
        repl.say(f"kept {thread_id}: {unasked} deletes it without asking", "dim")
        return None
    repl.backend.delete(thread_id)
    repl.say(f"deleted {thread_id}")
    if thread_id == repl.thread_id:
        repl.open_thread(new_thread_id())
    return None


def _delete_command(repl: Repl, thread_id: str) -> str:
    """``'chatbot delete ID --yes'``, with ``--db`` unless the database is the default one."""
    from chatbot.config.sources import default_db_path

    words = ["chatbot", "delete", thread_id, "--yes"]
    if repl.backend.location != str(default_db_path()):
        words += ["--db", repl.backend.location]
    return f"'{shlex.join(words)}'"


# --- summary and history -------------------------------------------------------------------------


@command("summary", "/summary [history]", "the current summary; 'history': how it evolved")
def _summary(repl: Repl, arg: str) -> Outcome:
    if arg == "history":
        changes = summary_timeline(_history(repl), repl.counter())
        if not changes:
            repl.say("the summary has not changed yet in this thread", "dim")
            return None
        repl.console.print(render.summary_timeline_view(changes))
        return None
    if arg:
        raise CommandError(f"unknown argument {arg!r}: /summary or /summary history")
    snapshot = repl.backend.current(repl.thread_id)
    if snapshot is None or not snapshot.summary:
        run = repl.run_settings()
        if run is not None and not run.policy.automatic:
            repl.say("no summary yet: automatic folding is off; /compact makes one", "dim")
            return None
        trigger = describe_trigger(run.policy) if run else "the server's trigger"
        repl.say(f"no summary yet: one is made when the conversation passes {trigger}", "dim")
        return None
    tokens = repl.counter().text(snapshot.summary)
    repl.console.print(render.summary_view(snapshot.summary, tokens))
    return None


@command(
    "history",
    "/history [all] [N]",
    "the thread's turns, newest first (default 20); 'all': every checkpoint",
)
def _history_command(repl: Repl, arg: str) -> Outcome:
    words = arg.split()
    every = "all" in words
    numbers = [word for word in words if word != "all"]
    if len(numbers) > 1 or (numbers and (not numbers[0].isdigit() or int(numbers[0]) < 1)):
        what = "checkpoints" if every else "turns"
        given = " ".join(numbers)  # what is wrong: not the 'all' before it
        raise CommandError(f"/history takes a number of {what}, not {given!r}: /history [all] [N]")
    limit = int(numbers[0]) if numbers else 20
    history = _history(repl)  # the index: each state is read only if a row needs it
    if every:
        repl.console.print(render.history_table(history_rows(history, limit)))
        if len(history) > limit:
            older = counted(len(history) - limit, "older checkpoint")
            repl.say(f"... {older} (/history all {len(history)})", "dim")
        return None
    repl.console.print(render.turn_table(turn_entries(history, limit)))
    total = turn_count(history)
    if total > limit:
        repl.say(f"... {counted(total - limit, 'older turn')} (/history {total})", "dim")
    return None


@command("show", "/show CHECKPOINT", "the full state at a past checkpoint")
def _show(repl: Repl, arg: str) -> Outcome:
    if not arg:
        raise CommandError("give a checkpoint id from /history: /show CHECKPOINT")
    history = _history(repl)
    snapshot = find_checkpoint(history, arg)
    repl.console.print(render.state_view(snapshot, title=render.checkpoint_heading(snapshot)))
    return None


# --- branching -----------------------------------------------------------------------------------


@command(
    "fork",
    "/fork [CHECKPOINT]",
    "a new thread branched from a checkpoint (default: now)",
    writes=True,
)
def _fork(repl: Repl, arg: str) -> Outcome:
    history = _history(repl)
    source = find_checkpoint(history, arg) if arg else lineage(history)[-1]
    new_id = next_fork_id(repl.thread_id, repl.backend.thread_exists)
    repl.backend.fork(repl.thread_id, source.checkpoint_id, new_id)
    origin = repl.thread_id
    repl.say(f"forked {origin} at checkpoint {short_id(source.checkpoint_id)} into {new_id}")
    repl.open_thread(new_id)
    return None


@command(
    "undo", "/undo", "rewind the last turn (/history still lists it)", remote=False, writes=True
)
def _undo(repl: Repl, arg: str) -> Outcome:
    _no_argument("undo", arg)
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
    return None


@command(
    "retry",
    "/retry [MODEL]",
    "regenerate the last reply, optionally with another model",
    writes=True,
)
def _retry(repl: Repl, arg: str) -> Outcome:
    context = dict(repl.context)
    if arg:
        _check_model(repl, arg)
        context["reply_model"] = arg  # (the summary model stays the session's)
    repl.stream(repl.backend.retry(repl.thread_id, context))
    return None


# --- export, tokens, model -----------------------------------------------------------------------


@command("export", "/export [PATH]", "save the conversation as Markdown (or JSON by extension)")
def _export(repl: Repl, arg: str) -> Outcome:
    try:
        parts = shlex.split(arg) if arg else []
    except ValueError:
        raise CommandError('the path has an unclosed quote: /export "my file.md"') from None
    if len(parts) > 1:
        raise CommandError("/export takes one path (quote it if it has spaces)")
    path = Path(parts[0]) if parts else None
    fmt = export_format(path)
    document = export_document(repl.thread_id, _history(repl))
    text = render_export(document, fmt)
    note = ""
    if path is not None:
        written = _write_asking(repl, path, text)
        if written is None:
            return None
    else:  # in the working directory: said in full, and when git would see it there
        written = _write_asking(repl, default_path(repl.thread_id, fmt).absolute(), text)
        if written is None:
            return None
        checkout = untracked_in(written)
        note = f"; untracked in the git checkout at {checkout}" if checkout else ""
    folded, live = len(document["folded_messages"]), len(document["messages"])
    repl.say(
        f"exported {repl.thread_id} to {written} ({folded} folded + {live} live messages{note})"
    )
    return None


def _write_asking(repl: Repl, path: Path, text: str) -> Path | None:
    """Write the export; a file already there is replaced only when the user says so
    (``None``: kept, and said)."""
    try:
        return write_private(path, text)
    except FileExists as exists:
        try:
            answer = repl.reader.read(f"{exists.shown} exists: replace it? [y/N] ")
        except (EOFError, KeyboardInterrupt):
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):  # (piped input: its next line answers)
            repl.say(f"kept {exists.shown}: nothing was exported", "dim")
            return None
        return write_private(path, text, replace=True)


@command(
    "context",
    "/context",
    "what fills the context window; the trigger, free space, the next fold",
)
def _context(repl: Repl, arg: str) -> Outcome:
    _no_argument("context", arg)
    snapshot = repl.backend.current(repl.thread_id)
    repl.measure(snapshot)  # (the status line agrees with it)
    tokenizer = repl.settings.tokenizer if repl.settings else "auto"
    window = repl.backend.context_window(snapshot, repl.context, tokenizer)
    repl.console.print(render.context_view(window, repl.thread_id))
    return None


@command("tokens", "/tokens", "context size now, the trigger, tokens saved by summaries, cost")
def _tokens(repl: Repl, arg: str) -> Outcome:
    _no_argument("tokens", arg)
    snapshot = repl.backend.current(repl.thread_id)
    tokens = repl.measure(snapshot)
    counter = repl.counter()
    # From the summary's own record; the history is read only for a thread summarized before
    # records existed.
    saved = summary_savings(snapshot, lambda: repl.backend.history(repl.thread_id), counter)
    run = repl.run_settings()  # what the graph resolves for this session's next run
    run_policy = run.policy if run else None
    trigger = describe_trigger(run_policy) if run_policy else "set by the server's settings"
    keep = describe_keep(run_policy) if run_policy else "set by the server's settings"
    threshold = run_policy.trigger_tokens() if run_policy else None
    scale = counter.scale(snapshot.messages) if snapshot else 1.0
    counted_with = f"{counter.name} tokenizer"
    if scale != 1.0:
        counted_with += f", x{scale:.2f} from the provider's reported usage"
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    in_messages = counted(len(snapshot.messages) if snapshot else 0, "message")
    table.add_row("context now", f"{tokens:,} tokens in {in_messages}")
    if run_policy is not None and run_policy.max_input_tokens:
        table.add_row("model input", f"{run_policy.max_input_tokens:,} tokens at most")
    if run_policy is not None and not run_policy.automatic:
        trigger = "off (only /compact and a full context fold)"
    table.add_row("trigger", trigger + (f" ({threshold:,} tokens)" if threshold else ""))
    table.add_row("keep", keep)
    table.add_row("summary", f"{counter.text(snapshot.summary) if snapshot else 0:,} tokens")
    table.add_row("saved", f"{saved.tokens:,} tokens per call ({saved.messages} messages folded)")
    for name, value in cost_rows(snapshot_cost(snapshot)):  # from the state's usage record
        table.add_row(name, escape(value))
    table.add_row("counted with", counted_with)
    repl.console.print(table)
    return None


@command(
    "compact",
    "/compact [FOCUS]",
    "fold older messages into the summary now; FOCUS: what the summary should keep",
    writes=True,
)
def _compact(repl: Repl, arg: str) -> Outcome:
    refusal = compact_refusal(repl.backend.current(repl.thread_id))
    if refusal:
        raise CommandError(refusal)
    repl.stream(
        repl.backend.compact(repl.thread_id, arg, repl.context),
        waiting_for="folding older messages into the summary…",
    )
    return None


def describe_trigger(run_policy: SummaryPolicy) -> str:
    """The trigger as it is written in settings: ``tokens:12000,messages:40`` or ``off``."""
    return ",".join(str(limit) for limit in run_policy.trigger) or TRIGGER_OFF


def describe_keep(run_policy: SummaryPolicy) -> str:
    """What stays verbatim: ``messages:2``, and the first message when it is pinned."""
    first = ", and the first user message" if run_policy.keep_first_message else ""
    return f"{run_policy.keep}{first}"


def _check_model(repl: Repl, name: str) -> None:
    """Refuse a model a run could not use here, asking the graph's own resolver (on a server
    the server decides, with its own credentials and settings)."""
    if any(character.isspace() for character in name):  # (a paste's line break too)
        raise CommandError(f"{name!r} is not a model name")
    try:
        repl.backend.run_settings({**repl.context, "chat_model": name})
    except MissingCredentials as error:
        raise CommandError(str(error)) from None
    except SettingsError as error:
        raise CommandError(f"cannot use {name!r}: {error}") from None


@command("model", "/model [NAME]", "show or switch the chat model for this session")
def _model(repl: Repl, arg: str) -> Outcome:
    if not arg:
        repl.ready()  # the model's name is known once the models are loaded
        shown = repl.model_name or "the server's (its CHATBOT_MODEL)"
        repl.say(f"chat model: {shown}")
        return None
    _check_model(repl, arg)
    repl.context["chat_model"] = arg
    repl.model_name = arg
    repl.measure(repl.backend.current(repl.thread_id))  # counted as the new model counts
    where = " (on the server)" if repl.remote else ""
    repl.say(f"chat model is now {arg} for this session{where}")
    return None


# --- files, editor, clipboard ----------------------------------------------------------------


@command(
    "file",
    "/file [PATH...]",
    "attach files to the next message; alone: list them; clear: drop them",
)
def _file(repl: Repl, arg: str) -> Outcome:
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
        return None
    if paths == ["clear"] and not sep:
        count = len(repl.attachments)
        repl.attachments = []
        if count:  # (nothing attached: nothing to say)
            repl.say(f"dropped {counted(count, 'attached file')}", "dim")
        return None
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
    return None


@command(
    "edit",
    "/edit [TEXT]",
    "write the message in $VISUAL/$EDITOR, then send it (Ctrl-X Ctrl-E too)",
)
def _edit(repl: Repl, arg: str) -> Outcome:
    from chatbot.terminal.editor import EditorError, edit_text

    try:
        text = edit_text(arg)
    except EditorError as error:
        raise CommandError(str(error)) from None
    if not text.strip():
        repl.say("nothing sent: the editor left the message empty", "dim")
        return None
    repl.chat(text)
    return None


@command("copy", "/copy [N]", "copy the last reply (or the N-th last) to the clipboard")
def _copy(repl: Repl, arg: str) -> Outcome:
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
    return None


# --- system prompt and roles ---------------------------------------------------------------------

if TYPE_CHECKING:
    from chatbot.config.roles import PromptChoice
    from chatbot.history.timeline import Snapshot


def _effective_prompt(repl: Repl) -> tuple[Snapshot | None, PromptChoice]:
    """The thread's snapshot and the system prompt its next run sends (with its source)."""
    from chatbot.config.roles import effective_prompt

    snapshot = repl.backend.current(repl.thread_id)
    default = "" if repl.remote or repl.settings is None else repl.settings.system_prompt
    choice = effective_prompt(
        str(repl.context.get("system_prompt") or ""),
        snapshot.system_prompt if snapshot else "",
        snapshot.system_role if snapshot else "",
        default,
    )
    return snapshot, choice


def _set_prompt(repl: Repl, prompt: str, role: str = "") -> bool:
    from chatbot.threads.attachments import check_system_prompt

    if prompt:
        repl.ready()  # (the model's name and input size are known once loaded)
        check_system_prompt(prompt, repl.run_settings(prompt), repl.model_name)
    changed = repl.backend.set_system_prompt(repl.thread_id, prompt, role)
    repl.measure(repl.backend.current(repl.thread_id))
    return changed


@command(
    "system",
    "/system [TEXT|clear]",
    "show or set this thread's system prompt; clear: remove it",
    writes=True,
)
def _system(repl: Repl, arg: str) -> Outcome:
    if not arg:
        repl.ready(reading=True)
        _, choice = _effective_prompt(repl)
        if not choice.text:
            server = " (the server's CHATBOT_SYSTEM_PROMPT applies, if it sets one)"
            repl.say(
                f"no system prompt{server if repl.remote else ''}: /system TEXT sets one for "
                "this thread, /role NAME uses a saved one",
                "dim",
            )
            return None
        repl.say(f"system prompt, from {choice.source}:", "dim")
        repl.print(render.plain(choice.text))
        return None
    if arg.lower() == "clear":
        if not _set_prompt(repl, ""):
            repl.say("this thread has no system prompt of its own", "dim")
            return None
        _, choice = _effective_prompt(repl)
        after = f"; {choice.source} applies" if choice.text else ""
        repl.say(f"removed the system prompt of thread {repl.thread_id}{after}")
        return None
    if not _set_prompt(repl, arg):
        repl.say("unchanged: this thread already has that system prompt", "dim")
        return None
    repl.say(f"system prompt set for thread {repl.thread_id} (/system clear removes it)")
    return None


@command("role", "/role [NAME]", "use a saved prompt (a role) as this thread's system prompt")
def _role(repl: Repl, arg: str) -> Outcome:
    from chatbot.config.roles import RoleError, how_to_add, list_roles, load_role, roles_dir

    if not arg:
        roles = list_roles()
        if not roles:
            repl.say(f"no roles yet: {how_to_add()}, then /role NAME", "dim")
            return None
        table = Table(box=None, show_header=False, pad_edge=False)
        table.add_column(style="bold")
        table.add_column()
        for role in roles:
            table.add_row(render.plain(role.name), render.plain(render.preview(role.first_line)))
        repl.console.print(table)
        repl.say(f"roles live in {roles_dir()}: /role NAME uses one", "dim")
        return None
    try:
        role = load_role(arg)
    except RoleError as error:
        raise CommandError(str(error)) from None
    if not _set_prompt(repl, role.prompt, role.name):
        repl.say(f"unchanged: this thread already uses role {role.name}", "dim")
        return None
    repl.say(f"system prompt set from role {role.name} for thread {repl.thread_id}")
    return None


# --- search ---------------------------------------------------------------------------------------


@command(
    "search",
    "/search TEXT",
    "find messages in every thread, folded ones too, newest first",
    remote=False,
)
def _search(repl: Repl, arg: str) -> Outcome:
    from chatbot.store.search import SearchError

    if not arg:
        raise CommandError('give the text to find: /search TEXT (all words; "a phrase")')
    limit = 20
    try:
        with render.indexing_bar(repl.console) as progress:
            hits = repl.backend.search(arg, limit=limit + 1, progress=progress)
    except SearchError as error:
        raise CommandError(str(error)) from None
    if not hits:
        shown = arg if len(arg) <= 80 else arg[:79] + "…"  # (not a pasted page back)
        repl.say(f"nothing found for {shown!r}", "dim")
        return None
    repl.print(render.hits_view(hits[:limit]))
    more = ""
    if len(hits) > limit:
        more = f"the newest {limit} shown (chatbot search --limit N for more); "
    repl.say(f"{more}/thread THREAD, then /show CHECKPOINT or /fork CHECKPOINT, opens one", "dim")
    return None


# --- the endpoint's models -----------------------------------------------------------------------


@command("models", "/models", "list the models the endpoint serves (Tab after /model completes)")
def _models(repl: Repl, arg: str) -> Outcome:
    _no_argument("models", arg)
    if repl.remote:
        raise CommandError(
            f"/models lists this machine's endpoint, but on a server /model picks from the "
            f"server's own ({repl.backend.local_only_note})"
        )
    repl.ready()  # the settings: the endpoint, its key and timeout
    assert repl.settings is not None
    from chatbot.engine.modellist import list_models

    listing = list_models(repl.settings)  # cached: /model's Tab completion uses it
    for model in listing:
        current = "  (current)" if model.id == repl.model_name else ""
        repl.say(f"{model.id}{current}")
    repl.say(f"{counted(len(listing), 'model')} · /model NAME switches (Tab completes)", "dim")
    return None
