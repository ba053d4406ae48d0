"""`chatbot db copy SRC DST`: threads move between SQLite and PostgreSQL with their whole
history, and history reads the same on both sides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.history.lineage import last_turn
from chatbot.store.copying import CopyError, plan_copy, run_copy
from chatbot.store.postgres import open_store
from chatbot.threads.backend import LocalBackend
from tests.helpers import slow_on_postgres
from tests.scripted import ScriptedChatModel
from tests.test_cli import invoke


def _rich_thread(db: str) -> None:
    """Two threads with folds, an undo, a regenerating retry, a fork and a failed last turn
    (which leaves pending writes behind)."""
    settings = Settings(_env_file=None, summary_trigger="messages:6", summary_keep="messages:2")  # type: ignore[call-arg]
    chat = ScriptedChatModel(script=["a1", "b1", "c1", "d1", "e1", "e2", RuntimeError("down")])
    with open_store(db) as store:
        graph = build_graph(chat, ScriptedChatModel(default="SUMMARY"), settings, store.saver)
        backend = LocalBackend(graph, store)
        for text in ("a", "b", "c", "d"):
            list(backend.send("work", text))
        turn = last_turn(backend.history("work"))
        assert turn is not None and turn.before is not None
        backend.restore("work", turn.before.checkpoint_id, "undo")
        list(backend.send("work", "e"))
        list(backend.regenerate("work"))
        backend.fork("work", None, "work-fork1")
        with pytest.raises(Exception, match="down"):
            list(backend.send("work", "f"))


def _views(db: str, thread: str) -> list[object]:
    return [
        json.loads(invoke(*args, thread, "--json", "--db", db).stdout)
        for args in (["history"], ["history", "--all", "--limit", "500"], ["show"])
    ]


def test_a_round_trip_keeps_every_checkpoint(postgres_url: str, tmp_path: Path) -> None:
    first, back = str(tmp_path / "first.sqlite"), str(tmp_path / "back.sqlite")
    _rich_thread(first)
    to_pg = invoke("db", "copy", first, postgres_url)
    assert to_pg.exit_code == 0, to_pg.output
    assert "copied 2 threads" in to_pg.stderr
    assert invoke("db", "copy", postgres_url, back).exit_code == 0
    for thread in ("work", "work-fork1"):
        original = _views(first, thread)
        assert _views(postgres_url, thread) == original
        assert _views(back, thread) == original
    listing = [json.loads(invoke("threads", "--json", "--db", db).stdout) for db in (first, back)]
    assert listing[0] == listing[1], "titles, counts, origins and times come along"
    with open_store(first) as a, open_store(postgres_url) as b:
        writes = 0
        for thread in ("work", "work-fork1"):
            left = list(a.saver.list({"configurable": {"thread_id": thread}}))
            right = list(b.saver.list({"configurable": {"thread_id": thread}}))
            assert [t.checkpoint["id"] for t in left] == [t.checkpoint["id"] for t in right]
            assert [t.metadata for t in left] == [t.metadata for t in right]
            assert [sorted(map(str, t.pending_writes or [])) for t in left] == [
                sorted(map(str, t.pending_writes or [])) for t in right
            ]
            writes += sum(len(t.pending_writes or []) for t in right)
        assert writes, "pending writes (the failed turn's among them) are copied too"
    chat = invoke("chat", "--thread", "work", "--db", postgres_url, input="/retry\n")
    assert chat.exit_code == 0, chat.output
    assert 'You said: "f"' in chat.stdout, "the copied thread's unfinished turn is resumed"


def test_copying_again_copies_only_what_is_new(any_db: str, tmp_path: Path) -> None:
    source = str(tmp_path / "source.sqlite")
    _rich_thread(source)
    assert invoke("db", "copy", source, any_db, "-t", "work").exit_code == 0
    again = invoke("db", "copy", source, any_db, "-t", "work")
    assert again.exit_code == 0 and "1 already there with the same history" in again.stderr
    assert "copied 0 threads (0 checkpoints)" in again.stderr, "counts in agreement"
    invoke("ask", "more", "--thread", "work", "--db", source)
    more = invoke("db", "copy", source, any_db)
    assert more.exit_code == 0 and "copied 2 threads" in more.stderr, more.output
    assert _views(any_db, "work") == _views(source, "work")


def test_the_users_memories_and_each_threads_record_come_along(any_db: str, tmp_path: Path) -> None:
    """The memories live in LangGraph's store beside the threads: a copy brings them, and
    each thread's own record (memory off for it); copying again adds nothing and keeps what
    the target changed since."""
    from chatbot.threads.reading import LocalReader

    source = str(tmp_path / "source.sqlite")
    _rich_thread(source)
    with open_store(source) as store:
        book = LocalReader(store).memory_book()
        rust = book.add("Writes Rust", "work")
        book.add("Allergic to peanuts", "work-fork1")
        book.set_thread("work-fork1", on=False)
    copied = invoke("db", "copy", source, any_db)
    assert copied.exit_code == 0, copied.output
    with open_store(any_db) as store:
        book = LocalReader(store).memory_book()
        assert [m.text for m in book.all()] == ["Writes Rust", "Allergic to peanuts"]
        assert [m.thread_id for m in book.all()] == ["work", "work-fork1"]
        assert book.thread_on("work") and not book.thread_on("work-fork1")
        book.edit(rust.id, "Writes Rust and Go")
    again = invoke("db", "copy", source, any_db)
    assert again.exit_code == 0, again.output
    with open_store(any_db) as store:
        texts = [m.text for m in LocalReader(store).memory_book().all()]
        assert texts == ["Writes Rust and Go", "Allergic to peanuts"]


def test_a_thread_with_another_history_is_refused_and_nothing_written(
    any_db: str, tmp_path: Path
) -> None:
    source = str(tmp_path / "source.sqlite")
    _rich_thread(source)
    invoke("ask", "a different life", "--thread", "work", "--db", any_db)
    before = _views(any_db, "work")
    with open_store(source) as src, open_store(any_db) as dst, pytest.raises(CopyError) as refused:
        plan_copy(src, dst)
    assert "exists in" in str(refused.value) and "different history" in str(refused.value)
    result = invoke("db", "copy", source, any_db)
    assert result.exit_code == 1 and "nothing was copied" in result.stderr
    assert _views(any_db, "work") == before
    with open_store(any_db) as dst:
        assert [t.thread_id for t in dst.list_threads()] == ["work"], "not even the fork"


def test_a_copy_cut_short_is_finished_by_the_next(tmp_path: Path) -> None:
    source, target = str(tmp_path / "s.sqlite"), str(tmp_path / "t.sqlite")
    _rich_thread(source)
    with open_store(source) as src, open_store(target) as dst:
        plan = plan_copy(src, dst, ["work"])
        plan.copy["work"] = plan.copy["work"][:5]  # as if the process died after five
        run_copy(src, dst, plan)
    assert invoke("db", "copy", source, target, "-t", "work").exit_code == 0
    assert _views(target, "work") == _views(source, "work")


def _refusing_writes_after(db: str, count: int) -> None:
    """Make the chatbot database ``db`` refuse every pending write after its ``count``-th, as
    a disk that fills up would: a trigger in the database itself."""
    if db.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(
                "CREATE FUNCTION refuse_writes() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF (SELECT count(*) FROM checkpoint_writes) >= {count} THEN "
                "RAISE EXCEPTION 'the disk is full'; END IF; RETURN NEW; END $$"
            )
            conn.execute(
                "CREATE TRIGGER refuse_writes BEFORE INSERT ON checkpoint_writes "
                "FOR EACH ROW EXECUTE FUNCTION refuse_writes()"
            )
        return
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TRIGGER refuse_writes BEFORE INSERT ON writes "
            f"WHEN (SELECT count(*) FROM writes) >= {count} "
            "BEGIN SELECT RAISE(ABORT, 'the disk is full'); END"
        )
    conn.close()


def _accepting_writes(db: str) -> None:
    if db.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("DROP TRIGGER refuse_writes ON checkpoint_writes")
        return
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("DROP TRIGGER refuse_writes")
    conn.close()


def _listing(db: str) -> object:
    return json.loads(invoke("threads", "--json", "--db", db).stdout)


def _whole(db: str, thread: str) -> list[object]:
    """Every checkpoint of a thread with its metadata and pending writes, and its views."""
    with open_store(db) as store:
        saved = [
            (t.checkpoint["id"], t.metadata, sorted(map(str, t.pending_writes or [])))
            for t in store.saver.list({"configurable": {"thread_id": thread}})
        ]
    return [saved, *_views(db, thread)]


@pytest.mark.parametrize("refused_after", [3, 12])
@slow_on_postgres
def test_a_copy_the_target_stops_mid_thread_is_made_whole_by_the_next(
    any_db: str, tmp_path: Path, refused_after: int
) -> None:
    source = str(tmp_path / "source.sqlite")
    _rich_thread(source)
    for fork in ("work-fork2", "work-fork3"):
        assert invoke("fork", "work", "--to", fork, "--db", source).exit_code == 0
    with open_store(any_db):
        pass  # (a chatbot database, for the trigger to go on)
    _refusing_writes_after(any_db, refused_after)
    stopped = invoke("db", "copy", source, any_db)
    assert stopped.exit_code == 1 and "the disk is full" in stopped.stderr, stopped.output
    assert "Traceback" not in stopped.output
    threads = ("work", "work-fork1", "work-fork2", "work-fork3")
    with open_store(any_db) as dst:
        there = [thread for thread in threads if dst.thread_exists(thread)]
        assert dst.query("SELECT thread_id FROM chatbot_threads ORDER BY 1") == [
            (thread,) for thread in sorted(there)
        ]
    for thread in there:  # each thread is there whole or not at all
        assert _whole(any_db, thread) == _whole(source, thread), thread
    _accepting_writes(any_db)
    again = invoke("db", "copy", source, any_db)
    assert again.exit_code == 0, again.output
    for thread in threads:
        assert _whole(any_db, thread) == _whole(source, thread), thread
    assert _listing(any_db) == _listing(source)
    for thread in threads:
        found = json.loads(invoke("search", "e1", "--json", "-t", thread, "--db", any_db).stdout)
        expected = json.loads(invoke("search", "e1", "--json", "-t", thread, "--db", source).stdout)
        assert found == expected, thread
    same = invoke("db", "copy", source, any_db)
    assert same.exit_code == 0 and "4 already there with the same history" in same.stderr


def test_a_thread_there_without_its_writes_or_listing_row_is_not_the_same_history(
    any_db: str, tmp_path: Path
) -> None:
    source = str(tmp_path / "source.sqlite")
    _rich_thread(source)
    assert invoke("db", "copy", source, any_db).exit_code == 0
    with open_store(any_db) as dst:
        dst.write(
            (f"DELETE FROM {dst.writes_table} WHERE thread_id = ?", ("work",)),
            ("DELETE FROM chatbot_threads WHERE thread_id = ?", ("work",)),
        )
    again = invoke("db", "copy", source, any_db)
    assert again.exit_code == 0, again.output
    assert "copied 1 thread" in again.stderr and "1 already there" in again.stderr
    assert _whole(any_db, "work") == _whole(source, "work")
    assert _listing(any_db) == _listing(source)


def test_bad_arguments_are_one_line(tmp_path: Path) -> None:
    missing = invoke("db", "copy", str(tmp_path / "none.sqlite"), str(tmp_path / "t.sqlite"))
    assert missing.exit_code == 2 and "no database" in missing.stderr
    assert not (tmp_path / "t.sqlite").exists()
    source = str(tmp_path / "s.sqlite")
    invoke("ask", "hi", "--thread", "x", "--db", source)
    same = invoke("db", "copy", source, source)
    assert same.exit_code == 2 and "the same database" in same.stderr
    unknown = invoke("db", "copy", source, str(tmp_path / "t.sqlite"), "-t", "nope")
    assert unknown.exit_code == 1 and "no thread 'nope'" in unknown.stderr
    assert f"'chatbot threads --db {source}' lists the threads there" in unknown.stderr
