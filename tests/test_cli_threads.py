"""The thread commands of the CLI through Typer's CliRunner, with the offline model.

Each test checks the output, the exit code and what is in SQLite afterwards. Threads are made
the way a user makes them: ``chatbot chat`` reading a script from stdin. With ``messages:6`` /
``messages:2`` the fourth turn folds the first six messages into the summary.
"""

from __future__ import annotations

import json
import shlex
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from chatbot.cli.commands import app
from chatbot.engine.graph import build_graph
from chatbot.engine.models import OfflineChatModel
from chatbot.history.lineage import lineage, short_id
from chatbot.history.snapshots import Snapshot
from chatbot.store.base import ThreadInfo, thread_config
from chatbot.store.sqlite import Store
from chatbot.terminal.render import preview
from chatbot.threadids import check_thread_id
from chatbot.threads.backend import LocalBackend
from tests.helpers import offline_echo, one_error, runner

SUMMARY_ENV = {"CHATBOT_SUMMARY_TRIGGER": "messages:6", "CHATBOT_SUMMARY_KEEP": "messages:2"}
FOUR_TURNS = ["one", "two", "three", "four"]


def cli(*args: str, input: str | None = None) -> Result:
    return runner.invoke(app, list(args), input=input, env=SUMMARY_ENV)


def chat(db: Path, thread: str, *lines: str) -> Result:
    """``chatbot chat --thread THREAD`` with ``lines`` on stdin; must succeed."""
    result = cli(
        "chat", "--db", str(db), "--thread", thread, input="".join(f"{x}\n" for x in lines)
    )
    assert result.exit_code == 0, result.output
    return result


@contextmanager
def opened(db: Path) -> Iterator[LocalBackend]:
    """The database as the app sees it, to check what the commands left in it."""
    with Store(db) as store:
        yield LocalBackend(build_graph(OfflineChatModel(), checkpointer=store.saver), store)


def listing(db: Path) -> dict[str, ThreadInfo]:
    with opened(db) as backend:
        return {info.thread_id: info for info in backend.threads()}


def values(db: Path, thread: str) -> dict[str, Any]:
    with opened(db) as backend:
        return backend.graph.get_state(thread_config(thread)).values


def texts(db: Path, thread: str) -> list[str]:
    return [m.text for m in values(db, thread).get("messages", [])]


def chain(db: Path, thread: str) -> list[Snapshot]:
    """The thread's current lineage, oldest first."""
    with opened(db) as backend:
        found = lineage(backend.history(thread))
        for snapshot in found:
            _ = snapshot.state, snapshot.metadata  # read while the database is open
        return found


def before_summary(db: Path, thread: str) -> Snapshot:
    """The checkpoint that still holds all eight messages of four turns, before the summary."""
    (found,) = [s for s in chain(db, thread) if len(s.messages) == 8 and not s.summary]
    return found


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "threads.sqlite"


@pytest.fixture
def summarized(db: Path) -> Path:
    """A database with thread ``t1``: four turns, the first three folded into the summary."""
    chat(db, "t1", *FOUR_TURNS)
    return db


# --- chat --------------------------------------------------------------------------------------


def test_chat_reads_a_script_from_stdin_and_stores_the_turns(db: Path) -> None:
    result = chat(db, "t1", "hello", "/threads", "/exit", "never sent")
    lines = result.stdout.splitlines()
    assert lines[0].startswith("chatbot ") and "model offline" in lines[0] and str(db) in lines[0]
    assert "note: No OPENAI_API_KEY or OPENAI_BASE_URL is set" in result.stdout
    assert "new thread t1" in lines
    assert offline_echo("hello") in result.stdout
    (current,) = [line for line in lines if line.startswith("* t1")]
    assert current.split()[2:4] == ["2", "no"] and current.split()[-1] == "hello"
    assert offline_echo("never sent") not in result.stdout

    info = listing(db)["t1"]
    assert (info.title, info.message_count, info.has_summary) == ("hello", 2, False)
    stored = texts(db, "t1")
    assert stored[0] == "hello" and stored[1].startswith(offline_echo("hello")) and len(stored) == 2


def test_chat_summarizes_and_a_bad_command_does_not_stop_the_script(db: Path) -> None:
    result = chat(db, "t1", *FOUR_TURNS, "/history x", "/summary")
    assert "summarized 6 messages" in result.stdout
    assert "error: /history takes a number of turns, not 'x': /history [all] [N]" in result.stdout
    assert "Offline extractive summary" in result.stdout
    state = values(db, "t1")
    assert state["summary"].splitlines()[1:] == ["- one", "- two", "- three"]
    assert state["messages"][0].text == "four"
    assert listing(db)["t1"].has_summary is True


