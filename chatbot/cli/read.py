"""The reading commands the Typer app and the quick entry point (:mod:`chatbot.cli.main`) share:
``threads``, ``history``, ``show`` and ``search``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chatbot.cli.core import AppState


def run_threads(state: AppState, as_json: bool) -> None:
    """``chatbot threads``: the thread listing, as a table or JSON."""
    from chatbot.cli.core import err, escape, print_json

    state.read_only = True
    # (locally plain SQL: nothing of LangGraph is imported)
    listing = [] if state.db_missing else state.reader().threads()
    if as_json:
        from chatbot.store.base import thread_record

        print_json([thread_record(t) for t in listing])
    elif listing:
        from chatbot.cli.core import out
        from chatbot.terminal.listings import threads_table

        out.print(threads_table(listing))
    else:
        err.print(f"[dim]no threads in {escape(state.where)}[/]")


def run_show(state: AppState, thread_id: str, checkpoint: str | None, as_json: bool) -> None:
    """``chatbot show``: a thread's summary and messages, now or at a past checkpoint."""
    from chatbot.cli.core import out, print_json, thread_backend

    state.read_only = True
    backend = thread_backend(state, thread_id)
    if checkpoint:
        from chatbot.history.lineage import find_checkpoint

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
        if snapshot.state.pending:  # (saved by a run stopped before it took them in)
            document["unanswered"] = [message_record(m) for m in snapshot.state.pending]
        if checkpoint:
            document["checkpoint_id"] = snapshot.checkpoint_id
        print_json(document)
        return
    from chatbot.terminal.render import checkpoint_heading, state_view

    out.print(state_view(snapshot, title=checkpoint_heading(snapshot) if checkpoint else ""))


def run_history(state: AppState, thread_id: str, limit: int, every: bool, as_json: bool) -> None:
    """``chatbot history``: one row per turn, newest first (every checkpoint with ``every``)."""
    from chatbot.cli.core import out, print_json, thread_backend
    from chatbot.history.turns import history_rows, turn_entries

    state.read_only = True
    backend = thread_backend(state, thread_id)
    history = backend.history(thread_id)  # the index: only the rows shown read their states
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


def run_search(state: AppState, text: str, thread: str | None, limit: int, as_json: bool) -> None:
    """``chatbot search``: every message ever written in local threads, folded ones too,
    newest first, as a table or JSON."""
    from chatbot.cli.core import err, escape, fail, out, print_json, valid_text
    from chatbot.store.search import SearchError, hit_record, parse_query

    text = valid_text(text)
    try:
        parse_query(text)
    except SearchError as error:
        fail(str(error), 2)
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
