"""Persistence: threads in SQLite survive the process, stay apart, keep their history."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from chatbot.cli.commands import app
from chatbot.config.settings import Settings
from chatbot.config.sources import data_dir
from chatbot.engine.graph import build_graph
from chatbot.store.base import checkpoint_time, thread_config
from chatbot.store.errors import StoreError
from chatbot.store.postgres import open_store
from chatbot.store.sqlite import APPLICATION_ID, Store, check_new_file
from chatbot.threads.backend import LocalBackend
from chatbot.threads.events import Reply, Summarized
from chatbot.threads.runner import blocking
from tests.helpers import runner, wait_until
from tests.scripted import ScriptedChatModel


def offline_settings(db: Path | str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "model": "offline",
        "db": str(db),
        "summary_trigger": "messages:6",
        "summary_keep": "messages:2",
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m chatbot`` in a new process, as a user would run the command."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OPENAI_"))}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "chatbot", *args],
        stdin=subprocess.DEVNULL,  # ask reads what is piped in: none here
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_thread_continues_in_a_new_process(tmp_path: Path) -> None:
    db = tmp_path / "chat.sqlite"
    first = run_cli("ask", "hi! I'm Lance", "--thread", "lance", "--db", str(db))
    assert first.returncode == 0, first.stderr
    assert "offline model" in first.stderr, "the offline stand-in says so visibly"
    second = run_cli("ask", "what's my name?", "--thread", "lance", "--db", str(db))
    assert second.returncode == 0, second.stderr

    shown = run_cli("show", "lance", "--json", "--db", str(db))
    document = json.loads(shown.stdout)
    assert document["thread_id"] == "lance"
    assert [m["type"] for m in document["messages"]] == ["human", "ai", "human", "ai"]
    assert document["messages"][0]["content"] == "hi! I'm Lance"
    assert document["messages"][2]["content"] == "what's my name?"
    assert all(m["id"] for m in document["messages"])


def test_threads_do_not_mix(any_db: str) -> None:
    settings = offline_settings(any_db)
    with open_store(settings.db) as store:
        graph = build_graph(ScriptedChatModel(), settings=settings, checkpointer=store.saver)
        list(LocalBackend(graph, store).send("a", "I am in thread a"))
        list(LocalBackend(graph, store).send("b", "I am in thread b"))
        list(LocalBackend(graph, store).send("a", "still a"))
        a = [m.text for m in graph.get_state(thread_config("a")).values["messages"]]
        b = [m.text for m in graph.get_state(thread_config("b")).values["messages"]]
    assert a[0] == "I am in thread a" and a[2] == "still a" and len(a) == 4
    assert b[0] == "I am in thread b" and len(b) == 2


def test_state_history_keeps_messages_later_folded_into_the_summary(any_db: str) -> None:
    settings = offline_settings(any_db)
    with open_store(settings.db) as store:
        graph = build_graph(
            ScriptedChatModel(), ScriptedChatModel(default="SUMMARY"), settings, store.saver
        )
        backend = LocalBackend(graph, store)
        events = []
        for text in ["one", "two", "three", "four"]:
            events += list(backend.send("t", text, {}))
        now = graph.get_state(thread_config("t")).values
        assert now["summary"] == "SUMMARY" and len(now["messages"]) == 2

        history = list(graph.get_state_history(thread_config("t")))
        older = [snapshot.values.get("messages", []) for snapshot in history]
        assert any(
            [m.text for m in messages][:1] == ["one"] and len(messages) == 8 for messages in older
        ), "a checkpoint before the summary still holds the folded messages"
        nodes = [s.metadata.get("source") for s in history]
        assert "input" in nodes and "loop" in nodes
        (summarized,) = [e for e in events if isinstance(e, Summarized)]
        assert summarized.messages == 6 and summarized.tokens_out > 0
        assert sum(isinstance(e, Reply) for e in events) == 4


def test_listing_threads_reads_rows_not_checkpoints(any_db: str) -> None:
    settings = offline_settings(any_db)
    with open_store(settings.db) as store:
        graph = build_graph(
            ScriptedChatModel(), ScriptedChatModel(default="S"), settings, store.saver
        )
        for text in ["first question about cats", "two", "three", "four"]:
            list(LocalBackend(graph, store).send("cats", text))
        list(LocalBackend(graph, store).send("dogs", "dogs please"))
        threads = {t.thread_id: t for t in store.list_threads()}

    assert list(threads) == ["dogs", "cats"], "newest activity first"
    assert threads["cats"].title == "first question about cats"
    assert threads["cats"].message_count == 2 and threads["cats"].has_summary is True
    assert threads["dogs"].message_count == 2 and threads["dogs"].has_summary is False
    assert threads["dogs"].last_active is not None
    assert threads["cats"].checkpoints > threads["dogs"].checkpoints


def test_threads_written_by_other_programs_are_listed_too(any_db: str) -> None:
    with open_store(any_db) as store:
        graph = build_graph(ScriptedChatModel(), checkpointer=store.saver)
        blocking(
            graph.ainvoke(
                {"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "raw"}}
            )
        )
        (info,) = store.list_threads()
    assert info.thread_id == "raw" and info.title == "" and info.message_count is None


def test_delete_thread_removes_it_and_only_it(any_db: str) -> None:
    settings = offline_settings(any_db)
    with open_store(settings.db) as store:
        graph = build_graph(ScriptedChatModel(), settings=settings, checkpointer=store.saver)
        list(LocalBackend(graph, store).send("keep", "keep me"))
        list(LocalBackend(graph, store).send("drop", "drop me"))
        assert store.delete_thread("drop") is True
        assert store.delete_thread("drop") is False
        assert [t.thread_id for t in store.list_threads()] == ["keep"]
        assert not graph.get_state(thread_config("drop")).values
        writes = "writes" if isinstance(store, Store) else "checkpoint_writes"
        rows = store.query(f"SELECT COUNT(*) FROM {writes} WHERE thread_id = 'drop'")
        assert rows == [(0,)]


def test_database_is_private_and_in_wal_mode(tmp_path: Path) -> None:
    db = data_dir() / "nested" / "dir" / "chat.sqlite"  # (chatbot makes its own folders)
    settings = offline_settings(db)
    with Store(db) as store:
        graph = build_graph(ScriptedChatModel(), settings=settings, checkpointer=store.saver)
        list(LocalBackend(graph, store).send("t", "secret stuff"))
        mode = store.conn.execute("PRAGMA journal_mode").fetchone()[0]
        files = [p for p in db.parent.iterdir() if p.name.startswith("chat.sqlite")]
        assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}
    assert mode == "wal"
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700


def test_in_memory_database_works() -> None:
    with Store(":memory:") as store:
        graph = build_graph(ScriptedChatModel(), checkpointer=store.saver)
        list(LocalBackend(graph, store).send("m", "hello"))
        assert [t.thread_id for t in store.list_threads()] == ["m"]


def test_unopenable_database_is_one_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match="cannot open the database"):
        Store(blocker / "chat.sqlite")


_OPEN_AND_WRITE = """
import os, sys, traceback
from chatbot.engine.graph import build_graph
from chatbot.engine.models import OfflineChatModel
from chatbot.threads.backend import LocalBackend
from chatbot.store.sqlite import Store
for db in sys.argv[1:]:
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    children = []
    for name in ("p0", "p1", "p2"):
        pid = os.fork()  # (a process of its own, forked before it opens the file)
        if pid:
            children.append(pid)
            continue
        code = 1
        try:
            os.write(ready_w, b"r")
            os.read(go_r, 1)  # (all three open the new file at once)
            with Store(db) as store:
                graph = build_graph(OfflineChatModel(), checkpointer=store.saver)
                list(LocalBackend(graph, store).send(name, "hello from " + name))
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    for _ in children:
        os.read(ready_r, 1)
    os.write(go_w, b"g" * len(children))
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
    print(db, codes, flush=True)
