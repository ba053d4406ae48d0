"""The REPL's live reply: finished blocks are printed once, the rest redrawn at the tick, and
a long reply scrolls past a small screen with every line exactly once (checked through a
terminal emulator, pyte, the way a person would see the scrollback)."""

from __future__ import annotations

import io
import re

import pyte
import pytest
from langchain_core.messages import AIMessage
from rich.console import Console

from chatbot.terminal.display import ReplyView, stable_prefix
from chatbot.threads.events import Folding, Reply, Summarized, Token


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("one paragraph still growing", 0),
        ("first\n\nsecond", len("first\n\n")),
        ("first\n\nsecond\n\nthird", len("first\n\nsecond\n\n")),
        ("first\n\n", 0),  # the next block has not started: the first may still grow
        ("```\ncode\n\nmore code\n```\n\nafter", len("```\ncode\n\nmore code\n```\n\n")),
        ("```\ncode\n\nstill inside", 0),
        ("- item\n\n    its second paragraph", 0),  # indented: still the same list item
        ("text\n\n```py\nx = 1", len("text\n\n")),
    ],
)
def test_where_finished_blocks_end(text: str, expected: int) -> None:
    assert stable_prefix(text) == expected


def test_a_boundary_found_later_starts_from_the_last_one() -> None:
    text = "a\n\nb\n\nc"
    first = stable_prefix(text[:4])
    assert first == 3
    assert stable_prefix(text, first) == len("a\n\nb\n\n")


def seen_by_a_terminal(output: str, columns: int, rows: int) -> list[str]:
    """Every line a terminal shows after ``output``: its scrollback, then its screen."""
    screen = pyte.HistoryScreen(columns, rows, history=10_000, ratio=0.5)
    screen.set_mode(pyte.modes.LNM)  # LF moves to the line start, as a tty's onlcr does
    stream = pyte.Stream(screen)
    stream.feed(output)
    scrolled = ["".join(line[x].data for x in range(columns)) for line in screen.history.top]
    return [line.rstrip() for line in [*scrolled, *screen.display]]


def test_a_long_reply_scrolls_past_a_small_screen_with_every_line_once() -> None:
    paragraphs = [
        f"paragraph {n:02d} " + " ".join(f"w{n}.{i}" for i in range(8)) for n in range(40)
    ]
    reply = "\n\n".join(paragraphs)
    out = io.StringIO()
    console = Console(file=out, width=60, height=12, force_terminal=True, color_system=None)
    view = ReplyView(console, live=True)
    view.start()
    view.tick()  # the spinner
    halfway = reply.index("paragraph 30")
    for piece in re.findall(r"\S+\s*", reply[:halfway]):  # as a server streams it
        view.show(Token(piece))
        view.tick()
    # While it streams, what has scrolled past is there for good, once, in order.
    lines = seen_by_a_terminal(out.getvalue(), 60, 12)
    numbers = [line.split()[1] for line in lines if line.startswith("paragraph")]
    assert numbers[:28] == [f"{n:02d}" for n in range(28)]
    for piece in re.findall(r"\S+\s*", reply[halfway:]):
        view.show(Token(piece))
        view.tick()
    view.show(Reply(AIMessage(reply)))
    view.tick()
    view.finish()

    lines = [line for line in seen_by_a_terminal(out.getvalue(), 60, 12) if line.strip()]
    shown = [line for line in lines if line.startswith("paragraph")]
    assert [line.split()[1] for line in shown] == [f"{n:02d}" for n in range(40)]
    assert not any("thinking" in line for line in lines), "the spinner is gone"


def test_the_spinner_says_what_it_waits_for() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, height=12, force_terminal=True, color_system=None)
    view = ReplyView(console, live=True)
    view.start()
    view.tick()
    assert "thinking… 0s" in out.getvalue()
    view.show(Folding(messages=6, reason="fit"))
    view.tick()
    assert "folding 6 messages into the summary… 0s" in out.getvalue()
    view.show(Summarized(messages=6, tokens_in=400, tokens_out=60, reason="fit"))
    assert view.status == "thinking…", "folded before the call: the reply is still to come"
    view.show(Token("hi"))
    view.tick()
    view.finish()
    assert "hi" in seen_by_a_terminal(out.getvalue(), 80, 12)


