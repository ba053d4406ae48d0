"""`chatbot prune --abandoned-days N`: side branches of a thread's history (an undone turn, a
reply /retry replaced, an abandoned continuation) removed whole, the line of history left as it
was, on SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.history.turns import turn_entries
from chatbot.store.base import SqlStore
from chatbot.store.postgres import open_store
from chatbot.store.pruning import abandoned_branches, prune_branches
from chatbot.store.search import search
from chatbot.threads.backend import LocalBackend
from tests.scripted import ScriptedChatModel
from tests.test_cli import invoke

FOLDING = {"summary_trigger": "messages:6", "summary_keep": "messages:2"}


class Thread:
    """A store and a backend on one database (scripted models), one thread ``t``."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.store = open_store(db)
        settings = Settings(_env_file=None, model="offline", db=db, **FOLDING)  # type: ignore[call-arg]
        graph = build_graph(
            ScriptedChatModel(), ScriptedChatModel(default="SUMMARY"), settings, self.store.saver
        )
        self.backend = LocalBackend(graph, self.store)

    def say(self, *texts: str) -> None:
        for text in texts:
            list(self.backend.send("t", text))

    def states(self) -> dict[str, tuple[Any, ...]]:
        """Every checkpoint's state, read by a store opened anew (nothing cached)."""
        with open_store(self.db) as fresh:
            reader = LocalBackend(None, fresh)
            return {
                s.checkpoint_id: (
                    [(m.id, m.type, m.content) for m in s.messages],
                    s.summary,
                    s.next,
                )
                for s in reader.history("t")
            }

    def entries(self) -> list[Any]:
        return turn_entries(self.backend.history("t"))

    def found(self, word: str) -> list[str]:
        return [hit.text for hit in search(self.store, word, thread_id="t", limit=50)]


@pytest.fixture
def thread(any_db: str) -> Iterator[Thread]:
    made = Thread(any_db)
    try:
        made.say("alpha one", "beta two")
        made.backend.undo("t")  # (beta two: a side branch)
        made.say("gamma three")
        list(made.backend.retry("t"))  # (gamma's first reply: a side branch)
        made.say("delta four", "epsilon five", "zeta six")  # (folds)
        yield made
    finally:
        made.store.close()


def _line_entries(entries: list[Any], gone: set[str]) -> list[tuple[Any, ...]]:
    return [
        (e.kind, e.text, e.fate, e.finished, e.messages_after, e.folded)
        for e in entries
        if e.first_checkpoint_id not in gone
    ]


def test_side_branches_go_whole_and_the_line_reads_as_it_did(thread: Thread) -> None:
    store: SqlStore = thread.store
    before = thread.states()
    entries = thread.entries()
    assert [e.text for e in entries if e.fate == "undone"] == ["beta two"]
    assert [e.text for e in entries if e.fate == "retried"] == ["gamma three"]
    branches = abandoned_branches(store, "t", 0)
    gone = {c for b in branches for c in b.checkpoints}
    assert len(branches) == 2 and gone and gone < set(before)

    assert prune_branches(store, "t", branches) == len(gone)

    after = thread.states()
    assert set(after) == set(before) - gone
    for checkpoint_id, state in after.items():  # every checkpoint left reads exactly as before
        assert state == before[checkpoint_id], checkpoint_id
    kept = thread.entries()
    assert [e.text for e in kept if e.kind == "turn"] == [
        "zeta six",
        "epsilon five",
        "delta four",
        "gamma three",
        "alpha one",
    ]
    assert not any(e.fate == "undone" for e in kept), "no turn on the line is called undone"
    assert all(e.finished for e in kept), "the run whose reply /retry replaced went on"
    line_before = _line_entries(entries, gone)
    line_after = _line_entries(kept, gone)
    assert [e[:3] for e in line_after] == [e[:3] for e in line_before]
    assert abandoned_branches(store, "t", 0) == []

    assert thread.found("beta") == [], "a message only a pruned branch held is not found"
    assert thread.found("alpha") == ["alpha one"] and thread.found("gamma") == ["gamma three"]
    thread.say("eta seven")  # the thread goes on
    assert thread.entries()[0].text == "eta seven"
    assert thread.backend.current("t").messages[-2].content == "eta seven"


def test_a_branch_written_to_since_the_cutoff_stays(thread: Thread) -> None:
    assert abandoned_branches(thread.store, "t", 1) == [], "written seconds ago"
    assert len(abandoned_branches(thread.store, "t", 0)) == 2


def test_postgresql_keeps_only_the_blobs_a_checkpoint_left_names(postgres_url: str) -> None:
    """PostgreSQL stores each version of a value once, apart from the checkpoints naming it."""
    made = Thread(postgres_url)
    try:
        made.say("one", "two", "three", "four")
        made.backend.undo("t")
        made.backend.undo("t")
        made.say("five")
        store = made.store
        count = "SELECT COUNT(*) FROM checkpoint_blobs WHERE thread_id = 't'"
        ((blobs_before,),) = store.query(count)
        prune_branches(store, "t", abandoned_branches(store, "t", 0))
        ((blobs_after,),) = store.query(count)
        assert blobs_after < blobs_before
        ((orphans,),) = store.query(
            "SELECT COUNT(*) FROM checkpoint_blobs AS b WHERE b.thread_id = 't' AND NOT EXISTS "
            "(SELECT 1 FROM checkpoints AS c WHERE c.thread_id = 't' "
            "AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)"
        )
        assert orphans == 0
        assert [m.content for m in made.backend.current("t").messages][-2:][0] == "five"
        assert made.states()  # (every checkpoint left reads)
    finally:
        made.store.close()


