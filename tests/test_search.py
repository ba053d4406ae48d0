"""Search everything ever said: `chatbot search`, `/search` and the index under them, on SQLite
and PostgreSQL. Messages are indexed from the checkpoints as each turn ends, so messages folded
into a summary are found, at the first checkpoint that holds them, and a turn stopped before
its thread was indexed loses nothing."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.store.base import SqlStore
from chatbot.store.checkpoints import read_checkpoint
from chatbot.store.copying import plan_copy, run_copy
from chatbot.store.postgres import open_store
from chatbot.store.search import (
    Hit,
    SearchError,
    lagging_threads,
    make_snippet,
    parse_query,
    search,
)
from chatbot.threads.backend import LocalBackend
from tests.scripted import ScriptedChatModel
from tests.test_cli import invoke
from tests.test_repl import World, errors, flat
from tests.test_repl import make_world as make_world  # the fixture

FOLDING = {"summary_trigger": "messages:6", "summary_keep": "messages:2"}


def _settings(db: str) -> Settings:
    return Settings(_env_file=None, model="offline", db=db, **FOLDING)  # type: ignore[call-arg]


class Chat:
    """A store and a backend on one database, the chat model scripted (``reply N``)."""

    def __init__(self, db: str) -> None:
        self.store = open_store(db)
        graph = build_graph(
            ScriptedChatModel(),
            ScriptedChatModel(default="SUMMARY"),
            _settings(db),
            self.store.saver,
        )
        self.backend = LocalBackend(graph, self.store)

    def say(self, thread: str, *texts: str) -> None:
        for text in texts:
            list(self.backend.send(thread, text))

    def find(self, query: str, **options: Any) -> list[Hit]:
        return search(self.store, query, **options)


@pytest.fixture
def chat(any_db: str) -> Iterator[Chat]:
    made = Chat(any_db)
    try:
        yield made
    finally:
        made.store.close()


def _rows(store: SqlStore) -> list[tuple[Any, ...]]:
    return store.query("SELECT thread_id, message_id FROM chatbot_messages ORDER BY 1, 2")


# --- the index -------------------------------------------------------------------------------


def test_messages_folded_into_the_summary_are_found_at_their_first_checkpoint(chat: Chat) -> None:
    chat.say("t", "my cat is called Mozzarella", "two", "three", "four")
    current = chat.backend.current("t")
    assert current is not None and current.summary == "SUMMARY"
    assert "my cat is called Mozzarella" not in [m.text for m in current.messages], "folded"

    (hit,) = chat.find("mozzarella")
    assert (hit.thread_id, hit.role, hit.text) == ("t", "user", "my cat is called Mozzarella")
    holding = read_checkpoint(chat.store, "t", hit.checkpoint_id)
    assert hit.message_id in [m.id for m in holding.messages]
    assert holding.parent_id is not None
    parent = read_checkpoint(chat.store, "t", holding.parent_id)
    assert hit.message_id not in [m.id for m in parent.messages], "the first that holds it"


def test_each_message_is_indexed_once_however_many_checkpoints_hold_it(chat: Chat) -> None:
    chat.say("t", "one", "two", "three", "four", "five")
    rows = _rows(chat.store)
    assert len(rows) == len(set(rows)) == 10, "5 messages and 5 replies, once each"
    assert [h.text for h in chat.find("reply")] == [f"reply {n}" for n in (5, 4, 3, 2, 1)]


def test_a_new_process_indexes_only_the_checkpoints_since_the_thread_was_indexed(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "db.sqlite")
    first = Chat(db)
    first.say("t", *(f"message {n}" for n in range(40)))  # 80 indexed; the window holds few
    first.store.close()
    (indexed,) = sqlite3.connect(db).execute("SELECT count(*) FROM chatbot_messages").fetchone()
    assert indexed == 80

    later = Chat(db)  # another process: nothing remembered
    asked: list[str] = []
    later.store.conn.set_trace_callback(asked.append)  # (SQLite's own statement trace)
    try:
        later.say("t", "one more")
        read = [sql for sql in asked if "ORDER BY checkpoint_id, task_id, idx" in sql]
        assert len(read) == 1, "one read of the new checkpoints' writes"
        assert read[0].count("'1f") <= 5, read[0]  # (the turn's own parents, not the thread's)
        rows = _rows(later.store)
        assert len(rows) == len(set(rows)) == 82, "the new turn's two messages, once each"
        assert [h.text for h in later.find("one more")] == ["one more"]
    finally:
        later.store.close()


def test_every_term_must_appear_and_a_quoted_phrase_stays_whole(chat: Chat) -> None:
    chat.say("t", "green tea in the morning", "black tea at night", "green light at night")
    assert [h.text for h in chat.find("TEA night")] == ["black tea at night"]
    assert [h.text for h in chat.find('"at night"')] == [
        "green light at night",
        "black tea at night",
    ]
    assert chat.find('"night tea"') == []
    assert [h.text for h in chat.find("green", thread_id="t", limit=1)] == ["green light at night"]


def test_chinese_and_japanese_are_found_by_any_part_of_a_sentence(chat: Chat) -> None:
    chat.say("zh", "我喜欢北京大学的图书馆", "上海的天气很好")
    chat.say("ja", "東京タワーに行きました")
    assert [h.text for h in chat.find("北京大学")] == ["我喜欢北京大学的图书馆"]
    assert [h.text for h in chat.find("北京")] == ["我喜欢北京大学的图书馆"], "two characters"
    assert [h.text for h in chat.find("图")] == ["我喜欢北京大学的图书馆"], "one character"
    assert [h.text for h in chat.find("天气 上海")] == ["上海的天气很好"]
    assert [h.thread_id for h in chat.find("タワー")] == ["ja"]
    assert chat.find("北京 天气") == []


def test_like_wildcards_in_a_query_are_plain_characters(chat: Chat) -> None:
    chat.say("t", "100% sure", "a_b", "abc")
    assert [h.text for h in chat.find("%")] == ["100% sure"]
    assert [h.text for h in chat.find("_")] == ["a_b"]


def test_rename_moves_the_index_and_delete_empties_it(chat: Chat) -> None:
    chat.say("old", "a walrus on the beach")
    chat.backend.rename("old", "new")
    assert [h.thread_id for h in chat.find("walrus")] == ["new"]
    chat.say("new", "the walrus again")
    assert [h.text for h in chat.find("walrus")] == ["the walrus again", "a walrus on the beach"]
    assert chat.backend.delete("new")
    assert chat.find("walrus") == [] and _rows(chat.store) == []


def test_a_fork_is_found_too_and_a_thread_made_again_after_delete_is_indexed(chat: Chat) -> None:
    chat.say("t", "the hippo song")
    chat.backend.fork("t", None, "t-fork1")
    assert sorted(h.thread_id for h in chat.find("hippo song")) == ["t", "t-fork1"]
    chat.backend.delete("t-fork1")
    chat.backend.fork("t", None, "t-fork1")  # the same messages, the same thread id
    assert sorted(h.thread_id for h in chat.find("hippo song")) == ["t", "t-fork1"]


def test_undo_and_retry_keep_what_they_replaced_findable(chat: Chat) -> None:
    chat.say("t", "first words")
    list(chat.backend.regenerate("t"))  # reply 1 is replaced by reply 2
    assert [h.text for h in chat.find("reply")] == ["reply 2", "reply 1"]


def test_copied_threads_are_searchable_in_the_target(tmp_path: Path, any_db: str) -> None:
    source = Chat(str(tmp_path / "source.sqlite"))
    try:
        source.say("t", "an okapi in the forest", "two", "three", "four")
        with open_store(any_db) as target:
            run_copy(source.store, target, plan_copy(source.store, target))
            (hit,) = search(target, "okapi")
            assert hit.checkpoint_id == source.find("okapi")[0].checkpoint_id
    finally:
        source.store.close()


def _lose_the_index(db: str, thread: str) -> None:
    """The database as a process killed after a turn's checkpoints, before its thread was
    indexed, leaves it: the thread's rows and mark gone."""
    with open_store(db) as store:
        store.write(
            ("DELETE FROM chatbot_messages WHERE thread_id = ?", (thread,)),
            ("DELETE FROM chatbot_indexed WHERE thread_id = ?", (thread,)),
        )


