"""The state's ``messages`` and ``summary`` are LangGraph's ``DeltaChannel``: a checkpoint stores
the message window only every tenth update (the summary where it changes), the writes between
hold the rest, and chatbot's own readers (``show``, ``history``, /undo, no graph built)
rebuild every checkpoint's state as LangGraph's ``get_state`` does."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.engine.models import resolve_models
from chatbot.memory.channels import MESSAGES_SNAPSHOT_EVERY
from chatbot.memory.state import ChatGraph
from chatbot.store.base import thread_config
from chatbot.store.checkpoints import lazy_history, read_checkpoint
from chatbot.store.search import recaller
from chatbot.store.sqlite import Store
from chatbot.threads.backend import LocalBackend


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[LocalBackend, ChatGraph, Store]]:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        model="offline",
        db=str(tmp_path / "threads.sqlite"),
        summary_trigger="messages:8",
        summary_keep="messages:4",
    )
    models = resolve_models(settings)
    with Store(settings.db) as store:
        graph = build_graph(models.chat, models.summary, settings, store.saver, recaller(store))
        yield LocalBackend(graph, store), graph, store


def said(messages: Any) -> list[tuple[str, str, str]]:
    return [(str(m.id), m.type, m.text) for m in messages]


def every_kind_of_checkpoint(backend: LocalBackend, graph: ChatGraph, thread: str) -> None:
    """Turns past a snapshot and several folds, an /undo, a /retry, a fork, a state edit."""
    for n in range(MESSAGES_SNAPSHOT_EVERY // 2 + 4):
        list(backend.send(thread, f"message {n} about the parking spot"))
    backend.undo(thread)
    list(backend.retry(thread))
    backend.set_system_prompt(thread, "Be brief.")
    graph.update_state(thread_config(thread), {"messages": "typed in Studio, no id"})
    list(backend.send(thread, "after the edit"))
    history = list(graph.get_state_history(thread_config(thread)))
    backend.fork(thread, history[len(history) // 2].config["configurable"]["checkpoint_id"], "f")
    list(backend.send("f", "on the fork"))


@pytest.mark.slow
def test_most_checkpoints_store_no_window_and_every_one_reads_as_langgraph_reads_it(
    local: tuple[LocalBackend, ChatGraph, Store],
) -> None:
    backend, graph, store = local
    every_kind_of_checkpoint(backend, graph, "t")
    for thread in ("t", "f"):
        states = list(graph.get_state_history(thread_config(thread)))
        stored = 0
        for state in states:
            checkpoint_id = state.config["configurable"]["checkpoint_id"]
            saved = store.saver.get_tuple(thread_config(thread, checkpoint_id))
            assert saved is not None
            stored += "messages" in saved.checkpoint["channel_values"]
            ours = read_checkpoint(store, thread, checkpoint_id).state
            assert said(ours.messages) == said(state.values.get("messages", []))
            assert ours.summary == state.values.get("summary", "")
        if thread == "t":  # (a fork's first checkpoint stores all: it has no writes behind it)
            assert 0 < stored < len(states) / 10, "snapshots only now and then"
        by_id = {s.checkpoint_id: s for s in lazy_history(store, thread)}
        for state in reversed(states):  # oldest first, as an export reads them: each child
            snapshot = by_id[state.config["configurable"]["checkpoint_id"]]  # from its parent
            assert said(snapshot.state.messages) == said(state.values.get("messages", []))
            assert snapshot.state.summary == state.values.get("summary", "")
    current = read_checkpoint(store, "t").state
    assert current.summary and current.messages[-1].type == "ai"


def test_a_message_written_without_an_id_gets_the_same_id_at_every_read(
    local: tuple[LocalBackend, ChatGraph, Store], tmp_path: Path
) -> None:
    backend, graph, store = local
    list(backend.send("t", "hello"))
    graph.update_state(
        thread_config("t"), {"messages": ["one", {"role": "user", "content": "two"}]}
    )
    graph.update_state(thread_config("t"), {"messages": [HumanMessage("three")]})
    first = said(graph.get_state(thread_config("t")).values["messages"])
    assert [text for _, _, text in first[-3:]] == ["one", "two", "three"]
    assert all(message_id not in ("", "None") for message_id, _, _ in first)
    assert said(graph.get_state(thread_config("t")).values["messages"]) == first
    assert said(read_checkpoint(store, "t").state.messages) == first
    with Store(str(tmp_path / "threads.sqlite")) as again:
        assert said(read_checkpoint(again, "t").state.messages) == first


def test_checkpoints_do_not_grow_with_the_window(
    local: tuple[LocalBackend, ChatGraph, Store], tmp_path: Path
) -> None:
    """Without a fold the window grows every turn; the checkpoints between snapshots stay the
    same size (they hold no messages), so a turn's bytes follow what it says."""
    backend = local[0]
    sizes = []
    for n in range(40):
        text = f"message {n}: " + "words of the conversation " * 30
        list(backend.send("long", text, {"summary_trigger": "messages:1000"}))
        with sqlite3.connect(tmp_path / "threads.sqlite") as conn:
            ((size,),) = conn.execute(
                "SELECT MAX(LENGTH(checkpoint)) FROM checkpoints WHERE thread_id = 'long' "
                "AND checkpoint_id = (SELECT MAX(checkpoint_id) FROM checkpoints "
                "WHERE thread_id = 'long')"
            ).fetchall()
        conn.close()
        sizes.append(size)
    snapshots = [size for size in sizes if size > 1.5 * min(sizes)]
    assert len(snapshots) <= 1 + 3 * len(sizes) // MESSAGES_SNAPSHOT_EVERY, sizes
    assert max(size for size in sizes if size not in snapshots) < 1000