def _search_is_sound(thread: Thread) -> None:
    """Every message a checkpoint of the thread holds has its search row, and each row names
    a checkpoint that holds its message (the oldest)."""
    from chatbot.store.checkpoints import state_of_id

    rows = dict(
        thread.store.query(
            "SELECT message_id, checkpoint_id FROM chatbot_messages WHERE thread_id = 't'"
        )
    )
    held: dict[str, str] = {}
    for checkpoint_id, (messages, _, _) in sorted(thread.states().items()):
        for message_id, _, content in messages:
            if str(content).strip():
                held.setdefault(message_id, checkpoint_id)
    assert rows == held
    for message_id, checkpoint_id in rows.items():
        state = state_of_id(thread.store, "t", checkpoint_id)
        assert any(m.id == message_id for m in state.messages), (message_id, checkpoint_id)


def _input_of_last_turn(thread: Thread) -> str:
    history = thread.backend.history("t")
    return max(s.checkpoint_id for s in history if s.source == "input")


@pytest.mark.parametrize(
    "shape",
    ["retry", "resume_from_input", "undo_to_a_retry", "retry_then_undo_the_first_turn"],
)
def test_search_names_a_checkpoint_holding_each_message_after_pruning(
    any_db: str, shape: str
) -> None:
    """What a helper trying to break pruning found: a reply /retry replaced stayed findable at
    a checkpoint that did not hold it; a message brought in again on the line (a run resumed
    from before it) was no longer found; a turn resumed from its input checkpoint lost its
    message in history."""
    thread = Thread(any_db)
    try:
        thread.say("alpha one")
        if shape == "retry":
            list(thread.backend.retry("t"))
        elif shape == "resume_from_input":
            thread.say("bravo two")
            list(thread.backend.resume("t", _input_of_last_turn(thread)))
        elif shape == "undo_to_a_retry":
            thread.backend.set_system_prompt("t", "be terse")
            thread.say("bravo two")
            list(thread.backend.retry("t"))
            fork = max(s.checkpoint_id for s in thread.backend.history("t") if s.source == "fork")
            thread.backend.restore("t", fork, "undo")
        else:
            list(thread.backend.retry("t"))
            thread.backend.undo("t")
        _search_is_sound(thread)
        texts = [(e.kind, e.text) for e in thread.entries()]
        prune_branches(thread.store, "t", abandoned_branches(thread.store, "t", 0))
        _search_is_sound(thread)
        after = [(e.kind, e.text) for e in thread.entries()]
        assert all(text for kind, text in after if kind == "turn"), after
        assert set(after) <= set(texts)
        thread.say("charlie three")
        _search_is_sound(thread)
    finally:
        thread.store.close()


# --- the command --------------------------------------------------------------------------


def _checkpoints(db: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0])


@pytest.fixture
def sqlite_thread(tmp_path: Any) -> Iterator[Thread]:
    made = Thread(str(tmp_path / "db.sqlite"))
    try:
        made.say("alpha one", "beta two")
        made.backend.undo("t")
        made.say("gamma three")
        list(made.backend.retry("t"))
        yield made
    finally:
        made.store.close()


def test_the_command_lists_what_would_go_then_removes_it_with_yes(sqlite_thread: Thread) -> None:
    db = sqlite_thread.db
    count = _checkpoints(db)
    listed = invoke("prune", "--abandoned-days", "0", "--db", db)
    assert listed.exit_code == 0, listed.output
    assert "beta two (undone by /undo)" in listed.stdout
    assert "the reply to gamma three (replaced by /retry)" in listed.stdout
    assert "nothing removed: add --yes" in listed.stderr
    assert _checkpoints(db) == count, "listing changes nothing"

    young = invoke("prune", "--abandoned-days", "1", "--yes", "--db", db)
    assert young.exit_code == 0 and "no side branch" in young.stderr
    assert _checkpoints(db) == count
    for days in ("1000000", "1e10", "inf"):  # (more days than a date goes back)
        older = invoke("prune", "--abandoned-days", days, "--yes", "--db", db)
        assert older.exit_code == 0 and "no side branch" in older.stderr, older.output
    assert _checkpoints(db) == count

    done = invoke("prune", "--abandoned-days", "0", "--yes", "--thread", "t", "--db", db)
    assert done.exit_code == 0, done.output
    assert "removed" in done.stderr and _checkpoints(db) < count
    history = invoke("history", "t", "--db", db)
    assert "beta two" not in history.stdout and "undone" not in history.stdout


def test_a_thread_taking_a_turn_is_left_as_it_was(sqlite_thread: Thread) -> None:
    db = sqlite_thread.db
    assert sqlite_thread.store.try_lease("t", "another process")
    count = _checkpoints(db)
    result = invoke("prune", "--abandoned-days", "0", "--yes", "--db", db)
    assert result.exit_code == 1 and "taking a turn now" in result.stderr
    assert _checkpoints(db) == count


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "give one of --inactive-days N"),
        (["--inactive-days", "1", "--abandoned-days", "1"], "give one of --inactive-days N"),
        (["--inactive-days", "1", "--thread", "t"], "--thread goes with --abandoned-days"),
        (["--abandoned-days", "-1"], "greater than or equal to 0"),
    ],
)
def test_bad_options_are_one_line_and_a_non_zero_exit(
    sqlite_thread: Thread, args: list[str], says: str
) -> None:
    result = invoke("prune", *args, "--db", sqlite_thread.db)
    assert result.exit_code == 2 and says in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_an_unknown_thread_is_one_line(sqlite_thread: Thread) -> None:
    result = invoke("prune", "--abandoned-days", "0", "--thread", "nope", "--db", sqlite_thread.db)
    assert result.exit_code == 1 and "no thread 'nope'" in result.output
