"""The savers remember a thread's newest checkpoints (``chatbot.store.saver.Recent``): whatever
changes a thread (turns, /undo, /retry, forks, Studio's edits, folds, renames, deletes,
pruning, copies, failed and stopped turns, another connection's turns, more threads and
checkpoints than are remembered), every checkpoint read through what a saver remembers reads
as a new connection reads it: its parent, its messages (ids and contents) and its summary."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, RemoveMessage

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.store.base import SqlStore, thread_config
from chatbot.store.checkpoints import read_checkpoint
from chatbot.store.postgres import open_store
from chatbot.threads.backend import LocalBackend
from tests.scripted import ScriptedChatModel

SETTINGS = {"summary_trigger": "messages:6", "summary_keep": "messages:2"}


def _settings() -> Settings:
    return Settings(_env_file=None, **SETTINGS)  # type: ignore[call-arg]


def _backend(store: SqlStore, *script: Any) -> LocalBackend:
    chat = ScriptedChatModel(script=list(script))
    graph = build_graph(chat, ScriptedChatModel(default="SUMMARY"), _settings(), store.saver)
    return LocalBackend(graph, store)


def _said(messages: Any) -> list[tuple[str, str, str]]:
    return [(str(m.id), m.type, m.text) for m in messages]


def _view(store: SqlStore, backend: LocalBackend, thread: str) -> list[Any]:
    """Every checkpoint of a thread, newest first, then oldest first: its id, parent and
    state as chatbot's reader and the graph's ``get_state`` read it."""
    ids = [row[0] for row in store.checkpoint_parents(thread)]
    seen = []
    for order in (ids, list(reversed(ids))):
        for checkpoint_id in order:
            snapshot = read_checkpoint(store, thread, checkpoint_id)
            state = backend.graph.get_state(thread_config(thread, checkpoint_id))
            seen.append(
                (
                    checkpoint_id,
                    snapshot.parent_id,
                    _said(snapshot.state.messages),
                    snapshot.state.summary,
                    _said(state.values.get("messages", [])),
                    state.values.get("summary", ""),
                )
            )
    if ids:
        head = read_checkpoint(store, thread)
        seen.append(("head", head.checkpoint_id, _said(head.state.messages), head.state.summary))
    return seen


def _same_as_fresh(db: str, store: SqlStore, backend: LocalBackend, *threads: str) -> None:
    for thread in threads:
        cached = _view(store, backend, thread)
        with open_store(db) as fresh:
            assert cached == _view(fresh, _backend(fresh), thread), thread


@pytest.fixture
def cached(any_db: str) -> Iterator[tuple[str, SqlStore, LocalBackend]]:
    with open_store(any_db) as store:
        yield any_db, store, _backend(store)


def _turns(backend: LocalBackend, thread: str, n: int, word: str = "turn") -> None:
    for number in range(n):
        list(backend.send(thread, f"{word} {number}"))


Scenario = Callable[[str, SqlStore, LocalBackend], tuple[str, ...]]


def _rename_and_back(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    _turns(backend, "t", 3)
    _view(store, backend, "t")
    backend.rename("t", "u")
    _turns(backend, "u", 2)
    backend.rename("u", "t")
    _turns(backend, "t", 1)
    return ("t",)


def _delete_and_again(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    _turns(backend, "t", 3)
    _view(store, backend, "t")
    backend.delete("t")
    _turns(backend, "t", 2, "again")
    _view(store, backend, "t")
    store.saver.delete_thread("t")  # (as LangGraph's server deletes a thread)
    _turns(backend, "t", 2, "once more")
    return ("t",)


def _undo_retry_fork(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    _turns(backend, "t", 4)
    backend.undo("t")
    list(backend.retry("t"))
    list(backend.regenerate("t"))
    backend.fork("t", None, "f")
    _turns(backend, "f", 1)
    _turns(backend, "t", 1)
    return ("t", "f")


def _studio_edits(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    _turns(backend, "t", 3)
    graph = backend.graph
    graph.update_state(thread_config("t"), {"messages": "typed in Studio"})
    graph.update_state(thread_config("t"), {"summary": "edited"}, as_node="conversation")
    _turns(backend, "t", 1)
    older = list(graph.get_state_history(thread_config("t")))[4].config
    graph.update_state(older, {"messages": [HumanMessage("from the past")]})
    _turns(backend, "t", 1)
    return ("t",)


def _fold_and_remove(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    _turns(backend, "t", 5)
    first = backend.graph.get_state(thread_config("t")).values["messages"][0]
    backend.graph.update_state(thread_config("t"), {"messages": [RemoveMessage(id=first.id)]})
    _turns(backend, "t", 1)
    return ("t",)


def _many_threads(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    threads = tuple(f"t{n}" for n in range(10))
    for _ in range(2):
        for thread in threads:
            _turns(backend, thread, 1)
    return threads


def _failed_turn(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    failing = _backend(store, "a", "b", RuntimeError("down"), KeyboardInterrupt(), "c")
    _turns(failing, "t", 2)
    _view(store, failing, "t")
    with pytest.raises(Exception, match="down"):
        _turns(failing, "t", 1, "fails")
    _view(store, failing, "t")
    with pytest.raises(KeyboardInterrupt):
        list(failing.retry("t"))
    list(failing.retry("t"))
    _turns(failing, "t", 1)
    return ("t",)


def _studio_forks(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    _turns(backend, "t", 5)
    graph = backend.graph
    history = list(graph.get_state_history(thread_config("t")))
    _view(store, backend, "t")
    graph.update_state(history[3].config, {"summary": "older"}, as_node="conversation")
    graph.update_state(history[6].config, {"messages": [HumanMessage("x")]}, as_node="recall")
    graph.update_state(history[2].config, None, as_node="__end__")
    graph.update_state(
        thread_config("t"), {"messages": [HumanMessage("y")]}, as_node="conversation"
    )
    _turns(backend, "t", 1)
    return ("t",)


def _prune(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    from chatbot.store.pruning import prune_branches, side_branches

    _turns(backend, "t", 3)
    backend.undo("t")
    list(backend.retry("t"))
    _turns(backend, "t", 1)
    _view(store, backend, "t")
    prune_branches(store, "t", side_branches(store.checkpoint_parents("t")))
    _turns(backend, "t", 1)
    return ("t",)


def _copy_in(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    from chatbot.store.copying import plan_copy, run_copy

    _turns(backend, "t", 3)
    _view(store, backend, "t")
    with open_store(":memory:") as other:
        elsewhere = _backend(other)
        _turns(elsewhere, "u", 3)
        run_copy(other, store, plan_copy(other, store, ["u"]))
    _turns(backend, "u", 1)
    return ("t", "u")


def _evicted(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    _turns(backend, "t", 12)
    _view(store, backend, "t")
    backend.fork("t", store.checkpoint_parents("t")[20][0], "f")
    _view(store, backend, "t")
    _turns(backend, "t", 2)
    _turns(backend, "f", 2)
    return ("t", "f")


def _state_changed_by_its_reader(
    db: str, store: SqlStore, backend: LocalBackend
) -> tuple[str, ...]:
    _turns(backend, "t", 2)
    state = backend.graph.get_state(thread_config("t"))
    state.values["messages"][0].content = "changed by a caller"
    _turns(backend, "t", 1)
    return ("t",)


def _stream_changed_by_its_reader(
    db: str, store: SqlStore, backend: LocalBackend
) -> tuple[str, ...]:
    import asyncio

    _turns(backend, "t", 2)

    async def streamed() -> list[Any]:
        stream = backend.graph.astream(
            {"messages": [HumanMessage("streamed")]}, thread_config("t"), stream_mode="values"
        )
        return [chunk async for chunk in stream]

    for chunk in asyncio.run(streamed()):
        for message in chunk["messages"]:
            message.content = f"{message.content} (seen)"
    _turns(backend, "t", 1)
    return ("t",)


def _overwritten(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    from langgraph.types import Overwrite

    _turns(backend, "t", 3)
    _view(store, backend, "t")
    kept = HumanMessage("only this", id="only")
    backend.graph.update_state(thread_config("t"), {"messages": Overwrite([kept])})
    _turns(backend, "t", 1)
    return ("t",)


def _two_stores(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    with open_store(db) as other:
        elsewhere = _backend(other)
        for n in range(3):
            _turns(backend, "t", 1, f"here {n}")
            _turns(elsewhere, "t", 1, f"there {n}")
            elsewhere.undo("t")
            _view(other, elsewhere, "t")
    _turns(backend, "t", 1)
    return ("t",)


def _restore_compact_import(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    _turns(backend, "t", 3)
    list(backend.compact("t"))
    backend.restore("t", None, "undo")
    _turns(backend, "t", 4, "after")
    list(backend.compact("t", "the parking spot"))
    list(backend.regenerate("t"))
    older = store.checkpoint_parents("t")[6][0]
    list(backend.resume("t", older))
    folded = [HumanMessage("folded", id="f1")]
    backend.import_thread("i", [HumanMessage("kept", id="k1")], folded=folded, summary="S")
    _turns(backend, "i", 2)
    return ("t", "i")


def _other_store_fails(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    _turns(backend, "t", 2)
    _view(store, backend, "t")
    with open_store(db) as other:
        failing = _backend(other, RuntimeError("down"), RuntimeError("down"))
        with pytest.raises(Exception, match="down"):
            _turns(failing, "t", 1, "fails elsewhere")
    list(backend.retry("t"))
    with open_store(db) as other, pytest.raises(Exception, match="down"):
        list(_backend(other, RuntimeError("down")).retry("t"))
    _turns(backend, "t", 1)
    return ("t",)


def _cancelled_midway(db: str, store: SqlStore, backend: LocalBackend) -> tuple[str, ...]:
    """A run stopped after its first step, as Ctrl-C stops a turn, then one resumed."""
    import asyncio

    _turns(backend, "t", 2)

    async def first_step(payload: Any) -> None:
        stream = backend.graph.astream(payload, thread_config("t"), stream_mode="updates")
        async for _ in stream:
            break
        await stream.aclose()

    asyncio.run(first_step({"messages": [HumanMessage("stopped")]}))
    _view(store, backend, "t")
    asyncio.run(first_step(None))
    _turns(backend, "t", 1)
    return ("t",)


SCENARIOS: dict[str, Scenario] = {
    "rename and back": _rename_and_back,
    "delete and again": _delete_and_again,
    "undo retry fork": _undo_retry_fork,
    "studio edits": _studio_edits,
    "fold and remove": _fold_and_remove,
    "many threads": _many_threads,
    "two stores": _two_stores,
    "failed turn": _failed_turn,
    "studio forks": _studio_forks,
    "prune": _prune,
    "copy in": _copy_in,
    "evicted": _evicted,
    "overwritten": _overwritten,
    "restore compact import": _restore_compact_import,
    "other store fails": _other_store_fails,
    "cancelled midway": _cancelled_midway,
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_cached_read_is_a_fresh_read(
    cached: tuple[str, SqlStore, LocalBackend], name: str
) -> None:
    db, store, backend = cached
    threads = SCENARIOS[name](db, store, backend)
    _same_as_fresh(db, store, backend, *threads)


CHANGED: dict[str, Scenario] = {
    "a state": _state_changed_by_its_reader,
    "a stream": _stream_changed_by_its_reader,
}


@pytest.mark.parametrize("name", CHANGED)
def test_messages_a_reader_changes_are_not_the_ones_the_saver_remembers(
    cached: tuple[str, SqlStore, LocalBackend], name: str
) -> None:
    """A caller may change the messages a state read or a run's stream gave it: what the
    saver remembers, and what it gives the next reader, are its own."""
    db, store, backend = cached
    threads = CHANGED[name](db, store, backend)
    _same_as_fresh(db, store, backend, *threads)


def test_a_write_elsewhere_at_a_checkpoint_with_children_is_read(any_db: str) -> None:
    """Another connection's pending write at a checkpoint that is not the thread's newest (a
    copy finishing a thread's writes, another LangGraph program) changes what its children
    read: the saver reads them again, as a new connection does."""
    from langgraph.checkpoint.base import empty_checkpoint

    from chatbot.store.checkpoints import channel_values

    with open_store(any_db) as store, open_store(any_db) as other:
        saver = store.saver
        root = empty_checkpoint()
        root["channel_values"] = {"messages": [HumanMessage("a", id="1")]}
        root["channel_versions"] = {"messages": 1}
        at = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        written = saver.put(at, root, {}, {"messages": 1})  # type: ignore[arg-type]
        saver.put_writes(written, [("messages", [HumanMessage("b", id="2")])], "one")
        child = empty_checkpoint()
        child["channel_versions"] = {"messages": 2}
        child_at = saver.put(written, child, {}, {"messages": 2})

        def read(reader: SqlStore) -> list[str]:
            saved = reader.saver.get_tuple(child_at)
            assert saved is not None
            return [m.text for m in channel_values(reader.saver, saved)["messages"]]

        assert read(store) == ["a", "b"]
        other.saver.put_writes(written, [("messages", [HumanMessage("c", id="3")])], "two")
        assert read(store) == ["a", "b", "c"]