"""
"""For each database file named, three processes (forked from this one, which imported what
a turn needs) opening it together, each then taking a turn on a thread of its own."""


@pytest.mark.slow
def test_processes_opening_a_fresh_file_together_do_not_fail(tmp_path: Path) -> None:
    dbs = [tmp_path / f"race{attempt}.sqlite" for attempt in range(2)]
    done = subprocess.run(
        [sys.executable, "-c", _OPEN_AND_WRITE, *map(str, dbs)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [f"{db} [0, 0, 0]" for db in dbs], done.stderr[-2000:]
    for db in dbs:
        with sqlite3.connect(db) as conn:
            threads = conn.execute("SELECT COUNT(DISTINCT thread_id) FROM checkpoints").fetchone()
        assert threads == (3,)


def test_checkpoint_time_is_read_from_the_checkpoint_id(tmp_path: Path) -> None:
    with Store(tmp_path / "db.sqlite") as store:
        graph = build_graph(ScriptedChatModel(), checkpointer=store.saver)
        blocking(
            graph.ainvoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "x"}})
        )
        snapshot = next(iter(graph.get_state_history(thread_config("x"))))
    from datetime import datetime

    written = datetime.fromisoformat(snapshot.created_at)
    decoded = checkpoint_time(snapshot.config["configurable"]["checkpoint_id"])
    assert decoded is not None and abs((decoded - written).total_seconds()) < 1
    assert checkpoint_time("not-a-uuid") is None
    # Read as the uuid module reads it: only a v6 UUID has a time; other shapes have none.
    import uuid

    v6 = snapshot.config["configurable"]["checkpoint_id"]
    assert uuid.UUID(v6).version == 6
    assert checkpoint_time(v6.upper()) == decoded
    for other in (str(uuid.uuid4()), str(uuid.uuid1()), "0x" + v6[2:], v6[:-1] + "g", v6 + " "):
        assert checkpoint_time(other) is None, other
    assert checkpoint_time(v6.replace("-", "_")) is None
    not_rfc = v6[:19] + "0" + v6[20:]  # the variant's bits: not RFC 9562's, so no version
    assert uuid.UUID(not_rfc).version is None and checkpoint_time(not_rfc) is None
    assert checkpoint_time(v6.encode()) is None  # type: ignore[arg-type]  (a BLOB id)


def test_a_read_only_database_is_refused_before_any_turn(tmp_path: Path) -> None:
    db = tmp_path / "ro.sqlite"
    Store(db).close()
    immutable = subprocess.run(["chattr", "+i", str(db)], capture_output=True, check=False)
    if immutable.returncode != 0:
        os.chmod(db, 0o400)
        if os.geteuid() == 0:
            pytest.skip("as root, only chattr makes a file read-only, and it is not available")
    try:
        with pytest.raises(StoreError, match="is read-only: check its permissions"):
            Store(db)
    finally:
        subprocess.run(["chattr", "-i", str(db)], capture_output=True, check=False)
        os.chmod(db, 0o600)


def test_a_file_in_the_way_of_the_database_folder_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(StoreError, match="a file stands where a folder of its path should be"):
        Store(tmp_path / "afile" / "deeper" / "c.sqlite")


@pytest.mark.parametrize("where", ["/proc/chatbot-test.sqlite", "afile/deeper/c.sqlite"])
def test_a_database_that_cannot_be_made_is_refused_first_with_the_line_opening_it_ends_with(
    tmp_path: Path, where: str
) -> None:
    """/proc takes no new file, even from root; a file stands in the way of the other's folder
    (a folder that does not exist at all is refused before: its own line)."""
    (tmp_path / "afile").write_text("x")
    db = str(tmp_path / where)
    with pytest.raises(StoreError) as opening:
        Store(db)
    with pytest.raises(StoreError) as checking:
        check_new_file(db)
    assert str(checking.value) == str(opening.value)
    assert str(checking.value).startswith(f"cannot open the database {db!r}: ")


def test_a_database_that_can_be_made_passes_the_check_and_nothing_is_made(
    tmp_path: Path,
) -> None:
    check_new_file(str(data_dir() / "a" / "b" / "chat.sqlite"))  # (folders made only there)
    check_new_file(str(tmp_path / "chat.sqlite"))
    assert not (data_dir() / "a").exists() and not (tmp_path / "chat.sqlite").exists()


def test_every_folder_created_for_the_database_is_private(tmp_path: Path) -> None:
    Store(data_dir() / "a" / "b" / "c" / "chat.sqlite").close()
    for folder in (data_dir(), *(data_dir() / name for name in ("a", "a/b", "a/b/c"))):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_a_new_database_outside_chatbots_folder_needs_its_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "dir"
    with pytest.raises(StoreError) as refused:
        Store(missing / "chat.sqlite")
    assert str(refused.value) == (
        f"the folder {str(missing)!r} does not exist: create it first, or choose another --db "
        "(nothing was written)"
    )
    assert not (tmp_path / "nowhere").exists()
    missing.mkdir(parents=True)
    Store(missing / "chat.sqlite").close()
    assert (missing / "chat.sqlite").is_file()


def _fingerprint(path: Path) -> tuple[bytes, int, list[str]]:
    """A file's bytes, its mtime and the files next to it (a -journal or -wal would show)."""
    return path.read_bytes(), path.stat().st_mtime_ns, sorted(p.name for p in path.parent.iterdir())


