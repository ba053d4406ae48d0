"""SQLite's search index takes new messages 256 rows at a time (migrations 5 and 9): a row waits in
``chatbot_messages_unindexed`` until then, and search matches the waiting rows itself. Every
message is found as soon as its turn is saved, with the same hits as once it is indexed, and
after every way rows come and go the FTS5 index holds exactly the rows not waiting."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from chatbot.engine.graph import build_graph
from chatbot.store.copying import plan_copy, run_copy
from chatbot.store.msgindex import MessageIndex
from chatbot.store.saver import LocalSaver
from chatbot.store.search import coarse_fold, search, trigram_query
from chatbot.store.sqlite import (
    APPLICATION_ID,
    MIGRATIONS,
    MIGRATIONS_TABLE,
    SEARCH_BATCH,
    SqlStore,
    Store,
    add_functions,
    migration_statements,
    thread_config,
)
from tests.scripted import ScriptedChatModel
from tests.test_cli import invoke
from tests.test_search import Chat, _settings

BATCH = SEARCH_BATCH


def assert_index_exact(db: str) -> None:
    """FTS5's own checks, on the file: the index is sound ('integrity-check'), and with the
    waiting rows added to it it holds every row of ``chatbot_messages`` and nothing else
    ('integrity-check' with rank 1 compares it with its content table: a row missing, left
    behind, indexed twice or deleted without having been indexed fails it). The rows are added
    in a transaction rolled back: the file is left as it was."""
    conn = sqlite3.connect(db, isolation_level=None)
    add_functions(conn)  # (the index's content is the text, read through chatbot_text)
    try:
        conn.execute(
            "INSERT INTO chatbot_messages_fts (chatbot_messages_fts) VALUES ('integrity-check')"
        )
        (orphans,) = conn.execute(
            "SELECT COUNT(*) FROM chatbot_messages_unindexed "
            "WHERE id NOT IN (SELECT id FROM chatbot_messages)"
        ).fetchone()
        assert orphans == 0, "a waiting id without its row"
        conn.execute("BEGIN")
        try:
            conn.execute(
                "INSERT INTO chatbot_messages_fts (rowid, content) SELECT t.id, t.content "
                "FROM chatbot_messages_unindexed AS u "
                "JOIN chatbot_messages_text AS t ON t.id = u.id"
            )
            conn.execute(
                "INSERT INTO chatbot_messages_fts (chatbot_messages_fts, rank) "
                "VALUES ('integrity-check', 1)"
            )
        except sqlite3.DatabaseError as error:
            pytest.fail(f"the index does not match chatbot_messages: {error}")
        finally:
            conn.execute("ROLLBACK")
    finally:
        conn.close()


def waiting(store: SqlStore) -> set[int]:
    """The ids of the rows waiting for the index."""
    return {row[0] for row in store._query("SELECT id FROM chatbot_messages_unindexed")}


def in_index(store: SqlStore, word: str) -> int:
    """How many rows the FTS5 index itself finds ``word``'s trigrams in."""
    ((count,),) = store._query(
        "SELECT COUNT(*) FROM chatbot_messages_fts WHERE chatbot_messages_fts MATCH ?",
        (trigram_query([word]),),
    )
    return int(count)


def row_ids(store: SqlStore, thread_id: str) -> set[int]:
    rows = store._query("SELECT id FROM chatbot_messages WHERE thread_id = ?", (thread_id,))
    return {row[0] for row in rows}


def one_turn_from_a_batch(chat: Chat) -> None:
    """Say turns on a thread of their own until BATCH - 2 rows wait: the next turn's two rows (a
    message and its reply) make the batch."""
    turn = 0
    while len(waiting(chat.store)) < BATCH - 2:
        turn += 1
        chat.say("filler", f"filler turn {turn}")
    assert len(waiting(chat.store)) == BATCH - 2


@pytest.fixture
def chat(tmp_path: Path) -> Iterator[Chat]:
    made = Chat(str(tmp_path / "db.sqlite"))
    try:
        yield made
    finally:
        made.store.close()


def _found(chat: Chat, query: str, **options: Any) -> list[str]:
    return [hit.text for hit in chat.find(query, **options)]


