"""What the history and state views draw, in a Rich console writing to a buffer at 40 and 80
columns: nothing is cut at a panel's edge, people's text keeps its lines, ids stay whole.

Both kinds of console are used: the CLI's soft-wrapping one (``soft_wrap=True``: Rich leaves
plain lines to the terminal and used to crop everything inside panels) and a plain one.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from datetime import UTC, datetime

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from rich.console import Console, RenderableType

from chatbot.history.export import to_markdown, verbatim
from chatbot.history.lineage import short_id
from chatbot.history.snapshots import Snapshot
from chatbot.history.summary import SummaryChange
from chatbot.history.turns import HistoryRow, TurnEntry
from chatbot.store.base import ThreadInfo
from chatbot.terminal import listings, render

CHECKPOINT = "1f0c2a3b-4d5e-6f70-8123-456789abcdef"
SUMMARY = (
    "## User\n"
    "- The user is Ada Lovelace, a mathematician who lives in London with a cat called "
    "Babbage and works as an engineer on the analytical engine\n"
    "- Prefers green tea over coffee, and answers in French when tired\n"
    "## Facts\n"
    "- The budget is 4,200 pounds; the flight is BA2490 on the ninth of March\n"
    "## Open tasks\n"
    "- Review the punch card layout before Thursday and send it to Charles"
)
MESSAGE = (
    "fix this:\n"
    "def f():\n"
    "    return 1  # and an indented comment long enough to pass forty columns\n"
    "\n"
    "* not a list *not emphasis* <T> #include <stdio.h>"
)
WIDTHS = [40, 80]


def draw(renderable: RenderableType, width: int, soft_wrap: bool, *, terminal: bool = True) -> str:
    """What ``renderable`` prints in a console ``width`` columns wide: a terminal's, or (not
    ``terminal``) one writing to a pipe or a file, as the CLI's is under ``| grep``."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        soft_wrap=soft_wrap,
        highlight=False,
        force_terminal=terminal,
        color_system=None,
    )
    console.print(renderable)
    return buffer.getvalue()


def words(text: str) -> Counter[str]:
    return Counter(re.findall(r"[A-Za-z0-9][A-Za-z0-9',.]*[A-Za-z0-9]|[A-Za-z0-9]", text))


def assert_every_word_shown(text: str, screen: str) -> None:
    missing = words(text) - words(screen)
    assert not missing, f"not on the screen: {sorted(missing)}\n{screen}"


def assert_fits(screen: str, width: int) -> None:
    for line in screen.splitlines():
        assert len(line.rstrip()) <= width, line


def snapshot(*messages: HumanMessage | AIMessage | ToolMessage, summary: str = "") -> Snapshot:
    return Snapshot(
        checkpoint_id=CHECKPOINT,
        parent_id=None,
        step=7,
        source="loop",
        messages=messages,
        summary=summary,
        created_at=datetime(2026, 11, 22, 10, 16, 40, tzinfo=UTC),
    )


@pytest.mark.parametrize("soft_wrap", [True, False])
@pytest.mark.parametrize("width", WIDTHS)
def test_every_word_of_a_long_summary_is_shown_wrapped_in_every_view(
    width: int, soft_wrap: bool
) -> None:
    change = SummaryChange(CHECKPOINT, 7, None, folded=6, folded_tokens=412, summary=SUMMARY)
    views = {
        "/summary": render.summary_view(SUMMARY, 120),
        "/summary history": render.summary_timeline_view([change]),
        "/show": render.state_view(snapshot(summary=SUMMARY)),
    }
    for name, view in views.items():
        screen = draw(view, width, soft_wrap)
        assert_every_word_shown(SUMMARY.replace("#", ""), screen)
        assert_fits(screen, width)
        assert "…" not in screen, name


@pytest.mark.parametrize("soft_wrap", [True, False])
@pytest.mark.parametrize("width", WIDTHS)
def test_a_users_message_keeps_its_line_breaks_indentation_and_characters(
    width: int, soft_wrap: bool
) -> None:
    view = render.state_view(snapshot(HumanMessage(MESSAGE), AIMessage("Use **return 2**.")))
    screen = draw(view, width, soft_wrap)
    lines = [line.rstrip() for line in screen.splitlines()]
    assert lines[:3] == ["you", "fix this:", "def f():"]
    assert lines[3].startswith("    return 1  # and an"), "the indentation is kept"
    assert_every_word_shown(MESSAGE, screen)
    assert "* not a list *not emphasis* <T> #include <stdio.h>" in screen or width < 52
    assert "*not emphasis*" in screen and "<T>" in screen
    assert "Use return 2." in screen, "a model's reply is Markdown"
    assert_fits(screen, width)


def test_tool_output_is_shown_as_written() -> None:
    screen = draw(
        render.state_view(snapshot(ToolMessage("a | b\n  *x*", tool_call_id="c1"))), 80, True
    )
    assert "a | b\n  *x*" in screen


