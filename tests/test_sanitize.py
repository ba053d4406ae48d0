"""Escape codes from a model never reach the terminal: the sanitizer over a table of sequences
and as properties, then a reply full of escapes through ``ask``, ``show``, ``export``,
``threads`` and the REPL (its commands and its live display), and thread ids with control
characters refused.

The only fakes are at the edge: the fake OpenAI server for the CLI, a scripted chat model for
the REPL. Stored state keeps what the model sent; only what is printed is made safe.
"""

from __future__ import annotations

import io
import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import BaseMessage
from rich.console import Console

import chatbot.cli.turns
from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.sanitize import MAX_HELD, StreamSanitizer, escape_json_controls, sanitize
from chatbot.store.sqlite import Store
from chatbot.terminal.commands import dispatch
from chatbot.terminal.repl import Repl, ScriptedReader
from chatbot.threadids import check_thread_id
from chatbot.threads.backend import LocalBackend
from tests.fake_openai import FakeOpenAI
from tests.helpers import CONTROL, Cli, is_summary_request, ok, summarizing
from tests.scripted import ScriptedChatModel

"""Any control character but newline and tab."""

NASTY_REPLY = (
    "Hello \x1b[2J\x1b[Hworld\x1b]0;pwned title\x07 and "
    "\x1b]8;;http://evil.example\x1b\\alink\x1b]8;;\x1b\\ done\x07\x08 "
    "csi\x9b31m red\x9b0m \x1bPdcs payload\x1b\\ \x1b_apc\x1b\\ \x1b7\x1b(B"
    "over\rwrite \x1b[2 q end\x1b"
)
"""Clear screen, cursor home, window title (OSC 0, BEL), hyperlink (OSC 8, ST), bell,
backspace, C1 CSI, DCS and APC strings, two-character escapes, a lone CR, a CSI with an
intermediate byte (split across two stream chunks by a space) and a trailing lone ESC."""
NASTY_VISIBLE = ["Hello", "world", "and", "alink", "done", "csi", "red", "over", "write", "end"]
NASTY_HIDDEN = ["pwned", "evil.example", "dcs payload", "apc"]
"""Payloads of sequences: a terminal would never show them, and neither do we."""

NASTY_SUMMARY = "SUMMARY \x1b]0;pwned\x07kept \x9b2Jsafe\x1b[5m blink"
SUMMARY_VISIBLE = ["SUMMARY", "kept", "safe", "blink"]


def assert_clean(output: str) -> None:
    """No control character but newline and tab in ``output``."""
    found = CONTROL.search(output)
    assert found is None, f"{found.group()!r} at {found.start()} in {output!r}"


def assert_nasty_reply_shown(output: str) -> None:
    assert_clean(output)
    flat = " ".join(output.split())
    for word in NASTY_VISIBLE:
        assert word in flat, word
    for payload in NASTY_HIDDEN:
        assert payload not in flat, payload


# --- the function ------------------------------------------------------------------------------

