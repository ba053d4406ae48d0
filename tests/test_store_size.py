"""What the database keeps of a thread, and in how little space: checkpoints and their writes
are stored compressed (plain zstd, no dictionary) and read back exactly, from any number of
threads at once; a LangGraph program without chatbot's serializer is told what the values are,
and one with the serializer docs/storage.md shows reads them."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
import zstandard
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.store.postgres import open_store
from chatbot.store.saver import SMALLEST
from chatbot.threads.backend import LocalBackend
from chatbot.threads.runner import blocking
from tests.helpers import Cli, echo_or_summary, ok
from tests.scripted import ScriptedChatModel

LONG = (
    "My allotment has rows of tomatoes, beans and courgettes; the shed key hangs on the third "
    "hook and the water butt leaks when it rains for more than two days in a row. "
)


@pytest.mark.slow
def test_checkpoints_are_stored_compressed_and_read_back_exactly(cli: Cli) -> None:
    cli.server.responder = echo_or_summary
    for n in range(4):
        ok(cli.ask(f"{n}: {LONG * 4}"))
    with sqlite3.connect(cli.db) as conn:  # (the messages: in the writes, and in snapshots)
        rows = conn.execute("SELECT type, checkpoint FROM checkpoints").fetchall()
        rows += conn.execute("SELECT type, value FROM writes").fetchall()
    packed = [data for kind, data in rows if kind == "msgpack+zstd"]
    assert packed, "the values holding messages are compressed"
    unpack = zstandard.ZstdDecompressor()  # (plain zstd frames: no dictionary to read them)
    plain = [unpack.decompress(data) for data in packed]
    assert sum(len(data) for data in packed) * 2 < sum(map(len, plain)), "to under half"
    assert min(map(len, plain)) > SMALLEST, "a value too small to gain is stored as it is"
    serde = JsonPlusSerializer()
    for data in plain:  # (what LangGraph's own serializer reads, once decompressed)
        serde.loads_typed(("msgpack", data))
    shown = cli.show()
    assert [m["content"] for m in shown["messages"] if m["type"] == "human"] == [
        f"{n}: {LONG * 4}" for n in range(4)
    ]


def test_a_langgraph_program_without_chatbots_serializer_is_told_what_the_values_are(
    cli: Cli,
) -> None:
    cli.server.responder = echo_or_summary
    ok(cli.ask(LONG * 4))
    with sqlite3.connect(cli.db) as conn, pytest.raises(NotImplementedError) as raised:
        SqliteSaver(conn).get_tuple({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}})
    assert "msgpack+zstd" in str(raised.value)


@pytest.mark.slow
def test_turns_on_many_threads_of_one_process_at_once_all_land(any_db: str) -> None:
    """LangGraph writes checkpoints from its own threads: a zstd context is used by one
    thread at a time (a shared one fails when two use it at once)."""
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        model="offline",
        db=any_db,
        summary_trigger="messages:4",
        summary_keep="messages:2",
    )
    errors: list[BaseException] = []
    with open_store(any_db) as store:
        graph = build_graph(
            ScriptedChatModel(default=LONG * 3),
            ScriptedChatModel(default="summary " + LONG),
            settings,
            store.saver,
        )

        def chat(name: str) -> None:
            try:
                backend = LocalBackend(graph, store)
                for turn in range(6):
                    list(backend.send(name, f"{name} {turn}: {LONG * 2}"))
            except BaseException as error:  # (reported below, with the thread it came from)
                errors.append(error)

        workers = [threading.Thread(target=chat, args=(f"w{n}",)) for n in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
        assert not errors, errors
        for n in range(4):
            values = graph.get_state({"configurable": {"thread_id": f"w{n}"}}).values
            assert values["summary"].startswith("summary "), n
            messages = values["messages"]
            assert isinstance(messages[-2], HumanMessage) and isinstance(messages[-1], AIMessage)
            assert messages[-2].content == f"w{n} 5: {LONG * 2}"
    assert "msgpack+zstd" in stored_types(any_db), "the window went in compressed"


def test_two_branches_written_from_one_checkpoint_each_read_their_own_values(
    any_db: str,
) -> None:
    """Two edits of one past checkpoint (a fork, an edit in Studio) make two branches whose
    checkpoints reach the same step, and PostgreSQL keys a stored value by its channel's
    version: each branch still reads its own messages and summary, and the turn after each."""
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, model="offline", summary_trigger="messages:4", summary_keep="messages:2"
    )
    with open_store(any_db) as store:
        graph = build_graph(
            ScriptedChatModel(), ScriptedChatModel(default="SUMMARY"), settings, store.saver
        )
        backend = LocalBackend(graph, store)
        for n in range(14):  # (snapshots and folds on the way)
            list(backend.send("t", f"turn {n} about tomatoes"))
        history = list(graph.get_state_history({"configurable": {"thread_id": "t"}}))
        assert history[0].values["messages"][-2].content == "turn 13 about tomatoes"

        past = history[len(history) // 2].config
        branches = {}
        for word in ("apples", "pears"):
            edited = graph.update_state(
                past, {"messages": [HumanMessage(f"only {word}")], "summary": f"all {word}"}
            )
            blocking(graph.ainvoke(None, edited))  # (it answers the message)
            branches[word] = edited
        for word, edited in branches.items():
            state = graph.get_state(edited)
            assert state.values["summary"] == f"all {word}", word
            assert state.values["messages"][-1].content == f"only {word}", word
            later = next(
                s
                for s in graph.get_state_history({"configurable": {"thread_id": "t"}})
                if s.parent_config
                and s.parent_config["configurable"]["checkpoint_id"]
                == edited["configurable"]["checkpoint_id"]
            )
            assert [m.content for m in later.values["messages"]][-2:] == [
                f"only {word}",
                later.values["messages"][-1].content,
            ] and later.values["messages"][-1].type == "ai", word


def test_the_savers_serializer_round_trips_from_many_threads_at_once(tmp_path: Path) -> None:
    """Eight threads write and read values of many sizes through one saver's serializer at
    the same moment (as LangGraph's threads and the caller's do): every value comes back
    exactly, the large ones went in compressed and the smallest as they are."""
    plain = JsonPlusSerializer()
    start = threading.Barrier(8)
    errors: list[BaseException] = []
    with open_store(str(tmp_path / "t.sqlite")) as store:
        serde = store.saver.serde

        def work(n: int) -> None:
            try:
                start.wait()
                for size in range(1, 400):
                    value = {"n": n, "text": f"{n}:{size} " + LONG[: size * 7] * (1 + size % 5)}
                    kind, data = serde.dumps_typed(value)
                    assert serde.loads_typed((kind, data)) == value
                    if len(value["text"]) > 2_000:
                        assert kind.endswith("+zstd"), (n, size, kind)
                    if len(plain.dumps_typed(value)[1]) <= SMALLEST:
                        assert (kind, data) == plain.dumps_typed(value), "stored as it is"
            except BaseException as error:  # (reported below)
                errors.append(error)

        workers = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
    assert not errors, errors[:3]


def stored_types(db: str) -> set[str]:
    """The serialization types of the values LangGraph's tables hold, on either database."""
    if not db.startswith("postgresql://"):
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT type FROM checkpoints UNION SELECT type FROM writes")
            return {row[0] for row in rows}
    import psycopg

    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT type FROM checkpoint_blobs UNION SELECT type FROM checkpoint_writes"
        ).fetchall()
        return {row[0] for row in rows}


def test_langgraph_reads_the_database_as_docs_storage_says(cli: Cli, tmp_path: Path) -> None:
    """docs/storage.md shows how a LangGraph program reads chatbot's compressed checkpoints
    (its ``EncryptedSerializer``, zstd for a cipher): that code reads them."""
    cli.server.responder = echo_or_summary
    ok(cli.ask(LONG * 4))
    page = (Path(__file__).parent.parent / "docs" / "storage.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    assert '"chatbot.sqlite"' in code
    namespace: dict[str, Any] = {}
    exec(code.replace('"chatbot.sqlite"', repr(str(cli.db))), namespace)
    said = namespace["messages"]("t1")
    assert [m.content for m in said[:1]] == [LONG * 4] and said[1].type == "ai"