@pytest.mark.parametrize("width", WIDTHS)
def test_full_checkpoint_ids_are_shown_whole_on_one_line(width: int) -> None:
    change = SummaryChange(CHECKPOINT, 7, None, folded=6, folded_tokens=412, summary=SUMMARY)
    for view in (
        render.summary_timeline_view([change]),
        render.state_view(snapshot(), title=render.checkpoint_heading(snapshot())),
    ):
        screen = draw(view, width, soft_wrap=True)
        assert any(CHECKPOINT in line for line in screen.splitlines()), screen


def entry(number: int, text: str, **changes: object) -> TurnEntry:
    values: dict[str, object] = {
        "kind": "turn",
        "checkpoint_id": f"1f0c2a3b-4d5e-6f70-8123-0000{number:08x}",
        "first_checkpoint_id": f"1f0c2a3b-4d5e-6f70-8123-1000{number:08x}",
        "created_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "text": text,
        "messages_before": 2 * number,
        "messages_after": 2 * number + 2,
        "folded": 0,
        "summary_changed": False,
        "finished": True,
        **changes,
    }
    return TurnEntry(**values)  # type: ignore[arg-type]


ENTRIES = [
    entry(3, "", kind="undo", messages_after=2),
    entry(2, MESSAGE, fate="undone", folded=6, summary_changed=True),
    entry(1, "hello there, a short one", fate="retried", fold_left=True),
    entry(0, "first", finished=False),
]


@pytest.mark.parametrize("soft_wrap", [True, False])
@pytest.mark.parametrize("width", WIDTHS)
def test_history_shows_every_turns_checkpoint_and_preview_at_any_width(
    width: int, soft_wrap: bool
) -> None:
    screen = draw(listings.turn_table(ENTRIES), width, soft_wrap)
    assert_fits(screen, width)
    for item in ENTRIES:
        assert short_id(item.checkpoint_id) in screen
    assert_every_word_shown(render.preview(MESSAGE), screen)
    notes = ("undone by /undo", "replaced by /retry", "unfinished: /retry", "/undo")
    for note in (*notes, "summary left for the next turn"):
        assert_every_word_shown(note, screen)
    assert "/undo" in screen and "/retry" in screen
    assert "folded 6" in screen and "4→6" in screen and "6→2" in screen


def test_history_is_a_table_where_it_fits_and_two_lines_a_turn_where_not() -> None:
    wide = draw(listings.turn_table(ENTRIES), 80, True).splitlines()
    assert wide[0].split() == ["checkpoint", "time", "message", "msgs", "summary"]
    assert wide[1].split()[0] == short_id(ENTRIES[0].checkpoint_id)
    narrow = draw(listings.turn_table(ENTRIES), 40, True).splitlines()
    assert narrow[0].split()[0] == short_id(ENTRIES[0].checkpoint_id)
    assert narrow[0].split()[-2:] == ["6→2", "msgs"]
    assert narrow[1].strip() == "/undo"
    assert narrow[2].split()[-2:] == ["4→6", "msgs"] and narrow[3] == "summary folded 6"


def test_a_preview_is_one_line_cut_with_an_ellipsis() -> None:
    assert render.preview("fix this:\n    return 1") == "fix this: return 1"
    long = render.preview("word " * 40)
    assert len(long) == render.PREVIEW_CHARS and long.endswith("…")


def test_the_markdown_export_keeps_a_users_message_as_written() -> None:
    document = {
        "thread_id": "t1",
        "exported_at": "2026-01-01T00:00:00+00:00",
        "summary": "",
        "summary_history": [],
        "folded_messages": [],
        "messages": [
            {"type": "human", "content": MESSAGE},
            {"type": "human", "content": "a ``` fence inside"},
            {"type": "ai", "content": "**bold** reply"},
        ],
    }
    text = to_markdown(document)
    assert f"```text\n{MESSAGE}\n```" in text
    assert "````text\na ``` fence inside\n````" in text
    assert "\n**bold** reply\n" in text, "a model's Markdown stays Markdown"
    assert verbatim("x") == "```text\nx\n```"


def test_markdown_is_set_up_as_richs_own_with_html_off() -> None:
    """chatbot's Markdown sets up what Rich's __init__ does without calling it (Rich's parses
    with a parser it makes each time): every attribute Rich's sets, here too, with the same
    values but the parse (HTML off) and links (shown as addresses)."""
    from rich.markdown import Markdown as RichMarkdown

    from chatbot.terminal.markdown import Markdown

    text = "Use <T> and [a link](https://example.com), `code`."
    ours, richs = vars(Markdown(text)), vars(RichMarkdown(text))
    assert set(ours) == set(richs)
    different = {name for name in ours if ours[name] != richs[name]}
    assert different == {"parsed", "hyperlinks"}
    assert "<T>" in draw(Markdown(text), 80, soft_wrap=False)
    assert "https://example.com" in draw(Markdown(text), 80, soft_wrap=False)


