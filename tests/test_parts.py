"""What a message holds, read one way everywhere: the summarizer, the search index, ``show``,
the Markdown export, titles and ``history`` all read typed text, an attached text file, an
image, an audio clip and a link alike.

The reader is tested on one message with all five parts; then each place that reads it is
checked from the outside: what the summary model was sent, what ``search`` finds, what
``show``, ``history`` and ``export`` print. The only fakes are scripted chat models.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    get_buffer_string,
)

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.memory.policy import chunk_for_summary
from chatbot.memory.prompts import summary_request, text_only, transcript
from chatbot.memory.tokens import TokenCounter
from chatbot.parts import describe, readable_text, text_and_media
from chatbot.store.search import search
from chatbot.store.sqlite import Store
from chatbot.threads.backend import LocalBackend
from tests.helpers import ok, runner
from tests.scripted import ScriptedChatModel, summary_calls

from chatbot.cli.commands import app  # isort: skip

LINK = "https://example.com/photos/cat.png"
NOTES = "notes.txt:\n```text\nthe budget is 4,200 euros\n```"
IMAGE = {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"}
EVERY_PART: list[Any] = [
    {"type": "text", "text": "please review"},
    {"type": "text", "text": NOTES},  # a text file, as /file attaches it
    {**IMAGE, "extras": {"filename": "cat.png"}},  # an image file, as /file attaches it
    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    {"type": "image_url", "image_url": {"url": LINK}},  # a link, as Studio or the API sends it
]


# --- the reader --------------------------------------------------------------------------------


def test_one_message_with_text_a_file_an_image_audio_and_a_link_reads_whole() -> None:
    assert readable_text(EVERY_PART) == (
        f"please review\n\n{NOTES}\n\n[image: cat.png]\n\n[audio]\n\n[image: {LINK}]"
    )
    assert describe(EVERY_PART) == f"please review [+ notes.txt, cat.png, audio, {LINK}]"
    text, media = text_and_media(EVERY_PART)
    assert text == f"please review\n\n{NOTES}"
    assert media == EVERY_PART[2:]


@pytest.mark.parametrize(
    ("block", "marker"),
    [
        ({"type": "image", "url": LINK}, f"[image: {LINK}]"),  # langchain-core's standard block
        ({"type": "image_url", "image_url": LINK}, f"[image: {LINK}]"),
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}, "[image]"),
        ({"type": "image", "source_type": "base64", "data": "iVBO"}, "[image]"),  # v0 block
        (
            {"type": "audio", "url": "https://example.com/a.mp3"},
            "[audio: https://example.com/a.mp3]",
        ),
        (
            {"type": "audio", "base64": "UklG", "extras": {"filename": "memo.wav"}},
            "[audio: memo.wav]",
        ),
        ({"type": "video", "file_id": "file-v1"}, "[video: file-v1]"),
        (
            {"type": "file", "file": {"filename": "report.pdf", "file_data": "data:x"}},
            "[file: report.pdf]",
        ),
        (
            {"type": "file", "url": LINK.replace("png", "pdf"), "filename": "r.pdf"},
            f"[file: r.pdf ({LINK.replace('png', 'pdf')})]",
        ),
        ({"type": "text-plain", "text": "hello", "title": "a.txt"}, "a.txt:\n```text\nhello\n```"),
        ({"type": "reasoning", "reasoning": "hidden thoughts"}, ""),  # not part of what was said
    ],
)
def test_each_kind_of_block_reads_as_langchain_core_would_show_it(
    block: dict[str, Any], marker: str
) -> None:
    """A link is a fact someone gave, so it is kept; base64 data and data: URLs never are (as
    langchain-core's own XML transcript does)."""
    assert readable_text([block]) == marker
    assert "base64" not in readable_text([block]) and "data:" not in readable_text([block])


def test_text_in_pieces_reads_as_one_text_and_a_string_is_itself() -> None:
    assert (
        readable_text([{"type": "text", "text": "Hel"}, "lo", {"text": " there"}]) == "Hello there"
    )
    assert readable_text("just text") == describe("just text") == "just text"
    assert readable_text([]) == describe([]) == ""


# --- the summarizer --------------------------------------------------------------------------


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[tuple[LocalBackend, ScriptedChatModel, str]]:
    """A thread on SQLite, answered by a scripted model, folded once it holds three messages
    (the latest kept); a summary call takes at most 3,000 tokens, so bigger inputs are split."""
    db = str(tmp_path / "parts.sqlite")
    chat = ScriptedChatModel()
    summarizer = ScriptedChatModel(default="SUMMARY")
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        model="offline",
        db=db,
        summary_trigger="messages:2",
        summary_keep="messages:1",
        summary_input_tokens=3000,
        max_summary_tokens=200,
    )
    with Store(db) as store:
        yield (
            LocalBackend(build_graph(chat, summarizer, settings, store.saver), store),
            summarizer,
            db,
        )


def folded_text(summarizer: ScriptedChatModel) -> str:
    return "\n".join(call[-1].text for call in summary_calls(summarizer))


def test_a_link_and_every_part_reach_the_summarizer(
    backend: tuple[LocalBackend, ScriptedChatModel, str],
) -> None:
    chat, summarizer, _ = backend
    list(chat.send("t1", EVERY_PART))
    list(chat.send("t1", "and then?"))
    folded = folded_text(summarizer)
    assert LINK in folded  # was a bare [image]
    assert "please review\n\nnotes.txt:" in folded
    assert "[image: cat.png]" in folded and "[audio]" in folded
    assert "iVBORw0KGgo" not in folded and "UklGRg" not in folded  # data never