def test_a_long_fold_says_its_part_and_counts_its_seconds_from_the_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import chatbot.terminal.display as display

    clock = [1000.0]
    monkeypatch.setattr(display.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    console = Console(file=out, width=80, height=12, force_terminal=True, color_system=None)
    view = ReplyView(console, live=True)
    view.start()
    view.show(Folding(messages=34, reason="fit", part=1, parts=5))
    clock[0] += 75
    view.show(Folding(messages=34, reason="fit", part=2, parts=5))
    clock[0] += 12
    view.tick()
    view.finish()
    assert "folding 34 messages (part 2 of 5) into the summary… 1m 27s" in out.getvalue()


def test_ask_on_a_terminal_says_the_part_of_a_long_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    from chatbot.terminal.display import WaitSpinner

    spinner = WaitSpinner(Console(file=io.StringIO()), "loading the model…")
    console = Console(file=io.StringIO())
    view = ReplyView(console, live=True, plain=True, notes_to=console, spinner=spinner)
    view.start()
    view.show(Folding(messages=34, reason="fit", part=1, parts=5))
    since = spinner._since
    view.show(Folding(messages=34, reason="fit", part=2, parts=5))
    assert spinner.words == "folding 34 messages (part 2 of 5) into the summary…"
    assert spinner._since == since, "the seconds count from the fold's first part"


def test_without_a_terminal_the_reply_is_printed_once_at_the_end() -> None:
    out = io.StringIO()
    view = ReplyView(Console(file=out, width=80), live=False)
    view.start()
    for word in ["one ", "two\n\n", "three"]:
        view.show(Token(word))
        view.tick()
    assert out.getvalue() == ""
    view.finish()
    assert out.getvalue().split() == ["one", "two", "three"]


def test_a_compaction_waits_with_its_own_words() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, height=12, force_terminal=True, color_system=None)
    view = ReplyView(console, live=True)
    view.start("folding older messages into the summary…")
    view.tick()
    view.finish()
    assert "folding older messages into the summary… 0s" in out.getvalue()
    assert "thinking" not in out.getvalue()


def test_a_fold_before_the_reply_is_told_above_it_and_one_after_below_it() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, height=12, force_terminal=True, color_system=None)
    view = ReplyView(console, live=True)
    view.start()
    view.tick()
    view.show(Folding(messages=5, reason="trigger"))
    view.tick()
    view.show(Summarized(messages=5, tokens_in=400, tokens_out=60, reason="trigger"))
    assert view.status == "thinking…", "folded before the call: the reply is still to come"
    view.tick()
    for word in ["the ", "reply\n\n", "goes ", "on"]:
        view.show(Token(word))
        view.tick()
    view.show(Reply(AIMessage("the reply\n\ngoes on")))
    view.show(Summarized(messages=2, tokens_in=40, tokens_out=20, reason="trigger"))
    view.tick()
    view.finish()
    lines = [line for line in seen_by_a_terminal(out.getvalue(), 80, 12) if line.strip()]
    assert lines[0].startswith("summarized 5 messages"), lines
    assert lines[1:3] == ["the reply", "goes on"]
    assert [note.count("summarized 2 messages") for note in view.notes] == [1], "told after"
    assert not any("summarized 5" in note for note in view.notes), "told once"


def test_a_plain_reply_into_a_pipe_is_printed_whole_as_it_comes_and_notes_apart() -> None:
    from chatbot.threads.events import Waiting

    out, notes = io.StringIO(), io.StringIO()
    view = ReplyView(
        Console(file=out, width=80), live=False, plain=True, notes_to=Console(file=notes)
    )
    view.start()
    view.show(Waiting("t1"))
    for word in ["**one** ", "two"]:
        view.show(Token(word))
    assert out.getvalue() == "", "into a pipe: the tokens are not written one by one"
    view.show(Reply(AIMessage("**one** two\x1b[31m")))
    assert out.getvalue() == "**one** two\n", "plain text, as it arrives, escape codes removed"
    view.show(Summarized(messages=5, tokens_in=400, tokens_out=60, reason="trigger"))
    view.finish()
    assert out.getvalue() == "**one** two\n"
    assert notes.getvalue().splitlines()[0] == (
        "thread t1 is answering in another window — waiting, Ctrl-C to stop"
    )
    assert notes.getvalue().splitlines()[1].startswith("summarized 5 messages")
    assert view.replied and view.notes == []


def test_a_plain_reply_on_a_terminal_streams_and_ends_its_line() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=True, color_system=None)
    view = ReplyView(console, live=True, plain=True)
    view.start()
    view.show(Token("one \x1b"))
    assert out.getvalue() == "one ", "what may start an escape code is held back"
    view.show(Token("[31mtwo"))
    assert out.getvalue() == "one two", "an escape code split across tokens never gets through"
    view.show(Reply(AIMessage("one \x1b[31mtwo three")))
    view.finish()
    assert out.getvalue() == "one two three\n"


def test_a_note_longer_than_the_terminal_is_wrapped_between_words() -> None:
    from chatbot.threads.events import NothingToFold

    out = io.StringIO()  # (soft wrap, as the CLI's consoles: a pipe gets whole lines)
    console = Console(
        file=out, width=80, height=12, force_terminal=True, color_system=None, soft_wrap=True
    )
    view = ReplyView(console, live=True)
    view.start()
    view.tick()
    view.show(NothingToFold(context=94, reason="compact", messages=0))
    view.finish()
    lines = [line.rstrip() for line in seen_by_a_terminal(out.getvalue(), 80, 12) if line.strip()]
    said = " ".join(lines)
    assert "; CHATBOT_SUMMARY_KEEP sets its size" in said, lines
    assert all(len(line) <= 80 for line in lines)
