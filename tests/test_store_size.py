"""What the database keeps of a thread, and in how little space: checkpoints are stored
compressed, a database written before that reads and goes on as it was, and a LangGraph
program without chatbot's serializer is told what the values are."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zstandard
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.store.postgres import open_store
from chatbot.threads.backend import LocalBackend
from tests.helpers import Cli, echo_or_summary, ok, zstd_dictionary
from tests.scripted import ScriptedChatModel

OLD_LAYOUT = Path(__file__).parent / "data" / "layout-2026-11-uncompressed.sqlite"
"""A database written by chatbot before checkpoints were compressed (offline model, trigger
``messages:4``, keep ``messages:2``): ``garden`` (5 turns, two folds), ``garden-fork1`` (forked
from it, one turn more) and ``工作`` (one turn)."""

OLD_THREADS = ("garden", "garden-fork1", "工作")

LONG = (
    "My allotment has rows of tomatoes, beans and courgettes; the shed key hangs on the third "
    "hook and the water butt leaks when it rains for more than two days in a row. "
)


@pytest.fixture
def old_db(tmp_path: Path) -> Path:
    path = tmp_path / "old.sqlite"
    shutil.copyfile(OLD_LAYOUT, path)
    path.chmod(0o600)
    return path


def langgraph_state(db: Path, thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    """A checkpoint's channel values as LangGraph's own ``SqliteSaver`` reads them."""
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if checkpoint_id:
        config["configurable"]["checkpoint_id"] = checkpoint_id
    with sqlite3.connect(db) as conn:
        saved = SqliteSaver(conn).get_tuple(config)  # type: ignore[arg-type]
    assert saved is not None
    return dict(saved.checkpoint["channel_values"])


def contents(messages: list[Any]) -> list[tuple[str, str]]:
    return [
        (m["type"], m["content"]) if isinstance(m, dict) else (m.type, m.content) for m in messages
    ]


def value_types(db: Path) -> dict[str, list[str]]:
    """The serialization type of each checkpoint and pending write, oldest first."""
    with sqlite3.connect(db) as conn:
        return {
            "checkpoints": [
                r[0] for r in conn.execute("SELECT type FROM checkpoints ORDER BY rowid")
            ],
            "writes": [r[0] for r in conn.execute("SELECT type FROM writes ORDER BY rowid")],
        }


def test_a_database_written_before_compression_reads_as_langgraph_wrote_it(
    cli: Cli, old_db: Path
) -> None:
    assert set(value_types(old_db)["checkpoints"]) == {"msgpack"}, "the fixture is uncompressed"
    db = ("--db", str(old_db))
    for thread in OLD_THREADS:
        shown = json.loads(ok(cli.invoke("show", thread, "--json", *db)).stdout)
        reference = langgraph_state(old_db, thread)
        assert contents(shown["messages"]) == contents(reference["messages"]), thread
        assert shown["summary"] == reference.get("summary", ""), thread
    rows = json.loads(ok(cli.invoke("history", "garden", "--all", "--json", *db)).stdout)
    with sqlite3.connect(old_db) as conn:
        (count,) = conn.execute(
            "SELECT COUNT(*) FROM checkpoints WHERE thread_id = 'garden'"
        ).fetchone()
    assert len(rows) == count
    for row in rows[::4]:  # a past checkpoint shows what LangGraph reads there
        past = json.loads(
            ok(
                cli.invoke("show", "garden", "--checkpoint", row["checkpoint_id"], "--json", *db)
            ).stdout
        )
        reference = langgraph_state(old_db, "garden", row["checkpoint_id"])
        assert contents(past["messages"]) == contents(reference.get("messages", []))
    found = json.loads(ok(cli.invoke("search", "tomato", "--json", "-t", "garden", *db)).stdout)
    assert any("Turn 1:" in hit["snippet"] for hit in found), "a folded message is found"


@pytest.mark.slow
def test_an_old_thread_goes_on_compressed_and_its_past_stays_readable(
    cli: Cli, old_db: Path
) -> None:
    cli.server.responder = echo_or_summary
    cli.env.update(CHATBOT_SUMMARY_TRIGGER="messages:4", CHATBOT_SUMMARY_KEEP="messages:2")
    db = ("--db", str(old_db))
    before = json.loads(ok(cli.invoke("history", "garden", "--all", "--json", *db)).stdout)
    old_types = value_types(old_db)

    ok(cli.invoke("ask", LONG * 3, "--thread", "garden", *db))
    forked = ok(cli.invoke("fork", "garden", "--checkpoint", before[-3]["checkpoint_id"], *db))
    fork_id = forked.stdout.strip().split()[-1]
    ok(cli.invoke("ask", LONG * 2, "--thread", fork_id, *db))

    types = value_types(old_db)
    count = len(old_types["checkpoints"])
    assert types["checkpoints"][:count] == old_types["checkpoints"], "old rows left as they were"
    assert "msgpack+zstd" in types["checkpoints"][count:], "new checkpoints are compressed"
    after = json.loads(ok(cli.invoke("history", "garden", "--all", "--json", *db)).stdout)
    assert after[-len(before) :] == before, "the thread's past reads the same"
    shown = json.loads(ok(cli.invoke("show", "garden", "--json", *db)).stdout)
    assert shown["messages"][-2]["content"] == LONG * 3
    assert (
        shown["summary"] == langgraph_state(old_db, "garden", before[0]["checkpoint_id"])["summary"]
    ), "the summary made before is kept"
    fork = json.loads(ok(cli.invoke("show", fork_id, "--json", *db)).stdout)
    reference = langgraph_state(old_db, "garden", before[-3]["checkpoint_id"])
    assert contents(fork["messages"])[: len(reference["messages"])] == contents(
        reference["messages"]
    )
    assert fork["messages"][-2]["content"] == LONG * 2


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
    unpack = zstandard.ZstdDecompressor(dict_data=zstd_dictionary())
    plain = sum(len(unpack.decompress(data)) for data in packed)
    assert sum(len(data) for data in packed) * 2 < plain, "to under half their size"
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


def test_versions_are_short_and_two_branches_from_one_checkpoint_keep_their_own_values(
    any_db: str,
) -> None:
    """A checkpoint names a version for each channel and each node's view of it: chatbot's are
    short. Two branches written from one checkpoint reach the same counter, and PostgreSQL
    keys a stored value by its version: each branch still reads its own."""
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, model="offline", summary_trigger="messages:4", summary_keep="messages:2"
    )
    with open_store(any_db) as store:
        graph = build_graph(
            ScriptedChatModel(), ScriptedChatModel(default="SUMMARY"), settings, store.saver
        )
        backend = LocalBackend(graph, store)
        for n in range(14):  # (versions pass 9 and 99 on the way: a digit more)
            list(backend.send("t", f"turn {n} about tomatoes"))
        history = list(graph.get_state_history({"configurable": {"thread_id": "t"}}))
        saved = [store.saver.get_tuple(state.config) for state in history]
        versions = [v for s in saved if s for v in s.checkpoint["channel_versions"].values()]
        assert versions and max(len(str(v)) for v in versions) <= 16, versions[:5]
        assert history[0].values["messages"][-2].content == "turn 13 about tomatoes"

        past = history[len(history) // 2].config
        branches = {}
        for word in ("apples", "pears"):  # (a snapshot each: a branch's first checkpoint)
            edited = graph.update_state(
                past, {"messages": [HumanMessage(f"only {word}")], "summary": f"all {word}"}
            )
            graph.invoke(None, edited)  # (it answers the message)
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
    exactly, and the large ones went in compressed."""
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