def test_a_new_database_carries_the_chatbot_mark(tmp_path: Path) -> None:
    db = tmp_path / "new.sqlite"
    Store(db).close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)


def test_another_programs_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    db = tmp_path / "other-app.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.close()
    before = _fingerprint(db)
    with pytest.raises(StoreError) as refused:
        Store(db)
    assert str(refused.value) == (
        f"{str(db)!r} is another program's SQLite database (table users, no chatbot mark), so "
        "chatbot leaves it untouched: choose another --db (a new file, or a chatbot database)"
    )
    result = runner.invoke(app, ["threads", "--db", str(db)])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {str(db)!r} is another program's SQLite database")
    assert _fingerprint(db) == before


def test_a_database_marked_by_another_program_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "marked.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA application_id = 1234")
    conn.close()
    before = _fingerprint(db)
    with pytest.raises(StoreError, match="application id 1234, no chatbot mark"):
        Store(db)
    assert _fingerprint(db) == before


def test_a_chatbot_database_from_before_the_mark_is_refused_and_left_untouched(
    tmp_path: Path,
) -> None:
    db = tmp_path / "old.sqlite"
    with Store(db) as store:
        graph = build_graph(ScriptedChatModel(), checkpointer=store.saver)
        list(LocalBackend(graph, store).send("kept", "hello from before"))
    with sqlite3.connect(db) as conn:  # what a development build's database looked like
        conn.execute("PRAGMA application_id = 0")
        conn.execute("PRAGMA user_version = 0")
    conn.close()
    before = db.read_bytes()
    with pytest.raises(StoreError, match=r"development build of chatbot .* 'chatbot import"):
        Store(db)
    assert db.read_bytes() == before
    assert APPLICATION_ID == 0x43686174


