"""``chatbot export`` (a thread as Markdown or JSON) and ``chatbot import`` (a thread back
from its JSON export)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from chatbot.cli.app import (
    DbOption,
    ForceOption,
    OutputOption,
    ThreadArgument,
    UrlOption,
    app_state,
    checked_thread_id,
    command,
    err,
    escape,
    fail,
    given_option,
    thread_reader,
    write_output,
)
from chatbot.sanitize import sanitize


@command(panel="Search and export")
def export(
    ctx: typer.Context,
    thread_id: ThreadArgument,
    output: OutputOption = None,
    fmt: Annotated[
        str | None, typer.Option("--format", "-f", help="md or json (default: by extension).")
    ] = None,
    force: ForceOption = False,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Export a thread: summary, messages folded into it, live messages."""
    from chatbot.history.export import ExportError, export_document, export_format, render

    reader = thread_reader(app_state(ctx, db, url), thread_id)
    try:
        chosen = export_format(output, fmt)
    except ExportError as error:
        fail(str(error) + ("" if fmt else " (or give --format md|json)"), 2)
    memories = [m.record() for m in reader.memory_book().from_thread(thread_id)]
    text = render(export_document(thread_id, reader.history(thread_id), memories), chosen)
    if output is None:
        sys.stdout.write(text)
        return
    written = write_output(output, text, force)
    err.print(f"exported {escape(sanitize(thread_id))} to {written}")


_HOW_TO_IMPORT = "import the JSON file 'chatbot export THREAD -o FILE.json' writes"


@command("import", panel="Search and export")
def import_(
    ctx: typer.Context,
    file: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            help="A thread's JSON export ('chatbot export THREAD -o FILE.json'); '-' reads stdin.",
        ),
    ],
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread",
            "-t",
            help="Name of the new thread (default: the thread id in FILE).",
            callback=given_option,
        ),
    ] = None,
    db: DbOption = None,
    url: UrlOption = None,
) -> None:
    """Bring a thread in from its JSON export: summary, messages folded into it, live messages
    (local threads only). A thread of that name already there is never written over."""
    from chatbot.plural import counted
    from chatbot.threadids import quoted
    from chatbot.threads.backend import LocalBackend
    from chatbot.threads.operations import BackendError

    state = app_state(ctx, db, url)
    if state.remote:
        fail(
            f"import works on local threads only (this session uses the LangGraph server at "
            f"{state.where})",
            2,
        )
    if thread is not None:
        thread = checked_thread_id(thread)
    stdin = str(file) == "-"
    shown = "stdin" if stdin else quoted(str(file), 300)
    found, contents = _read_export(_export_json(file, shown), shown)
    if thread is None:
        from chatbot.threadids import check_thread_id

        try:
            thread = check_thread_id(found)
        except ValueError as error:
            fail(f"{error} (the thread id in {shown}): name the new thread with --thread NAME", 2)
    taken = (
        f"thread {quoted(thread)} already exists in {state.where}: import it under another "
        "name with --thread NAME (nothing was written)"
    )
    backend = state.backend(runs=True)
    assert isinstance(backend, LocalBackend)  # (a server was refused above)
    if backend.thread_exists(thread):
        fail(taken)
    try:
        backend.import_thread(thread, **contents)
    except BackendError:
        if backend.thread_exists(thread):  # (made meanwhile, in another window)
            fail(taken)
        raise
    live = len(contents["messages"]) + len(contents["unanswered"])
    source = "stdin" if stdin else sanitize(str(file))
    err.print(
        f"imported {escape(sanitize(thread))} ({counted(live, 'message')}, "
        f"{len(contents['folded'])} folded) from {escape(source)}"
    )


def _export_json(file: Path, shown: str) -> object:
    """The JSON a file (``-``: stdin) holds; one line, exit 2, for a file that cannot be read
    or is not JSON."""
    import json

    if str(file) == "-":
        if sys.stdin.isatty():
            fail(f"'-' reads the export from stdin: pipe it in, or {_HOW_TO_IMPORT}", 2)
        data = sys.stdin.buffer.read()
    else:
        path = file.expanduser()
        try:
            if path.is_dir():
                fail(f"{shown} is a folder: {_HOW_TO_IMPORT}", 2)
            data = path.read_bytes()
        except FileNotFoundError:
            fail(f"{shown} does not exist: {_HOW_TO_IMPORT}", 2)
        except (OSError, ValueError) as error:  # (ValueError: a NUL in the name)
            reason = getattr(error, "strerror", None) or error
            fail(f"cannot read {shown}: {reason} (nothing was imported)", 2)
    if not data.strip():
        fail(f"{shown} is empty: {_HOW_TO_IMPORT}", 2)
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        fail(f"{shown} is not JSON: it is not UTF-8 text ({_HOW_TO_IMPORT})", 2)
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        fail(
            f"{shown} is not JSON ({error.msg.lower()} at {where}; a Markdown export cannot be "
            f"imported): {_HOW_TO_IMPORT}",
            2,
        )
    except RecursionError:
        fail(f"{shown} is not a chatbot export: it is nested too deeply ({_HOW_TO_IMPORT})", 2)


_EXPORT_TEXT = ("thread_id", "summary", "system_prompt", "system_role")
_EXPORT_LISTS = ("summary_history", "folded_messages", "messages", "unanswered")
_EXPORT_OPTIONAL = ("system_prompt", "system_role", "unanswered")


def _read_export(document: object, shown: str) -> tuple[str, dict[str, Any]]:
    """The thread id an export names and what ``LocalBackend.import_thread`` takes from it;
    one line, exit 2, saying what is wrong with a document that is not an export."""
    from chatbot.history.records import RecordError, json_kind, message_from_record
    from chatbot.sanitize import valid_data

    def wrong(what: str) -> NoReturn:
        fail(f"{shown} is not a chatbot export: {what} ({_HOW_TO_IMPORT})", 2)

    if not isinstance(document, dict):
        wrong(f"it holds {json_kind(document)}, not an object")
    export: dict[str, Any] = valid_data(document)  # (a lone surrogate, as an escape: U+FFFD)
    missing = [key for key in (*_EXPORT_TEXT, *_EXPORT_LISTS) if key not in export]
    missing = [key for key in missing if key not in _EXPORT_OPTIONAL]
    if missing:
        wrong(f"it has no {' and no '.join(map(repr, missing))}")
    for keys, kind, said in ((_EXPORT_TEXT, str, "text"), (_EXPORT_LISTS, list, "a list")):
        for key in keys:
            if key in export and not isinstance(export[key], kind):
                wrong(f"its {key!r} is {json_kind(export[key])}, not {said}")
    read: dict[str, list[Any]] = {}
    seen: set[str] = set()
    for key in ("folded_messages", "messages", "unanswered"):
        read[key] = []
        for number, record in enumerate(export.get(key, [])):
            try:
                message = message_from_record(record)
            except RecordError as error:
                wrong(f"{key}[{number}] {error}")
            if message.id in seen:
                wrong(f"{key}[{number}] has the id of an earlier message ({message.id!r:.60})")
            seen.add(str(message.id))
            read[key].append(message)
    contents = {
        "messages": read["messages"],
        "folded": read["folded_messages"],
        "unanswered": read["unanswered"],
        "summary": export["summary"],
        "system_prompt": export.get("system_prompt", ""),
        "system_role": export.get("system_role", ""),
    }
    return export["thread_id"], contents