# --- chatbot db migrate: an older database in the compact form --------------------------------


def readings(cli: Cli, db: str, threads: tuple[str, ...]) -> dict[str, Any]:
    """Every way a thread is read, as JSON: ``show``, ``history --all``, ``export``."""
    seen: dict[str, Any] = {}
    for thread in threads:
        for command in (("show",), ("history", "--all"), ("export", "--format", "json")):
            result = (
                ok(cli.invoke(*command, thread, "--json", "--db", db))
                if (command[0] != "export")
                else ok(cli.invoke(*command, thread, "--db", db))
            )
            document = json.loads(result.stdout)
            if isinstance(document, dict):
                document.pop("exported_at", None)  # (the time of the export itself)
            seen[f"{thread} {command[0]}"] = document
    return seen


def test_migrate_dry_run_says_what_it_would_save_and_changes_nothing(
    cli: Cli, old_db: Path
) -> None:
    before = old_db.read_bytes()
    result = ok(cli.invoke("db", "migrate", "--dry-run", "--db", str(old_db)))
    assert result.stdout.startswith(f"{old_db}: would rewrite ")
    assert "KB less); run 'chatbot db migrate' to do it" in result.stdout
    assert old_db.read_bytes() == before


@pytest.mark.slow
def test_migrate_rewrites_an_older_database_compact_and_every_thread_reads_the_same(
    cli: Cli, old_db: Path
) -> None:
    db = str(old_db)
    before = readings(cli, db, OLD_THREADS)
    found_before = ok(cli.invoke("search", "tomato", "--json", "--db", db)).stdout

    windows_before = windows_stored(old_db)
    said = ok(cli.invoke("db", "migrate", "--dry-run", "--db", db)).stdout
    done = ok(cli.invoke("db", "migrate", "--db", db))

    assert done.stdout.startswith(f"{old_db}: rewrote ") and "db vacuum" in done.stdout
    would = said.split("would rewrite ", 1)[1].split(" (", 1)[0]
    assert done.stdout.split("rewrote ", 1)[1].startswith(would), "the dry run said the same"
    assert readings(cli, db, OLD_THREADS) == before
    assert ok(cli.invoke("search", "tomato", "--json", "--db", db)).stdout == found_before
    with sqlite3.connect(old_db) as conn:
        big = [
            kind
            for table, column in (("checkpoints", "checkpoint"), ("writes", "value"))
            for kind, size in conn.execute(f"SELECT type, length({column}) FROM {table}")
            if size > 400
        ]
    conn.close()
    assert big and set(big) == {"msgpack+zstd"}, "every value worth it is compressed"
    assert windows_stored(old_db) < windows_before / 3, "the window stored only now and then"
    again = ok(cli.invoke("db", "migrate", "--db", db))
    assert "nothing to do" in again.stdout
    unvacuumed = json.loads(ok(cli.invoke("db", "stats", "--json", "--db", db)).stdout)
    ok(cli.invoke("db", "vacuum", "--db", db))
    vacuumed = json.loads(ok(cli.invoke("db", "stats", "--json", "--db", db)).stdout)
    assert vacuumed["bytes"] < unvacuumed["bytes"], "the space the old values took goes back"