def test_chat_opens_the_most_recent_thread_by_default(db: Path) -> None:
    chat(db, "older", "first")
    chat(db, "newer", "second")
    result = cli("chat", "--db", str(db), input="third\n")
    assert result.exit_code == 0, result.output
    assert "thread newer: 2 messages, no summary yet" in result.stdout
    assert texts(db, "newer")[2] == "third"
    assert len(texts(db, "older")) == 2


def test_chat_thread_continues_the_named_thread(db: Path) -> None:
    chat(db, "t1", "first")
    result = chat(db, "t1", "/thread")
    assert result.stdout.count("thread t1: 2 messages, no summary yet") == 2  # opened, /thread


def test_a_thread_of_one_message_is_told_in_the_singular(db: Path, openai_server: Any) -> None:
    """A turn whose reply failed leaves one message: `1 message`, never `1 messages`."""
    from tests.fake_openai import Reply

    openai_server.script(Reply(status=500, error_message="down"))
    env = SUMMARY_ENV | {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": openai_server.base_url}
    env["CHATBOT_MAX_RETRIES"] = "0"  # the 500 fails the turn at once, not after two backoffs
    failed = runner.invoke(app, ["ask", "--db", str(db), "--thread", "t1", "hello"], env=env)
    assert failed.exit_code == 1 and listing(db)["t1"].message_count == 1
    result = chat(db, "t1", "/thread")
    assert "thread t1: 1 message, no summary yet" in result.stdout
    assert "thread t1: 1 message, no summary yet" in result.stdout
    assert "1 messages" not in result.stdout


def test_chat_new_starts_a_fresh_thread(db: Path) -> None:
    chat(db, "t1", "first")
    result = cli("chat", "--db", str(db), "--new", input="fresh start\n")
    assert result.exit_code == 0, result.output
    threads = listing(db)
    (fresh,) = [t for t in threads if t != "t1"]
    assert check_thread_id(fresh) == fresh and f"new thread {fresh}" in result.stdout
    assert threads[fresh].title == "fresh start"
    assert texts(db, fresh)[0] == "fresh start" and len(texts(db, "t1")) == 2


def test_chat_with_both_thread_and_new_is_an_error(db: Path) -> None:
    result = cli("chat", "--db", str(db), "--thread", "t1", "--new", input="hello\n")
    assert one_error(result, 2) == "error: give --thread or --new, not both"
    assert result.stdout == ""
    assert not db.exists(), "nothing was opened or created"


def test_chat_with_an_unusable_thread_id_is_an_error(db: Path) -> None:
    result = cli("chat", "--db", str(db), "--thread", "two words", input="hello\n")
    assert "is not a usable thread id" in one_error(result, 2)
    assert listing(db) == {}


def test_chatbot_without_a_command_runs_the_chat(db: Path) -> None:
    chat(db, "t1", "first")
    result = cli("--db", str(db), input="second\n/thread\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("chatbot ")
    assert offline_echo("second") in result.stdout
    assert "thread t1: 4 messages, no summary yet" in result.stdout
    assert texts(db, "t1")[2] == "second"


# --- threads -----------------------------------------------------------------------------------


def test_threads_lists_ids_counts_summaries_and_titles(summarized: Path) -> None:
    chat(summarized, "cats", "talk about cats")
    result = cli("threads", "--db", str(summarized))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["thread", "messages", "summary", "last", "active", "title"]
    cats, t1 = (line.split() for line in lines[1:])
    assert cats[:3] == ["cats", "2", "no"] and cats[-3:] == ["talk", "about", "cats"]
    assert t1[:3] == ["t1", "2", "yes"] and t1[-1] == "one"
    assert not any(line.startswith("*") for line in lines), "no current thread outside chat"


LONG_TITLE = "a rather long first message that makes a title of some length for a thread"


def test_piped_listings_keep_each_row_on_one_line(db: Path) -> None:
    """`chatbot threads | grep fork1` finds the row whole: output that is not a terminal is
    never wrapped (it was, at 80 columns), whatever COLUMNS says."""
    chat(db, "1124-2310-2f44", LONG_TITLE, "and a second message, long enough to fold")
    assert cli("fork", "1124-2310-2f44", "--db", str(db)).exit_code == 0
    narrow = {"COLUMNS": "40", **SUMMARY_ENV}

    def lines(*args: str) -> list[str]:
        result = runner.invoke(app, [*args, "--db", str(db)], env=narrow)
        assert result.exit_code == 0, result.output
        return result.stdout.splitlines()

    (row,) = [line for line in lines("threads") if "fork1" in line]
    assert row.split()[:3] == ["1124-2310-2f44-fork1", "4", "no"]
    assert row.rstrip().endswith(LONG_TITLE)
    every = lines("history", "1124-2310-2f44", "--all")
    assert every[0].split() == ["checkpoint", "step", "node", "next", "msgs", "summary", "time"]
    checkpoints = cli("history", "1124-2310-2f44", "--all", "--json", "--db", str(db))
    assert len(every) == 1 + len(json.loads(checkpoints.stdout)), "one line a checkpoint"
    turns = lines("history", "1124-2310-2f44")
    assert len(turns) == 3 and preview(LONG_TITLE) in turns[2] and turns[2].split()[-2] == "0→2"
    hits = lines("search", "rather long")
    found = json.loads(cli("search", "rather long", "--json", "--db", str(db)).stdout)
    assert len(hits) == 2 * len(found)
    assert found[0]["checkpoint_id"] in hits[0] and hits[0].startswith(found[0]["thread_id"])


def test_threads_json_has_one_record_per_thread(summarized: Path) -> None:
    fork = cli("fork", "t1", "--to", "branch", "--db", str(summarized))
    assert fork.exit_code == 0, fork.output
    result = cli("threads", "--json", "--db", str(summarized))
    assert result.exit_code == 0, result.output
    records = {r["thread_id"]: r for r in json.loads(result.stdout)}
    assert list(records) == ["branch", "t1"], "newest activity first"
    t1 = records["t1"]
    assert (t1["messages"], t1["has_summary"], t1["title"], t1["origin"]) == (2, True, "one", None)
    assert t1["checkpoints"] == len(chain(summarized, "t1"))
    assert t1["last_active"] is not None
    head = chain(summarized, "t1")[-1]
    assert records["branch"]["origin"] == {"thread_id": "t1", "checkpoint_id": head.checkpoint_id}


def test_threads_on_an_empty_database_says_so(db: Path) -> None:
    Store(db).close()  # chatbot's tables, no thread
    result = cli("threads", "--db", str(db))
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr.strip() == f"no threads in {db}"
    as_json = cli("threads", "--json", "--db", str(db))
    assert as_json.exit_code == 0 and json.loads(as_json.stdout) == []


# --- history and show --------------------------------------------------------------------------


def test_history_lists_one_row_per_turn_newest_first_with_the_checkpoint_it_left(
    db: Path,
) -> None:
    chat(db, "t1", *FOUR_TURNS, "five")
    ends = [s for s in chain(db, "t1") if not s.next and s.source == "loop"]
    assert len(ends) == 5, "each turn's run ends in one checkpoint"
    result = cli("history", "t1", "--db", str(db))
    assert result.exit_code == 0, result.output
    header, *rows = [line.split() for line in result.stdout.splitlines()]
    assert header == ["checkpoint", "time", "message", "msgs", "summary"]
    assert [r[0] for r in rows] == [short_id(s.checkpoint_id) for s in reversed(ends)]
    assert [r[2] for r in rows] == ["five", "four", "three", "two", "one"]
    assert [r[3:] for r in rows] == [
        ["2→4", "-"],
        ["6→2", "folded", "6"],  # the fourth turn folded the first three into the summary
        ["4→6", "-"],
        ["2→4", "-"],
        ["0→2", "-"],
    ]

    as_json = json.loads(cli("history", "t1", "--json", "--db", str(db)).stdout)
    assert [r["checkpoint_id"] for r in as_json] == [s.checkpoint_id for s in reversed(ends)]
    assert [r["text"] for r in as_json] == ["five", "four", "three", "two", "one"]
    four = as_json[1]
    assert four == {
        "checkpoint_id": ends[3].checkpoint_id,
        "first_checkpoint_id": four["first_checkpoint_id"],
        "kind": "turn",
        "time": four["time"],
        "text": "four",
        "messages_before": 6,
        "messages_after": 2,
        "folded": 6,
        "summary_changed": True,
        "finished": True,
        "fate": None,
        "origin": None,
        "fold_left": False,
    }
    (first,) = [s for s in chain(db, "t1") if s.checkpoint_id == four["first_checkpoint_id"]]
    assert first.source == "input" and len(first.messages) == 6, "where the turn's run began"


def test_history_all_lists_every_checkpoint_newest_first(db: Path) -> None:
    chat(db, "t1", "hello")
    ids = [s.checkpoint_id for s in reversed(chain(db, "t1"))]
    result = cli("history", "t1", "--all", "--db", str(db))
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == [short_id(i) for i in ids]
    assert [r[1:3] for r in rows] == [["1", "conversation"], ["0", "__start__"], ["-1", "input"]]

    as_json = json.loads(cli("history", "t1", "--all", "--json", "--db", str(db)).stdout)
    assert [r["checkpoint_id"] for r in as_json] == ids
    assert [r["parent_id"] for r in as_json] == [*ids[1:], None]
    assert [r["messages"] for r in as_json] == [2, 1, 0]
    assert as_json[1]["next"] == ["conversation"] and as_json[0]["next"] == []
    assert set(as_json[0]) == {
        "checkpoint_id",
        "parent_id",
        "step",
        "node",
        "next",
        "messages",
        "summary_chars",
        "time",
    }


def test_history_limit_keeps_the_newest(db: Path) -> None:
    chat(db, "t1", "hello", "again")
    ids = [s.checkpoint_id for s in reversed(chain(db, "t1"))]
    limited = json.loads(
        cli("history", "t1", "--all", "--json", "--limit", "2", "--db", str(db)).stdout
    )
    assert [r["checkpoint_id"] for r in limited] == ids[:2]
    table = cli("history", "t1", "-a", "-n", "1", "--db", str(db))
    assert [line.split()[0] for line in table.stdout.splitlines()[1:]] == [short_id(ids[0])]
    turns = json.loads(cli("history", "t1", "--json", "-n", "1", "--db", str(db)).stdout)
    assert [t["text"] for t in turns] == ["again"] and turns[0]["checkpoint_id"] == ids[0]
    assert cli("history", "t1", "--limit", "0", "--db", str(db)).exit_code == 2


def test_show_at_a_checkpoint_includes_messages_later_folded(summarized: Path) -> None:
    old = before_summary(summarized, "t1")
    result = cli(
        "show", "t1", "--checkpoint", short_id(old.checkpoint_id), "--json", "--db", str(summarized)
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["checkpoint_id"] == old.checkpoint_id
    assert document["summary"] == ""
    contents = [m["content"] for m in document["messages"]]
    assert contents[::2] == FOUR_TURNS
    assert all(
        c.startswith(offline_echo(t)) for c, t in zip(contents[1::2], FOUR_TURNS, strict=True)
    )

    now = json.loads(cli("show", "t1", "--json", "--db", str(summarized)).stdout)
    assert "checkpoint_id" not in now
    assert now["messages"][0]["content"] == "four"
    assert "- one" in now["summary"]


def test_show_renders_the_state_at_a_checkpoint_for_people(summarized: Path) -> None:
    old = before_summary(summarized, "t1")
    result = cli("show", "t1", "-c", old.checkpoint_id, "--db", str(summarized))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "one" in lines and lines.count("you") == 4 and lines.count("assistant") == 4


def test_show_of_an_unknown_checkpoint_is_one_error_line(summarized: Path) -> None:
    result = cli("show", "t1", "--checkpoint", "zzzzzzzz", "--db", str(summarized))
    assert (
        one_error(result)
        == "error: no checkpoint 'zzzzzzzz' in this thread (its history lists them)"
    )


# --- export ------------------------------------------------------------------------------------


def test_export_to_stdout_is_markdown_with_summary_folded_and_live_messages(
    summarized: Path,
) -> None:
    result = cli("export", "t1", "--db", str(summarized))
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith("# Thread t1\n")
    summary, rest = text.split("## Summary", 1)[1].split("## Messages folded into the summary", 1)
    folded, live = rest.split("## Conversation", 1)
    assert "- one\n- two\n- three" in summary
    assert "6 messages folded" in summary
    for said in ("one", "two", "three"):
        assert f"\n{said}\n" in folded and offline_echo(said) in folded
    assert "\nfour\n" in live and offline_echo("four") in live and offline_echo("one") not in live


def test_export_to_files_by_extension_or_format_is_private(
    summarized: Path, tmp_path: Path
) -> None:
    outputs = {
        "a.md": ["-o", "a.md", "--force"],  # (an older file: replaced when asked)
        "b.json": ["-o", "b.json"],
        "nested/c.txt": ["--output", "nested/c.txt", "--format", "json"],
    }
    (tmp_path / "a.md").write_text("an older, world-readable file")
    (tmp_path / "a.md").chmod(0o644)
    (tmp_path / "nested").mkdir()  # (a folder that does not exist is not made)
    for name, options in outputs.items():
        result = cli("export", "t1", *options, "--db", str(summarized))
        assert result.exit_code == 0, result.output
        assert result.stdout == ""
        assert result.stderr.strip() == f"exported t1 to {name}"
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name

    markdown = (tmp_path / "a.md").read_text()
    assert "## Messages folded into the summary" in markdown and "older" not in markdown
    for name in ("b.json", "nested/c.txt"):
        document = json.loads((tmp_path / name).read_text())
        assert document["summary"] == values(summarized, "t1")["summary"]
        assert [m["content"] for m in document["folded_messages"]][::2] == FOUR_TURNS[:3]
        assert document["messages"][0]["content"] == "four"
        assert document["checkpoint_id"] == chain(summarized, "t1")[-1].checkpoint_id


def test_export_json_to_stdout(summarized: Path) -> None:
    result = cli("export", "t1", "-f", "json", "--db", str(summarized))
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["thread_id"] == "t1" and len(document["folded_messages"]) == 6


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--format", "xml"], "error: unknown format 'xml': use md or json"),
        (
            ["-o", "notes.txt"],
            "error: cannot tell the format of 'notes.txt': "
            "end the name in .md or .json (or give --format md|json)",
        ),
    ],
)
def test_export_with_a_bad_format_is_one_error_line(
    summarized: Path, tmp_path: Path, options: list[str], message: str
) -> None:
    result = cli("export", "t1", *options, "--db", str(summarized))
    assert one_error(result, code=2) == message, "a bad argument exits 2"
    assert result.stdout == "" and not (tmp_path / "notes.txt").exists()


# --- fork and delete ---------------------------------------------------------------------------


def test_fork_prints_the_new_id_and_copies_the_latest_state(summarized: Path) -> None:
    result = cli("fork", "t1", "--db", str(summarized))
    assert result.exit_code == 0, result.output
    new_id = result.stdout.strip()
    assert new_id == "t1-fork1", "named as /fork names it in the REPL"
    assert values(summarized, new_id) == values(summarized, "t1")
    info = listing(summarized)[new_id]
    head = chain(summarized, "t1")[-1]
    assert (info.origin_thread, info.origin_checkpoint) == ("t1", head.checkpoint_id)
    assert (info.title, info.message_count, info.has_summary) == ("one", 2, True)
    again = cli("fork", "t1", "--db", str(summarized))
    assert again.stdout == "t1-fork2\n", "the next free number"
    forked_in_repl = chat(summarized, "t1", "/fork")
    assert "into t1-fork3" in forked_in_repl.stdout, "the REPL follows the same rule"


def test_fork_at_a_checkpoint_to_a_chosen_id(summarized: Path) -> None:
    old = before_summary(summarized, "t1")
    result = cli(
        "fork", "t1", "-c", short_id(old.checkpoint_id), "--to", "branch", "--db", str(summarized)
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == "branch\n"
    state = values(summarized, "branch")
    assert [m.text for m in state["messages"]] == [m.text for m in old.messages]
    assert state.get("summary", "") == ""
    info = listing(summarized)["branch"]
    assert (info.origin_thread, info.origin_checkpoint) == ("t1", old.checkpoint_id)
    assert texts(summarized, "t1")[0] == "four", "the origin is untouched"

    continued = chat(summarized, "branch", "in the branch")
    assert "thread branch: 8 messages, no summary yet" in continued.stdout
    assert "summarized" in continued.stdout, "the branch goes on from its own state"


def test_fork_onto_an_existing_thread_is_refused(summarized: Path) -> None:
    chat(summarized, "other", "hello")
    before = {t: info.checkpoints for t, info in listing(summarized).items()}
    result = cli("fork", "t1", "--to", "other", "--db", str(summarized))
    assert one_error(result) == "error: thread 'other' already exists: pick another name"
    assert result.stdout == ""
    assert {t: info.checkpoints for t, info in listing(summarized).items()} == before
    assert texts(summarized, "other")[0] == "hello"


def test_fork_to_an_unusable_id_or_unknown_checkpoint_is_refused(summarized: Path) -> None:
    bad_id = cli("fork", "t1", "--to", "two words", "--db", str(summarized))
    assert "is not a usable thread id" in one_error(bad_id, 2)
    bad_checkpoint = cli("fork", "t1", "-c", "zzzzzzzz", "--db", str(summarized))
    assert "no checkpoint 'zzzzzzzz'" in one_error(bad_checkpoint)
    assert list(listing(summarized)) == ["t1"]


def test_delete_with_yes_removes_the_thread_from_sqlite(db: Path) -> None:
    chat(db, "keep", "keep me")
    chat(db, "drop", "drop me")
    result = cli("delete", "drop", "--yes", "--db", str(db))
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == "deleted drop"
    assert list(listing(db)) == ["keep"]
    assert values(db, "drop") == {} and chain(db, "drop") == []
    assert texts(db, "keep")[0] == "keep me"


def test_delete_without_yes_and_no_terminal_refuses(db: Path) -> None:
    chat(db, "t1", "hello")
    result = cli("delete", "t1", "--db", str(db), input="y\n")
    assert one_error(result, 2) == "error: deleting needs confirmation: add --yes"
    assert list(listing(db)) == ["t1"] and len(texts(db, "t1")) == 2


def test_delete_in_a_piped_chat_names_the_thread_kept_and_the_command_that_deletes_it(
    db: Path,
) -> None:
    chat(db, "t2", "doomed")
    result = chat(db, "t1", "hello", "/delete t2")  # the input ends at the question: no answer
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("kept")]
    assert line == f"kept t2: 'chatbot delete t2 --yes --db {db}' deletes it without asking"
    assert sorted(listing(db)) == ["t1", "t2"]
    command = shlex.split(line.split("'", 2)[1])
    assert command[0] == "chatbot"
    assert cli(*command[1:]).stderr.strip() == "deleted t2"
    assert list(listing(db)) == ["t1"]


def test_delete_kept_in_the_default_database_names_the_command_without_db() -> None:
    for thread, lines in (("t2", ["doomed"]), ("t1", ["hello", "/delete t2", "no"])):
        result = cli("chat", "--thread", thread, input="".join(f"{x}\n" for x in lines))
        assert result.exit_code == 0, result.output
    assert "kept t2: 'chatbot delete t2 --yes' deletes it without asking" in result.stdout


# --- unknown threads ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["history", "nope"],
        ["history", "nope", "--json"],
        ["show", "nope"],
        ["show", "nope", "--checkpoint", "abc"],
        ["export", "nope"],
        ["export", "nope", "-o", "out.md"],
        ["fork", "nope"],
        ["fork", "nope", "--to", "new"],
        ["delete", "nope"],
        ["delete", "nope", "--yes"],
    ],
    ids=lambda command: " ".join(command),
)
def test_an_unknown_thread_is_one_error_line(db: Path, tmp_path: Path, command: list[str]) -> None:
    chat(db, "t1", "hello")
    result = cli(*command, "--db", str(db))
    line = one_error(result)
    # the hint lists the database given, not the default one
    assert line == f"error: no thread 'nope' in {db} ('chatbot threads --db {db}' lists them)"
    assert result.stdout == ""
    assert list(listing(db)) == ["t1"] and not (tmp_path / "out.md").exists()
    from_env = runner.invoke(app, command, env=SUMMARY_ENV | {"CHATBOT_DB": str(db)})
    assert one_error(from_env) == f"error: no thread 'nope' in {db} ('chatbot threads' lists them)"


def test_chat_options_work_without_the_chat_command(tmp_path: Path) -> None:
    db = str(tmp_path / "c.sqlite")
    result = runner.invoke(app, ["--db", db, "--thread", "direct"], input="hello\n/exit\n")
    assert result.exit_code == 0, result.output
    assert "new thread direct" in result.stdout
    fresh = runner.invoke(app, ["--db", db, "--new"], input="/thread\n/exit\n")
    assert fresh.exit_code == 0 and "thread direct" not in fresh.stdout
    misplaced = runner.invoke(app, ["--db", db, "--thread", "x", "threads"])
    assert misplaced.exit_code == 2
    assert "--thread and --new go after the command" in misplaced.stderr