CASES = [
    ("plain text, 中文, emoji 🙂", "plain text, 中文, emoji 🙂"),
    ("keeps\nnewlines\tand tabs", "keeps\nnewlines\tand tabs"),
    ("a\x1b[2J\x1b[Hb", "ab"),  # clear screen, cursor home
    ("\x1b[31mred\x1b[0m", "red"),  # colours are ours to add
    ("\x1b[38;2;255;0;0mrgb\x1b[m", "rgb"),
    ("\x1b[?1049hscreen\x1b[?1049l", "screen"),  # private parameters
    ("\x1b[2 qcursor", "cursor"),  # an intermediate byte
    ("\x1b]0;pwned\x07title", "title"),  # OSC 0 ended by BEL
    ("\x1b]2;pwned\x1b\\title", "title"),  # ended by ST
    ("\x1b]8;;http://evil\x1b\\text\x1b]8;;\x1b\\", "text"),  # OSC 8 hyperlink
    ("\x1b]52;c;cHduZWQ=\x07clip", "clip"),  # OSC 52 writes the clipboard
    ("\x1bPq#0;2;0;0;0\x1b\\dcs", "dcs"),  # DCS (sixel)
    ("\x1bXsos\x1b\\ok", "ok"),  # SOS
    ("\x1b^pm\x1b\\ok", "ok"),  # PM
    ("\x1b_apc\x1b\\ok", "ok"),  # APC
    ("\x1b7save\x1b8", "save"),  # two-character escapes
    ("\x1b(Bcharset", "charset"),  # nF: intermediate then final
    ("\x1bcreset", "reset"),  # RIS: full reset
    ("\x1b\\bare ST", "bare ST"),
    ("a\x9b2Jb", "ab"),  # C1 CSI
    ("a\x9d0;pwned\x9cb", "ab"),  # C1 OSC ended by C1 ST
    ("a\x90dcs\x9cb", "ab"),  # C1 DCS
    ("a\x85b\x80c\x9ad", "abcd"),  # other C1
    ("a\x9fapc\x9cb", "ab"),  # C1 APC
    ("bell\x07 back\x08space", "bell backspace"),
    ("nul\x00 del\x7f vt\x0b ff\x0c", "nul del vt ff"),
    ("over\rwrite", "over\nwrite"),  # a lone CR would overwrite the line
    ("windows\r\nline", "windows\nline"),
    ("lone escape at the end\x1b", "lone escape at the end"),
    ("unfinished \x1b[3", "unfinished "),
    ("unfinished title \x1b]0;pwn", "unfinished title "),
    ("\x1b]0;cut by a newline\nstays", "\nstays"),  # a payload never swallows a line
    ("\x1b[31\x1b[2Jnested", "nested"),  # an ESC ends a CSI and starts another
    ("\x1b\x1b[31mdouble", "double"),
    ("\x1b]0;x\x1b[31mred", "red"),  # an ESC ends a string too
    ("zh 中文 \x1b[31m红\x1b[0m", "zh 中文 红"),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_sanitize_removes_every_sequence_and_keeps_the_text(text: str, expected: str) -> None:
    assert sanitize(text) == expected


def test_every_prefix_of_a_reply_is_safe_to_render() -> None:
    """The REPL re-renders the reply as it grows: a sequence cut in half must stay hidden."""
    for end in range(len(NASTY_REPLY) + 1):
        assert_clean(sanitize(NASTY_REPLY[:end]))


ALPHABET = st.sampled_from(
    [
        *"ab ;[]P\\X^_0123456789J;?m(B \n\t",
        *["\x1b", "\x07", "\x08", "\r", "\x00", "\x7f", "\x9b", "\x9c", "\x9d", "\x90", "\x85"],
    ]
)
TEXTS = st.lists(ALPHABET, max_size=40).map("".join)


@given(TEXTS)
def test_sanitized_text_holds_no_control_but_newline_and_tab(text: str) -> None:
    clean = sanitize(text)
    assert_clean(clean)
    assert sanitize(clean) == clean


@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cf"))))
def test_text_without_controls_comes_back_unchanged(text: str) -> None:
    # (format characters: bidi controls and zero-width ones go, see test_shown_faults)
    assert sanitize(text) == text


@given(TEXTS, st.lists(st.integers(min_value=0, max_value=40), max_size=8))
def test_streamed_in_any_pieces_it_prints_what_the_whole_text_would(
    text: str, cuts: list[int]
) -> None:
    bounds = sorted({0, len(text), *(min(c, len(text)) for c in cuts)})
    stream = StreamSanitizer()
    printed = [stream.feed(text[a:b]) for a, b in itertools.pairwise(bounds)]
    printed.append(stream.flush())
    for piece in printed:
        assert_clean(piece)
    assert "".join(printed) == sanitize(text)


def test_a_sequence_split_across_pieces_is_held_back_until_complete() -> None:
    stream = StreamSanitizer()
    assert stream.feed("before \x1b") == "before "
    assert stream.feed("[2") == ""
    assert stream.feed("Jafter \x1b]0;pw") == "after "
    assert stream.feed("ned\x07done\r") == "done"
    assert stream.feed("\nnext") == "\nnext"
    assert stream.flush() == ""


def test_an_unfinished_string_is_not_held_back_forever() -> None:
    stream = StreamSanitizer()
    assert stream.feed("start \x1b]52;c;") == "start "
    assert stream.feed("A" * MAX_HELD) == ""  # past the limit: dropped, not waited for
    assert stream.feed("visible again") == "visible again"


@pytest.mark.slow
def test_long_and_adversarial_replies_come_out_clean() -> None:
    """(That cleaning them stays linear in their length is measured by
    ``benchmarks/sanitize.py``, not timed here.)"""
    replies = [
        "word \x1b[31mred\x1b[0m \x1b]8;;http://x\x07link\x1b]8;;\x07 中文\n" * 40_000,
        "\x1b]" + "a" * 2_000_000,  # a string that never ends
        "\x1b[" * 1_000_000,  # CSIs that never end
        "\x1b" * 2_000_000,
        "\r" * 1_000_000,
    ]
    for reply in replies:
        assert_clean(sanitize(reply))
    assert "red" in sanitize(replies[0]) and "中文" in sanitize(replies[0])


def test_json_keeps_every_character_but_escapes_del_and_c1() -> None:
    data = {"reply": "a\x1b[2J \x9b31m \x7f \x85 中文 \x07"}
    text = escape_json_controls(json.dumps(data, ensure_ascii=False))
    assert_clean(text)
    assert "中文" in text and "\\u009b" in text
    assert json.loads(text) == data


# --- thread ids -------------------------------------------------------------------------------


@pytest.mark.parametrize("thread_id", ["bad\x1b[31mid", "a\x9bb", "a\x7fb", "nul\x00", "x\x07"])
def test_a_thread_id_with_a_control_character_is_refused(thread_id: str) -> None:
    with pytest.raises(ValueError) as raised:
        check_thread_id(thread_id)
    message = str(raised.value)
    assert "control character" in message and "\n" not in message
    assert_clean(message)


def test_the_cli_refuses_a_thread_id_with_an_escape(cli: Cli) -> None:
    for command in (["ask", "hi"], ["chat"]):
        result = cli.invoke(*command, "--thread", "x\x1b]0;pwned\x07", "--db", str(cli.db))
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("error: ") and "control character" in line
        assert_clean(result.stderr)
    assert cli.server.requests == []


# --- the CLI against the fake OpenAI server --------------------------------------------------


def nasty_server(body: dict[str, Any]) -> str:
    return NASTY_SUMMARY if is_summary_request(body) else NASTY_REPLY


def test_ask_show_threads_and_export_print_no_escape_codes(
    cli: Cli, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    openai_server.responder = nasty_server
    cli.env.update(summarizing())
    db = str(cli.db)
    first = ok(cli.ask("first \x1b]0;pwned\x07question"))  # becomes the thread's title
    assert_nasty_reply_shown(first.stdout)
    assert_clean(first.stderr)
    assert_nasty_reply_shown(ok(cli.ask("second")).stdout)

    shown = ok(cli.invoke("show", "t1", "--db", db)).stdout
    assert_nasty_reply_shown(shown)
    for word in SUMMARY_VISIBLE:
        assert word in shown

    listing = ok(cli.invoke("threads", "--db", db)).stdout
    assert_clean(listing)
    assert "first question" in listing and "pwned" not in listing

    # JSON keeps exactly what the model sent (stored state is never rewritten), escaped
    raw = ok(cli.invoke("show", "t1", "--json", "--db", db)).stdout
    assert_clean(raw)
    document = json.loads(raw)
    assert document["messages"][-1]["content"] == NASTY_REPLY
    assert document["summary"] == NASTY_SUMMARY
    assert_clean(ok(cli.invoke("threads", "--json", "--db", db)).stdout)

    markdown = ok(cli.invoke("export", "t1", "--db", db)).stdout
    assert_nasty_reply_shown(markdown)
    assert "## Summary" in markdown and "SUMMARY kept safe blink" in markdown
    ok(cli.invoke("export", "t1", "-o", str(tmp_path / "t1.md"), "--db", db))
    written = (tmp_path / "t1.md").read_text()
    assert_nasty_reply_shown(written)
    assert written.splitlines()[3:] == markdown.splitlines()[3:]  # but for "Exported <time>"
    ok(cli.invoke("export", "t1", "-o", str(tmp_path / "t1.json"), "--db", db))
    exported = (tmp_path / "t1.json").read_text()
    assert_clean(exported)
    assert json.loads(exported)["messages"][-1]["content"] == NASTY_REPLY


def test_ask_streaming_to_a_terminal_never_prints_a_split_sequence(
    cli: Cli, openai_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal ``ask`` prints each token as it comes; the fake server cuts the reply at
    spaces, so the OSC title and the ``ESC [ 2 SP q`` arrive in two pieces each."""
    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, highlight=False, soft_wrap=True)
    monkeypatch.setattr(chatbot.cli.turns, "out", terminal)
    openai_server.responder = nasty_server
    ok(cli.ask("hello"))
    assert openai_server.requests[-1].body.get("stream") is True
    assert_nasty_reply_shown(screen.getvalue())
    assert screen.getvalue() == sanitize(NASTY_REPLY) + "\n", "no payload shows, even in part"


# --- the REPL ---------------------------------------------------------------------------------


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    """Threads on a temporary file, answered by a scripted model whose replies and summaries
    are full of escape codes; a summary once a thread has more than 2 messages."""

    def answer(messages: list[BaseMessage]) -> str:
        return NASTY_SUMMARY if "<conversation>" in messages[-1].text else NASTY_REPLY

    model = ScriptedChatModel(default=answer)
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        model="offline",
        db=str(tmp_path / "repl.sqlite"),
        summary_trigger="messages:2",
        summary_keep="messages:1",
    )
    with Store(settings.db) as store:
        yield LocalBackend(build_graph(model, model, settings, store.saver), store)


def run_repl(backend: LocalBackend, lines: list[str], *, terminal: bool = False) -> str:
    screen = io.StringIO()
    console = Console(file=screen, width=100, force_terminal=terminal, highlight=False)
    settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    repl = Repl(backend, console, ScriptedReader(lines), settings, "t1", "scripted", dispatch)
    assert repl.run() == 0
    return screen.getvalue()


RICH_OWN = re.compile(r"\r?\x1b\[(?:[0-9;]*m|\d*[ABCDGK]|\?25l|\?25h\r?)")
"""What Rich itself writes on a terminal: colours, the live display's cursor moves and
erasures, hiding the cursor (and the carriage return after showing it again)."""


def test_the_repl_streams_and_renders_a_reply_without_its_escape_codes(
    backend: LocalBackend,
) -> None:
    screen = run_repl(backend, ["hi \x1b]0;pwned\x07there"], terminal=True)
    assert "\x1b]" not in screen and "\x1b[2J" not in screen and "\x1b[H" not in screen
    assert_nasty_reply_shown(RICH_OWN.sub("", screen))


def test_repl_commands_print_no_escape_codes(backend: LocalBackend) -> None:
    screen = run_repl(backend, ["hi \x1b]0;pwned\x07there", "second"])
    assert_nasty_reply_shown(screen)
    checkpoint = backend.history("t1")[-1].checkpoint_id  # the oldest: the first message
    commands = ["/summary", "/summary history", "/history", f"/show {checkpoint[-8:]}"]
    screen = run_repl(backend, [*commands, "/threads", "/thread"])
    assert_clean(screen)
    for word in SUMMARY_VISIBLE:
        assert word in screen
    assert "hi there" in screen and "pwned" not in screen


def test_the_repl_refuses_a_thread_id_with_an_escape(backend: LocalBackend) -> None:
    screen = run_repl(backend, ["/thread evil\x1b[2Jid", "/thread"])
    assert_clean(screen)
    errors = [line for line in screen.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "control character" in errors[0]
    assert "thread t1:" in screen
    assert [t.thread_id for t in backend.threads()] == []
