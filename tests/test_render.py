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
from chatbot.history.timeline import Snapshot, SummaryChange, TurnEntry, short_id
from chatbot.terminal import render

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


def draw(renderable: RenderableType, width: int, soft_wrap: bool) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, soft_wrap=soft_wrap, highlight=False)
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
    screen = draw(render.turn_table(ENTRIES), width, soft_wrap)
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
    wide = draw(render.turn_table(ENTRIES), 80, True).splitlines()
    assert wide[0].split() == ["checkpoint", "time", "message", "msgs", "summary"]
    assert wide[1].split()[0] == short_id(ENTRIES[0].checkpoint_id)
    narrow = draw(render.turn_table(ENTRIES), 40, True).splitlines()
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

    text = "Use <T> and [a link](https://example.com), `code`."
    ours, richs = vars(render.Markdown(text)), vars(RichMarkdown(text))
    assert set(ours) == set(richs)
    different = {name for name in ours if ours[name] != richs[name]}
    assert different == {"parsed", "hyperlinks"}
    assert "<T>" in draw(render.Markdown(text), 80, soft_wrap=False)
    assert "https://example.com" in draw(render.Markdown(text), 80, soft_wrap=False)