def test_a_turn_stopped_before_its_thread_was_indexed_loses_nothing(any_db: str) -> None:
    chat = Chat(any_db)
    chat.say("t", "a narwhal in the fjord", "two", "three", "four")
    chat.say("u", "no whales here")
    chat.store.close()
    _lose_the_index(any_db, "t")

    with open_store(any_db) as store:
        assert lagging_threads(store) == ["t"] and len(_rows(store)) == 2
    found = invoke("search", "narwhal", "--json", "--db", any_db)  # reads only
    assert found.exit_code == 0 and found.stderr == "", found.output
    (hit,) = json.loads(found.stdout)
    assert hit["thread_id"] == "t" and hit["role"] == "user"
    with open_store(any_db) as store:
        assert lagging_threads(store) == ["t"], "a reading command wrote nothing"
        holding = read_checkpoint(store, "t", hit["checkpoint_id"])
        assert holding.parent_id is not None
        parent = read_checkpoint(store, "t", holding.parent_id)
        assert hit["message_id"] in [m.id for m in holding.messages]
        assert hit["message_id"] not in [m.id for m in parent.messages]
    offline = {"CHATBOT_MODEL": "offline"}
    repl = invoke("chat", "--db", any_db, input="/search narwhal\n", env=offline)
    assert repl.exit_code == 0 and "a narwhal in the fjord" in repl.stdout, repl.output
    with open_store(any_db) as store:
        assert lagging_threads(store) == []
        assert len(_rows(store)) == 10, "every message of both threads, once"
        again = search(store, "narwhal")
        assert [(h.thread_id, h.checkpoint_id) for h in again] == [("t", hit["checkpoint_id"])]


