"""Files in a message: ``chatbot ask -f PATH`` and ``/file PATH`` in the REPL.

What the model is sent is read from the fake OpenAI server: a text file inline with its name,
an image as an ``image_url`` data URL. Refusals are one line and send nothing. The attachment
is part of the stored message: titles, history, /show, exports and summaries have it.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from chatbot.parts import describe, readable_text
from chatbot.threads.attachments import image_type
from tests.fake_openai import FakeOpenAI
from tests.helpers import (
    CHAT_MODEL,
    Cli,
    DevServer,
    chat_requests,
    echo_or_summary,
    ok,
    one_error,
    runner,
    summarizing,
    summary_requests,
)

NOTES = "line one\nline `two`\n"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(64))


@pytest.fixture
def files(tmp_path: Path) -> Path:
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "notes.txt").write_text(NOTES)
    (folder / "cat.png").write_bytes(PNG)
    (folder / "tool.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00binary")
    (folder / "latin1.txt").write_bytes("café".encode("latin-1"))
    return folder


@pytest.fixture(autouse=True)
def echoing(openai_server: FakeOpenAI) -> None:
    openai_server.responder = echo_or_summary


def last_user_content(server: FakeOpenAI) -> Any:
    (request,) = chat_requests(server)[-1:]
    user = [m for m in request.messages if m["role"] == "user"]
    return user[-1]["content"]


def ask(cli: Cli, *args: str, thread: str = "t1", **env: str) -> Any:
    return cli.invoke("ask", *args, "--thread", thread, "--db", str(cli.db), **env)


# --- ask -f ------------------------------------------------------------------------------------


def test_a_text_file_goes_inline_after_the_message_with_its_name(cli: Cli, files: Path) -> None:
    ok(ask(cli, "summarize this", "-f", str(files / "notes.txt")))

    assert last_user_content(cli.server) == [
        {"type": "text", "text": "summarize this"},
        {"type": "text", "text": "notes.txt:\n```text\nline one\nline `two`\n```"},
    ]


def test_an_image_is_sent_as_an_image_url_data_url(cli: Cli, files: Path) -> None:
    ok(ask(cli, "what is this", "--file", str(files / "cat.png")))

    content = last_user_content(cli.server)
    assert content[0] == {"type": "text", "text": "what is this"}
    assert content[1]["type"] == "image_url"
    expected = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert content[1]["image_url"]["url"] == expected


def test_several_files_and_no_text_at_all(cli: Cli, files: Path) -> None:
    ok(ask(cli, "-f", str(files / "notes.txt"), "-f", str(files / "cat.png")))

    content = last_user_content(cli.server)
    assert [block["type"] for block in content] == ["text", "image_url"]
    assert content[0]["text"].startswith("notes.txt:\n")
    threads = json.loads(ok(cli.invoke("threads", "--json", "--db", str(cli.db))).stdout)
    assert threads[0]["title"] == "[+ notes.txt, cat.png]"


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("tool.bin", "tool.bin is a binary file"),
        ("latin1.txt", "latin1.txt is not UTF-8 text"),
        ("missing.txt", "no file"),
        (".", "is a folder"),
    ],
)
def test_files_that_cannot_be_attached_are_one_line_and_nothing_is_sent(
    cli: Cli, files: Path, name: str, words: str
) -> None:
    result = ask(cli, "look", "-f", str(files / name))

    assert words in one_error(result, 2)
    assert chat_requests(cli.server) == []
    assert not cli.db.exists() or "t1" not in cli.invoke("threads", "--db", str(cli.db)).stdout


def test_an_unreadable_file_is_one_line(cli: Cli, files: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    secret = files / "secret.txt"
    secret.write_text("x")
    secret.chmod(0)
    assert "permission denied" in one_error(ask(cli, "look", "-f", str(secret)), 2)


def test_a_file_too_big_for_the_models_input_is_refused(cli: Cli, files: Path) -> None:
    big = files / "big.log"
    big.write_text("the quick brown fox jumps over the lazy dog\n" * 400)

    result = ask(cli, "look", "-f", str(big), CHATBOT_MAX_INPUT_TOKENS="2000")

    line = one_error(result, 2)
    assert f"big.log is too big for {CHAT_MODEL}" in line
    assert "the model takes 2,000 at most" in line
    assert chat_requests(cli.server) == []


def test_models_without_image_input_refuse_images_by_name(cli: Cli, files: Path) -> None:
    offline = ask(cli, "x", "-f", str(files / "cat.png"), CHATBOT_MODEL="offline")
    line = one_error(offline, 2)
    assert "the offline model does not take images: cat.png" in line
    assert "chatbot --model NAME ask" in line  # the way out that works from the command line

    # gpt-3.5-turbo's profile (from langchain-openai) says it takes no images
    old = ask(cli, "x", "-f", str(files / "cat.png"), CHATBOT_MODEL="gpt-3.5-turbo")
    assert "gpt-3.5-turbo does not take images" in one_error(old, 2)
    assert chat_requests(cli.server) == []


def test_utf16_text_with_a_byte_order_mark_is_text(cli: Cli, files: Path) -> None:
    (files / "windows.txt").write_bytes("héllo wörld\r\n".encode("utf-16"))

    ok(ask(cli, "read", "-f", str(files / "windows.txt")))

    assert last_user_content(cli.server)[1]["text"] == "windows.txt:\n```text\nhéllo wörld\r\n```"


def test_an_image_with_a_damaged_header_is_refused(cli: Cli, files: Path) -> None:
    (files / "fake.png").write_bytes(b"\x89PNG\r\n\x1a\ngarbage")

    result = ask(cli, "look", "-f", str(files / "fake.png"))

    assert "fake.png starts like a PNG image but is damaged" in one_error(result, 2)
    assert chat_requests(cli.server) == []


def test_the_same_file_twice_is_attached_once(cli: Cli, files: Path) -> None:
    notes = str(files / "notes.txt")

    ok(ask(cli, "read", "-f", notes, "-f", str(files / ".." / "files" / "notes.txt")))

    assert [b["text"][:10] for b in last_user_content(cli.server)] == ["read", "notes.txt:"]


# --- part of the message ------------------------------------------------------------------------


def test_history_show_and_the_exports_have_the_attachments(
    cli: Cli, files: Path, tmp_path: Path
) -> None:
    ok(ask(cli, "compare", "-f", str(files / "notes.txt"), "-f", str(files / "cat.png")))
    db = ("--db", str(cli.db))

    (turn,) = json.loads(ok(cli.invoke("history", "t1", "--json", *db)).stdout)
    assert turn["text"] == "compare [+ notes.txt, cat.png]"
    shown = ok(cli.invoke("show", "t1", *db)).stdout
    assert "notes.txt:" in shown and "line `two`" in shown and "[image: cat.png]" in shown

    markdown = ok(cli.invoke("export", "t1", *db)).stdout
    assert "```text\ncompare\n```" in markdown
    assert "notes.txt:\n```text\nline one\nline `two`\n```" in markdown
    assert "_[image: cat.png]_" in markdown

    ok(cli.invoke("export", "t1", "-o", str(tmp_path / "t1.json"), *db))
    document = json.loads((tmp_path / "t1.json").read_text())
    image = document["messages"][0]["content"][2]
    assert image["base64"] == base64.b64encode(PNG).decode()
    assert image["extras"] == {"filename": "cat.png"}


def test_a_summary_folds_the_attached_text_and_names_the_image(cli: Cli, files: Path) -> None:
    env = summarizing()
    ok(ask(cli, "read these", "-f", str(files / "notes.txt"), "-f", str(files / "cat.png"), **env))
    ok(ask(cli, "and then?", **env))

    (request,) = summary_requests(cli.server)
    folded = request.last_user_text
    assert "read these" in folded
    assert "line `two`" in folded
    assert "[image: cat.png]" in folded


# --- the REPL -----------------------------------------------------------------------------------


def chat(cli: Cli, lines: str, thread: str = "t1") -> str:
    result = cli.invoke("chat", "--thread", thread, "--db", str(cli.db), stdin=lines)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result.output


def test_file_attaches_to_the_next_message_only(cli: Cli, files: Path) -> None:
    output = chat(
        cli,
        f"/file {files / 'notes.txt'} {files / 'cat.png'}\n/file\nwhat are these\nand now?\n",
    )

    assert "attached notes.txt (20 B, " in output
    assert "attached cat.png (image, " in output
    assert "attached to the next message: notes.txt" in output
    first, second = chat_requests(cli.server)
    sent = [m for m in first.messages if m["role"] == "user"][-1]["content"]
    assert [block["type"] for block in sent] == ["text", "text", "image_url"]
    assert sent[0]["text"] == "what are these"
    assert [m for m in second.messages if m["role"] == "user"][-1]["content"] == "and now?"


def test_files_attached_then_a_thread_switch_are_named_and_go_with_the_new_threads_message(
    cli: Cli, files: Path
) -> None:
    output = chat(cli, f"/file {files / 'notes.txt'}\n/thread other\nread this\n")

    assert "still attached to the next message: notes.txt (/file clear drops them)" in output
    (request,) = chat_requests(cli.server)
    sent = [m for m in request.messages if m["role"] == "user"][-1]["content"]
    assert sent[1]["text"].startswith("notes.txt:\n")
    listing = cli.invoke("threads", "--json", "--db", str(cli.db))
    assert [t["thread_id"] for t in json.loads(listing.stdout)] == ["other"]


def test_file_refusals_clear_and_send_now(cli: Cli, files: Path) -> None:
    output = chat(
        cli,
        f"/file {files / 'tool.bin'}\n/file {files}\n/file {files / 'notes.txt'}\n"
        "/file clear\n/file\n/file clear\n"
        f"/file {files / 'notes.txt'} -- sum it up\n",
    )

    assert "error: tool.bin is a binary file" in output
    assert "is a folder: attach the files in it one by one" in output
    assert "dropped 1 attached file" in output
    assert "dropped 0" not in output, "nothing attached: nothing dropped, nothing said"
    assert "no files attached" in output
    (request,) = chat_requests(cli.server)
    sent = [m for m in request.messages if m["role"] == "user"][-1]["content"]
    assert sent[0] == {"type": "text", "text": "sum it up"}
    assert sent[1]["text"].startswith("notes.txt:\n")


def test_file_patterns_attach_each_match_once(cli: Cli, files: Path) -> None:
    src = files / "src"
    src.mkdir()
    for name in ("b.py", "a.py"):
        (src / name).write_text(f"# {name}\n")
    (src / "notes.md").write_text("not matched\n")

    output = chat(cli, f"/file {src}/*.py {src / 'a.py'} {src}/*.rs\nreview\n")

    assert "attached a.py (" in output and "attached b.py (" in output
    assert "a.py is already attached to the next message" in output
    assert "error: no file " in output and "*.rs" in output
    sent = last_user_content(cli.server)
    assert [block["text"].split("\n")[0] for block in sent] == ["review", "a.py:", "b.py:"]


def test_file_in_the_repl_refuses_images_for_the_offline_model(cli: Cli, files: Path) -> None:
    output = cli.invoke(
        "chat", "--db", str(cli.db), stdin=f"/file {files / 'cat.png'}\n", CHATBOT_MODEL="offline"
    ).output
    assert "error: the offline model does not take images: cat.png not attached" in output


def test_tab_completes_paths_with_spaces_so_file_reads_them_back(files: Path) -> None:
    import shlex

    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    from chatbot.terminal.lineinput import SlashCompleter

    (files / "my notes.txt").write_text("spaced\n")
    completer = SlashCompleter(commands=list, thread_ids=list, checkpoint_ids=list)

    def complete(line: str) -> list[str]:
        found = completer.get_completions(Document(line), CompleteEvent(completion_requested=True))
        return [line[: len(line) + c.start_position] + c.text for c in found]

    folder = str(files).replace(" ", "\\ ")
    for typed in (f"/file {folder}/my", f"/file {folder}/my\\ n", f'/file "{files}/my n'):
        (line,) = complete(typed)
        assert shlex.split(line) == ["/file", str(files / "my notes.txt")], typed
    (line,) = complete(f"/file {files / 'notes.txt'} {folder}/cat")
    assert shlex.split(line)[1:] == [str(files / "notes.txt"), str(files / "cat.png")]


# --- pieces ---------------------------------------------------------------------------------------


def test_images_are_told_by_their_first_bytes_not_their_name() -> None:
    assert image_type(PNG) == "image/png"
    assert image_type(b"\xff\xd8\xff\xe0rest") == "image/jpeg"
    assert image_type(b"GIF89a...") == "image/gif"
    assert image_type(b"RIFF\x10\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert image_type(b"hello") is None


def test_a_message_with_files_reads_as_its_text_and_their_names() -> None:
    content = [
        {"type": "text", "text": "look"},
        {"type": "text", "text": "a.py:\n```text\nx = 1\n```"},
        {"type": "image", "base64": "AA==", "mime_type": "image/png", "extras": {"filename": "b"}},
    ]
    assert describe(content) == "look [+ a.py, b]"
    assert describe("plain") == "plain"
    assert readable_text(content) == "look\n\na.py:\n```text\nx = 1\n```\n\n[image: b]"


# --- against a LangGraph server -------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.integration
def test_attachments_go_to_a_server_with_url(dev_server: DevServer, files: Path) -> None:
    thread = f"files-{uuid.uuid4().hex[:8]}"
    url = ("--url", dev_server.url)
    from chatbot.cli.commands import app

    asked = runner.invoke(
        app,
        [
            "ask",
            "compare",
            "-f",
            str(files / "notes.txt"),
            "-f",
            str(files / "cat.png"),
            "-t",
            thread,
            *url,
        ],
    )
    assert asked.exit_code == 0, asked.output
    assert "compare" in asked.stdout  # the server's offline model echoes the text

    shown = json.loads(runner.invoke(app, ["show", thread, "--json", *url]).stdout)
    content = shown["messages"][0]["content"]
    assert content[1]["text"] == "notes.txt:\n```text\nline one\nline `two`\n```"
    assert content[2]["base64"] == base64.b64encode(PNG).decode()
    threads = json.loads(runner.invoke(app, ["threads", "--json", *url]).stdout)
    assert {"title": "compare [+ notes.txt, cat.png]"}.items() <= next(
        t for t in threads if t["thread_id"] == thread
    ).items()


@pytest.mark.slow
@pytest.mark.integration
def test_file_in_the_repl_with_url_counts_the_text_as_the_status_line_does(
    dev_server: DevServer, files: Path
) -> None:
    from chatbot.cli.commands import app

    thread = f"files-{uuid.uuid4().hex[:8]}"
    result = runner.invoke(
        app,
        ["--url", dev_server.url, "chat", "--thread", thread],
        input=f"/file {files / 'notes.txt'}\nread this\n",
    )
    assert result.exit_code == 0, result.output
    assert "attached notes.txt (20 B, 0 tokens)" not in result.output
    assert "attached notes.txt (20 B, " in result.output
    counted = int(result.output.split("attached notes.txt (20 B, ")[1].split(" tokens")[0])
    assert counted > 5, "an estimate of the fenced file, not nothing"