def test_a_message_is_found_while_it_waits_and_once_its_batch_is_indexed(chat: Chat) -> None:
    chat.say("t", "a quokka smiled at me")
    (first,) = chat.find("quokka")
    assert len(waiting(chat.store)) == 2 and in_index(chat.store, "quokka") == 0
    assert_index_exact(chat.store.path)

    one_turn_from_a_batch(chat)
    chat.say("t", "another quokka")
    assert waiting(chat.store) == set(), "the last row of a batch indexed them all"
    assert in_index(chat.store, "quokka") == 2
    assert chat.find("quokka")[1] == first, "the same hit, found in the index now"
    assert_index_exact(chat.store.path)

    chat.say("t", "a third quokka")  # waits, while the two before are indexed
    assert in_index(chat.store, "quokka") == 2 and len(waiting(chat.store)) == 2
    assert _found(chat, "quokka") == ["a third quokka", "another quokka", "a quokka smiled at me"]
    assert _found(chat, "quokka", limit=2) == ["a third quokka", "another quokka"]
    assert _found(chat, "quokka", thread_id="filler") == []
    assert _found(chat, "quokka me") == ["a quokka smiled at me"], "a short term, indexed"
    assert _found(chat, "quokka rd") == ["a third quokka"], "a short term, waiting"
    assert_index_exact(chat.store.path)


GREEK_AND_MORE = [
    "ΟΔΟΣ ΚΑΙ ΝΕΡΟ",
    "Straße und STRASSE",
    "ſtrange long s",
    "İstanbul kelvin 5 K",
    "ÉCOLE élève",
    "Он сказал ДА",
    "東京タワーに行きました",
    "an odd \ufffe char",  # (SQLite reads U+FFFE as U+FFFD)
]
QUERIES = [
    "δοσ",  # FTS5 folds the final sigma ΟΔΟΣ's lower case ends with: Python's lower() does not
    "οδος",
    "stran",  # and the long s to s
    "ſtr",
    "i̇stanbul",  # what Python makes of "İ"; FTS5 leaves it as it is
    "İstanbul",
    "straße",
    "strasse",
    "vin 5 k",
    "école ÉLÈVE",
    "сказал да",
    "タワー",
    "ΝΕΡΟ δα",
    '"d \ufffd c"',
    '"d \ufffe c"',
]


def test_waiting_rows_are_matched_exactly_as_the_index_matches_them(chat: Chat) -> None:
    chat.say("t", *GREEK_AND_MORE)
    assert len(waiting(chat.store)) == 2 * len(GREEK_AND_MORE)
    while_waiting = {query: _found(chat, query) for query in QUERIES}
    assert while_waiting["δοσ"] == ["ΟΔΟΣ ΚΑΙ ΝΕΡΟ"] and while_waiting["i̇stanbul"] == []
    assert while_waiting["ſtr"] == ["ſtrange long s", "Straße und STRASSE"]
    assert while_waiting['"d \ufffd c"'] == while_waiting['"d \ufffe c"'] == [GREEK_AND_MORE[-1]]

    one_turn_from_a_batch(chat)
    chat.say("u", "one more")
    assert waiting(chat.store) == set()
    assert {query: _found(chat, query) for query in QUERIES} == while_waiting
    assert_index_exact(chat.store.path)


