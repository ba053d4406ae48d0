"""The reading commands the Typer app and the quick entry point (:mod:`chatbot.cli.main`) share:
``threads``, ``history`` and ``show``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chatbot.cli.core import AppState


def run_threads(state: AppState, as_json: bool) -> None:
    """``chatbot threads``: the thread listing, as a table or JSON."""
    from chatbot.cli.core import err, escape, print_json

    state.read_only = True
    if state.db_missing:
        listing = []
    elif state.remote:
        listing = state.backend().threads()
    else:
        listing = state.store.list_threads()  # plain SQL: nothing of LangGraph is imported
    if as_json:
        from chatbot.store.sqlite import thread_record

        print_json([thread_record(t) for t in listing])
    elif listing:
        from chatbot.cli.core import out
        from chatbot.terminal.render import threads_table

        out.print(threads_table(listing))
    else:
        err.print(f"[dim]no threads in {escape(state.where)}[/]")


def run_show(state: AppState, thread_id: str, checkpoint: str | None, as_json: bool) -> None:
    """``chatbot show``: a thread's summary and messages, now or at a past checkpoint."""
    from chatbot.cli.core import out, print_json, thread_backend

    state.read_only = True
    backend = thread_backend(state, thread_id)
    if checkpoint:
        from chatbot.history.timeline import find_checkpoint

        snapshot = find_checkpoint(backend.history(thread_id), checkpoint)
    else:
        current = backend.current(thread_id)
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
        if checkpoint:
            document["checkpoint_id"] = snapshot.checkpoint_id
        print_json(document)
        return
    from chatbot.terminal.render import checkpoint_heading, state_view

    out.print(state_view(snapshot, title=checkpoint_heading(snapshot) if checkpoint else ""))


def run_history(state: AppState, thread_id: str, limit: int, every: bool, as_json: bool) -> None:
    """``chatbot history``: one row per turn, newest first (every checkpoint with ``every``)."""
    from chatbot.cli.core import out, print_json, thread_backend
    from chatbot.history.timeline import history_rows, turn_entries

    state.read_only = True
    backend = thread_backend(state, thread_id)
    history = backend.history(thread_id)  # the index: only the rows shown read their states
    if every:
        rows = history_rows(history, limit)
        if as_json:
            from chatbot.history.records import history_record

            print_json([history_record(r) for r in rows])
        else:
            from chatbot.terminal.render import history_table

            out.print(history_table(rows))
        return
    entries = turn_entries(history, limit)
    if as_json:
        from chatbot.history.records import turn_record

        print_json([turn_record(e) for e in entries])
    else:
        from chatbot.terminal.render import turn_table

        out.print(turn_table(entries))