def test_the_next_turn_indexes_what_a_stopped_one_left(sqlite_db: str) -> None:
    chat = Chat(sqlite_db)
    chat.say("t", "a narwhal in the fjord")
    chat.store.close()
    _lose_the_index(sqlite_db, "t")
    chat = Chat(sqlite_db)
    chat.say("t", "and a walrus")
    assert lagging_threads(chat.store) == []
    assert [h.text for h in chat.find("narwhal")] == ["a narwhal in the fjord"]
    assert len([row for row in _rows(chat.store) if row[0] == "t"]) == 4
    chat.store.close()


def test_search_reads_a_lagging_sqlite_file_without_changing_it(tmp_path: Path) -> None:
    db = str(tmp_path / "old.sqlite")
    chat = Chat(db)
    chat.say("t", "a narwhal in the fjord")
    chat.store.close()
    _lose_the_index(db, "t")
    before = Path(db).read_bytes()
    result = invoke("search", "narwhal", "--json", "--db", db)
    assert result.exit_code == 0 and len(json.loads(result.stdout)) == 1, result.output
    assert Path(db).read_bytes() == before, "search opens it read-only"


def test_vacuum_keeps_the_index_pointing_at_the_right_messages(tmp_path: Path) -> None:
    db = str(tmp_path / "db.sqlite")
    chat = Chat(db)
    chat.say("a", "apples", "apricots")
    chat.say("b", "bananas")
    chat.backend.delete("a")
    chat.store.vacuum()
    assert [h.text for h in chat.find("bananas")] == ["bananas"]
    assert chat.find("apples") == []
    chat.store.close()


# --- queries and snippets --------------------------------------------------------------------


def test_a_query_is_words_or_quoted_phrases() -> None:
    assert parse_query('green  "at night" tea green') == ["green", "at night", "tea"]
    for empty in ("", "   ", '""'):
        with pytest.raises(SearchError, match="the search is empty"):
            parse_query(empty)


def test_a_quote_left_open_runs_to_the_end_of_the_query() -> None:
    assert parse_query('tea "at night') == ["tea", "at night"]
    assert parse_query('5" screen') == ['5"', "screen"], "a quote inside a word is a character"
    with pytest.raises(SearchError, match="the search is empty"):
        parse_query('"')


def test_short_terms_beyond_ascii_are_found_in_any_case_like_longer_ones(chat: Chat) -> None:
    chat.say("ru", "Он сказал да", "ÉCOLE")
    assert [h.text for h in chat.find("ДА")] == ["Он сказал да"]
    assert [h.text for h in chat.find("он СКАЗАЛ")] == ["Он сказал да"]
    assert [h.text for h in chat.find("é")] == ["ÉCOLE"]
    assert [h.text for h in chat.find("Éc")] == ["ÉCOLE"]


def test_a_huge_limit_is_all_hits_not_an_error(sqlite_db: str) -> None:
    result = invoke("search", "giraffe", "--json", "--limit", str(10**30), "--db", sqlite_db)
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == 2