# --- listings: an id or a number is never broken; piped, a row is one line -------------------

GENERATED = "1124-2310-2f44"
THREADS = [
    ThreadInfo(GENERATED, 12, datetime(2026, 11, 24, 23, 10, 5, tzinfo=UTC), "hello", 128, True),
    ThreadInfo(
        "t1-fork1",
        3,
        datetime(2026, 11, 25, 9, 0, 0, tzinfo=UTC),
        "a rather long first message that makes a title of some length for the thread",
        2,
        False,
    ),
]
LISTING_WIDTHS = [40, 60, 80]


def assert_whole(token: str, screen: str) -> None:
    """``token`` (an id, a number) is on one line of the screen, not broken across two."""
    assert any(token in line for line in screen.splitlines()), f"{token!r} broken:\n{screen}"


@pytest.mark.parametrize("width", LISTING_WIDTHS)
def test_the_threads_listing_never_breaks_an_id_a_count_or_a_header(width: int) -> None:
    screen = draw(listings.threads_table(THREADS, current="t1-fork1"), width, True)
    assert_fits(screen, width)
    for token in (GENERATED, "* t1-fork1", "128", "2026-11-2"):
        assert_whole(token, screen)
    assert_every_word_shown(THREADS[1].title, screen)
    assert "messag\n" not in screen and not re.search(r"^\s*es\b", screen, re.M)
    table = re.match(r"thread\s+messages\s+summary\s+last active\s+title", screen)
    assert bool(table) == (width >= 80), "a table where it fits, lines a thread where not"
    if width < 80:
        assert re.search(rf"^{GENERATED}  2026-11-2\d \d\d:\d\d:05", screen, re.M), "id first"
        assert re.search(r"^  128 messages · summary *$", screen, re.M)


def test_piped_the_threads_listing_is_one_line_a_thread() -> None:
    """`chatbot threads | grep fork1` finds the row whole, whatever the width."""
    screen = draw(listings.threads_table(THREADS), 40, True, terminal=False)
    (row,) = [line for line in screen.splitlines() if "fork1" in line]
    assert row.split()[:3] == ["t1-fork1", "2", "no"] and row.rstrip().endswith("the thread")
    assert len(screen.splitlines()) == 3


HISTORY_ROWS = [
    HistoryRow(f"1f0c2a3b-4d5e-6f70-8123-0000{n:08x}", None, n, node, 2 * n, 340 * n, None, nxt)
    for n, (node, nxt) in enumerate(
        [
            ("__input__", ("__start__",)),
            ("__start__", ("summarize_conversation", "conversation")),
            ("summarize_conversation", ("conversation",)),
            ("conversation", ()),
        ]
    )
]


@pytest.mark.parametrize("width", LISTING_WIDTHS)
def test_every_checkpoint_listing_never_breaks_an_id_a_name_or_a_number(width: int) -> None:
    screen = draw(listings.history_table(HISTORY_ROWS), width, True)
    assert_fits(screen, width)
    for row in HISTORY_ROWS:
        assert_whole(short_id(row.checkpoint_id), screen)
        assert_whole(row.node, screen)
        for name in row.next:
            assert_whole(name, screen)
        assert_whole(f"{row.summary_chars} ch" if row.summary_chars else "-", screen)
    assert not re.search(r"checkpo\s*$|^\s*int\b", screen, re.M), "a header is whole"


def test_piped_every_checkpoint_and_every_turn_is_one_line() -> None:
    screen = draw(listings.history_table(HISTORY_ROWS), 40, True, terminal=False)
    for row in HISTORY_ROWS:
        (line,) = [line for line in screen.splitlines() if short_id(row.checkpoint_id) in line]
        assert row.node in line and all(name in line for name in row.next)
    screen = draw(listings.turn_table(ENTRIES), 40, True, terminal=False)
    assert screen.splitlines()[0].split() == ["checkpoint", "time", "message", "msgs", "summary"]
    for item in ENTRIES:
        (line,) = [line for line in screen.splitlines() if short_id(item.checkpoint_id) in line]
        assert f"{item.messages_before}→{item.messages_after}" in line


@pytest.mark.parametrize("width", LISTING_WIDTHS)
def test_search_hits_keep_the_checkpoint_id_whole(width: int) -> None:
    from chatbot.store.search import Hit
    from chatbot.terminal.listings import hits_view

    checkpoint = "1f0c93a2-1b2c-6d3e-8f40-123456789abc"
    hits = [Hit(GENERATED, "m1", checkpoint, "user", "a needle " * 12, ("needle",))]
    for soft_wrap in (True, False):
        screen = draw(hits_view(hits), width, soft_wrap)
        assert_fits(screen, width)
        assert_whole(checkpoint, screen)
        assert_whole(GENERATED, screen)
