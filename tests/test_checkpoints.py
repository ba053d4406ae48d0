"""Reading checkpoints without the graph gives what the graph's own ``get_state`` gives."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.history.lineage import last_turn
from chatbot.history.snapshots import Snapshot, snapshot_from_parts
from chatbot.store.base import thread_config
from chatbot.store.checkpoints import NODE_TRIGGERS, lazy_history, read_checkpoint
from chatbot.store.sqlite import Store
from chatbot.threads.backend import LocalBackend
from chatbot.threads.runner import blocking
from tests.scripted import ScriptedChatModel


def _graph_history(graph, thread: str) -> list[Snapshot]:  # type: ignore[no-untyped-def]
    """Every checkpoint as LangGraph's ``get_state_history`` reports it."""
    return [
        snapshot_from_parts(
            checkpoint_id=s.config["configurable"]["checkpoint_id"],
            parent_id=(s.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
            metadata=dict(s.metadata or {}),
            values=s.values,
            next_nodes=s.next,
            created_at=s.created_at,
        )
        for s in graph.get_state_history(thread_config(thread))
    ]


def _as_tuple(snapshot: Snapshot) -> tuple[object, ...]:
    return (
        snapshot.checkpoint_id,
        snapshot.parent_id,
        snapshot.step,
        snapshot.source,
        snapshot.metadata,
        [(m.type, m.id, m.text) for m in snapshot.messages],
        snapshot.summary,
        snapshot.next,
        snapshot.created_at,
    )


def test_the_node_triggers_are_the_graphs() -> None:
    graph = build_graph(ScriptedChatModel())
    assert {name: tuple(node.triggers) for name, node in graph.nodes.items()} == NODE_TRIGGERS


def test_every_kind_of_checkpoint_reads_as_the_graph_reads_it(tmp_path: Path) -> None:
    """Turns, folds, a failed reply, a failed summary, /retry (resumed and regenerated),
    /undo, /compact and a fork: each checkpoint's messages, summary, next, time, parent and
    metadata match ``graph.get_state_history``."""
    settings = Settings(_env_file=None, summary_trigger="messages:6", summary_keep="messages:2")  # type: ignore[call-arg]
    chat = ScriptedChatModel(
        script=["one", "two", "three", RuntimeError("provider down"), "four", "five"]
    )
    summarizer = ScriptedChatModel(script=[RuntimeError("summary down")], default="SUMMARY")
    with Store(tmp_path / "db.sqlite") as store:
        graph = build_graph(chat, summarizer, settings, store.saver)
        backend = LocalBackend(graph, store)
        for text in ("a", "b", "c"):
            list(backend.send("t", text))
        with pytest.raises(Exception, match="provider down"):
            list(backend.send("t", "d"))  # the reply fails: the turn is left unfinished
        current = backend.current("t")
        assert current is not None and current.awaiting_reply
        list(backend.resume("t", None))  # /retry resumes it; the fold after it fails
        list(backend.send("t", "e"))  # the next turn folds
        list(backend.compact("t"))
        turn = last_turn(backend.history("t"))
        assert turn is not None and turn.before is not None
        backend.restore("t", turn.before.checkpoint_id, "undo")
        list(backend.regenerate("t"))
        backend.fork("t", None, "t-fork")
        blocking(graph.ainvoke({"messages": [HumanMessage("f")]}, thread_config("t-fork")))

        for thread in ("t", "t-fork"):
            expected = _graph_history(graph, thread)
            assert len(expected) > (20 if thread == "t" else 3)
            assert any(s.next for s in expected), "some checkpoints leave work to do"
            assert [_as_tuple(s) for s in lazy_history(store, thread)] == [
                _as_tuple(s) for s in expected
            ]
            assert _as_tuple(read_checkpoint(store, thread)) == _as_tuple(expected[0])


def test_a_lazy_history_reads_only_the_checkpoints_used(tmp_path: Path) -> None:
    with Store(tmp_path / "db.sqlite") as store:
        graph = build_graph(ScriptedChatModel(), checkpointer=store.saver)
        backend = LocalBackend(graph, store)
        for text in ("a", "b", "c", "d"):
            list(backend.send("t", text))
        history = backend.history("t")
        assert len(history) == 12
        assert last_turn(history) is not None
        read = [s for s in history if s._state is not None]
        assert 0 < len(read) < 4, "only the last turn's checkpoints were deserialised"


def test_reading_never_builds_the_graph(tmp_path: Path) -> None:
    with Store(tmp_path / "db.sqlite") as store:
        graph = build_graph(ScriptedChatModel(), checkpointer=store.saver)
        list(LocalBackend(graph, store).send("t", "hello"))

    def no_graph() -> object:
        raise AssertionError("the graph was built to read")

    with Store(tmp_path / "db.sqlite") as store:
        reader = LocalBackend(None, store, build=no_graph)  # type: ignore[arg-type]
        current = reader.current("t")
        assert current is not None and [m.text for m in current.messages] == ["hello", "reply 1"]
        assert len(reader.history("t")) == 3 and reader.threads()[0].thread_id == "t"
