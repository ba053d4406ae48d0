"""``chatbot import FILE``: a thread's JSON export brought into another database, through
Typer's CliRunner with the offline model.

A thread that folded is exported from one SQLite file and imported into a second, empty
database (SQLite, then PostgreSQL): exported again it gives back the same summary, folded
messages and messages, and search finds its folded messages there. A name already taken and a
file that is not an export are one line each, with nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from chatbot.cli.commands import app
from chatbot.store.postgres import open_store
from chatbot.store.search import recaller
from chatbot.threads.backend import LocalBackend
from tests.helpers import one_error, runner

FOLDING = {"CHATBOT_SUMMARY_TRIGGER": "messages:4", "CHATBOT_SUMMARY_KEEP": "messages:2"}
TURNS = ["my name is Zanzibar", "I like tea", "three", "four"]


def invoke(*args: str, input: str | None = None) -> Result:
    return runner.invoke(app, list(args), input=input, env=FOLDING)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def exported(db: str, thread: str) -> dict[str, Any]:
    """``chatbot export THREAD --format json``, read."""
    return json.loads(ok(invoke("export", thread, "--format", "json", "--db", db)).stdout)


def thread_ids(db: str) -> list[str]:
    return [t["thread_id"] for t in json.loads(ok(invoke("threads", "--json", "--db", db)).stdout)]


def folded_thread(tmp_path: Path, system: str = "Answer in French") -> Path:
    """A SQLite file holding ``t1``, which folded (four turns, its own system prompt), and
    that thread's JSON export. Returns the export's path."""
    db = str(tmp_path / "source.sqlite")
    ok(invoke("ask", TURNS[0], "-t", "t1", "--system", system, "--db", db))
    for text in TURNS[1:]:
        ok(invoke("ask", text, "-t", "t1", "--db", db))
    path = tmp_path / "t1.json"
    ok(invoke("export", "t1", "-o", str(path), "--db", db))
    return path


def nothing_in(db: str) -> None:
    """The database was not written: a SQLite file not even made; no thread in PostgreSQL."""
    if db.startswith("postgresql://"):
        assert thread_ids(db) == []
    else:
        assert not Path(db).exists()


def test_a_thread_that_folded_comes_back_whole_in_another_database(
    tmp_path: Path, any_db: str
) -> None:
    path = folded_thread(tmp_path)
    before = json.loads(path.read_text())
    assert before["summary"] and before["folded_messages"] and before["messages"]
    result = ok(invoke("import", str(path), "--db", any_db))
    live, folded = len(before["messages"]), len(before["folded_messages"])
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"imported t1 ({live} messages, {folded} folded) from {path}"
    ]
    after = exported(any_db, "t1")
    for key in ("summary", "folded_messages", "messages", "system_prompt", "system_role"):
        assert after[key] == before[key], key
    assert "unanswered" not in after
    assert [c["folded_messages"] for c in after["summary_history"]] == [folded]

    shown = json.loads(ok(invoke("show", "t1", "--json", "--db", any_db)).stdout)
    assert (shown["summary"], shown["messages"]) == (before["summary"], before["messages"])
    (listed,) = json.loads(ok(invoke("threads", "--json", "--db", any_db)).stdout)
    assert (listed["title"], listed["messages"], listed["has_summary"]) == (TURNS[0], live, True)
    kinds = [
        e["kind"] for e in json.loads(ok(invoke("history", "t1", "--json", "--db", any_db)).stdout)
    ]
    assert kinds == ["import", "import"]

    hits = json.loads(ok(invoke("search", "Zanzibar", "--json", "--db", any_db)).stdout)
    first = before["folded_messages"][0]
    assert first["content"] == TURNS[0]
    assert first["id"] in {hit["message_id"] for hit in hits if hit["thread_id"] == "t1"}

    with open_store(any_db) as store:  # the recall tool's search, on the thread's line
        head = LocalBackend(None, store).current("t1")
        assert head is not None
        live_ids = {m["id"] for m in before["messages"]}
        found = recaller(store)("t1", "Zanzibar", 5, live_ids, head.checkpoint_id)
        assert (first["id"], TURNS[0]) in [(r.message_id, r.text) for r in found]
        assert {r.message_id for r in found} <= {m["id"] for m in before["folded_messages"]}

    # The thread goes on as any other: the next turn answers in it.
    answered = ok(invoke("ask", "five", "-t", "t1", "--db", any_db))
    assert 'You said: "five"' in answered.stdout


def test_the_summary_says_what_it_saves_as_after_a_fold(tmp_path: Path) -> None:
    """The imported summary holds the record a fold leaves: how many messages it holds."""
    path = folded_thread(tmp_path)
    target = tmp_path / "target.sqlite"
    ok(invoke("import", str(path), "--db", str(target)))
    with open_store(str(target)) as store:
        now = LocalBackend(None, store).current("t1")
        assert now is not None and now.fold_record is not None
        assert now.fold_record["messages"] == len(json.loads(path.read_text())["folded_messages"])
        assert not now.unfinished


def test_thread_names_the_new_thread(tmp_path: Path, any_db: str) -> None:
    path = folded_thread(tmp_path)
    result = ok(invoke("import", str(path), "--thread", "moved", "--db", any_db))
    assert result.stderr.startswith("imported moved (")
    assert thread_ids(any_db) == ["moved"]
    assert exported(any_db, "moved")["messages"] == json.loads(path.read_text())["messages"]


def test_a_thread_of_that_name_is_refused_and_kept_as_it_was(tmp_path: Path, any_db: str) -> None:
    path = folded_thread(tmp_path)
    ok(invoke("import", str(path), "--db", any_db))
    ok(invoke("ask", "more", "-t", "t1", "--db", any_db))
    history = ok(invoke("history", "t1", "--all", "--json", "--db", any_db)).stdout
    line = one_error(invoke("import", str(path), "--db", any_db))
    assert line.startswith("error: thread 't1' already exists in ")
    assert "--thread" in line and "nothing was written" in line
    assert ok(invoke("history", "t1", "--all", "--json", "--db", any_db)).stdout == history
    ok(invoke("import", str(path), "-t", "t1-again", "--db", any_db))
    assert sorted(thread_ids(any_db)) == ["t1", "t1-again"]


def test_an_export_read_from_stdin(tmp_path: Path) -> None:
    path = folded_thread(tmp_path)
    target = str(tmp_path / "target.sqlite")
    result = ok(invoke("import", "-", "--db", target, input=path.read_text()))
    assert result.stderr.endswith(" folded) from stdin\n")
    assert (
        exported(target, "t1")["folded_messages"] == json.loads(path.read_text())["folded_messages"]
    )


def _document(**changes: Any) -> dict[str, Any]:
    """An export of a thread with every kind of message a record holds, changed by ``changes``
    (a value of None removes the key)."""
    document: dict[str, Any] = {
        "thread_id": "made",
        "exported_at": "2025-01-01T00:00:00+00:00",
        "checkpoint_id": None,
        "system_prompt": "",
        "system_role": "",
        "summary": "the user asked about tea",
        "summary_history": [],
        "folded_messages": [
            {"type": "human", "content": "what about tea?", "id": "h0"},
            {"type": "ai", "content": "tea is fine", "id": "a0"},
        ],
        "messages": [
            {"type": "human", "content": [{"type": "text", "text": "look it up"}], "id": "h1"},
            {
                "type": "ai",
                "content": "",
                "id": "a1",
                "tool_calls": [
                    {"name": "recall", "args": {"query": "tea"}, "id": "c1", "type": "tool_call"}
                ],
            },
            {
                "type": "tool",
                "content": "tea is fine",
                "id": "t1",
                "tool_call_id": "c1",
                "name": "recall",
            },
            {"type": "ai", "content": [{"type": "text", "text": "tea, then"}], "id": "a2"},
        ],
    }
    for key, value in changes.items():
        if value is None:
            document.pop(key)
        else:
            document[key] = value
    return document


def _write(tmp_path: Path, document: Any, name: str = "export.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return path


def test_messages_keep_their_ids_content_blocks_tool_calls_and_names(tmp_path: Path) -> None:
    document = _document()
    target = str(tmp_path / "target.sqlite")
    result = ok(invoke("import", str(_write(tmp_path, document)), "--db", target))
    assert "imported made (4 messages, 2 folded)" in result.stderr
    again = exported(target, "made")
    assert again["folded_messages"] == document["folded_messages"]
    expected = [{k: v for k, v in m.items() if k != "name"} for m in document["messages"]]
    assert again["messages"] == expected  # (an export has no name: the state keeps it)
    with open_store(target) as store:
        now = LocalBackend(None, store).current("made")
        assert now is not None
        assert [getattr(m, "name", None) for m in now.messages] == [None, None, "recall", None]


def test_unanswered_messages_come_last_waiting_for_their_reply(tmp_path: Path) -> None:
    waiting = [{"type": "human", "content": "are you there?", "id": "u1"}]
    target = str(tmp_path / "target.sqlite")
    path = _write(tmp_path, _document(unanswered=waiting))
    assert "(5 messages, 2 folded)" in ok(invoke("import", str(path), "--db", target)).stderr
    with open_store(target) as store:
        now = LocalBackend(None, store).current("made")
        assert now is not None and now.awaiting_reply
        assert [m.id for m in now.messages][-2:] == ["a2", "u1"]
    entries = json.loads(ok(invoke("history", "made", "--json", "--db", target)).stdout)
    assert not entries[0]["finished"]
    retried = ok(invoke("chat", "-t", "made", "--db", target, input="/retry\n"))
    assert "did not finish" in retried.stdout + retried.stderr
    assert 'You said: "are you there?"' in retried.stdout


def test_an_export_from_before_threads_had_system_prompts(tmp_path: Path) -> None:
    target = str(tmp_path / "target.sqlite")
    path = _write(tmp_path, _document(system_prompt=None, system_role=None, summary=""))
    ok(invoke("import", str(path), "--db", target))
    shown = json.loads(ok(invoke("show", "made", "--json", "--db", target)).stdout)
    assert (shown["system_prompt"], shown["summary"]) == ("", "")
    assert [m["id"] for m in exported(target, "made")["folded_messages"]] == ["h0", "a0"]


def test_a_thread_without_a_summary_or_anything_folded_is_one_checkpoint(tmp_path: Path) -> None:
    target = str(tmp_path / "target.sqlite")
    path = _write(tmp_path, _document(summary="", folded_messages=[]))
    assert "(4 messages, 0 folded)" in ok(invoke("import", str(path), "--db", target)).stderr
    entries = json.loads(ok(invoke("history", "made", "--all", "--json", "--db", target)).stdout)
    assert len(entries) == 1


BAD_DOCUMENTS: dict[str, tuple[Any, str]] = {
    "markdown": ("# Thread t1\n\nExported today.\n", "is not JSON (expecting value at line 1"),
    "empty": ("\n", "export.json' is empty: import the JSON file"),
    "a list": ([1, 2], "is not a chatbot export: it holds a list, not an object"),
    "no messages": (_document(messages=None), "it has no 'messages'"),
    "two keys missing": (
        _document(summary=None, thread_id=None),
        "it has no 'thread_id' and no 'summary'",
    ),
    "summary a number": (_document(summary=3), "its 'summary' is a number, not text"),
    "messages an object": (_document(messages={}), "its 'messages' is an object, not a list"),
    "unanswered text": (_document(unanswered="x"), "its 'unanswered' is text, not a list"),
    "a message that is text": (_document(messages=["hi"]), "messages[0] is text, not a message"),
    "an unknown type": (
        _document(messages=[{"type": "robot", "content": "x", "id": "r"}]),
        "messages[0] has the type 'robot': a message is one of human, ai, tool, system",
    ),
    "no content": (
        _document(folded_messages=[{"type": "human", "id": "x"}]),
        "folded_messages[0] has no 'content'",
    ),
    "content a number": (
        _document(messages=[{"type": "human", "content": 4, "id": "x"}]),
        "messages[0] has content that is a number: it is text or a list of content blocks",
    ),
    "an id that is a number": (
        _document(messages=[{"type": "human", "content": "x", "id": 7}]),
        "messages[0] has an 'id' that is a number, not text",
    ),
    "a tool call without a name": (
        _document(
            messages=[{"type": "ai", "content": "", "id": "a", "tool_calls": [{"args": {}}]}]
        ),
        "messages[0] has tool_calls[0] without a 'name' (text)",
    ),
    "a tool message without its call": (
        _document(messages=[{"type": "tool", "content": "r", "id": "t"}]),
        "messages[0] is a tool message without a 'tool_call_id' (text)",
    ),
    "one id twice": (
        _document(messages=[{"type": "human", "content": "again", "id": "h0"}]),
        "messages[0] has the id of an earlier message ('h0')",
    ),
}


@pytest.mark.parametrize("case", BAD_DOCUMENTS)
def test_a_file_that_is_not_an_export_is_one_line_and_nothing_is_written(
    case: str, tmp_path: Path, any_db: str
) -> None:
    document, said = BAD_DOCUMENTS[case]
    path = _write(tmp_path, document)
    line = one_error(invoke("import", str(path), "--db", any_db), 2)
    assert said in line, line
    assert "import the JSON file 'chatbot export THREAD -o FILE.json' writes" in line, line
    nothing_in(any_db)


def test_a_file_that_is_not_utf8_text(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_bytes(b'{"thread_id": "\xff"}')
    line = one_error(invoke("import", str(path), "--db", str(tmp_path / "t.sqlite")), 2)
    assert "is not JSON: it is not UTF-8 text" in line
    nothing_in(str(tmp_path / "t.sqlite"))


@pytest.mark.parametrize("where", ["missing", "a folder"])
def test_a_file_that_is_not_there_is_one_line(where: str, tmp_path: Path) -> None:
    path = tmp_path / ("nope.json" if where == "missing" else "folder")
    if where == "a folder":
        path.mkdir()
    target = str(tmp_path / "target.sqlite")
    line = one_error(invoke("import", str(path), "--db", target), 2)
    said = "does not exist" if where == "missing" else "is a folder"
    assert line == (
        f"error: {str(path)!r} {said}: import the JSON file 'chatbot export THREAD -o FILE.json' "
        "writes"
    )
    nothing_in(target)


def test_a_thread_id_in_the_file_that_cannot_be_used_asks_for_thread(tmp_path: Path) -> None:
    target = str(tmp_path / "target.sqlite")
    path = _write(tmp_path, _document(thread_id="two words"))
    line = one_error(invoke("import", str(path), "--db", target), 2)
    assert "is not a usable thread id" in line and line.endswith("with --thread NAME")
    nothing_in(target)
    ok(invoke("import", str(path), "--thread", "two-words", "--db", target))
    assert thread_ids(target) == ["two-words"]


def test_a_thread_name_that_cannot_be_used_is_refused(tmp_path: Path) -> None:
    target = str(tmp_path / "target.sqlite")
    path = _write(tmp_path, _document())
    line = one_error(invoke("import", str(path), "--thread", "two words", "--db", target), 2)
    assert "is not a usable thread id" in line
    nothing_in(target)


def test_a_langgraph_server_is_refused_in_one_line(tmp_path: Path, refused_port: int) -> None:
    url = f"http://127.0.0.1:{refused_port}"
    path = _write(tmp_path, _document())
    line = one_error(invoke("import", str(path), "--url", url), 2)
    assert line == (
        "error: import works on local threads only (this session uses the LangGraph server at "
        f"{url})"
    )


def test_a_write_that_fails_takes_back_what_was_written(
    tmp_path: Path, any_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(self: LocalBackend, *args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(LocalBackend, "record", full_disk)
    path = _write(tmp_path, _document())
    result = invoke("import", str(path), "--db", any_db)
    assert result.exit_code == 1 and "Traceback" not in result.output
    monkeypatch.undo()
    assert thread_ids(any_db) == []
    assert json.loads(ok(invoke("search", "tea", "--json", "--db", any_db)).stdout) == []
    ok(invoke("import", str(path), "--db", any_db))
    assert thread_ids(any_db) == ["made"]