def test_a_message_split_for_the_summarizer_keeps_its_text_apart_from_the_file(
    backend: tuple[LocalBackend, ScriptedChatModel, str],
) -> None:
    big_file = "notes.txt:\n```text\n" + "the budget is 4,200 euros. " * 1500 + "\n```"
    content = [{"type": "text", "text": "please review"}, {"type": "text", "text": big_file}, IMAGE]
    chat, summarizer, _ = backend
    list(chat.send("t1", content))
    list(chat.send("t1", "and then?"))
    assert len(summary_calls(summarizer)) > 1, "the message was split"
    folded = folded_text(summarizer)
    assert "[part 1/" in folded
    assert "please review\n\nnotes.txt:" in folded  # was "please reviewnotes.txt:"
    assert "please reviewnotes.txt" not in folded
    assert "[image]" in folded


def test_splitting_then_reading_keeps_the_separator_and_the_link() -> None:
    """The same, through the pure functions the graph calls: chunk, then build the requests."""
    message = HumanMessage(
        content=[
            {"type": "text", "text": "please review"},
            {"type": "text", "text": "notes.txt:\n```text\n" + "word " * 3000 + "\n```"},
            {"type": "image_url", "image_url": {"url": LINK}},
        ]
    )
    chunks = chunk_for_summary([message], 1500, TokenCounter())
    assert len(chunks) > 1
    bodies = [summary_request(chunk, "")[-1].text for chunk in chunks]
    assert "[part 1/" in bodies[0] and "please review\n\nnotes.txt:" in bodies[0]
    assert f"[image: {LINK}]" in bodies[-1]


def test_a_message_is_not_split_for_media_the_summarizer_reads_as_markers() -> None:
    """A model is counted 1,000 tokens per image; the summarizer reads ``[image: x]``."""
    images = [{**IMAGE, "extras": {"filename": f"photo{i}.png"}} for i in range(5)]
    message = HumanMessage(content=[{"type": "text", "text": "my holiday"}, *images])
    (chunk,) = chunk_for_summary([message], 300, TokenCounter())
    (read,) = chunk
    assert read.text.startswith("my holiday\n\n[image: photo0.png]")
    assert "[part" not in read.text


# --- search, show, history, export -----------------------------------------------------------


def test_search_show_history_and_export_read_every_part(
    backend: tuple[LocalBackend, ScriptedChatModel, str], tmp_path: Path
) -> None:
    chat, _, db = backend
    list(chat.send("t1", EVERY_PART))

    for query in ("cat.png", "4,200", "example.com"):
        (hit,) = search(chat.store, query)  # type: ignore[attr-defined]
        assert hit.thread_id == "t1"

    shown = ok(runner.invoke(app, ["show", "t1", "--db", db])).stdout
    flat = " ".join(shown.split())
    for marker in ("please review", "notes.txt:", "[image: cat.png]", "[audio]", LINK):
        assert marker in flat, marker

    (turn,) = json.loads(ok(runner.invoke(app, ["history", "t1", "--json", "--db", db])).stdout)
    assert turn["text"] == f"please review [+ notes.txt, cat.png, audio, {LINK}]"

    markdown = ok(runner.invoke(app, ["export", "t1", "--db", db])).stdout
    assert "```text\nplease review\n```" in markdown
    assert NOTES in markdown
    assert "_[image: cat.png]_" in markdown and "_[audio]_" in markdown
    assert f"_[image: {LINK}]_" in markdown


_TEXTS = st.lists(
    st.sampled_from([*"ab <>&\"'\n\t中…", "</message>", '<message type="user">']), max_size=12
).map("".join)


@st.composite
def _messages(draw: st.DrawFn) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for kind in draw(
        st.lists(
            st.sampled_from(["human", "ai", "tool_call", "blocks", "system", "tool"]), max_size=6
        )
    ):
        text = draw(_TEXTS)
        if kind == "human":
            out.append(HumanMessage(text))
        elif kind == "ai":
            out.append(AIMessage(text))
        elif kind == "tool_call":
            out.append(
                AIMessage(text, tool_calls=[{"name": "look", "args": {"q": text}, "id": "c1"}])
            )
        elif kind == "blocks":
            out.append(
                HumanMessage(
                    [
                        {"type": "text", "text": text},
                        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                    ]
                )
            )
        elif kind == "system":
            out.append(SystemMessage(text))
        else:
            out.append(ToolMessage(text, tool_call_id="c1"))
    return out


@settings(max_examples=300, deadline=None)
@given(messages=_messages())
def test_the_summarizer_reads_langchains_xml_transcript_with_short_tags(
    messages: list[BaseMessage],
) -> None:
    """What the summary model reads of the folded messages is langchain-core's XML transcript
    (``get_buffer_string(..., format="xml")``) of their readable text, with each
    ``<message type="X">...</message>`` written ``<X>...</X>``, whatever the messages hold."""
    xml = get_buffer_string(
        [text_only(m) for m in messages], human_prefix="user", ai_prefix="assistant", format="xml"
    )
    expected = re.sub(r'<message type="([\w-]+)">(.*?)</message>', r"<\1>\2</\1>", xml, flags=re.S)
    assert transcript(messages) == expected