def test_a_snippet_is_one_safe_line_around_the_first_match() -> None:
    text = "start " + "filler words here " * 20 + "the Needle is\nhere\x1b[2J " + "more " * 40
    snippet = make_snippet(text, ["needle"], width=60)
    assert snippet.text.startswith("…") and snippet.text.endswith("…")
    assert "\n" not in snippet.text and "\x1b" not in snippet.text
    ((start, end),) = snippet.spans
    assert snippet.text[start:end] == "Needle"
    short = make_snippet("北京大学 and 北京", ["北京"])
    assert [short.text[a:b] for a, b in short.spans] == ["北京", "北京"]


# --- the command line ------------------------------------------------------------------------


@pytest.fixture
def sqlite_db(tmp_path: Path) -> str:
    db = str(tmp_path / "db.sqlite")
    chat = Chat(db)
    chat.say("zoo", "the giraffe is tall", "two", "three", "four")
    chat.say("farm", "the giraffe escaped to the farm")
    chat.store.close()
    return db


def test_search_json_gives_thread_checkpoint_role_time_and_a_marked_snippet(
    sqlite_db: str,
) -> None:
    result = invoke("search", "Giraffe", "--json", "--db", sqlite_db)
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)
    assert [(h["thread_id"], h["role"]) for h in hits] == [("farm", "user"), ("zoo", "user")]
    first = hits[0]
    assert set(first) == {
        "thread_id",
        "checkpoint_id",
        "message_id",
        "role",
        "time",
        "snippet",
        "highlights",
    }
    assert first["snippet"] == "the giraffe escaped to the farm"
    assert [first["snippet"][a:b] for a, b in first["highlights"]] == ["giraffe"]
    assert first["time"].startswith("20")
    limited = invoke(
        "search", "giraffe", "--json", "--limit", "1", "--thread", "zoo", "--db", sqlite_db
    )
    assert [h["thread_id"] for h in json.loads(limited.stdout)] == ["zoo"]


def test_the_checkpoint_a_hit_names_opens_with_show(sqlite_db: str) -> None:
    (hit,) = json.loads(invoke("search", "tall", "--json", "--db", sqlite_db).stdout)
    shown = invoke("show", "zoo", "--checkpoint", hit["checkpoint_id"], "--json", "--db", sqlite_db)
    assert shown.exit_code == 0, shown.output
    texts = [m["content"] for m in json.loads(shown.stdout)["messages"]]
    assert "the giraffe is tall" in texts
    now = json.loads(invoke("show", "zoo", "--json", "--db", sqlite_db).stdout)
    assert "the giraffe is tall" not in [m["content"] for m in now["messages"]], "folded since"


def test_search_in_the_terminal_shows_thread_role_checkpoint_and_snippet(sqlite_db: str) -> None:
    result = invoke("search", "giraffe", "--db", sqlite_db)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("farm ") and " user " in lines[0] and "checkpoint " in lines[0]
    assert lines[1].strip() == "the giraffe escaped to the farm"
    assert "chatbot show THREAD --checkpoint ID" in result.stderr
    nothing = invoke("search", "okapi", "--db", sqlite_db)
    assert nothing.exit_code == 0 and "nothing found for 'okapi'" in nothing.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["search", ""], 2, "error: the search is empty: give some text to find"),
        (["search", '""'], 2, "error: the search is empty: give some text to find"),
        (["search", "x", "--limit", "0"], 2, "--limit"),
        (["search", "x", "--thread", "nope"], 1, "error: no thread 'nope'"),
        (
            ["search", " ".join(f"w{n}" for n in range(2000))],
            2,
            "error: the search has 2000 words: give at most 64",
        ),
        (
            ["search", "x", "--url", "http://127.0.0.1:9"],
            2,
            "error: search works on local threads only (this session uses the LangGraph "
            "server at http://127.0.0.1:9)",
        ),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    sqlite_db: str, args: list[str], code: int, message: str
) -> None:
    result = invoke(*args, "--db", sqlite_db)
    assert result.exit_code == code
    (line,) = result.stderr.strip().splitlines()
    assert message in line
    assert result.stdout == ""


