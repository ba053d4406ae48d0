"""Keeping a database small: `chatbot prune`, `chatbot db stats`, `chatbot db vacuum`."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from chatbot.engine.graph import build_graph
from chatbot.engine.models import OfflineChatModel
from chatbot.store.checkpoints import read_checkpoint
from chatbot.store.postgres import open_store
from chatbot.threads.backend import LocalBackend
from tests.test_cli import invoke


def _fill(db: Path | str, threads: dict[str, int]) -> None:
    with open_store(str(db)) as store:
        backend = LocalBackend(build_graph(OfflineChatModel(), checkpointer=store.saver), store)
        for thread, turns in threads.items():
            for turn in range(turns):
                list(backend.send(thread, f"{thread} turn {turn}: " + "words " * 200))


def test_inactive_threads_are_those_whose_newest_checkpoint_is_older(any_db: str) -> None:
    db = any_db
    _fill(db, {"old": 2, "new": 1})
    with open_store(db) as store:
        infos = {info.thread_id: info for info in store.list_threads()}
        old, new = infos["old"].last_active, infos["new"].last_active
        assert old is not None and new is not None and old < new
        later = new + timedelta(days=10)
        between = (later - (old + (new - old) / 2)).total_seconds() / 86_400
        assert [i.thread_id for i in store.inactive_threads(between, now=later)] == ["old"]
        assert [i.thread_id for i in store.inactive_threads(9, now=later)] == ["old", "new"]
        assert store.inactive_threads(11, now=later) == []


def test_prune_lists_first_and_deletes_whole_threads_with_yes(any_db: str) -> None:
    db = any_db
    _fill(db, {"a": 2, "b": 1})
    with open_store(db) as store:
        backend = LocalBackend(build_graph(OfflineChatModel(), checkpointer=store.saver), store)
        backend.fork("a", None, "a-fork1")

    dry = invoke("prune", "--inactive-days", "0", "--db", str(db))
    assert dry.exit_code == 0, dry.output
    assert {"a", "b", "a-fork1"} <= set(dry.stdout.split())
    assert "nothing deleted: add --yes" in dry.stderr
    with open_store(db) as store:
        assert {t.thread_id for t in store.list_threads()} == {"a", "b", "a-fork1"}

    kept = invoke("prune", "--inactive-days", "30", "--db", str(db))
    assert kept.exit_code == 0 and "has been inactive for 30 days" in kept.stderr

    gone = invoke("prune", "--inactive-days", "0", "--yes", "--db", str(db))
    assert gone.exit_code == 0, gone.output
    assert "deleted 3 threads" in gone.stderr
    with open_store(db) as store:
        assert store.list_threads() == []
        assert store.stats().checkpoints == 0 and store.stats().writes == 0


def test_a_forks_origin_stays_when_its_thread_is_pruned(any_db: str) -> None:
    db = any_db
    _fill(db, {"a": 1})
    with open_store(db) as store:
        backend = LocalBackend(build_graph(OfflineChatModel(), checkpointer=store.saver), store)
        backend.fork("a", None, "a-fork1")
        store.delete_thread("a")  # what prune does to each thread it deletes
        (fork,) = store.list_threads()
        assert fork.thread_id == "a-fork1" and fork.origin_thread == "a"
        current = backend.current("a-fork1")
        assert current is not None and current.messages, "the fork keeps its own state"


@pytest.mark.slow
def test_stats_and_vacuum_report_and_give_back_the_space(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    _fill(db, {f"t{n}": 3 for n in range(20)})
    stats = json.loads(invoke("db", "stats", "--json", "--db", str(db)).stdout)
    assert stats["threads"] == 20 and stats["checkpoints"] == 20 * 9
    assert stats["bytes"] > 100_000 and stats["free_bytes"] == 0
    assert invoke("prune", "--inactive-days", "0", "--yes", "--db", str(db)).exit_code == 0
    freed = json.loads(invoke("db", "stats", "--json", "--db", str(db)).stdout)
    assert freed["threads"] == 0 and freed["free_bytes"] > 0
    result = invoke("db", "vacuum", "--db", str(db))
    assert result.exit_code == 0, result.output
    assert f"{db}: " in result.stdout and " → " in result.stdout  # (sizes before → after)
    after = json.loads(invoke("db", "stats", "--json", "--db", str(db)).stdout)
    assert after["bytes"] < stats["bytes"] / 2 and after["free_bytes"] == 0
    text = invoke("db", "stats", "--db", str(db)).stdout
    assert "0 threads, 0 checkpoints" in text and "on disk" in text
    _fill(db, {"one": 1})  # one turn: 1 thread, 3 checkpoints, in the singular where it is one
    assert ": 1 thread, 3 checkpoints, " in invoke("db", "stats", "--db", str(db)).stdout


def test_stats_say_what_each_part_takes_and_the_bytes_a_turn(any_db: str) -> None:
    _fill(any_db, {"a": 6, "b": 4})
    stats = json.loads(invoke("db", "stats", "--json", "--db", any_db).stdout)
    parts = stats["parts"]
    assert list(parts) == ["checkpoints", "pending writes", "search index", "other"]
    assert parts["checkpoints"] > 0 and parts["search index"] > 0
    assert sum(parts.values()) <= stats["bytes"]
    with open_store(any_db) as store:
        said = [m for thread in ("a", "b") for m in read_checkpoint(store, thread).state.messages]
    assert stats["turns"] == sum(m.type == "human" for m in said) == 10
    assert stats["text_bytes"] == sum(len(m.text.encode()) for m in said)
    assert stats["bytes_per_turn"] == round(stats["bytes"] / 10)
    text = invoke("db", "stats", "--db", any_db).stdout
    assert "checkpoints " in text and " · search index " in text
    assert "10 turns, " in text and " a turn (" in text and "× the text)" in text


def test_below_ten_turns_stats_give_no_figures_a_turn(any_db: str) -> None:
    # A database's tables and indexes take pages of their own before the first turn: over a
    # few turns the bytes a turn are mostly those, hundreds of times the text.
    with open_store(any_db):
        pass  # made, no turn yet
    _fill(any_db, {"a": 3})
    stats = json.loads(invoke("db", "stats", "--json", "--db", any_db).stdout)
    assert stats["turns"] == 3 and stats["bytes_per_turn"] is None
    text = invoke("db", "stats", "--db", any_db).stdout
    assert text.splitlines()[-1].endswith(" of text: per-turn figures need at least 10 turns"), text
    assert "3 turns, " in text and " a turn" not in text and "× the text" not in text


def test_stats_and_vacuum_on_postgresql(postgres_url: str) -> None:
    _fill(postgres_url, {"a": 2, "b": 1})
    stats = json.loads(invoke("db", "stats", "--json", "--db", postgres_url).stdout)
    assert (stats["threads"], stats["checkpoints"]) == (2, 9) and stats["bytes"] > 0
    assert "***" not in stats["location"] and stats["location"] == postgres_url
    result = invoke("db", "vacuum", "--db", postgres_url)
    assert result.exit_code == 0 and result.stdout.startswith(postgres_url), result.output


def test_postgresql_stats_count_every_table_and_the_search_index_has_no_pending_list(
    postgres_url: str,
) -> None:
    _fill(postgres_url, {"a": 2})
    with open_store(postgres_url) as store:
        ((tables,),) = store.query(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class AS c "
            "JOIN pg_namespace AS n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
        )
        assert store.stats().bytes == tables, "every table of the database, search's too"
        ((options,),) = store.query(
            "SELECT reloptions FROM pg_class WHERE relname = 'chatbot_messages_trigrams'"
        )
        assert options == ["fastupdate=off"]


@pytest.mark.parametrize(
    "args", [["db", "stats"], ["db", "vacuum"], ["prune", "--inactive-days", "1"]]
)
def test_maintenance_refuses_a_server_and_leaves_a_missing_file_alone(
    args: list[str], tmp_path: Path
) -> None:
    remote = invoke(*args, env={"CHATBOT_URL": "http://127.0.0.1:9"})
    assert remote.exit_code == 2 and "works on local databases only" in remote.stderr
    missing = tmp_path / "none.sqlite"
    result = invoke(*args, "--db", str(missing))
    assert result.exit_code == 1 and f"there is no database at '{missing}'" in result.stderr
    assert not missing.exists()
    fresh = invoke(*args)  # the default database, not made yet: nothing to do
    assert fresh.exit_code == 0 and "does not exist yet: nothing to do" in fresh.stderr