def test_a_file_that_is_not_sqlite_is_refused_and_left_untouched(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    before = _fingerprint(notes)
    with pytest.raises(StoreError, match=r"'.*notes.txt' is not a SQLite database, so chatbot"):
        Store(notes)
    result = runner.invoke(app, ["ask", "hi", "--db", str(notes)])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and "is not a SQLite database" in line
    assert _fingerprint(notes) == before


def test_an_empty_file_becomes_a_chatbot_database(tmp_path: Path) -> None:
    db = tmp_path / "empty.sqlite"
    db.touch()
    with Store(db) as store:
        assert store.conn.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)


def test_folders_devices_and_pipes_are_refused_before_sqlite_opens_them(tmp_path: Path) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    pipe = tmp_path / "a-pipe"
    os.mkfifo(pipe)
    journal = Path("/dev/null-journal")
    journal_existed = journal.exists()
    for path, kind in [
        (folder, "a folder"),
        (pipe, "a named pipe"),
        (Path("/dev/null"), "a device"),
    ]:
        with pytest.raises(StoreError) as refused:
            Store(path)
        assert str(refused.value) == (
            f"cannot use {str(path)!r} as the database: it is {kind}, not a file; "
            "choose another --db"
        )
    assert journal_existed or not journal.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-folder", "a-pipe"]
    assert list(folder.iterdir()) == []
    result = runner.invoke(app, ["threads", "--db", "/dev/null"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: cannot use '/dev/null' as the database: it is a device, not a file; "
        "choose another --db"
    ]


def test_opening_to_read_does_not_wait_for_another_process_writing(tmp_path: Path) -> None:
    db = tmp_path / "busy.sqlite"
    Store(db).close()
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process, in the middle of a long write
    writer.execute(
        "INSERT INTO chatbot_threads (thread_id, created_at, updated_at) VALUES ('w', '', '')"
    )
    listed: list[list[str]] = []

    def read() -> None:
        store = Store(db)
        listed.append([t.thread_id for t in store.list_threads()])
        store.close()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(lambda: listed, timeout=10, what="the store opened while the lock is held")
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert listed == [[]]


def test_closing_waits_for_a_statement_another_thread_is_running(tmp_path: Path) -> None:
    # The REPL leaves (and closes the database) while its loading thread may still be using
    # it; closing a SQLite connection under a running statement crashed the process.
    store = Store(tmp_path / "db.sqlite")
    saver = store.saver
    running, release = threading.Event(), threading.Event()

    def reading() -> None:
        with saver.cursor(transaction=False) as cursor:  # LangGraph's own way in
            cursor.execute("SELECT count(*) FROM checkpoints").fetchall()
            running.set()
            release.wait(10)
            cursor.execute("SELECT count(*) FROM writes").fetchall()

    reader = threading.Thread(target=reading)
    reader.start()
    assert running.wait(10)
    closer = threading.Thread(target=store.close)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive(), "close waited for the reader"
    release.set()
    reader.join(10)
    closer.join(10)
    assert not closer.is_alive()
    with pytest.raises(sqlite3.ProgrammingError):
        store.conn.execute("SELECT 1")


def test_leaving_waits_only_a_moment_for_another_threads_statement(tmp_path: Path) -> None:
    # Leaving the REPL must not wait for the loading thread: after ``wait`` seconds the
    # connection is left to the process's end, and the other thread's work is not cut short.
    store = Store(tmp_path / "db.sqlite")
    saver = store.saver
    running, release = threading.Event(), threading.Event()
    counted: list[int] = []

    def reading() -> None:
        with saver.cursor(transaction=False) as cursor:
            running.set()
            release.wait(10)
            counted.append(cursor.execute("SELECT count(*) FROM checkpoints").fetchone()[0])

    reader = threading.Thread(target=reading)
    reader.start()
    assert running.wait(10)
    store.close(wait=0.1)  # returns although the reader holds the connection
    release.set()
    reader.join(10)
    assert counted == [0], "the reader finished on the open connection"
    store.close()
