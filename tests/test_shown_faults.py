"""What is shown and what is stored (docs/reliability.md, "What is shown and stored").

- A password in ``OPENAI_BASE_URL`` is written nowhere: not in the cached model list, the call
  log, the exports or the database.
- Bidi controls and zero-width characters never reach the terminal or the Markdown export,
  as escape codes never do; the stored text and the JSON keep them.

The only fakes are at the edge: the fake OpenAI server for the CLI, a scripted chat model for
the REPL.
"""

from __future__ import annotations

import io
import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from chatbot.config.settings import Settings
from chatbot.config.sources import endpoint_of
from chatbot.engine.graph import build_graph
from chatbot.engine.modellist import cache_path, completion_names
from chatbot.sanitize import StreamSanitizer, escape_json_controls, sanitize
from chatbot.store.sqlite import Store
from chatbot.terminal.commands import dispatch
from chatbot.terminal.repl import Repl, ScriptedReader
from chatbot.threads.backend import LocalBackend
from tests.fake_openai import FakeOpenAI
from tests.helpers import (
    CONTROL,
    Cli,
    echo_or_summary,
    is_summary_request,
    ok,
    stored_bytes,
    summarizing,
    worth_folding,
)
from tests.scripted import ScriptedChatModel

# --- a password in the model server's URL ------------------------------------------------------

PASSWORD = "PW-hunter2/x"
"""With a ``/``: written ``%2F`` in a URL, so both forms are looked for."""


def with_password(base_url: str) -> str:
    return base_url.replace("http://", f"http://ada:{quote(PASSWORD, safe='')}@")


def files_holding(folder: Path, *secrets: str) -> list[Path]:
    """Every file under ``folder`` that holds one of ``secrets`` (as UTF-8 bytes; in a
    SQLite database, inside its compressed values too)."""
    needles = [secret.encode() for secret in secrets]

    def content(path: Path) -> bytes:
        return stored_bytes(path) if path.suffix == ".sqlite" else path.read_bytes()

    return [
        path
        for path in sorted(folder.rglob("*"))
        if path.is_file() and any(needle in content(path) for needle in needles)
    ]


def test_a_password_in_the_model_servers_url_is_written_nowhere(
    cli: Cli, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    openai_server.responder = echo_or_summary
    url = with_password(openai_server.base_url)
    cli.env.update(OPENAI_BASE_URL=url, CHATBOT_LOG=str(tmp_path / "calls.jsonl"), **summarizing())
    for text in ("one", "two", "three"):  # a summary too
        ok(cli.ask(text))
    ok(cli.invoke("models"))  # caches the listing for completion
    db = ("--db", str(cli.db))
    ok(cli.invoke("export", "t1", "-o", str(tmp_path / "t1.md"), *db))
    ok(cli.invoke("export", "t1", "-o", str(tmp_path / "t1.json"), *db))

    assert (tmp_path / "calls.jsonl").stat().st_size > 0
    cached = json.loads(cache_path().read_text())
    assert cached["endpoint"] == openai_server.base_url.replace("http://", "http://ada:***@")
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {cache_path(), cli.db, tmp_path / "t1.md", tmp_path / "t1.json"} <= set(written)
    assert files_holding(tmp_path, PASSWORD, quote(PASSWORD, safe="")) == []
    # and completion still finds the listing under the URL as the user set it
    assert "fake-summary-model" in completion_names(endpoint_of(url))


def test_a_model_list_cached_with_a_password_by_an_older_version_is_removed(
    openai_server: FakeOpenAI,
) -> None:
    url = with_password(openai_server.base_url)
    path = cache_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"endpoint": url, "models": ["old-model"]}))
    assert completion_names(url, "mine") == ["mine", "offline"]
    assert not path.exists()


def test_a_password_in_a_postgresql_url_is_not_in_the_database(
    cli: Cli, openai_server: FakeOpenAI, postgres_url: str
) -> None:
    """Checkpoint metadata copies string settings from a run's config: none holds the URL."""
    openai_server.responder = echo_or_summary
    secret = quote(PASSWORD, safe="")
    with_secret = postgres_url.replace("postgres@", f"postgres:{secret}@")  # trust: ignored
    cli.env.update(CHATBOT_DB=with_secret, **summarizing())
    for text in ("one", "two", "three"):
        ok(cli.invoke("ask", text, "--thread", "t1"))
    with psycopg.connect(postgres_url) as connection:
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            )
        ]
        assert "checkpoints" in tables
        for table in tables:
            rows = connection.execute(f"SELECT * FROM {table}").fetchall()  # type: ignore[call-overload]
            assert "hunter2" not in repr(rows), table


