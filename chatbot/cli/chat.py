"""How ``chatbot chat`` starts its REPL: loaded before it (piped input, a server), or with the
prompt first and the settings, models and graph loaded behind it (a terminal)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from chatbot.cli.core import AppState, ValidTextReader, checked_thread_id, fail, out, valid_stdin

if TYPE_CHECKING:  # the rest is imported on demand: `--help`, `--version` and reading stay fast
    from chatbot.terminal.repl import LineReader, Repl


def _first_thread(thread: str | None, new: bool, newest: Callable[[], str | None]) -> str:
    """The thread a REPL opens: the one given, a fresh one, or the most recently active."""
    from chatbot.threadids import new_thread_id

    if new or thread:
        return thread or new_thread_id()
    return newest() or new_thread_id()


def repl_loaded(state: AppState, thread: str | None, new: bool) -> Repl:
    """A REPL whose backend, settings and models are made before it starts."""
    from chatbot.terminal.commands import dispatch
    from chatbot.terminal.repl import Repl, ScriptedReader

    backend = state.backend(runs=True)
    return Repl(
        backend=backend,
        console=out,
        reader=ValidTextReader(ScriptedReader(line.rstrip("\n") for line in valid_stdin())),
        settings=state.settings,
        thread_id=_first_thread(
            thread, new, lambda: next((t.thread_id for t in backend.threads()), None)
        ),
        model_name="" if state.remote else state.models.chat_name,  # (a server's: not known here)
        dispatch=dispatch,
        notice="" if state.remote else state.models.notice,
    )


def repl_loading_behind_the_prompt(state: AppState, thread: str | None, new: bool) -> Repl:
    """A REPL in a terminal that shows its prompt first: before it, only the database file
    is opened (plain SQL) to choose the thread; behind it, a daemon thread checks the
    settings, opens the backend and makes the models and the graph."""
    import gc

    # Collecting resumes once loading has ended, over every object (not `started()`: freezing
    # them from the loading thread while the prompt runs can lose a key pressed just then).
    gc.disable()
    from chatbot.terminal.repl import Repl, ScriptedReader
    from chatbot.threads.loading import Loaded, LoadingBackend, Opened

    if state.db_missing:  # (a file that could not be made at all ends it before its prompt)
        from chatbot.store.sqlite import check_new_file

        check_new_file(state.places.db)
    store = None if state.db_missing else state.store
    thread_id = _first_thread(thread, new, store.newest_thread if store else lambda: None)

    def open_backend() -> Opened:
        try:
            settings = state.settings  # a bad setting ends the REPL here, before any file is made
            import chatbot.terminal.commands  # noqa: F401  (here, not at the prompt: it imports LangGraph)

            return Opened(state.backend(), settings)
        except BaseException:
            gc.enable()
            raise

    def load_models(opened: Opened) -> Loaded:
        try:
            models = state.models  # a bad summary policy ends the REPL here
            opened.backend.run_settings(None)  # builds the graph; its resolver makes the tokenizer
            return Loaded(models.chat_name, models.notice)
        finally:
            gc.enable()

    location = store.path if store else str(Path(state.places.db).expanduser())
    loading = LoadingBackend(location, store, open_backend, load_models)
    repl = Repl(
        backend=loading.as_backend(),
        console=out,
        reader=ValidTextReader(ScriptedReader(())),
        settings=None,
        thread_id=thread_id,
        model_name="(still loading)",
        dispatch=_dispatch_while_loading,
    )
    repl.reader = terminal_reader(repl, shown=repl.prompt_shown)
    return repl


_LEAVING = ("/exit", "/quit", "/q")  # (as chatbot.terminal.commands names them)


def _dispatch_while_loading(repl: Repl, line: str) -> str | None:
    """Slash commands in a REPL started before loading: leaving never waits; the others wait
    until threads can be read (the commands import LangGraph, on the loading thread)."""
    if line.strip().lower() in _LEAVING:
        return "exit"
    repl.ready(reading=True)
    from chatbot.terminal.commands import dispatch

    return dispatch(repl, line)


def terminal_reader(repl: Repl, shown: Callable[[], None] | None = None) -> LineReader:
    """prompt_toolkit's line editing, completing commands and ids, never waiting for them."""
    from chatbot.config.sources import data_dir
    from chatbot.terminal.lineinput import PromptToolkitReader, SlashCompleter

    def commands() -> list[str]:
        if not repl.can_read():
            return []
        from chatbot.terminal.commands import COMMANDS

        return list(COMMANDS)

    def checkpoint_ids() -> list[str]:
        if not repl.can_read():
            return []
        from chatbot.history.lineage import short_id

        # the newest 50: completing reads ids only, never a whole long history
        return [short_id(i) for i in repl.backend.recent_checkpoint_ids(repl.thread_id, 50)]

    from chatbot.engine.modellist import ModelCatalog

    catalog = ModelCatalog()

    def fetch_models() -> None:
        """Once loaded, list the endpoint's models in the background, for /model Tab."""
        if repl.settings is not None and not repl.remote:
            catalog.refresh(repl.settings)

    def model_names() -> list[str]:
        fetch_models()
        return catalog.names()

    def prompt_shown() -> None:
        if shown is not None:
            shown()
        fetch_models()

    reader = PromptToolkitReader(
        data_dir() / "input_history",
        SlashCompleter(
            commands=commands,
            thread_ids=lambda: [t.thread_id for t in repl.backend.threads()],
            checkpoint_ids=checkpoint_ids,
            model_names=model_names,
        ),
        shown=prompt_shown,
    )
    repl.interject = reader.interject
    return ValidTextReader(reader)


def leave_at_once(state: AppState, code: int) -> NoReturn:
    """End the process when the REPL ends, without the interpreter's slow teardown: the
    database closed, the exit handlers run, the output flushed first. The loading thread is
    not waited for: it only reads, or creates a database whose set-up SQLite makes atomic."""
    import os

    from chatbot.interrupts import run_exit_handlers

    state.close(wait=0.1)  # (the loading thread's statement, if any, is not waited for long)
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def run_chat(state: AppState, thread: str | None, new: bool) -> int:
    """``chatbot chat``: the REPL; its exit code."""
    from chatbot.store.base import is_postgres_url

    if thread and new:
        fail("give --thread or --new, not both", 2)
    if thread:  # checked before the database is opened (or created)
        thread = checked_thread_id(thread)
    terminal = sys.stdin.isatty() and out.is_terminal
    try:
        # On a SQLite file the prompt comes first (the thread list is plain SQL); on a server
        # or PostgreSQL, everything is made before it.
        if terminal and not state.remote and not is_postgres_url(state.places.db):
            repl = repl_loading_behind_the_prompt(state, thread, new)
        else:
            from chatbot.cli.core import started

            repl = repl_loaded(state, thread, new)
            started()
            if terminal:
                repl.reader = terminal_reader(repl)
        code = repl.run()
    except BaseException:
        if terminal:
            drop_typed_keys()
        raise
    if terminal:
        leave_at_once(state, code)
    return code


def drop_typed_keys() -> None:
    """Throw away the keys typed but not read yet, which a REPL ending in an error would leave
    to the shell as its next command."""
    import contextlib

    with contextlib.suppress(Exception):  # (not POSIX, or no terminal after all: nothing to drop)
        import termios

        termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)
