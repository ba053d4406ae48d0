"""The search index under `chatbot search`, `/search` and the recall tool: each message is a row
of ``chatbot_messages`` once, written as the turn that saved it ends (on SQLite kept in an FTS5
trigram index by triggers). A thread whose newest checkpoints the index has not read yet (a turn
stopped before its thread was indexed, a LangGraph program writing through chatbot's saver) is
found all the same, and as it is once indexed, on a database opened read-only too. After every
way messages come and go (retry, fork, undo, rename, copy, delete, prune), search finds what
the threads hold: the index is what indexing every thread afresh makes, and FTS5 finds it sound
and equal to its table."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage

from chatbot.store.base import SqlStore, thread_config
from chatbot.store.copying import plan_copy, run_copy
from chatbot.store.search import catch_up, lagging_threads, reindex, search
from chatbot.store.sqlite import Store
from chatbot.threads.runner import blocking
from tests.helpers import slow_on_postgres
from tests.test_cli import invoke
from tests.test_search import Chat
from tests.test_search import chat as chat  # the fixture

Row = tuple[Any, ...]


def _rows(store: SqlStore) -> list[Row]:
    return sorted(
        store.query(
            "SELECT thread_id, message_id, checkpoint_id, role, content FROM chatbot_messages"
        )
    )


def assert_index_exact(store: SqlStore) -> None:
    """The index holds what indexing every thread afresh from its checkpoints makes: no message
    missing, none left behind, none twice, each at the first checkpoint that holds it. On
    SQLite, FTS5's own checks too: the index is sound ('integrity-check') and holds every row
    of ``chatbot_messages`` and nothing else ('integrity-check' with rank 1 compares it with
    its content table)."""
    if store.dialect == "sqlite":
        fts = "INSERT INTO chatbot_messages_fts (chatbot_messages_fts"
        store.write(
            (f"{fts}) VALUES ('integrity-check')", ()),
            (f"{fts}, rank) VALUES ('integrity-check', 1)", ()),
        )
    kept = _rows(store)
    threads = [
        row[0]
        for row in store.query(
            "SELECT thread_id FROM chatbot_messages UNION SELECT thread_id FROM checkpoints"
        )
    ]
    store.write(*(statement for thread in threads for statement in reindex(thread)))
    catch_up(store)
    assert _rows(store) == kept


def _found(chat: Chat, query: str, **options: Any) -> list[str]:
    return [hit.text for hit in chat.find(query, **options)]


def _unindexed(chat: Chat, thread: str, *texts: str) -> None:
    """Turns saved and not indexed: the graph run on chatbot's saver by a LangGraph program
    of its own (a script), as a turn stopped before its thread was indexed leaves them."""
    for text in texts:
        blocking(
            chat.backend.graph.ainvoke({"messages": [HumanMessage(text)]}, thread_config(thread))
        )


# --- every way messages come and go ----------------------------------------------------------


def test_retry_fork_undo_rename_and_copy_are_found_as_the_threads_hold_them(
    chat: Chat, tmp_path: Path
) -> None:
    chat.say("t", "the okapi sleeps")
    list(chat.backend.regenerate("t"))  # a new reply; the old one stays found at its checkpoint
    chat.backend.fork("t", None, "f")
    chat.say("f", "the okapi wakes")
    assert sorted((h.thread_id, h.text) for h in chat.find("okapi")) == [
        ("f", "the okapi sleeps"),
        ("f", "the okapi wakes"),
        ("t", "the okapi sleeps"),
    ]
    assert_index_exact(chat.store)
    before_wakes = chat.backend.history("f")[1]  # (newest first)
    chat.backend.restore("f", before_wakes.checkpoint_id, "undo")
    chat.backend.rename("f", "g")
    assert sorted((h.thread_id, h.text) for h in chat.find("okapi")) == [
        ("g", "the okapi sleeps"),
        ("g", "the okapi wakes"),
        ("t", "the okapi sleeps"),
    ]
    assert _found(chat, "okapi", thread_id="f") == []
    assert_index_exact(chat.store)

    with Store(str(tmp_path / "target.sqlite")) as target:
        run_copy(chat.store, target, plan_copy(chat.store, target))
        assert lagging_threads(target) == []
        for query in ("okapi", "reply 1", "reply 2", '"okapi wakes"'):
            assert search(target, query, limit=100) == chat.find(query, limit=100), query
        assert_index_exact(target)


def test_a_thread_deleted_and_made_again_finds_only_its_new_messages(chat: Chat) -> None:
    chat.say("t", "an alpha particle")
    chat.backend.delete("t")
    assert chat.find("particle") == []
    chat.say("t", "a beta particle")
    assert _found(chat, "particle") == ["a beta particle"]
    assert_index_exact(chat.store)

    chat.say("u", "a gamma particle")
    chat.store.saver.delete_thread("u")  # as a LangGraph program deletes it, through the saver
    assert chat.find("gamma") == []
    chat.say("u", "a delta particle")
    assert _found(chat, "particle") == ["a delta particle", "a beta particle"]
    assert chat.find("gamma") == []
    assert_index_exact(chat.store)


def test_prune_removes_the_search_rows_of_the_threads_it_removes(chat: Chat) -> None:
    chat.say("t", "an ibis wades")
    chat.say("u", "an ibis flies")
    _unindexed(chat, "w", "an ibis lands")
    assert len(chat.find("ibis")) == 3

    result = invoke("prune", "--inactive-days", "0", "--yes", "--db", chat.store.path)
    assert result.exit_code == 0, result.output
    assert chat.find("ibis") == []
    assert chat.store.query("SELECT COUNT(*) FROM chatbot_messages") == [(0,)]
    chat.say("t", "the ibis is back")
    assert _found(chat, "ibis") == ["the ibis is back"]
    assert_index_exact(chat.store)


# --- a thread the index has not read yet -----------------------------------------------------


def _digest(db: str) -> list[str]:
    """The file's bytes and its write-ahead log's (none, or empty: the same)."""
    return [
        hashlib.sha256(path.read_bytes() if path.exists() else b"").hexdigest()
        for path in (Path(db), Path(db + "-wal"))
    ]


def test_search_works_on_a_read_only_database_with_messages_not_yet_indexed(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "db.sqlite")
    chat = Chat(db)
    try:
        chat.say("t", "the capybara swims", "the capybara naps")
        _unindexed(chat, "t", "the capybara eats")
        _unindexed(chat, "u", "another capybara")
        assert lagging_threads(chat.store) == ["t", "u"]
    finally:
        chat.store.close()
    before = _digest(db)

    with Store(db, read_only=True) as store:
        assert store.read_only
        found = [
            (hit.thread_id, hit.text) for hit in search(store, "capybara") if hit.role == "user"
        ]
        assert found == [
            ("u", "another capybara"),
            ("t", "the capybara eats"),
            ("t", "the capybara naps"),
            ("t", "the capybara swims"),
        ]
        assert [hit.text for hit in search(store, "eats capy")] == ["the capybara eats"]
        assert [hit.text for hit in search(store, "capybara", thread_id="u")] == [
            "another capybara"
        ]
        read_only = {query: search(store, query) for query in ("capybara", "reply", "eats")}
    assert _digest(db) == before, "nothing written"

    with Store(db) as store:
        catch_up(store)
        assert lagging_threads(store) == []
        assert {query: search(store, query) for query in read_only} == read_only
        assert_index_exact(store)


GREEK_AND_MORE = [
    "ΟΔΟΣ ΚΑΙ ΝΕΡΟ",
    "Straße und STRASSE",
    "ſtrange long s",
    "İstanbul kelvin 5 K",
    "ÉCOLE élève",
    "Он сказал ДА",
    "東京タワーに行きました",
    "我喜欢北京大学的图书馆",
]
QUERIES = [
    "δοσ",  # (ΟΔΟΣ in lower case, as a word's middle: no final sigma)
    "οδος",  # (and as a word ends: ς)
    "stran",
    "ſtr",
    "i̇stanbul",  # (what Python makes of "İ" in lower case)
    "İstanbul",
    "straße",
    "strasse",
    "vin 5 k",
    "école ÉLÈVE",
    "сказал да",
    "タワー",
    "北京",
    "京",
    "ΝΕΡΟ δα",
]


def test_a_message_not_yet_indexed_is_found_exactly_as_once_it_is_indexed(chat: Chat) -> None:
    _unindexed(chat, "t", *GREEK_AND_MORE)
    assert lagging_threads(chat.store) == ["t"]
    not_yet = {query: _found(chat, query) for query in QUERIES}
    assert not_yet["ΝΕΡΟ δα"] == [] and not_yet["北京"] == ["我喜欢北京大学的图书馆"]

    catch_up(chat.store)
    assert lagging_threads(chat.store) == []
    assert {query: _found(chat, query) for query in QUERIES} == not_yet
    assert_index_exact(chat.store)


def test_a_quoted_phrase_finds_the_messages_its_words_find_side_by_side(chat: Chat) -> None:
    """Case is folded alike in a word and in a phrase, in whatever script: a word of one
    letter (``ẞ`` for ``ß``, ``Ⱥ`` for ``ⱥ``), and the words of a phrase, quoted or not."""
    texts = [
        "Straße und Weg sind lang und breit in der alten Stadt",
        "Ⱥlpha bravo charlie delta echo foxtrot golf hotel",
        "the ſtring theory is about tiny vibrating loops in space",
        "the \u212aelvin scale reading was quite low today in the lab",
        "ΟΔΟΣ ΚΑΙ ΝΕΡΟ στην πόλη",
    ]
    chat.say("t", *texts)
    letters = {"ẞ": [texts[0]], "ß": [texts[0]], "ⱥ": [texts[1]], "Ⱥ": [texts[1]]}
    assert {query: _found(chat, query) for query in letters} == letters
    assert _found(chat, '"straße und"') == [texts[0]]
    assert _found(chat, '"kelvin scale"') == [texts[3]]
    for words in ("straße und", "kelvin scale", "string theory", "οδος και"):
        assert _found(chat, f'"{words}"') == _found(chat, words), words


@slow_on_postgres
def test_messages_holding_a_terms_trigrams_apart_are_not_hits_however_many_come_first(
    chat: Chat,
) -> None:
    """A message holding ``hel``, ``ell`` and ``llo`` but not ``hello`` is no hit, even when
    more such messages than the limit are newer than the hits."""
    chat.say("t", "hello from the first", "HELLO from the second")
    chat.say("t", *(f"hel ell llo, decoy {n}" for n in range(40)))
    assert _found(chat, "hello", limit=2) == ["HELLO from the second", "hello from the first"]
    assert _found(chat, '"llo from"', limit=1) == ["HELLO from the second"]
    assert _found(chat, "hello decoy") == []
    assert len(_found(chat, "coy", limit=100)) == 40  # (three characters: one trigram)


def test_a_term_longer_than_sqlites_like_patterns_is_found(chat: Chat) -> None:
    """SQLite's LIKE takes patterns of up to 50,000 bytes: a longer term (a pasted text in
    quotes), a word or a phrase, is found, not an error. (The phrase's words repeat, as a text's
    do: PostgreSQL's index is asked once for each distinct word.)"""
    long_word = "ab" * 30_000
    long_phrase = " ".join(f"word{n % 100}" for n in range(9_000))
    assert len(long_phrase[:60_000].encode()) > 50_000
    chat.say("t", f"{long_word} end", f"{long_phrase} end")
    assert _found(chat, f'"{long_word[:55_000]}"', limit=1) == [f"{long_word} end"]
    assert _found(chat, f'"{long_phrase[:60_000]}"', limit=1) == [f"{long_phrase} end"]


def test_long_messages_in_any_script_are_found_by_every_kind_of_query(chat: Chat) -> None:
    """A long message is found by its words, by a phrase across a line break, by a word of
    one Chinese character; its hit gives back the exact text, and deleting its thread takes
    it out of search."""
    english = (
        "The walrus and the carpenter were walking close at hand;\nthey wept like anything to "
        "see such quantities of sand. "
    ) * 6
    chinese = "我们明天去北京大学参观，然后在上海吃火锅。" * 8
    greek = "ΟΔΟΣ " + "a long road with many turns and a view of the sea " * 4
    mixed = "We flew to 北京 in May and walked along the old city walls every morning. " * 3
    chat.say("t", english, chinese, greek, mixed)
    queries = {
        "carpenter wept": [english],
        '"quantities of sand. The walrus"': [english],
        '"at hand; they wept"': [english],  # (across a line break)
        "北京大学": [chinese],
        "上海": [chinese],
        "京": [mixed, chinese],
        "北京 walls": [mixed],
        "οδοσ": [greek],
        "walrus 北京": [],
    }
    found = {
        query: [hit.text for hit in chat.find(query, limit=5) if hit.role == "user"]
        for query in queries
    }
    assert found == queries
    assert_index_exact(chat.store)

    chat.store.delete_thread("t")
    assert _found(chat, "carpenter") == [] and _found(chat, "上海") == []
    assert_index_exact(chat.store)