# --- bidi controls and zero-width characters ----------------------------------------------------

HIDDEN = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u180e\u200b\u2060-\u2064\ufeff]")
"""Bidi controls and zero-width characters that never reach the screen."""
EMOJI = "👩\u200d💻"  # woman technologist: a ZWJ sequence
PERSIAN = "می\u200cخواهم"  # "I want": a ZWNJ inside the word

TRICKY_REPLY = (
    "run `cat invoice_\u202efdp.exe` \u2066isolated\u2069 \u200bhid\u2060den "
    f"marks\u200e\u200f\u061c bom\ufeff {EMOJI} {PERSIAN} co\u200dpy"
)
"""A RIGHT-TO-LEFT OVERRIDE ("invoice_exe.pdf" on a screen that obeys it), an isolate, zero-width
space and word joiner, the three bidi marks, a BOM, and joiners: two that belong, one hidden
in an ASCII word."""
TRICKY_SHOWN = f"run `cat invoice_fdp.exe` isolated hidden marks bom {EMOJI} {PERSIAN} copy"


def assert_nothing_hidden(output: str) -> None:
    """No bidi control, no zero-width character, and a joiner only inside the emoji or the
    Persian word; no control character either."""
    found = HIDDEN.search(output) or CONTROL.search(output)
    assert found is None, f"{found.group()!r} at {found.start()} in {output!r}"
    rest = output.replace(EMOJI, "").replace(PERSIAN, "")
    assert "\u200c" not in rest and "\u200d" not in rest, repr(output)


CASES = [
    ("invoice_\u202efdp.exe", "invoice_fdp.exe"),  # RLO
    ("a\u202ab\u202bc\u202cd\u202de", "abcde"),  # LRE, RLE, PDF, LRO
    ("\u2066l\u2069 \u2067r\u2069 \u2068f\u2069", "l r f"),  # LRI, RLI, FSI, PDI
    ("m\u200ea\u200fr\u061ck", "mark"),  # LRM, RLM, ALM
    ("zero\u200bwidth\u2060joiner\ufeff\u180e", "zerowidthjoiner"),
    ("x\u2061\u2062\u2063\u2064y", "xy"),  # invisible operators
    (EMOJI, EMOJI),
    ("👨\u200d👩\u200d👧 family", "👨\u200d👩\u200d👧 family"),
    (PERSIAN, PERSIAN),
    ("क्\u200dष", "क्\u200dष"),  # Devanagari: ZWJ after a virama
    ("co\u200dpy pa\u200cste", "copy paste"),  # inside an ASCII word
    ("\u200dstart end\u200d \u200d \u200c", "start end  "),  # at an end, next to a space
    ("é\u200d\u200dé", "éé"),  # two in a row join nothing
    ("é\u200b\u200d\u200bé", "éé"),  # next to a hidden character
    ("é\u200d\x1b[31mé", "éé"),  # next to an escape code
    ("soft\u00adhyphen 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f", None),
    ("العربية والعبرية עברית", None),  # right-to-left text itself stays
]


@pytest.mark.parametrize(("text", "shown"), CASES)
def test_bidi_controls_and_zero_width_characters_are_removed_for_the_screen(
    text: str, shown: str | None
) -> None:
    assert sanitize(text) == (text if shown is None else shown)


ALPHABET = st.sampled_from(
    [
        *["a", " ", "é", "中", "👩", "💻", "\u200d", "\u200c", "\u202e", "\u2066", "\u2069"],
        *["\u200b", "\u200e", "\ufeff", "\x1b", "[", "]", "0", ";", "m", "\x07", "\r", "\n"],
        "\x9b",
    ]
)
TEXTS = st.lists(ALPHABET, max_size=40).map("".join)


@given(TEXTS)
def test_nothing_hidden_is_left_and_sanitizing_again_changes_nothing(text: str) -> None:
    clean = sanitize(text)
    assert HIDDEN.search(clean) is None and CONTROL.search(clean) is None
    for found in re.finditer("[\u200c\u200d]", clean):
        before, after = (
            clean[found.start() - 1 : found.start()],
            clean[found.end() : found.end() + 1],
        )
        assert before and after and not before.isascii() and not after.isascii(), repr(clean)
    assert sanitize(clean) == clean


