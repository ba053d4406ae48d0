"""Faults around opening a database (docs/reliability.md, "Opening a database").

Each test runs what a user runs (the CLI in-process, or ``python -m chatbot`` processes when
several start at once) against a real SQLite file or the real PostgreSQL server, and checks
the exit code, the one line on stderr and what is kept in the database.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pexpect
import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from typer.testing import Result

from chatbot.store.errors import StoreError
from chatbot.store.postgres import PgStore, open_store
from chatbot.store.schema import APPLICATION_ID, SCHEMA_VERSION
from chatbot.store.search import lagging_threads
from tests.fake_openai import FakeOpenAI
from tests.helpers import Cli, chatbots_together, echo_or_summary, ok, one_error

# --- helpers -------------------------------------------------------------------------------


def _other_apps_graph(checkpointer: Any) -> Any:
    """Another program's LangGraph app: a plain StateGraph over messages, its own saver."""

    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [("ai", "order 42 ships tomorrow")]}

    graph = StateGraph(MessagesState)
    graph.add_node("answer", answer)
    graph.add_edge(START, "answer")
    return graph.compile(checkpointer=checkpointer)


def _langgraph_sqlite(path: Path) -> None:
    """A database made by ``SqliteSaver`` for another app, with its thread ``orders-42``."""
    conn = sqlite3.connect(path, check_same_thread=False)
    app = _other_apps_graph(SqliteSaver(conn))
    app.invoke({"messages": [("user", "where is order 42?")]}, _thread("orders-42"))
    conn.close()


def _langgraph_postgres(url: str) -> None:
    """A database made by ``PostgresSaver`` for another app, with its thread ``orders-42``."""
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        app = _other_apps_graph(saver)
        app.invoke({"messages": [("user", "where is order 42?")]}, _thread("orders-42"))


def _thread(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def _postgres_contents(url: str) -> dict[str, Any]:
    """Every table of the database's schema with its rows (as text), and the schema's indexes:
    enough to see that nothing was added, changed or removed."""
    with psycopg.connect(url) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1"
            )
        ]
        contents: dict[str, Any] = {
            table: sorted(
                str(row)
                for row in conn.execute(f"SELECT * FROM {table}")  # type: ignore[arg-type]
            )
            for table in tables
        }
        contents[" indexes"] = sorted(
            row[0]
            for row in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
            )
        )
    return contents


def _damage_page_of(db: Path, table: str) -> None:
    """Overwrite the cell pointers of ``table``'s first b-tree page: SQLite then finds the
    page damaged when it reads the table (the rest of the file is intact)."""
    with sqlite3.connect(db) as conn:
        ((root,),) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,))
        ((page_size,),) = conn.execute("PRAGMA page_size")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    with db.open("r+b") as file:
        file.seek((root - 1) * page_size + 8)
        file.write(b"\xde\xad\xbe\xef" * 64)


@pytest.fixture
def chatbot_db(cli: Cli) -> Path:
    """A chatbot SQLite database with two threads, t1 and t2, one turn each."""
    cli.server.responder = echo_or_summary
    ok(cli.ask("first thread", thread="t1"))
    ok(cli.ask("second thread", thread="t2"))
    return cli.db


# --- 1. PostgreSQL: processes starting together on a new database ----------------------------