def stopping_after(batches: int) -> Callable[[int], None]:
    """A progress callback that stops the work after ``batches`` batches, as Ctrl-C lands
    between two of them."""
    seen: list[int] = []

    def progress(looked_at: int) -> None:
        seen.append(looked_at)
        if len(seen) == batches:
            raise KeyboardInterrupt

    return progress


@pytest.mark.slow
def test_a_migration_cut_short_loses_nothing_and_the_next_one_finishes(
    cli: Cli, old_db: Path
) -> None:
    db = str(old_db)
    before = readings(cli, db, OLD_THREADS)
    stop_after_two = stopping_after(2)

    with open_store(db) as store, pytest.raises(KeyboardInterrupt):
        store.migrate_values(batch=4, progress=stop_after_two)
    kinds = value_types(old_db)
    assert "msgpack+zstd" in kinds["checkpoints"] and "msgpack" in kinds["checkpoints"]
    assert readings(cli, db, OLD_THREADS) == before, "half done reads the same"

    ok(cli.invoke("db", "migrate", "--db", db))
    assert readings(cli, db, OLD_THREADS) == before
    with open_store(db) as store:
        assert store.migrate_values(dry_run=True).values == 0


def windows_stored(db: Path) -> int:
    """How many of the database's checkpoints store the message window themselves."""
    with open_store(str(db)) as store:
        rows = store._query("SELECT type, checkpoint FROM checkpoints")
        return sum(
            "messages" in store.saver.serde.loads_typed((kind, data))["channel_values"]
            for kind, data in rows
        )