@given(TEXTS, st.lists(st.integers(min_value=0, max_value=40), max_size=8))
def test_streamed_in_any_pieces_a_joiner_is_kept_or_not_as_in_the_whole_text(
    text: str, cuts: list[int]
) -> None:
    bounds = sorted({0, len(text), *(min(c, len(text)) for c in cuts)})
    stream = StreamSanitizer()
    printed = [stream.feed(text[a:b]) for a, b in itertools.pairwise(bounds)]
    printed.append(stream.flush())
    assert "".join(printed) == sanitize(text)


def test_an_emoji_streamed_token_by_token_keeps_its_joiner() -> None:
    stream = StreamSanitizer()
    assert stream.feed("I am 👩") == "I am 👩"
    assert stream.feed("\u200d") == ""  # held: the next character decides
    assert stream.feed("💻 and a\u200d") == "\u200d💻 and a"
    assert stream.feed("b") == "b"  # a joiner inside an ASCII word: dropped
    assert stream.flush() == ""


def test_json_keeps_bidi_controls_and_zero_width_characters_as_escapes() -> None:
    data = {"reply": TRICKY_REPLY}
    text = escape_json_controls(json.dumps(data, ensure_ascii=False))
    assert HIDDEN.search(text) is None and "\u200d" not in text
    assert "\\u202e" in text and "\\u200d" in text
    assert json.loads(text) == data


def tricky_server(body: dict[str, Any]) -> str:
    return f"SUMMARY {TRICKY_REPLY}" if is_summary_request(body) else TRICKY_REPLY


def test_ask_show_threads_and_export_neutralise_bidi_and_keep_it_stored(
    cli: Cli, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    openai_server.responder = tricky_server
    cli.env.update(summarizing())
    db = ("--db", str(cli.db))
    first = ok(cli.ask("title \u202eevil\u202c here"))  # the user's message names the thread
    assert_nothing_hidden(first.stdout)
    assert TRICKY_SHOWN in first.stdout
    ok(cli.ask(worth_folding("second")))  # (folded with the first: a summary is made)

    shown = ok(cli.invoke("show", "t1", *db)).stdout
    assert_nothing_hidden(shown)
    assert "invoice_fdp.exe" in shown and EMOJI in shown and PERSIAN in shown
    listing = ok(cli.invoke("threads", *db)).stdout
    assert_nothing_hidden(listing)
    assert "title evil here" in listing

    # Markdown is for people: an editor or a web page obeys a bidi control as a terminal does
    markdown = ok(cli.invoke("export", "t1", *db)).stdout
    assert_nothing_hidden(markdown)
    assert TRICKY_SHOWN in markdown and f"SUMMARY {TRICKY_SHOWN}" in markdown

    # the stored text, show --json and the JSON export keep every character (escaped)
    raw = ok(cli.invoke("show", "t1", "--json", *db)).stdout
    assert_nothing_hidden(raw)
    document = json.loads(raw)
    assert document["messages"][-1]["content"] == TRICKY_REPLY
    assert document["summary"] == f"SUMMARY {TRICKY_REPLY}"
    ok(cli.invoke("export", "t1", "-o", str(tmp_path / "t1.json"), *db))
    exported = json.loads((tmp_path / "t1.json").read_text())
    assert exported["messages"][-1]["content"] == TRICKY_REPLY
    listed = ok(cli.invoke("threads", "--json", *db)).stdout
    assert_nothing_hidden(listed)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    model = ScriptedChatModel(default=TRICKY_REPLY)
    settings = Settings(_env_file=None, model="offline", db=str(tmp_path / "r.sqlite"))  # type: ignore[call-arg]
    with Store(settings.db) as store:
        yield LocalBackend(build_graph(model, model, settings, store.saver), store)


def test_the_repl_streams_and_shows_a_reply_without_bidi_controls(backend: LocalBackend) -> None:
    screen = io.StringIO()
    console = Console(file=screen, width=200, force_terminal=True, highlight=False)
    settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    lines = ["hi", "/history", "/show"]
    repl = Repl(backend, console, ScriptedReader(lines), settings, "t1", "scripted", dispatch)
    assert repl.run() == 0
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", screen.getvalue())  # Rich's own codes
    assert_nothing_hidden(shown)
    assert "invoice_fdp.exe" in shown and EMOJI in shown and PERSIAN in shown
    current = backend.current("t1")
    assert current is not None and current.messages[-1].text == TRICKY_REPLY