def test_search_of_a_database_not_made_yet_finds_nothing_and_creates_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "data" / "chatbot" / "chatbot.sqlite"  # the default database
    result = invoke("search", "anything", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    assert not db.parent.exists()
    named = invoke("search", "anything", "--json", "--db", str(tmp_path / "none.sqlite"))
    assert named.exit_code == 1 and "there is no database at" in named.stderr
    assert not (tmp_path / "none.sqlite").exists()


# --- the REPL --------------------------------------------------------------------------------


def test_repl_search_finds_folded_messages_of_every_thread(
    make_world: Callable[..., World],
) -> None:
    world = make_world()
    world.run(["a pelican flew by", "two", "three", "four"], thread_id="birds")
    transcript = world.run(["I saw a pelican too", "/search pelican", "/search", "/search zebra"])
    lines = transcript.splitlines()
    headings = [
        line for line in lines if "checkpoint " in line and line.split()[0] in ("t1", "birds")
    ]
    assert [h.split()[0] for h in headings] == ["t1", "birds"]
    assert "a pelican flew by" in transcript, "folded into birds' summary, found all the same"
    assert "/thread THREAD, then /show CHECKPOINT or /fork CHECKPOINT, opens one" in flat(
        transcript
    )
    assert errors(transcript) == [
        'error: give the text to find: /search TEXT (all words; "a phrase")'
    ]
    assert "nothing found for 'zebra'" in transcript
    birds = next(line for line in headings if line.startswith("birds"))
    checkpoint = birds.split("checkpoint ")[1].strip()
    shown = world.run(["/show " + checkpoint], thread_id="birds")
    assert "a pelican flew by" in shown


def test_sqlite_file_holds_the_index_in_the_same_database(sqlite_db: str) -> None:
    with sqlite3.connect(sqlite_db) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        (indexed,) = conn.execute(
            "SELECT COUNT(*) FROM chatbot_messages_fts WHERE chatbot_messages_fts "
            "MATCH 'gir AND ira AND raf AND aff AND ffe'"
        ).fetchone()
    assert {"chatbot_messages", "chatbot_messages_fts", "chatbot_indexed"} <= tables
    assert indexed == 2, "the message and its reply, in the index as their turn ends"


def test_a_quoted_phrase_is_found_across_a_line_break_a_tab_or_a_run_of_spaces(
    chat: Chat,
) -> None:
    """A phrase's words match with any whitespace between them (a reply's line break, a
    pasted tab): the query's space stands for any of it, on both databases, for words the
    index finds and for words too short for it."""
    chat.say(
        "t",
        "the first line ends here\nand the second line starts",
        "a  wide   gap here",
        "tab\tseparated words",
        "ab\ncd ef",
        "北京\n大学",
    )

    def found(query: str) -> list[str]:
        return [hit.text for hit in chat.find(query)]

    assert found('"ends here and the second"') == [
        "the first line ends here\nand the second line starts"
    ]
    assert found('"ENDS   here and"') == found('"ends here and"') != []
    assert found('"wide gap"') == ["a  wide   gap here"]
    assert found('"tab separated" words') == ["tab\tseparated words"]
    assert found('"ab cd"') == ["ab\ncd ef"], "words too short for the index"
    assert found('"AB CD ef"') == ["ab\ncd ef"]
    assert found('"北京 大学"') == ["北京\n大学"]
    assert found('"here the second"') == [], "the words must follow each other"
    assert found('"ab ef"') == []
    (hit,) = chat.find('"here and the"')
    snippet = hit.snippet()
    assert [snippet.text[a:b] for a, b in snippet.spans] == ["here and the"]


def test_a_phrase_matches_the_same_whitespace_and_case_on_both_databases(chat: Chat) -> None:
    """What Python takes for whitespace (a no-break space, U+0085, a vertical tab) is
    whitespace on PostgreSQL too; a phrase of short words folds case as a short word does
    (``ss`` is not ``ß``); the snippet shows whitespace the screen would drop as a space; a
    phrase of thousands of words is searched like any other."""
    chat.say("t", "hello\u00a0world", "next\u0085line", "vertical\vtab here", "ß x", "Σ Λ")

    def found(query: str) -> list[str]:
        return [hit.text for hit in chat.find(query)]

    assert found('"hello world"') == ["hello\u00a0world"]
    assert found('"next line"') == ["next\u0085line"]
    assert found('"ss x"') == [] and found('"ß X"') == ["ß x"]
    assert found('"σ λ"') == ["Σ Λ"]
    (hit,) = chat.find('"vertical tab"')
    snippet = hit.snippet()
    assert snippet.text == "vertical tab here"
    assert [snippet.text[a:b] for a, b in snippet.spans] == ["vertical tab"]
    long_phrase = '"' + " ".join(["word"] * 3_000) + '"'
    assert chat.find(long_phrase) == []