@pytest.mark.slow
def test_compacting_cut_short_loses_nothing_and_old_threads_go_on(cli: Cli, old_db: Path) -> None:
    """Old checkpoints lose their stored window only where replaying their parent's writes
    gives it back; stopped between two batches, every thread reads the same, and the next
    run finishes; a migrated thread takes new turns and reads them."""
    from chatbot.store import compacting

    db = str(old_db)
    before = readings(cli, db, OLD_THREADS)
    windows = windows_stored(old_db)
    stop_after_two = stopping_after(2)

    with open_store(db) as store, pytest.raises(KeyboardInterrupt):
        compacting.compact(store, batch=4, progress=stop_after_two)  # type: ignore[arg-type]
    assert windows_stored(old_db) < windows, "the first batches are in"
    assert readings(cli, db, OLD_THREADS) == before, "half done reads the same"
    ok(cli.invoke("db", "migrate", "--db", db))
    assert readings(cli, db, OLD_THREADS) == before
    with open_store(db) as store:
        assert compacting.compact(store, dry_run=True).checkpoints == 0  # type: ignore[arg-type]
    cli.server.responder = echo_or_summary
    ok(cli.invoke("ask", "and the tomatoes?", "--thread", OLD_THREADS[0], "--db", db))
    shown = json.loads(ok(cli.invoke("show", OLD_THREADS[0], "--json", "--db", db)).stdout)
    assert shown["messages"][-2]["content"] == "and the tomatoes?"


@pytest.mark.slow
def test_migrate_on_postgresql_rewrites_uncompressed_values(
    cli: Cli, old_db: Path, postgres_url: str
) -> None:
    """A PostgreSQL database whose values an older chatbot wrote uncompressed (made here by
    copying the old SQLite database and writing its values back as they were stored)."""
    ok(cli.invoke("db", "copy", str(old_db), postgres_url))
    import psycopg

    from chatbot.store import compression

    with psycopg.connect(postgres_url) as conn:
        for table in ("checkpoint_blobs", "checkpoint_writes"):
            rows = conn.execute(
                f"SELECT ctid, type, blob FROM {table} WHERE type LIKE '%+zstd'"
            ).fetchall()
            assert rows, table
            for ctid, kind, blob in rows:
                plain_kind, plain = compression.decompress(kind, bytes(blob))
                conn.execute(
                    f"UPDATE {table} SET type = %s, blob = %s WHERE ctid = %s",
                    (plain_kind, plain, ctid),
                )
    assert "msgpack+zstd" not in stored_types(postgres_url)
    before = readings(cli, postgres_url, OLD_THREADS)
    dry = ok(cli.invoke("db", "migrate", "--dry-run", "--db", postgres_url)).stdout
    assert "would rewrite " in dry

    done = ok(cli.invoke("db", "migrate", "--db", postgres_url)).stdout

    assert "rewrote " in done and "vacuum" not in done
    assert "msgpack+zstd" in stored_types(postgres_url)
    assert readings(cli, postgres_url, OLD_THREADS) == before


def _old_postgres_thread(url: str) -> None:
    """Thread ``t`` on ``url`` as a chatbot before the compact layout stored it: every
    checkpoint holds the whole window (one value a version), uncompressed; folds, an undo and
    a retry among its turns."""
    with open_store(url) as store:
        store.saver.keep_uncompressed()  # type: ignore[attr-defined]
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None, model="offline", summary_trigger="messages:6", summary_keep="messages:2"
        )
        graph = build_graph(
            ScriptedChatModel(), ScriptedChatModel(default="SUMMARY"), settings, store.saver
        )
        backend = LocalBackend(graph, store)
        for n in range(14):
            list(backend.send("t", f"turn {n} about tomatoes"))
            if n == 5:
                backend.undo("t")
            if n == 9:
                list(backend.retry("t"))


