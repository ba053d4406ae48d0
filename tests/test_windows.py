"""What servers and refusals said of a model's window, kept for the process and the next one
(the model cache): which answer wins, how long it is trusted, what survives a damaged cache."""

from __future__ import annotations

import json
import stat
import time

import pytest

from chatbot.engine import windows
from chatbot.engine.modelcache import cache_path
from chatbot.engine.windows import MAX_AGE, Window, WindowBook, input_limit, reply_room

ENDPOINT = "http://127.0.0.1:8080/v1"
SERVER = Window(4096, "server", "llama.cpp", "n_ctx of /props", 131072)


def test_a_window_is_kept_for_the_next_process_with_when_it_was_asked() -> None:
    WindowBook().record(ENDPOINT, "m", SERVER)
    later = WindowBook()
    found = later.lookup(ENDPOINT, "m")
    assert found is not None and found.tokens == 4096 and found.server == "llama.cpp"
    assert time.time() - found.learned_at < 60
    assert later.fresh(ENDPOINT, "m")
    assert later.lookup(ENDPOINT, "other-model") is None
    assert later.lookup("http://elsewhere/v1", "m") is None


def test_an_answer_a_day_old_is_asked_again_and_an_assumed_one_always() -> None:
    book = WindowBook()
    book.record(ENDPOINT, "m", SERVER)
    assert not book.fresh(ENDPOINT, "m", now=time.time() + MAX_AGE + 1)
    book.record(
        ENDPOINT, "a", Window(4096, "server", "Ollama", "default", assumed=True, until_loaded=True)
    )
    assert not book.fresh(ENDPOINT, "a"), "asked again until the model is loaded"
    book.record(
        ENDPOINT, "lcp", Window(2048, "server", "llama-cpp-python", "default", assumed=True)
    )
    assert book.fresh(ENDPOINT, "lcp"), "a default that asking again cannot change"
    assert not book.fresh(ENDPOINT, "m", now=time.time() + windows.WINDOW_AGE + 1)
    assert not book.fresh(ENDPOINT, "m", now=time.time() - 3600), "a clock set back"
    book.record(ENDPOINT, "silent", None)
    assert book.fresh(ENDPOINT, "silent"), "a server that says nothing is not asked every time"
    assert book.lookup(ENDPOINT, "silent") is None


def test_what_a_refusal_said_outlasts_a_server_that_says_nothing_or_assumes() -> None:
    book = WindowBook()
    book.learn_refusal(ENDPOINT, "m", 1024, 1500)
    book.record(ENDPOINT, "m", None)
    book.record(ENDPOINT, "m", Window(2048, "server", "llama-cpp-python", "", assumed=True))
    found = book.lookup(ENDPOINT, "m")
    assert found is not None and (found.tokens, found.source) == (1024, "refusal")
    book.record(ENDPOINT, "m", SERVER)  # (a server that says its window is believed)
    found = book.lookup(ENDPOINT, "m")
    assert found is not None and (found.tokens, found.source) == (4096, "server")


def test_a_refusal_without_a_number_only_ever_lowers_the_window() -> None:
    book = WindowBook()
    book.learn_refusal(ENDPOINT, "m", None, 3000)
    book.learn_refusal(ENDPOINT, "m", None, 5000)
    assert book.lookup(ENDPOINT, "m").tokens == 3000  # type: ignore[union-attr]
    book.learn_refusal(ENDPOINT, "m", None, 2500)
    assert book.lookup(ENDPOINT, "m").tokens == 2500  # type: ignore[union-attr]
    book.learn_refusal(ENDPOINT, "m", 8192, 9000)  # (one that says the number is believed)
    assert book.lookup(ENDPOINT, "m").tokens == 8192  # type: ignore[union-attr]


def test_the_note_about_a_window_is_said_once_across_processes() -> None:
    book = WindowBook()
    book.record(ENDPOINT, "m", SERVER)
    note = book.take_note(ENDPOINT, "m")
    assert note.startswith("llama.cpp runs this model with a 4,096-token window (the model takes")
    assert book.take_note(ENDPOINT, "m") == ""
    assert WindowBook().take_note(ENDPOINT, "m") == "", "not again in the next process"
    book.record(ENDPOINT, "m", SERVER)  # asked again, the same answer: still said
    assert book.take_note(ENDPOINT, "m") == ""
    book.record(ENDPOINT, "m", Window(2048, "server", "llama.cpp", "n_ctx of /props", 131072))
    assert "2,048-token window" in book.take_note(ENDPOINT, "m"), "a new window is news"


