"""The compact layout: a checkpoint stores the message window and the summary only now and then
(LangGraph's ``DeltaChannel`` snapshots), the writes between hold the rest, and every reader
rebuilds the same state LangGraph's own ``get_state`` does."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.types import Command

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.engine.models import resolve_models
from chatbot.memory.channels import MESSAGES_SNAPSHOT_EVERY
from chatbot.memory.state import ChatGraph, MessagesKey
from chatbot.store.checkpoints import lazy_history, read_checkpoint
from chatbot.store.deltas import missing
from chatbot.store.search import recaller
from chatbot.store.sqlite import Store, thread_config
from chatbot.threads.backend import LocalBackend
from tests.scripted import ScriptedChatModel


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


NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
"""The task id of writes no task made (LangGraph's, as update_state saves them)."""


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
    current = read_checkpoint(store, "t").state
    assert current.summary and current.messages[-1].type == "ai"


def test_the_savers_history_of_a_delta_channel_rebuilds_what_langgraphs_does(
    local: tuple[LocalBackend, ChatGraph, Store], tmp_path: Path
) -> None:
    """chatbot's saver answers LangGraph's question (a channel's history at a checkpoint) from
    the values it keeps, or finds the nearest stored value from the checkpoints' metadata
    instead of decoding every ancestor; either way the state rebuilt from its answer is the
    one LangGraph's own ``SqliteSaver`` rebuilds, warm (the process that wrote the thread) or
    cold (another process)."""
    backend, graph, store = local
    every_kind_of_checkpoint(backend, graph, "t")
    path = tmp_path / "threads.sqlite"
    reference = SqliteSaver(sqlite3.connect(path), serde=store.saver.serde)
    compared = 0
    with Store(str(path)) as cold:
        for thread in ("t", "f"):
            for saved in store.saver.list(thread_config(thread)):
                asked = missing(saved.checkpoint)  # (what LangGraph asks: what is not stored)
                for channels in (asked[:1], asked[1:], asked):
                    if not channels:
                        continue
                    theirs = rebuilt(
                        graph,
                        reference.get_delta_channel_history(config=saved.config, channels=channels),
                    )
                    for saver in (store.saver, cold.saver):
                        ours = saver.get_delta_channel_history(
                            config=saved.config, channels=channels
                        )
                        assert rebuilt(graph, ours) == theirs
                        compared += 1
    assert compared > 400


def rebuilt(graph: ChatGraph, histories: Any) -> Any:
    """The value each channel's history rebuilds, as LangGraph rebuilds it (its channels)."""
    values = {}
    for channel, history in histories.items():
        spec: Any = graph.channels[channel]
        state = spec.from_checkpoint(history["seed"] if "seed" in history else spec.ValueType())
        state.replay_writes(history["writes"])
        value = state.get()
        values[channel] = said(value) if isinstance(value, list) else value
    return values


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
    """A long-lived reader (the REPL) keeps what it rebuilt; an update another process saves
    on the checkpoint it read (its writes go there) is in the state it reads next."""
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


class WritesElsewhere(ScriptedChatModel):
    """A chat model during whose call another process saves a message on the checkpoint the
    turn is at (the thread's newest)."""

    path: str = ""

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        if len(self.calls) == 3:  # (the fourth turn)
            with Store(self.path) as other:
                head = other.saver.get_tuple(thread_config("t"))
                assert head is not None
                edit = [HumanMessage("added elsewhere", id="elsewhere")]
                other.saver.put_writes(head.config, [("messages", edit)], NULL_TASK_ID)
        return super()._generate(messages, stop, run_manager, **kwargs)


def test_a_write_another_process_adds_mid_turn_is_in_the_checkpoints_after_it(
    tmp_path: Path,
) -> None:
    """The writer keeps the values of the checkpoints it writes, made from its own writes
    while nothing else writes to the database; a write another process adds in between is
    read back, not missed: the writer reads what a new reader reads."""
    path = str(tmp_path / "threads.sqlite")
    chat = WritesElsewhere(default="a reply", path=path)
    settings = Settings(_env_file=None, model="offline", db=path)  # type: ignore[call-arg]
    with Store(path) as store:
        graph = build_graph(chat, chat, settings, store.saver, recaller(store))
        backend = LocalBackend(graph, store)
        for n in range(5):
            list(backend.send("t", f"turn {n}"))
        ours = said(read_checkpoint(store, "t").state.messages)
    with Store(path) as cold:
        theirs = said(read_checkpoint(cold, "t").state.messages)
    assert ours == theirs
    assert "added elsewhere" in [text for _, _, text in ours]


def every_state(store: Store, graph: Any, thread: str) -> dict[str, list[tuple[str, str, str]]]:
    """Each checkpoint's messages, as ``get_state`` and as chatbot's readers read them."""
    found = {}
    for state in graph.get_state_history(thread_config(thread)):
        checkpoint_id = state.config["configurable"]["checkpoint_id"]
        ours = read_checkpoint(store, thread, checkpoint_id).state.messages
        found[checkpoint_id] = [*said(state.values.get("messages", [])), ("|", "", ""), *said(ours)]
    return found


def test_a_thread_renamed_away_and_back_mid_turn_reads_as_a_new_reader_reads_it(
    tmp_path: Path,
) -> None:
    """A rename is a write of the writer's own connection: what the writer kept of the
    thread's writes under its old name is not taken for the whole (a message saved on the
    paused checkpoint under the other name is in the next turn's state)."""
    path = str(tmp_path / "threads.sqlite")
    chat = ScriptedChatModel(default="a reply")
    settings = Settings(_env_file=None, model="offline", db=path)  # type: ignore[call-arg]
    with Store(path) as store:
        graph = build_graph(chat, chat, settings, store.saver, recaller(store))
        backend = LocalBackend(graph, store)
        list(backend.send("t", "one"))
        graph.invoke(
            {"messages": [HumanMessage("paused")]},
            thread_config("t"),
            interrupt_before=["conversation"],
        )
        backend.rename("t", "u")
        chat.script = [RuntimeError("provider down")]
        with pytest.raises(Exception, match="provider down"):
            graph.invoke(
                Command(update={"messages": [HumanMessage("while renamed", id="u1")]}),
                thread_config("u"),
            )
        backend.rename("u", "t")
        graph.invoke(None, thread_config("t"))
        warm = every_state(store, graph, "t")
    with Store(path) as cold:
        cold_graph = build_graph(chat, chat, settings, cold.saver, recaller(cold))
        assert every_state(cold, cold_graph, "t") == warm
        newest = read_checkpoint(cold, "t").state.messages
    assert [m.text for m in newest][-2:] == ["while renamed", "a reply"]


class WithNote(TypedDict):
    messages: MessagesKey
    note: str


def test_an_edit_on_a_slot_another_write_holds_reads_as_a_new_reader_reads_it(
    tmp_path: Path,
) -> None:
    """Two tasks in one step, one done, one failed; an edit as the done one reuses its task
    id, and LangGraph's saver keeps the first write of a task's slot (its note), not the
    edit's message: the writer keeps what the table keeps."""
    path = str(tmp_path / "threads.sqlite")
    failing = {"b": True}

    def a(state: WithNote) -> dict[str, Any]:
        return {"note": "from a"}

    def b(state: WithNote) -> dict[str, Any]:
        if failing["b"]:
            raise RuntimeError("b fails")
        return {"messages": [HumanMessage("from b")]}

    def build(saver: Any) -> Any:
        builder = StateGraph(WithNote)
        builder.add_node("a", a)
        builder.add_node("b", b)
        builder.add_edge(START, "a")
        builder.add_edge(START, "b")
        return builder.compile(checkpointer=saver)

    with Store(path) as store:
        graph = build(store.saver)
        with pytest.raises(RuntimeError, match="b fails"):
            graph.invoke({"messages": [HumanMessage("hi", id="h1")]}, thread_config("t"))
        graph.update_state(
            thread_config("t"), {"messages": [HumanMessage("edit", id="e1")]}, as_node="a"
        )
        warm = every_state(store, graph, "t")
    with Store(path) as cold:
        assert every_state(cold, build(cold.saver), "t") == warm