def _window_blobs(url: str) -> int:
    with open_store(url) as store:
        ((count,),) = store._query(
            "SELECT COUNT(*) FROM checkpoint_blobs WHERE channel = 'messages' AND thread_id = 't'"
        )
        return int(count)


def _langgraph_reads(url: str) -> dict[str, list[tuple[Any, Any]]]:
    """Every checkpoint's messages as LangGraph's own ``PostgresSaver`` rebuilds them (with
    chatbot's serializer: the values are compressed)."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    with (
        open_store(url) as store,
        psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn,
    ):
        saver = PostgresSaver(conn, serde=store.saver.serde)
        graph = build_graph(ScriptedChatModel(), checkpointer=saver)
        config = {"configurable": {"thread_id": "t"}}
        return {
            state.config["configurable"]["checkpoint_id"]: [
                (m.id, m.content) for m in state.values.get("messages", [])
            ]
            for state in graph.get_state_history(config)
        }


@pytest.mark.slow
def test_compacting_on_postgresql_cut_short_loses_nothing_and_old_threads_go_on(
    cli: Cli, postgres_url: str
) -> None:
    """PostgreSQL stores each version of the window once: a version's value goes only where
    every checkpoint naming it rebuilds it exactly; stopped between two batches, the thread
    reads the same, the next run finishes, LangGraph reads every checkpoint as chatbot does,
    and the thread takes new turns."""
    from chatbot.store import compacting

    _old_postgres_thread(postgres_url)
    before = readings(cli, postgres_url, ("t",))
    graph_before = _langgraph_reads(postgres_url)
    blobs = _window_blobs(postgres_url)
    with open_store(postgres_url) as store, pytest.raises(KeyboardInterrupt):
        compacting.compact(store, batch=4, progress=stopping_after(2))
    assert _window_blobs(postgres_url) < blobs, "the first batches are in"
    assert readings(cli, postgres_url, ("t",)) == before, "half done reads the same"

    said = ok(cli.invoke("db", "migrate", "--dry-run", "--db", postgres_url)).stdout
    done = ok(cli.invoke("db", "migrate", "--db", postgres_url)).stdout
    would = said.split("would rewrite ", 1)[1].split(" (", 1)[0]
    assert done.split("rewrote ", 1)[1].startswith(would), "the dry run said the same"
    assert readings(cli, postgres_url, ("t",)) == before
    assert _window_blobs(postgres_url) < blobs / 3, "the window stored only now and then"
    assert _langgraph_reads(postgres_url) == graph_before
    assert "nothing to do" in ok(cli.invoke("db", "migrate", "--db", postgres_url)).stdout
    found = json.loads(ok(cli.invoke("search", "tomatoes", "--json", "--db", postgres_url)).stdout)
    assert len(found) >= 14
    cli.server.responder = echo_or_summary
    ok(cli.invoke("ask", "and the onions?", "--thread", "t", "--db", postgres_url))
    shown = json.loads(ok(cli.invoke("show", "t", "--json", "--db", postgres_url)).stdout)
    assert shown["messages"][-2]["content"] == "and the onions?"


@pytest.mark.slow
def test_migrating_postgresql_keeps_the_snapshots_todays_turns_wrote(
    cli: Cli, postgres_url: str
) -> None:
    """An old thread that today's chatbot went on with (a /retry, folds): a snapshot written
    today is a blob behind a `true` in the checkpoint, which is not the window (a helper's
    fuzzing found `db migrate` taking it for one)."""
    _old_postgres_thread(postgres_url)
    with open_store(postgres_url) as store:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None, model="offline", summary_trigger="messages:6", summary_keep="messages:2"
        )
        graph = build_graph(
            ScriptedChatModel(), ScriptedChatModel(default="SUMMARY"), settings, store.saver
        )
        backend = LocalBackend(graph, store)
        list(backend.retry("t"))
        for n in range(6):
            list(backend.send("t", f"today {n} about onions"))
        marked = store._query(
            "SELECT COUNT(*) FROM checkpoints WHERE checkpoint -> 'channel_values' -> 'messages' "
            "= 'true'::jsonb"
        )
        assert marked[0][0] > 0, "today's snapshots are behind a marker"
    before = readings(cli, postgres_url, ("t",))
    graph_before = _langgraph_reads(postgres_url)

    ok(cli.invoke("db", "migrate", "--db", postgres_url))

    assert readings(cli, postgres_url, ("t",)) == before
    assert _langgraph_reads(postgres_url) == graph_before
    assert "nothing to do" in ok(cli.invoke("db", "migrate", "--db", postgres_url)).stdout
    cli.server.responder = echo_or_summary
    ok(cli.invoke("ask", "and the leeks?", "--thread", "t", "--db", postgres_url))


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


DICTIONARY_SHA256 = "406e60294c61bf7e7d92b35da688e72e98cbe25e8c930c9b8b4a5ba310d6b97c"


def test_the_dictionary_is_the_one_databases_were_written_with() -> None:
    """Every value written since the eleventh session needs this very file to be read: it is
    never remade (a new one gets an id of its own, and this one stays)."""
    import hashlib

    data = (Path(__file__).parent.parent / "chatbot" / "store" / "zstd-1.dict").read_bytes()
    assert hashlib.sha256(data).hexdigest() == DICTIONARY_SHA256
    assert zstd_dictionary().dict_id() == 0x43680001


def test_small_values_are_compressed_with_the_dictionary_and_older_frames_still_read(
    cli: Cli,
) -> None:
    cli.server.responder = echo_or_summary
    ok(cli.ask("a short one"))
    shown = cli.show()["messages"]
    with sqlite3.connect(cli.db) as conn:
        rows = conn.execute("SELECT type, value FROM writes WHERE channel = 'messages'").fetchall()
    assert rows and all(kind == "msgpack+zstd" for kind, _ in rows), "one message is worth it"
    assert {zstandard.get_frame_parameters(data).dict_id for _, data in rows} == {0x43680001}
    from chatbot.store import compression

    unpack = zstandard.ZstdDecompressor(dict_data=zstd_dictionary())
    plain = unpack.decompress(rows[0][1])
    before = zstandard.ZstdCompressor(level=1).compress(plain)  # (as values were written before)
    assert compression.decompress("msgpack+zstd", before) == ("msgpack", plain)
    with sqlite3.connect(cli.db) as conn:  # (a thread written before reads as it was)
        for _, data in rows:
            again = zstandard.ZstdCompressor(level=1).compress(unpack.decompress(data))
            conn.execute("UPDATE writes SET value = ? WHERE value = ?", (again, data))
    assert cli.show()["messages"] == shown and shown[0]["content"] == "a short one"


def test_a_value_compressed_with_a_dictionary_this_version_lacks_is_one_clear_line(
    cli: Cli,
) -> None:
    cli.server.responder = echo_or_summary
    ok(cli.ask("written by a newer chatbot"))
    unpack = zstandard.ZstdDecompressor(dict_data=zstd_dictionary())
    samples = [bytes([n % 251]) * (40 + n % 90) + b"newer dictionary" for n in range(400)]
    newer = zstandard.train_dictionary(1024, samples, dict_id=0x43680002)
    with sqlite3.connect(cli.db) as conn:
        for data, rowid in conn.execute(
            "SELECT checkpoint, rowid FROM checkpoints WHERE type = 'msgpack+zstd'"
        ).fetchall():
            again = zstandard.ZstdCompressor(dict_data=newer).compress(unpack.decompress(data))
            conn.execute("UPDATE checkpoints SET checkpoint = ? WHERE rowid = ?", (again, rowid))
    result = cli.invoke("show", "t1", "--db", str(cli.db))
    assert result.exit_code != 0 and "Traceback" not in result.output
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert "zstd dictionary 0x43680002" in line and "update chatbot" in line