def _start(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OPENAI_"))}
    return subprocess.Popen(
        [sys.executable, "-m", "chatbot", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "CHATBOT_MODEL": "offline"},
    )


def _finish_all(processes: list[subprocess.Popen[str]], timeout: float) -> list[tuple[int, str]]:
    """Each process's exit code and stderr; the ones still running after ``timeout`` seconds
    (all counted from now) are killed and reported with code None."""
    deadline = time.monotonic() + timeout
    results: list[tuple[int, str]] = []
    for process in processes:
        try:
            _, stderr = process.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
            results.append((-999, "still running at the deadline: " + stderr[-300:]))
            continue
        results.append((process.returncode, stderr))
    return results


@pytest.mark.slow
def test_eight_processes_starting_together_on_a_new_postgresql_database_all_come_up(
    postgres_url: str, tmp_path: Path
) -> None:
    # On main all of them hung for ever: one held the set-up lock on one connection while its
    # other connection built an index CONCURRENTLY, which waited for the others' lock waits.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OPENAI_"))}
    env["CHATBOT_MODEL"] = "offline"
    vacuums = [["db", "vacuum", "--db", postgres_url]] * 8
    results = chatbots_together(tmp_path / "vacuum", *vacuums, env=env, timeout=300)
    assert [ended.returncode for ended in results] == [0] * 8, results
    with psycopg.connect(postgres_url) as conn:
        invalid = conn.execute("SELECT count(*) FROM pg_index WHERE NOT indisvalid").fetchone()
        versions = conn.execute("SELECT version FROM chatbot_schema").fetchall()
    assert invalid == (0,) and versions == [(SCHEMA_VERSION,)], "set up once"
    asks = [["ask", f"hello from {n}", "--thread", f"p{n}", "--db", postgres_url] for n in range(8)]
    results = chatbots_together(tmp_path / "ask", *asks, env=env, timeout=300)
    assert [ended.returncode for ended in results] == [0] * 8, results


@pytest.mark.slow  # (it waits out a second)
def test_waiting_for_another_process_setting_up_gives_up_saying_for_what(
    postgres_url: str,
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", (0x43686174,))  # chatbot's set-up lock
        (pid,) = other.execute("SELECT pg_backend_pid()").fetchone() or (0,)
        with pytest.raises(StoreError) as gave_up:
            PgStore(postgres_url, setup_wait=1)
    message = str(gave_up.value)
    assert message.startswith(
        "gave up after 1 s waiting for another process to finish setting up the PostgreSQL "
        f"database {postgres_url} (its server process {pid} holds the set-up lock, idle"
    )
    assert f"SELECT pg_terminate_backend({pid})" in message
    open_store(postgres_url).close()  # the lock gone, it opens


@pytest.mark.slow  # (it waits out a second)
def test_a_set_up_statement_waiting_for_another_session_gives_up_saying_so(
    postgres_url: str,
) -> None:
    # An index built CONCURRENTLY waits for every open transaction of the database to end.
    with psycopg.connect(postgres_url) as idle:
        idle.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        idle.execute("SELECT 1").fetchall()  # idle in a transaction that holds a snapshot
        with pytest.raises(StoreError) as gave_up:
            PgStore(postgres_url, setup_wait=1)
        idle.rollback()
    assert str(gave_up.value) == (
        f"setting up the PostgreSQL database {postgres_url} waited more than 1 s for other "
        "sessions (to make LangGraph's tables and indexes): one holds a lock or a transaction "
        "open (look for 'idle in transaction' in pg_stat_activity); try again once it ends"
    )
    with open_store(postgres_url) as store:  # the next start finishes the set-up
        assert store.list_threads() == []
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_index WHERE NOT indisvalid").fetchone() == (0,)


def test_an_index_build_cut_short_is_built_again_at_the_next_start(postgres_url: str) -> None:
    open_store(postgres_url).close()
    statement = (
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS checkpoints_thread_id_idx "
        "ON checkpoints(thread_id)"
    )
    with (
        psycopg.connect(postgres_url, autocommit=True) as builder,
        psycopg.connect(postgres_url) as idle,
    ):
        builder.execute("DROP INDEX checkpoints_thread_id_idx")
        idle.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        idle.execute("SELECT 1").fetchall()
        builder.execute("SET lock_timeout = 500")
        with pytest.raises(psycopg.errors.LockNotAvailable):  # as a killed round leaves it
            builder.execute(statement)  # type: ignore[arg-type]
        idle.rollback()
        valid = (
            "SELECT indisvalid FROM pg_index "
            "WHERE indexrelid = 'checkpoints_thread_id_idx'::regclass"
        )
        assert builder.execute(valid).fetchone() == (False,)  # type: ignore[arg-type]
        with open_store(postgres_url) as store:
            assert store.list_threads() == []
        assert builder.execute(valid).fetchone() == (True,)  # type: ignore[arg-type]


# --- 2. another LangGraph program's database -------------------------------------------------


_COMMANDS_THAT_TOOK_IT_OVER = (
    ("threads",),
    ("ask", "ship it", "--thread", "orders-42"),
    ("prune", "--inactive-days", "0", "--yes"),
    ("show", "orders-42"),
    ("history", "orders-42"),
    ("db", "stats"),
)


def _refused(result: Result, where: str) -> None:
    line = one_error(result, 2)
    assert line.startswith(f"error: {where!r} is another LangGraph program's ")
    assert f"'chatbot db adopt --db {where}'" in line


def test_a_langgraph_sqlite_database_is_refused_and_left_untouched(
    cli: Cli, tmp_path: Path
) -> None:
    db = tmp_path / "orders.sqlite"
    _langgraph_sqlite(db)
    before = db.read_bytes()
    for command in _COMMANDS_THAT_TOOK_IT_OVER:
        result = cli.invoke(*command, "--db", str(db))
        _refused(result, str(db))
        assert "1 thread in its tables checkpoints, writes" in result.stderr
    assert db.read_bytes() == before
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA application_id").fetchone() == (0,)
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert not {name for name in tables if name.startswith("chatbot")}


def test_a_langgraph_postgresql_database_is_refused_and_left_untouched(
    cli: Cli, postgres_url: str
) -> None:
    _langgraph_postgres(postgres_url)
    before = _postgres_contents(postgres_url)
    for command in _COMMANDS_THAT_TOOK_IT_OVER:
        _refused(cli.invoke(*command, "--db", postgres_url), postgres_url)
    assert _postgres_contents(postgres_url) == before


def test_an_empty_sqlite_file_with_another_programs_user_version_is_refused(
    cli: Cli, tmp_path: Path
) -> None:
    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 7")
    conn.close()
    before = db.read_bytes()
    for command in (("threads",), ("ask", "hi"), ("db", "adopt", "--yes")):
        line = one_error(cli.invoke(*command, "--db", str(db)), 2)
        assert "another program's" in line and "user version 7" in line
    assert db.read_bytes() == before


def test_a_postgresql_database_of_another_program_is_refused(cli: Cli, postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE invoices (id serial PRIMARY KEY, total numeric)")
    before = _postgres_contents(postgres_url)
    line = one_error(cli.invoke("ask", "hi", "--db", postgres_url), 2)
    assert line == (
        f"error: {postgres_url!r} is another program's PostgreSQL database (table invoices, no "
        "chatbot mark), so chatbot leaves it untouched: choose another --db (a database of its "
        "own, or a schema of its own in this one: CREATE SCHEMA chatbot, then --db "
        f"{postgres_url}?options=-csearch_path%3Dchatbot)"
    )
    one_error(cli.invoke("db", "adopt", "--yes", "--db", postgres_url), 2)
    assert _postgres_contents(postgres_url) == before


def test_the_schema_advice_adds_to_the_urls_own_query_and_works(
    cli: Cli, openai_server: FakeOpenAI, postgres_url: str
) -> None:
    # On main the advice said '?options=...' whatever the URL: appended to a URL that had a
    # query already, it became part of the last parameter's value.
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE invoices (id serial PRIMARY KEY, total numeric)")
    url = postgres_url.replace("postgres@", "postgres:hunter2@") + "?sslmode=disable"
    shown = url.replace(":hunter2@", ":***@")
    line = one_error(cli.invoke("threads", "--db", url), 2)
    assert line.endswith(
        f"(a database of its own, or a schema of its own in this one: CREATE SCHEMA chatbot, "
        f"then --db {shown}&options=-csearch_path%3Dchatbot)"
    )
    assert "hunter2" not in line
    with_options = f"{postgres_url}?options=-cstatement_timeout%3D0"  # (options of its own)
    assert one_error(cli.invoke("threads", "--db", with_options), 2).endswith(
        "(a database of its own, or a schema of its own in this one (CREATE SCHEMA chatbot, "
        "then put -csearch_path=chatbot in the URL's options))"
    )
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE SCHEMA chatbot")
    in_schema = url + "&options=-csearch_path%3Dchatbot"  # what it said, with the password
    openai_server.script("hello to you")
    ok(cli.invoke("ask", "hello", "--thread", "t1", "--db", in_schema))
    listed = ok(cli.invoke("threads", "--json", "--db", in_schema))
    assert [row["thread_id"] for row in json.loads(listed.stdout)] == ["t1"]


def test_a_url_naming_a_schema_that_does_not_exist_says_how_to_make_it(
    cli: Cli, postgres_url: str
) -> None:
    # On main: "cannot use the PostgreSQL database …: no schema has been selected to create
    # in", PostgreSQL's own words, for writing commands.
    url = f"{postgres_url}?options=-csearch_path%3Dchatbot"
    expected = (
        "error: the schema 'chatbot' that the search_path names does not exist in the "
        f"PostgreSQL database {url}: create it (CREATE SCHEMA chatbot), or name another in the "
        "URL's options"
    )
    for command in (("ask", "hi"), ("threads",), ("db", "adopt", "--yes")):
        assert one_error(cli.invoke(*command, "--db", url), 2) == expected, command
    assert _postgres_relations(postgres_url) == []


def test_a_shared_postgresql_database_takes_chatbot_in_a_schema_of_its_own(
    cli: Cli, openai_server: FakeOpenAI, postgres_url: str
) -> None:
    """What the refusal suggests works: chatbot's and LangGraph's tables go in the schema the
    URL's search_path names, and the other program's tables are left as they were."""
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE invoices (id serial PRIMARY KEY, total numeric)")
        conn.execute("INSERT INTO invoices (total) VALUES (42)")
        conn.execute("CREATE SCHEMA chatbot")
    in_schema = f"{postgres_url}?options=-csearch_path%3Dchatbot"
    openai_server.script("hello to you")
    assert cli.invoke("ask", "hello", "--thread", "t1", "--db", in_schema).exit_code == 0
    listed = cli.invoke("threads", "--db", in_schema)
    assert listed.exit_code == 0 and "t1" in listed.stdout
    with psycopg.connect(postgres_url) as conn:
        tables = {
            (schema, name)
            for schema, name in conn.execute(
                "SELECT table_schema, table_name FROM information_schema.tables "
                "WHERE table_schema IN ('public', 'chatbot')"
            )
        }
        assert ("public", "invoices") in tables and ("chatbot", "checkpoints") in tables
        assert {name for schema, name in tables if schema == "public"} == {"invoices"}
        assert conn.execute("SELECT total FROM invoices").fetchall() == [(42,)]


def test_db_adopt_asks_then_takes_a_langgraph_sqlite_database_on_purpose(
    cli: Cli, tmp_path: Path
) -> None:
    db = tmp_path / "orders.sqlite"
    _langgraph_sqlite(db)
    before = db.read_bytes()
    line = one_error(cli.invoke("db", "adopt", "--db", str(db)), 2)  # no terminal to ask on
    assert (
        line
        == f"error: adopting {str(db)!r} needs confirmation: add --yes (or run it in a terminal)"
    )
    assert db.read_bytes() == before

    result = ok(cli.invoke("db", "adopt", "--yes", "--db", str(db)))
    said = result.stderr.strip().splitlines()
    assert said[0].startswith(f"{db} is another LangGraph program's database: 1 thread in its")
    assert said[-1] == f"adopted {db} (1 thread listed): 'chatbot threads --db {db}' lists them"
    listed = ok(cli.invoke("threads", "--json", "--db", str(db)))
    (row,) = json.loads(listed.stdout)
    assert row["thread_id"] == "orders-42"
    assert (row["title"], row["messages"]) == ("where is order 42?", 2), "listed as chatbot's"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
    conn.close()
    again = ok(cli.invoke("db", "adopt", "--db", str(db)))
    assert again.stderr.strip() == f"{db} is already a chatbot database: nothing to do"
    cli.server.responder = echo_or_summary
    ok(cli.invoke("ask", "and order 43?", "--thread", "orders-42", "--db", str(db)))
    shown = ok(cli.invoke("show", "orders-42", "--json", "--db", str(db)))
    said = [m["content"] for m in json.loads(shown.stdout)["messages"]]
    assert said == [
        "where is order 42?",
        "order 42 ships tomorrow",
        "and order 43?",
        "echo: and order 43?",
    ]


def test_db_adopt_takes_a_langgraph_postgresql_database(cli: Cli, postgres_url: str) -> None:
    _langgraph_postgres(postgres_url)
    ok(cli.invoke("db", "adopt", "--yes", "--db", postgres_url))
    listed = ok(cli.invoke("threads", "--json", "--db", postgres_url))
    (row,) = json.loads(listed.stdout)
    assert (row["thread_id"], row["title"], row["messages"]) == (
        "orders-42",
        "where is order 42?",
        2,
    )


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_an_adopted_database_stays_readable_by_the_program_it_came_from(
    cli: Cli, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """chatbot compresses the checkpoints it writes, which a LangGraph program without its
    serializer cannot read: where it shares the database with one (adopted), it writes them
    as LangGraph does, in its thread and in chatbot's own."""
    if kind == "sqlite":
        db = str(tmp_path / "orders.sqlite")
        _langgraph_sqlite(Path(db))
    else:
        db = request.getfixturevalue("postgres_url")
        _langgraph_postgres(db)
    ok(cli.invoke("db", "adopt", "--yes", "--db", db))
    cli.server.responder = echo_or_summary
    long = "and order 43, with the long list of what it holds: " + "a widget, " * 80
    ok(cli.invoke("ask", long, "--thread", "orders-42", "--db", db))
    ok(cli.invoke("ask", "a thread of chatbot's own " * 40, "--thread", "mine", "--db", db))

    said = {"orders-42": long, "mine": "a thread of chatbot's own " * 40}
    for thread, last in said.items():  # the other program reads every checkpoint, its way
        if kind == "sqlite":
            with sqlite3.connect(db, check_same_thread=False) as conn:
                saved = list(SqliteSaver(conn).list(_thread(thread)))
                state = _other_apps_graph(SqliteSaver(conn)).get_state(_thread(thread))
            conn.close()
        else:
            with PostgresSaver.from_conn_string(db) as saver:
                saved = list(saver.list(_thread(thread)))
                state = _other_apps_graph(saver).get_state(_thread(thread))
        assert len(saved) >= 3, thread
        messages = [(m.type, m.content) for m in state.values["messages"]]
        assert messages[-2:] == [("human", last), ("ai", f"echo: {last}")], thread
        if thread == "orders-42":
            assert messages[:2] == [
                ("human", "where is order 42?"),
                ("ai", "order 42 ships tomorrow"),
            ]


def test_a_thread_copied_into_an_adopted_database_goes_on_there(cli: Cli, tmp_path: Path) -> None:
    """A thread copied into an adopted database from one of chatbot's own (its values
    compressed there) takes turns there, and the program the database came from reads it."""
    mine, adopted = str(tmp_path / "mine.sqlite"), tmp_path / "orders.sqlite"
    _langgraph_sqlite(adopted)
    ok(cli.invoke("db", "adopt", "--yes", "--db", str(adopted)))
    cli.server.responder = echo_or_summary
    for n in range(3):
        ok(cli.invoke("ask", f"turn {n} of my own", "--thread", "mine", "--db", mine))
    ok(cli.invoke("db", "copy", mine, str(adopted), "--thread", "mine"))
    ok(cli.invoke("ask", "and one more there", "--thread", "mine", "--db", str(adopted)))
    shown = json.loads(ok(cli.invoke("show", "mine", "--json", "--db", str(adopted))).stdout)
    assert [m["content"] for m in shown["messages"] if m["type"] == "human"][-2:] == [
        "turn 2 of my own",
        "and one more there",
    ]
    with sqlite3.connect(adopted) as conn:  # (LangGraph's own saver, without chatbot's)
        saved = list(SqliteSaver(conn).list(_thread("mine")))
        kinds = {
            row[0]
            for row in conn.execute(
                "SELECT type FROM checkpoints WHERE thread_id = 'mine' "
                "UNION SELECT type FROM writes WHERE thread_id = 'mine'"
            )
        }
        ((count,),) = conn.execute("SELECT COUNT(*) FROM checkpoints WHERE thread_id = 'mine'")
    conn.close()
    assert len(saved) == count > 3
    assert not any(kind.endswith("+zstd") for kind in kinds), kinds


@pytest.mark.slow
def test_db_adopt_in_a_terminal_asks_first_and_no_keeps_it_untouched(tmp_path: Path) -> None:
    db = tmp_path / "orders.sqlite"
    _langgraph_sqlite(db)
    before = db.read_bytes()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OPENAI_"))}
    for answer, code in (("n", 1), ("y", 0)):
        child = pexpect.spawn(
            sys.executable,
            ["-m", "chatbot", "db", "adopt", "--db", str(db)],
            env=env,
            encoding="utf-8",
            timeout=60,
        )
        child.expect(r"Adopt it\? \[y/N\]: ")
        assert "chatbot's tables (chatbot_threads" in (child.before or "")
        child.sendline(answer)
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == code, child.before
        if answer == "n":
            assert "left " in (child.before or "") and db.read_bytes() == before
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
    conn.close()


# --- 5. a damaged SQLite file ----------------------------------------------------------------


def _damaged_line(result: Result, db: Path) -> str:
    line = one_error(result, 2)
    assert line.startswith(f"error: the database {str(db)!r} is damaged (")
    assert f"'sqlite3 {db} .recover | sqlite3 recovered.sqlite'" in line
    assert "'chatbot db copy BACKUP NEW.sqlite'" in line
    return line


def test_reading_a_damaged_database_is_one_line_and_writes_nothing(
    cli: Cli, chatbot_db: Path
) -> None:
    _damage_page_of(chatbot_db, "chatbot_threads")
    _damage_page_of(chatbot_db, "checkpoints")
    before = chatbot_db.read_bytes()
    line = _damaged_line(cli.invoke("threads", "--db", str(chatbot_db)), chatbot_db)
    assert "(database disk image is malformed)" in line
    for command in (("threads", "--json"), ("show", "t1"), ("history", "t1"), ("export", "t1")):
        _damaged_line(cli.invoke(*command, "--db", str(chatbot_db)), chatbot_db)
    assert chatbot_db.read_bytes() == before
    _damaged_line(cli.invoke("ask", "hi", "--thread", "t1", "--db", str(chatbot_db)), chatbot_db)


def _cut_short(db: Path, octets: int) -> None:
    """Cut the last ``octets`` off the file, its write-ahead log folded in first: a copy or a
    disk that stopped short."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    with db.open("r+b") as file:
        file.truncate(db.stat().st_size - octets)


def test_a_database_cut_short_is_read_as_far_as_it_goes_and_never_written(
    cli: Cli, chatbot_db: Path
) -> None:
    _cut_short(chatbot_db, 1000)
    before = chatbot_db.read_bytes()
    listed = cli.invoke("threads", "--json", "--db", str(chatbot_db))
    assert listed.exit_code in (0, 2) and "Traceback" not in listed.output, listed.output
    writing = (
        ("ask", "hi", "--thread", "t1"),
        ("fork", "t1", "--to", "t3"),
        ("db", "vacuum"),
        ("delete", "t2", "--yes"),
    )
    for command in writing:
        line = _damaged_line(cli.invoke(*command, "--db", str(chatbot_db)), chatbot_db)
        assert "are not a whole number of pages" in line, line
        assert chatbot_db.read_bytes() == before, command
    assert sorted(p.name for p in chatbot_db.parent.iterdir()) == ["chatbot.sqlite"]


def test_reading_commands_never_write_to_a_database_whose_search_index_page_is_damaged(
    cli: Cli, chatbot_db: Path
) -> None:
    """``chatbot_indexed`` says how far each thread is indexed: read back short from a damaged
    page, every thread would look unindexed, and a search would index them all again, writing
    into the damaged file. Reading commands write nothing; a turn says the file is damaged."""
    _damage_page_of(chatbot_db, "chatbot_indexed")
    before = chatbot_db.read_bytes()
    reading = (
        ("threads",),
        ("show", "t1"),
        ("history", "t1"),
        ("db", "stats"),
        ("search", "first"),
    )
    for command in reading:
        result = cli.invoke(*command, "--db", str(chatbot_db))
        assert result.exit_code in (0, 2) and "Traceback" not in result.output, result.output
        if result.exit_code == 2:
            _damaged_line(result, chatbot_db)
        assert chatbot_db.read_bytes() == before, command
    _damaged_line(cli.invoke("ask", "hi", "--thread", "t1", "--db", str(chatbot_db)), chatbot_db)


def test_reading_commands_open_read_only(cli: Cli, chatbot_db: Path) -> None:
    immutable = subprocess.run(["chattr", "+i", str(chatbot_db)], capture_output=True, check=False)
    if immutable.returncode != 0:
        os.chmod(chatbot_db, 0o400)
        if os.geteuid() == 0:
            pytest.skip("as root, only chattr makes a file read-only, and it is not available")
    try:
        db = str(chatbot_db)
        assert '"thread_id": "t1"' in ok(cli.invoke("threads", "--json", "--db", db)).stdout
        for command in (("show", "t1"), ("history", "t1"), ("export", "t1"), ("db", "stats")):
            ok(cli.invoke(*command, "--db", db))
        found = ok(cli.invoke("search", "first", "--json", "--db", db))
        assert [hit["thread_id"] for hit in json.loads(found.stdout)] == ["t1", "t1"]
        line = one_error(cli.invoke("ask", "hi", "--db", db), 2)
        assert "is read-only: check its permissions" in line
    finally:
        subprocess.run(["chattr", "-i", str(chatbot_db)], capture_output=True, check=False)
        os.chmod(chatbot_db, 0o600)


def test_a_database_in_a_read_only_folder_is_read_and_writing_says_it_is_read_only(
    cli: Cli, chatbot_db: Path
) -> None:
    # On main every command failed: "cannot open the database …: unable to open database
    # file", SQLite unable to make the -shm file a WAL database's readers share.
    folder = chatbot_db.parent
    assert sorted(p.name for p in folder.iterdir()) == ["chatbot.sqlite"], "no -wal, no -shm"
    before = chatbot_db.read_bytes()
    immutable = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
    if immutable.returncode != 0:
        os.chmod(folder, 0o500)
        if os.geteuid() == 0:
            pytest.skip("as root, only chattr makes a folder read-only, and it is not available")
    try:
        db = str(chatbot_db)
        listed = ok(cli.invoke("threads", "--json", "--db", db))
        assert {row["thread_id"] for row in json.loads(listed.stdout)} == {"t1", "t2"}
        shown = ok(cli.invoke("show", "t1", "--json", "--db", db))
        assert "first thread" in [m["content"] for m in json.loads(shown.stdout)["messages"]]
        for command in (("history", "t1"), ("export", "t1"), ("db", "stats")):
            ok(cli.invoke(*command, "--db", db))
        found = ok(cli.invoke("search", "second", "--json", "--db", db))
        assert {hit["thread_id"] for hit in json.loads(found.stdout)} == {"t2"}
        writing = (("ask", "hi", "--thread", "t1"), ("delete", "t2", "--yes"), ("db", "adopt"))
        for command in writing:
            line = one_error(cli.invoke(*command, "--db", db), 2)
            assert line == f"error: the database {db!r} is read-only: check its permissions, " + (
                "or use --db for another file"
            )
        assert sorted(p.name for p in folder.iterdir()) == ["chatbot.sqlite"]
    finally:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True, check=False)
        os.chmod(folder, 0o700)
    assert chatbot_db.read_bytes() == before


def _as_nobody(cli: Cli, folder: Path, *args: str) -> tuple[int, str]:
    """``chatbot ARGS`` run as the user ``nobody``, in a forked child of this process (its
    interpreter lives under root's home, which nobody cannot enter, so a new process could
    not start), with its settings and data folders in ``folder``. Its exit code and output."""
    import pwd

    user = pwd.getpwnam("nobody")
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become nobody, run, report, and never return into pytest
        os.close(readable)
        try:
            os.chdir(folder)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            places = {f"XDG_{kind}_HOME": str(folder) for kind in ("CONFIG", "DATA", "CACHE")}
            result = cli.invoke(*args, **places)
            os.write(writable, json.dumps([result.exit_code, result.output]).encode())
        finally:
            os._exit(0)
    os.close(writable)
    with os.fdopen(readable, "rb") as reported:
        data = reported.read()
    os.waitpid(pid, 0)
    assert data, "the child run as nobody reported nothing"
    code, output = json.loads(data)
    return int(code), str(output)


def test_a_database_in_a_read_only_folder_is_read_by_a_user_other_than_root(
    cli: Cli, chatbot_db: Path
) -> None:
    """To a user who is not root, SQLite says a read-only folder is read-only (not that it
    cannot open the file): that too is read as the unchanging file it is."""
    if os.geteuid() != 0:
        pytest.skip("runs the command as the user nobody, which only root can become")
    # (a folder of its own: pytest's temporary folders are closed to other users)
    folder = Path(tempfile.mkdtemp(prefix="chatbot-read-only-"))
    try:
        db = folder / "chatbot.sqlite"
        shutil.copy(chatbot_db, db)
        os.chmod(db, 0o644)
        os.chmod(folder, 0o555)
        code, output = _as_nobody(cli, folder, "threads", "--json", "--db", str(db))
        assert code == 0, output
        assert {row["thread_id"] for row in json.loads(output)} == {"t1", "t2"}
        code, output = _as_nobody(cli, folder, "show", "t1", "--json", "--db", str(db))
        assert code == 0, output
        assert "first thread" in [m["content"] for m in json.loads(output)["messages"]]
        code, output = _as_nobody(cli, folder, "ask", "hi", "--thread", "t1", "--db", str(db))
        assert (code, output.strip()) == (
            2,
            f"error: the database {str(db)!r} is read-only: check its permissions, "
            "or use --db for another file",
        )
        assert sorted(p.name for p in folder.iterdir()) == ["chatbot.sqlite"]
    finally:
        os.chmod(folder, 0o700)
        shutil.rmtree(folder)


# --- 13. settings that are no database, a newer or an older chatbot's database ----------------


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (
            "mysql://x",
            "chatbot keeps threads in a SQLite file or in PostgreSQL, not in mysql://: give a "
            "file's path or a postgresql:// URL",
        ),
        ("sqlite:///x", "give the SQLite file's path itself ('x'), not a URL"),
        ("file:x?mode=ro", "give the SQLite file's path itself ('x'), not a file: URI"),
    ],
)
def test_a_database_setting_that_is_no_path_is_refused_and_creates_nothing(
    cli: Cli, tmp_path: Path, value: str, reason: str
) -> None:
    before = sorted(p.name for p in tmp_path.iterdir())
    for command in (("threads",), ("ask", "hi"), ("show", "t1")):
        line = one_error(cli.invoke(*command, CHATBOT_DB=value), 2)
        assert line == f"error: CHATBOT_DB={value!r} is not valid: {reason}"
    line = one_error(cli.invoke("threads", "--db", value), 2)
    assert line == f"error: CHATBOT_DB={value!r} is not valid: {reason}"
    one_error(cli.invoke("db", "copy", str(tmp_path / "missing.sqlite"), value), 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    with pytest.raises(StoreError, match=re.escape(f"cannot use {value!r} as the database: ")):
        open_store(value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "it is blank"),
        (" ", "it is blank"),
        ("chat\nlog.sqlite", "it holds a control character (U+000A)"),
        ("\x1b[31mred.sqlite", "it holds a control character (U+001B)"),
        ("postgresql://postgres@127.0.0.1/db\n", "it holds a control character (U+000A)"),
    ],
)
@pytest.mark.slow
def test_a_blank_database_path_or_one_with_control_characters_is_refused(
    cli: Cli, tmp_path: Path, value: str, reason: str
) -> None:
    # On main a blank --db or CHATBOT_DB was the default database, and `ask` wrote its turn
    # there; a newline or an escape became part of a file's name.
    expected = f"error: CHATBOT_DB={value!r} is not valid: {reason}"
    for command in (("threads",), ("ask", "hi"), ("show", "t1"), ("search", "hi"), ("db", "stats")):
        assert one_error(cli.invoke(*command, "--db", value), 2).startswith(expected), command
        assert one_error(cli.invoke(*command, CHATBOT_DB=value), 2).startswith(expected), command
    assert one_error(cli.invoke("--db", value, "threads"), 2).startswith(expected)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OPENAI_"))}
    for args, extra in ((["threads", "--db", value], {}), (["threads"], {"CHATBOT_DB": value})):
        done = subprocess.run(  # (through the entry point: chatbot.cli.main)
            [sys.executable, "-m", "chatbot", *args],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (done.returncode, done.stderr.startswith(expected)) == (2, True), done.stderr
    made = [path.relative_to(tmp_path) for path in tmp_path.rglob("*")]
    assert made == [Path("data")], "nothing made, in the default place (data/) either"


def test_a_blank_database_line_in_a_settings_file_is_still_unset(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("CHATBOT_DB=\n", encoding="utf-8")
    cli.server.responder = echo_or_summary
    ok(cli.invoke("ask", "hi", "--thread", "t1"))
    assert (tmp_path / "data" / "chatbot" / "chatbot.sqlite").is_file()


def _newer_schema(db: str, version: int) -> None:
    """What a newer chatbot leaves: its schema's version, which this one does not know."""
    if db.startswith("postgresql://"):
        with psycopg.connect(db) as conn:
            conn.execute("UPDATE chatbot_schema SET version = %s", (version,))
        return
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {version}")
    conn.close()


@pytest.fixture
def any_chatbot_db(cli: Cli, any_db: str) -> str:
    cli.server.responder = echo_or_summary
    ok(cli.invoke("ask", "hello", "--thread", "t1", "--db", any_db))
    return any_db


def test_a_newer_chatbots_database_is_read_with_a_note_and_not_written(
    cli: Cli, any_chatbot_db: str
) -> None:
    db = any_chatbot_db
    newer, known = SCHEMA_VERSION + 3, SCHEMA_VERSION
    _newer_schema(db, newer)
    said = (
        f"{db!r} was written by a newer chatbot (its schema is at version {newer}; this one "
        f"knows up to {known})"
    )
    listed = ok(cli.invoke("threads", "--json", "--db", db))
    assert '"thread_id": "t1"' in listed.stdout
    assert listed.stderr.strip() == f"note: {said}: reading only; upgrade chatbot to write to it"
    line = one_error(cli.invoke("ask", "more", "--thread", "t1", "--db", db), 2)
    assert line == (
        f"error: {said}, so this one does not write to it: upgrade chatbot (reading commands "
        "still work)"
    )
    shown = ok(cli.invoke("show", "t1", "--json", "--db", db))
    assert '"more"' not in shown.stdout


_OLDER_MIGRATIONS = (
    "CREATE TABLE chatbot_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)",
    "INSERT INTO chatbot_migrations (version, applied_at) VALUES (1, '2025-01-01'), "
    "(2, '2025-01-01')",
    "CREATE TABLE chatbot_threads (thread_id TEXT PRIMARY KEY, title TEXT NOT NULL DEFAULT '')",
    "INSERT INTO chatbot_threads (thread_id, title) VALUES ('garden', 'my allotment')",
)
"""Tables of a database a development build of chatbot made before 0.1.0, as it made them."""


def _made_by_an_older_chatbot(db: str) -> list[str]:
    """Databases as a development build of chatbot made them: on PostgreSQL, LangGraph's
    tables with its ``chatbot_migrations`` and ``chatbot_threads``; a SQLite file marked as
    chatbot's (``application_id``) at ``user_version`` 0 with those tables, and one made
    before the mark, holding ``chatbot_threads`` unmarked. Returns them."""
    if db.startswith("postgresql://"):
        with PostgresSaver.from_conn_string(db) as saver:
            saver.setup()
        with psycopg.connect(db) as conn:
            for statement in _OLDER_MIGRATIONS:
                conn.execute(statement)  # type: ignore[arg-type]
        return [db]
    marked, unmarked = db, str(Path(db).with_name("before-the-mark.sqlite"))
    for path, statements in ((marked, _OLDER_MIGRATIONS), (unmarked, _OLDER_MIGRATIONS[2:])):
        with sqlite3.connect(path, check_same_thread=False) as conn:
            SqliteSaver(conn).setup()
            if path == marked:
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            for statement in statements:
                conn.execute(statement)
        conn.close()
    with sqlite3.connect(marked) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (0,)
    conn.close()
    return [marked, unmarked]


def test_a_database_a_development_build_made_is_refused_saying_to_export_and_import(
    cli: Cli, any_db: str
) -> None:
    """Its checkpoints are in a layout this version does not read: every command says in one
    line how to bring its threads over, and the database is left as it was."""
    for db in _made_by_an_older_chatbot(any_db):
        before = _contents(db)
        for command in (("threads",), ("ask", "hello", "--thread", "garden"), ("show", "garden")):
            result = cli.invoke(*command, "--db", db)
            assert result.exit_code in (1, 2), (command, result.output)
            line = one_error(result, result.exit_code)
            assert f"{db!r} was written by a development build of chatbot" in line, command
            assert "'chatbot export " in line and "'chatbot import " in line, line
        assert _contents(db) == before, db


@pytest.mark.slow
def test_a_database_a_development_build_made_is_refused_by_the_console_script_too(
    any_db: str,
) -> None:
    """The fast ``chatbot threads`` process says it in one line as well."""
    for db in _made_by_an_older_chatbot(any_db):
        before = _contents(db)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OPENAI_"))}
        done = subprocess.run(
            [sys.executable, "-m", "chatbot", "threads", "--db", db],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        (line,) = done.stderr.strip().splitlines()
        assert done.returncode in (1, 2) and line.startswith("error: "), done.stderr
        assert "'chatbot export " in line and "'chatbot import " in line, line
        assert _contents(db) == before, db


# --- 14. reading a database that holds nothing yet --------------------------------------------


def _postgres_relations(url: str) -> list[tuple[str, str]]:
    """Every table, view, sequence and index outside PostgreSQL's own schemas, and every
    extension but plpgsql: what a set-up would have made."""
    with psycopg.connect(url) as conn:
        relations = conn.execute(
            "SELECT n.nspname, c.relname FROM pg_class AS c JOIN pg_namespace AS n "
            "ON n.oid = c.relnamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname NOT LIKE 'pg_toast%' ORDER BY 1, 2"
        ).fetchall()
        extensions = conn.execute(
            "SELECT 'extension', extname FROM pg_extension WHERE extname <> 'plpgsql'"
        ).fetchall()
    return [*relations, *extensions]


@pytest.fixture(params=["sqlite", "postgres"])
def empty_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database that holds nothing: an empty SQLite file, a PostgreSQL database just made
    (``CREATE DATABASE``, no table), its URL with a password (trust auth ignores it)."""
    if request.param == "sqlite":
        (tmp_path / "empty").mkdir()  # (a folder of its own: nothing may be made beside it)
        (tmp_path / "empty" / "empty.sqlite").touch()
        return str(tmp_path / "empty" / "empty.sqlite")
    url: str = request.getfixturevalue("postgres_url")
    return url.replace("postgres@", "postgres:hunter2@")


def test_reading_commands_on_an_empty_database_create_nothing(cli: Cli, empty_db: str) -> None:
    # On main they set it up: nine tables and pg_trgm on PostgreSQL, the schema in the file.
    shown = empty_db.replace(":hunter2@", ":***@")
    listed = ok(cli.invoke("threads", "--db", empty_db))
    assert listed.stderr.strip() == f"no threads in {shown}"
    assert ok(cli.invoke("threads", "--json", "--db", empty_db)).stdout.strip() == "[]"
    for command in (("history", "t1"), ("show", "t1"), ("export", "t1")):
        line = one_error(cli.invoke(*command, "--db", empty_db))
        assert line == f"error: no thread 't1': {shown} is empty", command
    stats = ok(cli.invoke("db", "stats", "--db", empty_db))
    assert stats.stderr.strip() == f"{shown} is empty: nothing to do"
    found = ok(cli.invoke("search", "anything", "--db", empty_db))
    assert found.stderr.strip() == f"nothing found for 'anything' in {shown}"
    if empty_db.startswith("postgresql://"):
        assert _postgres_relations(empty_db) == []
    else:
        assert sorted(p.name for p in Path(empty_db).parent.iterdir()) == ["empty.sqlite"]
        assert Path(empty_db).stat().st_size == 0
    cli.server.responder = echo_or_summary
    ok(cli.invoke("ask", "hello", "--thread", "t1", "--db", empty_db))  # writing sets it up
    assert '"thread_id": "t1"' in ok(cli.invoke("threads", "--json", "--db", empty_db)).stdout


def _contents(db: str) -> Any:
    """What a database holds: on PostgreSQL every table's rows and the indexes, a SQLite
    file's bytes and its write-ahead log's (the time it was last changed aside)."""
    if db.startswith("postgresql://"):
        return _postgres_contents(db)
    wal = Path(db + "-wal")
    return [
        hashlib.sha256(Path(db).read_bytes()).hexdigest(),
        hashlib.sha256(wal.read_bytes() if wal.exists() else b"").hexdigest(),
    ]


def test_search_writes_nothing_and_a_new_database_is_indexed_from_the_start(
    cli: Cli, any_db: str
) -> None:
    """A turn indexes its messages as it ends, on a database it has just made: a search after
    it finds them in the index, with nothing left to index, and writes nothing."""
    cli.server.responder = echo_or_summary
    ok(cli.invoke("ask", "the okapi sleeps", "--thread", "t1", "--db", any_db))
    with open_store(any_db) as store:
        assert lagging_threads(store) == []
        assert store.query("SELECT COUNT(*) FROM chatbot_messages") == [(2,)]
    before = _contents(any_db)
    for _ in range(2):
        found = ok(cli.invoke("search", "okapi", "--json", "--db", any_db))
        hits = [(hit["role"], hit["snippet"]) for hit in json.loads(found.stdout)]
        assert hits == [("assistant", "echo: the okapi sleeps"), ("user", "the okapi sleeps")]
        assert found.stderr == ""
        assert _contents(any_db) == before


# --- the campaign script ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.integration
def test_the_campaign_counts_every_round(tmp_path: Path) -> None:
    report = tmp_path / "campaign.json"
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve().parent.parent / "benchmarks" / "campaign.py"),
            # (the fewest that still count: more than one kill, processes starting together)
            *("--kills", "2", "--starts", "1", "--processes", "2", "--only", "sqlite"),
            *("--copies", "1", "--copy-threads", "3"),
            *("--json", str(report)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith("kill -9 of chatbot ask, SQLite: 2 of 2 intact (")
    assert lines[2].startswith(
        "db copy of 3 threads killed with kill -9, then run again, SQLite: 1 of 1 read the same ("
    )
    assert lines[3:] == [
        "2 processes starting together on a new database, SQLite: 1 of 1 all up",
        "2 processes starting after kill -9 mid-set-up, SQLite: 1 of 1 all up",
    ]
    counts = json.loads(report.read_text())["counts"]
    assert [(c["rounds"], c["held"], c["failures"]) for c in counts] == [
        (2, 2, []),
        (1, 1, []),
        (1, 1, []),
        (1, 1, []),
    ]