def test_a_reader_sees_what_another_process_wrote_after_it_read(
    local: tuple[LocalBackend, ChatGraph, Store], tmp_path: Path
) -> None:
    """A long-lived reader (the REPL) that has read a thread's whole history sees an update
    another process saves on the checkpoint it read (its writes go there) in the state it
    reads next, and the checkpoint before it as it was."""
    backend, graph, _ = local
    for n in range(3):
        list(backend.send("t", f"turn {n}"))
    with Store(str(tmp_path / "threads.sqlite")) as reader:
        for snapshot in lazy_history(reader, "t"):
            assert snapshot.state is not None  # (everything read, oldest ones too)
        head = read_checkpoint(reader, "t").state.messages
        graph.update_state(thread_config("t"), {"messages": [HumanMessage("added elsewhere")]})
        after = read_checkpoint(reader, "t")
        assert [m.text for m in after.state.messages] == [
            *(m.text for m in head),
            "added elsewhere",
        ]
        parent = after.parent_id
        assert parent is not None
        assert said(read_checkpoint(reader, "t", parent).state.messages) == said(head)


def _walks(store: Store, run: Any) -> int:
    """How many times ``run()`` had LangGraph's saver walk a thread's history in SQL (its
    recursive query over the ancestors), on the store's own connection."""
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    try:
        run()
    finally:
        store.conn.set_trace_callback(None)
    return sum("WITH RECURSIVE ancestors" in statement for statement in statements)


def test_a_turn_starting_where_the_last_ended_reads_no_history_and_reads_true(
    local: tuple[LocalBackend, ChatGraph, Store], tmp_path: Path
) -> None:
    """The saver remembers the newest checkpoints it read and wrote: a turn that starts where
    this process's last one ended rebuilds its state from them, not from the database. A turn
    another connection saved in between is read from the database, and every checkpoint reads
    as a new connection reads it."""
    backend, graph, store = local
    every_kind_of_checkpoint(backend, graph, "t")
    list(backend.send("t", "one more turn"))
    assert _walks(store, lambda: list(backend.send("t", "and another"))) == 0
    settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    models = resolve_models(settings)
    with Store(str(tmp_path / "threads.sqlite")) as other:  # another window, same thread
        other_graph = build_graph(models.chat, models.summary, settings, other.saver)
        list(LocalBackend(other_graph, other).send("t", "from the other window"))
    assert _walks(store, lambda: list(backend.send("t", "and back here"))) > 0
    assert _walks(store, lambda: list(backend.send("t", "and again"))) == 0
    with Store(str(tmp_path / "threads.sqlite")) as fresh:
        fresh_graph = build_graph(models.chat, models.summary, settings, fresh.saver)
        states = list(fresh_graph.get_state_history(thread_config("t")))
        assert "from the other window" in [m.text for m in states[0].values["messages"]]
        for state in states:
            ours = graph.get_state(state.config)
            assert said(ours.values.get("messages", [])) == said(state.values.get("messages", []))
            assert ours.values.get("summary", "") == state.values.get("summary", "")


def test_writes_at_a_checkpoint_with_children_are_read_in_them(tmp_path: Path) -> None:
    """A checkpoint's children replay its writes: one written after a child was read makes the
    saver read that child again as the database holds it, not as it remembered it."""
    from langgraph.checkpoint.base import empty_checkpoint

    from chatbot.store.checkpoints import channel_values

    with Store(str(tmp_path / "threads.sqlite")) as store:
        saver = store.saver
        root = empty_checkpoint()
        root["channel_values"] = {"messages": [HumanMessage("a", id="1")]}
        root["channel_versions"] = {"messages": 1}
        at = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        written = saver.put(at, root, {}, {"messages": 1})  # type: ignore[arg-type]
        child = empty_checkpoint()
        child["channel_versions"] = {"messages": 2}
        child_at = saver.put(written, child, {}, {"messages": 2})

        def read() -> list[str]:
            saved = saver.get_tuple(child_at)
            assert saved is not None
            return [m.text for m in channel_values(saver, saved)["messages"]]

        saver.put_writes(written, [("messages", [HumanMessage("b", id="2")])], "one")
        assert read() == ["a", "b"]
        saver.put_writes(written, [("messages", [HumanMessage("c", id="3")])], "two")
        assert read() == ["a", "b", "c"]
        with Store(str(tmp_path / "threads.sqlite")) as fresh:
            saved = fresh.saver.get_tuple(child_at)
            assert saved is not None
            assert [m.text for m in channel_values(fresh.saver, saved)["messages"]] == read()