@pytest.mark.parametrize(
    "damage",
    [
        "{not json",
        json.dumps([1, 2]),
        json.dumps({"windows": []}),
        json.dumps({"windows": {ENDPOINT: {"m": {"window": {"tokens": "x"}, "asked_at": 1}}}}),
        json.dumps({"windows": {ENDPOINT: {"m": {"window": {"tokens": 0, "source": "server"}}}}}),
        json.dumps({"windows": {ENDPOINT: {"m": {"window": {"zzz": 1}, "asked_at": 1.0}}}}),
        json.dumps({"windows": {ENDPOINT: {"m": {"window": 5, "asked_at": 1.0}}}}),
    ],
)
def test_a_damaged_cache_is_asked_again_and_rewritten(damage: str) -> None:
    cache_path().parent.mkdir(parents=True, exist_ok=True)
    cache_path().write_text(damage)
    book = WindowBook()
    assert book.lookup(ENDPOINT, "m") is None and not book.fresh(ENDPOINT, "m")
    book.record(ENDPOINT, "m", SERVER)
    assert WindowBook().lookup(ENDPOINT, "m") is not None
    assert stat.S_IMODE(cache_path().stat().st_mode) == 0o600


def test_a_cache_that_cannot_be_written_keeps_the_window_for_the_process() -> None:
    folder = cache_path().parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.write_text("a file where the cache folder should be")
    book = WindowBook()
    book.record(ENDPOINT, "m", SERVER)
    book.learn_refusal(ENDPOINT, "m", 1024, 2000)
    found = book.lookup(ENDPOINT, "m")
    assert found is not None and found.tokens == 1024
    assert WindowBook().lookup(ENDPOINT, "m") is None, "nothing was kept: nothing failed either"


def test_a_password_in_the_endpoint_never_reaches_the_cache() -> None:
    secret = "http://ada:hunter2@127.0.0.1:8080/v1"
    WindowBook().record(secret, "m", SERVER)
    assert "hunter2" not in cache_path().read_text()
    assert WindowBook().lookup(secret, "m") is not None, "found again under the URL as set"


def test_room_for_the_reply_in_a_shared_window_and_none_in_an_input_limit() -> None:
    assert [reply_room(Window(w, "server"), None) for w in (256, 2048, 8192, 131072)] == [
        64,
        512,
        2048,
        4096,
    ]
    assert reply_room(Window(2048, "server"), 300) == 300
    assert reply_room(Window(2048, "server"), 5000) == 1024, "half the window at most"
    assert reply_room(Window(10, "refusal"), None) == 5
    assert input_limit(Window(2048, "server"), None) == 1536
    assert input_limit(Window(2048, "refusal"), 300) == 1748
    assert input_limit(Window(8192, "settings"), 300) == 8192, "a setting is what a request holds"
    assert input_limit(Window(128000, "profile"), None) == 128000


def test_a_window_says_where_it_comes_from() -> None:
    assert SERVER.origin() == "the server (llama.cpp: n_ctx of /props)"
    assert Window(900, "refusal", detail="it said 900 tokens").origin() == (
        "a refusal of the server (it said 900 tokens)"
    )
    assert Window(8192, "settings").origin() == "CHATBOT_MAX_INPUT_TOKENS"
    assumed = Window(2048, "server", "llama-cpp-python", "its default n_ctx", assumed=True)
    assert assumed.origin() == "the server's default (llama-cpp-python: its default n_ctx)"
    assert "if it runs with more, CHATBOT_MAX_INPUT_TOKENS says so" in assumed.note()


def test_what_wins_the_setting_the_profile_or_what_the_server_said() -> None:
    windows.BOOK.record(ENDPOINT, "m", SERVER)  # (4,096 tokens: 3,072 a request, 1,024 reply)
    said = windows.BOOK.lookup(ENDPOINT, "m")
    assert windows.window_of("m", ENDPOINT, None, None) == said
    assert windows.window_of("m", ENDPOINT, 128000, None) == said, "a server runs it smaller"
    assert windows.window_of("m", ENDPOINT, 2048, None) == Window(2048, "profile")
    assert windows.window_of("m", ENDPOINT, 128000, 5000) == said, "a setting past the window"
    assert windows.window_of("m", ENDPOINT, None, 3000) == Window(3000, "settings")
    windows.BOOK.record(ENDPOINT, "a", Window(2048, "server", "llama-cpp-python", "", assumed=True))
    assert windows.window_of("a", ENDPOINT, None, 6000) == Window(6000, "settings"), (
        "a window only assumed never overrides the setting"
    )


def test_a_named_pipe_where_the_cache_should_be_is_never_read() -> None:
    import os

    cache_path().parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(cache_path())
    book = WindowBook()
    assert book.lookup(ENDPOINT, "m") is None  # (reading it would wait for a writer forever)
    book.record(ENDPOINT, "m", SERVER)
    assert WindowBook().lookup(ENDPOINT, "m") is not None, "replaced by the cache file"