def test_a_character_folds_coarsely_as_fts5_folds_it() -> None:
    """Waiting rows are filtered with :func:`coarse_fold` before FTS5 decides: no row FTS5
    would match may be filtered out, so every character FTS5 can fold (SQLite folds nothing
    beyond U+1FFFF, and Python's case folding changes nothing there) must fold coarsely to
    what the character FTS5 folds it to does."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE w USING fts5(content, tokenize='trigram')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(w, 'instance')")
    characters = [cp for cp in range(1, 0x20000) if not 0xD800 <= cp < 0xE000]  # (surrogates)
    conn.executemany(  # each character three times: its one trigram is FTS5's fold of it
        "INSERT INTO w (rowid, content) VALUES (?, ?)", ((cp, chr(cp) * 3) for cp in characters)
    )
    folds = {doc: term for term, doc in conn.execute("SELECT term, doc FROM v")}
    conn.close()
    assert len(folds) == len(characters)
    assert sum(folds[cp] != chr(cp) * 3 for cp in characters) > 1000, "FTS5 folds these"
    wrong = [
        (hex(cp), folds[cp])
        for cp in characters
        if coarse_fold(chr(cp) * 3) != coarse_fold(folds[cp])
    ]
    assert wrong == []
    assert all(chr(cp).casefold() == chr(cp) for cp in range(0x20000, 0x110000))


def test_a_thread_deleted_and_made_again_reuses_row_ids_and_the_index_stays_exact(
    chat: Chat,
) -> None:
    chat.say("t", "an alpha particle")  # waiting
    before = row_ids(chat.store, "t")
    chat.backend.delete("t")
    chat.say("t", "a beta particle")
    assert row_ids(chat.store, "t") == before, "SQLite gave the deleted rows' ids again"
    assert _found(chat, "particle") == ["a beta particle"]
    assert_index_exact(chat.store.path)

    one_turn_from_a_batch(chat)
    chat.say("u", "a gamma particle")  # the batch: u's rows, the newest ids, are indexed
    assert waiting(chat.store) == set() and in_index(chat.store, "gamma") == 1
    indexed = row_ids(chat.store, "u")
    chat.store.saver.delete_thread("u")  # as LangGraph's server deletes: FTS5 deletes them
    assert_index_exact(chat.store.path)
    chat.say("u", "a delta particle")
    assert row_ids(chat.store, "u") == indexed, "the indexed rows' ids given again"
    assert waiting(chat.store) == indexed
    assert _found(chat, "particle") == ["a delta particle", "a beta particle"]
    assert chat.find("gamma") == []
    assert_index_exact(chat.store.path)


def test_prune_deletes_indexed_and_waiting_rows_alike(chat: Chat) -> None:
    chat.say("t", "an ibis wades")
    one_turn_from_a_batch(chat)
    chat.say("u", "an ibis flies")  # the batch: t's rows and u's are indexed
    chat.say("w", "an ibis lands")  # waits
    assert in_index(chat.store, "ibis") == 2 and len(waiting(chat.store)) == 2

    result = invoke("prune", "--inactive-days", "0", "--yes", "--db", chat.store.path)
    assert result.exit_code == 0, result.output
    assert chat.find("ibis") == [] and waiting(chat.store) == set()
    assert_index_exact(chat.store.path)
    chat.say("t", "the ibis is back")
    assert _found(chat, "ibis") == ["the ibis is back"]
    assert_index_exact(chat.store.path)


def test_retry_fork_undo_rename_and_copy_keep_the_index_exact_across_batches(
    chat: Chat, tmp_path: Path
) -> None:
    one_turn_from_a_batch(chat)
    chat.say("t", "the okapi sleeps")  # the batch
    assert waiting(chat.store) == set()
    list(chat.backend.regenerate("t"))  # a new reply waits, the old one is indexed
    chat.backend.fork("t", None, "f")
    chat.say("f", "the okapi wakes")
    assert sorted((h.thread_id, h.text) for h in chat.find("okapi")) == [
        ("f", "the okapi sleeps"),
        ("f", "the okapi wakes"),
        ("t", "the okapi sleeps"),
    ]
    assert_index_exact(chat.store.path)
    before_wakes = chat.backend.history("f")[1]  # (newest first)
    chat.backend.restore("f", before_wakes.checkpoint_id, "undo")
    chat.backend.rename("f", "g")
    assert sorted((h.thread_id, h.text) for h in chat.find("okapi")) == [
        ("g", "the okapi sleeps"),
        ("g", "the okapi wakes"),
        ("t", "the okapi sleeps"),
    ]
    assert_index_exact(chat.store.path)

    target_db = str(tmp_path / "target.sqlite")
    with Store(target_db) as target:
        run_copy(chat.store, target, plan_copy(chat.store, target))
        ((rows,),) = target._query("SELECT COUNT(*) FROM chatbot_messages")
        assert 0 < len(waiting(target)) < BATCH < rows, "a batch indexed, some rows wait"
        for query in ("okapi", "filler turn", "reply 3"):
            assert search(target, query, limit=100) == chat.find(query, limit=100), query
    assert_index_exact(target_db)


def _digest(db: str) -> str:
    return hashlib.sha256(Path(db).read_bytes()).hexdigest()


def test_search_works_on_a_read_only_database_with_rows_waiting(chat: Chat) -> None:
    chat.say("t", "the capybara swims")
    one_turn_from_a_batch(chat)
    chat.say("t", "the capybara naps")  # the batch
    chat.say("t", "the capybara eats")  # waits
    expected = _found(chat, "capybara")
    chat.store.close()
    before = _digest(chat.store.path)

    with Store(chat.store.path, read_only=True) as store:
        assert store.read_only and len(waiting(store)) == 2
        assert [hit.text for hit in search(store, "capybara")] == expected
        assert expected == ["the capybara eats", "the capybara naps", "the capybara swims"]
        assert [hit.text for hit in search(store, "eats capy")] == ["the capybara eats"]
    assert _digest(chat.store.path) == before, "nothing written"


# --- a database from before the batches -------------------------------------------------------


def _made_before_batches(db: str) -> None:
    """A database as the version before migration 5 made and wrote it: migrations 1-4 (an
    FTS5 index kept row by row by their triggers), turns written through chatbot's saver."""
    conn = sqlite3.connect(db, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    saver = LocalSaver(conn)
    saver.setup()
    conn.execute(MIGRATIONS_TABLE)
    for version, migration in enumerate(MIGRATIONS[:4], start=1):
        for statement in migration_statements(migration, "sqlite"):
            conn.execute(statement)
        conn.execute(
            "INSERT INTO chatbot_migrations (version, applied_at) VALUES (?, '2025-01-01')",
            (version,),
        )
    conn.commit()
    lock = threading.RLock()

    def query(sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        with lock:
            return conn.execute(sql, tuple(params)).fetchall()

    def write(*statements: tuple[str, Any]) -> int:
        with lock, conn:
            for sql, params in statements:
                conn.execute(sql, tuple(params))
        return 0

    saver.lock = lock  # type: ignore[assignment]
    saver.message_index = MessageIndex(query, write)
    graph = build_graph(
        ScriptedChatModel(), ScriptedChatModel(default="SUMMARY"), _settings(db), saver
    )
    for thread, count in (("old", 40), ("other", 3)):
        for n in range(count):
            graph.invoke(
                {"messages": [HumanMessage(f"{thread} walrus {n}")]}, thread_config(thread)
            )
    conn.close()


def test_a_database_from_before_the_batches_is_migrated_and_searches_as_before(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "old.sqlite")
    _made_before_batches(db)
    conn = sqlite3.connect(db)
    ((indexed,),) = conn.execute(
        "SELECT COUNT(*) FROM chatbot_messages_fts WHERE chatbot_messages_fts MATCH 'walrus'"
    ).fetchall()  # (made before the index lost its positions: 'walrus' is a phrase there)
    conn.close()
    assert indexed == 43, "every message in the index, row by row"
    queries = ("walrus", '"old walrus 1"', "other", "reply 7", "walrus 3")
    with Store(db, read_only=True) as store:  # as the version before reads it: no migration
        before = {query: search(store, query, limit=100) for query in queries}
    assert len(before["walrus"]) == 43 and len(before['"old walrus 1"']) == 11

    chat = Chat(db)  # opened to write: migration 5
    try:
        applied = {row[0] for row in chat.store._query("SELECT version FROM chatbot_migrations")}
        assert applied == set(range(1, len(MIGRATIONS) + 1))
        assert waiting(chat.store) == set()
        assert {query: chat.find(query, limit=100) for query in queries} == before
        assert_index_exact(db)
        chat.say("old", "a walrus again")
        assert len(waiting(chat.store)) == 2 and in_index(chat.store, "again") == 0
        assert _found(chat, "walrus", limit=2) == ["a walrus again", "other walrus 2"]
        assert_index_exact(db)
    finally:
        chat.store.close()


def test_messages_holding_a_terms_trigrams_apart_are_not_hits_however_many_come_first(
    chat: Chat,
) -> None:
    """The index knows which trigrams a message holds, not where: a message holding
    ``hel``, ``ell`` and ``llo`` but not ``hello`` is no hit, even when more such messages
    than the limit are newer than the hits."""
    chat.say("t", "hello from the first", "HELLO from the second")
    chat.say("t", *(f"hel ell llo, decoy {n}" for n in range(40)))
    one_turn_from_a_batch(chat)
    chat.say("u", "one more")
    assert waiting(chat.store) == set() and in_index(chat.store, "hello") >= 42
    assert _found(chat, "hello", limit=2) == ["HELLO from the second", "hello from the first"]
    assert _found(chat, '"llo from"', limit=1) == ["HELLO from the second"]
    assert _found(chat, "hello decoy") == []
    assert len(_found(chat, "coy", limit=100)) == 40  # (three characters: one trigram)
    assert_index_exact(chat.store.path)


def test_a_term_longer_than_sqlites_like_patterns_is_found(chat: Chat) -> None:
    """SQLite's LIKE takes patterns of up to 50,000 bytes: a longer term (a pasted text in
    quotes) is checked another way, not an error."""
    long_text = "ab" * 30_000
    chat.say("t", f"{long_text} end")
    one_turn_from_a_batch(chat)
    chat.say("u", "one more")
    assert waiting(chat.store) == set()
    assert _found(chat, f'"{long_text[:55_000]}"', limit=1) == [f"{long_text} end"]


def test_long_messages_are_kept_compressed_and_found_by_every_kind_of_query(chat: Chat) -> None:
    """SQLite's search rows keep a long message's text compressed (a BLOB smaller than the
    text): every kind of query finds it as before, waiting and once indexed, its hit gives
    back the exact text, and deleting it leaves the index exact."""
    english = (
        "The walrus and the carpenter were walking close at hand;\nthey wept like anything to "
        "see such quantities of sand. "
    ) * 6
    chinese = "我们明天去北京大学参观，然后在上海吃火锅。" * 8
    greek = "ΟΔΟΣ " + "a long road with many turns and a view of the sea " * 4
    mixed = "We flew to 北京 in May and walked along the old city walls every morning. " * 3
    chat.say("t", english, chinese, greek, mixed)
    stored = chat.store._query(
        "SELECT typeof(content), length(content), length(CAST(chatbot_text(content) AS BLOB)) "
        "FROM chatbot_messages WHERE role = 'user' ORDER BY id"
    )
    assert [kind for kind, _, _ in stored] == ["blob", "text", "blob", "text"], "Chinese: text"
    assert all(size < text * 0.8 for kind, size, text in stored if kind == "blob"), stored
    queries = {
        "carpenter wept": [english],
        '"quantities of sand. The walrus"': [english],
        '"at hand; they wept"': [english],  # (across a line break)
        "北京大学": [chinese],
        "上海": [chinese],
        "京": [mixed, chinese],
        "北京 walls": [mixed],
        "δοσ": [greek],  # (FTS5's folding: ΟΔΟΣ holds δοσ)
        "οδος": [greek],
        "walrus 北京": [],
    }

    def found() -> dict[str, list[str]]:
        return {query: _found(chat, query, limit=5) for query in queries}

    assert len(waiting(chat.store)) == 8
    assert found() == queries
    one_turn_from_a_batch(chat)
    chat.say("u", "one more")
    assert waiting(chat.store) == set() and in_index(chat.store, "carpenter") == 1
    assert found() == queries
    assert_index_exact(chat.store.path)
    ((text,),) = chat.store._query(
        "SELECT SUM(length(chatbot_text(content))) FROM chatbot_messages"
    )
    assert chat.store.stats().text_bytes > text  # (bytes of UTF-8 text, not of what is stored)

    chat.store.delete_thread("t")
    assert _found(chat, "carpenter") == [] and _found(chat, "上海") == []
    assert_index_exact(chat.store.path)


def test_db_migrate_compresses_search_rows_an_older_chatbot_kept_as_text(chat: Chat) -> None:
    """Rows written before compression (text) are found as they are; ``db migrate`` says what
    compressing them saves, then compresses them, and search finds the same."""
    long_texts = [
        f"message {n}: " + "the quick brown fox jumps over the lazy dog " * 8 for n in range(6)
    ]
    chat.say("t", *long_texts[:3])
    one_turn_from_a_batch(chat)
    chat.say("u", *long_texts[3:])
    db = chat.store.path
    chat.store._write(  # (as a chatbot before compression kept them)
        ("UPDATE chatbot_messages SET content = chatbot_text(content)", ())
    )
    assert chat.store.uncompressed_search_rows() == 6  # (the replies are too short to gain)
    queries = ("fox", '"message 4: the quick"', "lazy dog message", "message 1")
    before = {query: _found(chat, query, limit=50) for query in queries}
    assert len(before["fox"]) == 6 and before['"message 4: the quick"'] == [long_texts[4]]
    assert_index_exact(db)
    waiting_before = waiting(chat.store)
    chat.store.close()

    said = invoke("db", "migrate", "--dry-run", "--db", db)
    assert said.exit_code == 0, said.output
    assert "would rewrite 6 stored values" in said.output
    done = invoke("db", "migrate", "--db", db)
    assert done.exit_code == 0, done.output
    assert "rewrote 6 stored values" in done.output
    again = invoke("db", "migrate", "--db", db)
    assert "nothing to do" in again.output

    chat.store = Store(db)
    assert chat.store.uncompressed_search_rows() == 0
    assert waiting(chat.store) == waiting_before, "the same text: not taken out of the index"
    assert {query: _found(chat, query, limit=50) for query in queries} == before
    assert_index_exact(db)


def test_a_chatbot_from_before_still_running_goes_on_adding_rows_after_the_upgrade(
    chat: Chat,
) -> None:
    """A connection without ``chatbot_text`` (a chatbot from before migration 10, still
    running as a newer one upgrades the database) adds rows as it did: nothing it does on
    insert needs the function. Its rows are found, waiting, and the next batch the newer
    chatbot takes in holds them. Deleting is the newer chatbot's: the old connection is
    refused, and nothing changes."""
    chat.say("t", "written by the newer chatbot, long enough to be kept compressed: " * 3)
    old = sqlite3.connect(chat.store.path, isolation_level=None)
    try:
        for n in range(4):  # (an even count: turns add two rows)
            old.execute(
                "INSERT INTO chatbot_messages (thread_id, message_id, checkpoint_id, role, "
                "content) VALUES ('old', ?, ?, 'user', ?)",
                (f"m{n}", f"1f0{n}", f"a capybara wrote this in the older window, number {n}"),
            )
        with pytest.raises(sqlite3.OperationalError, match="no such function: chatbot_"):
            old.execute("DELETE FROM chatbot_messages WHERE thread_id = 'old'")
    finally:
        old.close()
    assert len(_found(chat, "capybara", limit=10)) == 4
    assert _found(chat, '"older window, number 1"') == [
        "a capybara wrote this in the older window, number 1"
    ]
    one_turn_from_a_batch(chat)
    chat.say("u", "one more")
    assert waiting(chat.store) == set() and in_index(chat.store, "capybara") == 4
    assert len(_found(chat, "capybara", limit=10)) == 4
    assert_index_exact(chat.store.path)


def test_folding_finds_the_same_in_compressed_plain_waiting_and_indexed_rows(chat: Chat) -> None:
    """A short term whose lower case is in a compressed text (``ẞ`` for ``ß``), one whose lower
    case is in a script kept plain (``Ⱥ``: ``ⱥ``), a phrase FTS5 folds beyond ASCII (``ſ``, the
    Kelvin sign) and a phrase longer than SQLite's LIKE patterns are found the same while their
    rows wait for the index and once it holds them."""
    long_phrase = " ".join(f"word{n}" for n in range(9_000))  # (over 50,000 bytes)
    texts = [
        "Straße und Weg sind lang und breit in der alten Stadt",
        "Ⱥlpha bravo charlie delta echo foxtrot golf hotel",
        "the ſtring theory is about tiny vibrating loops in space",
        "the \u212aelvin scale reading was quite low today in the lab",
        long_phrase + " end",
    ]
    chat.say("t", *texts)
    queries = {
        "ẞ": [texts[0]],
        "ß": [texts[0]],
        "ⱥ": [texts[1]],
        "Ⱥ": [texts[1]],
        '"string theory"': [texts[2]],
        '"kelvin scale"': [texts[3]],
        f'"{long_phrase[:60_000]}"': [texts[4]],
    }

    def found() -> dict[str, list[str]]:  # (the users' messages: the replies echo them)
        return {
            query: [hit.text for hit in chat.find(query, limit=50) if hit.role == "user"]
            for query in queries
        }

    assert found() == queries
    one_turn_from_a_batch(chat)
    chat.say("u", "one more")
    assert waiting(chat.store) == set()
    assert found() == queries
    assert_index_exact(chat.store.path)
