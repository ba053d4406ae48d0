"""Faults around what chatbot writes, and smaller faults with them: the rows of
"Writing output" in docs/reliability.md.

Output faults are real ones, in a child process: stdout on ``/dev/full`` (every write fails
with ENOSPC), a pipe whose reader left after one byte, a file size limit (``RLIMIT_FSIZE``:
writes past it fail with EFBIG, as on a full disk). Each test checks the exit code, the one
line on stderr (never Python's "Exception ignored"), and what is left on disk. The smaller
faults (a file ``export -o`` must not write, a bad thread id or env file) need no process of
their own: they run in-process, as do the threads made and read back around a process.
"""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
from pathlib import Path
from typing import IO, Any

import pytest
from typer.testing import Result

from chatbot.cli.commands import app
from tests.fake_openai import FakeOpenAI
from tests.helpers import Cli, chatbot_argv, offline_threads, one_error, runner

FULL = "error: cannot write to stdout: No space left on device; the output is cut"
CLOSED = "error: cannot write to stdout: it is closed (or not open for writing)"
LONG_TEXT = "x" * 90_000  # (its thread's export and JSON are larger than a pipe's 64 KB)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Threads ``t1`` (one message of 90,000 characters and the offline model's echo) and
    ``t2``."""
    return offline_threads(tmp_path_factory.mktemp("output") / "db.sqlite", (LONG_TEXT,))


def run(
    *args: str,
    stdout: int | IO[Any] | None = subprocess.PIPE,
    stdin: str | None = None,
    limit: int | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """``chatbot ARGS`` in a child process; ``limit``: the largest file it may write, in
    bytes; ``stdout=None``: stdout closed (``>&-``)."""

    def limited() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        if stdout is None:
            os.close(1)

    return subprocess.run(
        chatbot_argv(*args),
        stdout=stdout,
        stderr=subprocess.PIPE,
        input=stdin,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        preexec_fn=limited,
    )


def here(*args: str, stdin: str | None = None, **env: str) -> Result:
    """``chatbot ARGS`` in this process (Typer's CliRunner), ``env`` set meanwhile."""
    return runner.invoke(app, list(args), input=stdin, env=env)


def only_line(done: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert done.returncode == code, done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    return line


# --- stdout ------------------------------------------------------------------------------------

ON_FULL_STDOUT = [
    ["threads"],
    ["threads", "--json"],
    ["show", "t1"],
    ["show", "t1", "--json"],
    ["history", "t1"],
    ["history", "t1", "--json"],
    ["export", "t2"],
    ["export", "t2", "-f", "json"],
    ["search", "other"],
    ["search", "other", "--json"],
    ["roles", "--json"],
    ["config"],
    ["config", "--json"],
    ["db", "stats"],
    ["--version"],
    ["show", "--help"],
]


@pytest.mark.slow
@pytest.mark.parametrize("form", ON_FULL_STDOUT, ids=" ".join)
def test_a_full_stdout_is_one_line_and_exit_1(db: Path, form: list[str]) -> None:
    with open("/dev/full", "w") as full:
        done = run(*form, stdout=full, CHATBOT_DB=str(db))
    assert only_line(done) == FULL


@pytest.mark.slow
@pytest.mark.parametrize("stdout", ["/dev/full", "closed"])
def test_ask_on_a_stdout_that_takes_nothing_saves_the_reply_and_says_so(
    tmp_path: Path, stdout: str
) -> None:
    """The reply came whole: it is saved, though it could not be printed (on /dev/full the
    turn was stopped, and the reply lost; with stdout closed all went unsaid, exit 0)."""
    database = tmp_path / "ask.sqlite"
    with open("/dev/full", "w") as full:
        target = full if stdout == "/dev/full" else None
        done = run("ask", "hello", "-t", "a1", "--db", str(database), stdout=target)
    assert done.returncode == 1 and "Exception ignored" not in done.stderr
    assert "Traceback" not in done.stderr
    note, line = done.stderr.strip().splitlines()  # (the note: the offline model answers)
    assert note.startswith("note: No OPENAI_API_KEY")
    problem = FULL if stdout == "/dev/full" else CLOSED
    assert line == f"{problem} - your message and the reply are saved ('chatbot show a1' prints it)"
    shown = json.loads(here("show", "a1", "--json", "--db", str(database)).stdout)
    assert [m["type"] for m in shown["messages"]] == ["human", "ai"]
    assert shown["messages"][0]["content"] == "hello"


@pytest.mark.parametrize(
    "form", [["threads"], ["threads", "--json"], ["show", "t1"], ["--version"]], ids=" ".join
)
@pytest.mark.slow
def test_a_closed_stdout_is_one_line_and_exit_1(db: Path, form: list[str]) -> None:
    assert only_line(run(*form, stdout=None, CHATBOT_DB=str(db))) == CLOSED


@pytest.mark.parametrize(
    "form",
    [["export", "t1"], ["export", "t1", "-f", "json"], ["show", "t1"], ["history", "t1", "--json"]],
    ids=" ".join,
)
@pytest.mark.slow
def test_a_reader_gone_ends_the_command_quietly_with_exit_1(db: Path, form: list[str]) -> None:
    child = subprocess.Popen(
        chatbot_argv(*form, "--db", str(db)), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stdout is not None and child.stderr is not None
    assert child.stdout.read(1)
    child.stdout.close()  # (`| head -c 1`)
    stderr = child.stderr.read().decode()
    assert child.wait(timeout=120) == 1
    assert stderr == ""


WIDTH_FORMS = (("show", "t2"), ("history", "t2"), ("threads",))


@pytest.fixture(scope="module")
def unset_width(db: Path) -> dict[tuple[str, ...], subprocess.CompletedProcess[str]]:
    """Each of :data:`WIDTH_FORMS` run without ``COLUMNS``."""
    return {form: run(*form, CHATBOT_DB=str(db)) for form in WIDTH_FORMS}


@pytest.mark.slow
@pytest.mark.parametrize("columns", ["0", "-3", "wide"])
def test_a_columns_that_is_no_width_is_as_unset(
    db: Path,
    columns: str,
    unset_width: dict[tuple[str, ...], subprocess.CompletedProcess[str]],
) -> None:
    for form in WIDTH_FORMS:
        unset = unset_width[form]
        odd = run(*form, CHATBOT_DB=str(db), COLUMNS=columns)
        assert odd.returncode == unset.returncode == 0
        assert odd.stdout == unset.stdout and "other" in odd.stdout


# --- export -o ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["kept.md", "kept.json"])
def test_an_export_that_cannot_be_written_whole_keeps_the_file_that_was_there(
    db: Path, tmp_path: Path, name: str
) -> None:
    target = tmp_path / name
    assert here("export", "t2", "-o", str(target), "--db", str(db)).exit_code == 0
    before = target.read_bytes()
    done = run("export", "t1", "-o", str(target), "--force", "--db", str(db), limit=64 * 1024)
    assert only_line(done) == (
        f"error: cannot write '{target}': File too large (the file is as it was)"
    )
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [name], "no part of a file is left"


def test_export_never_writes_over_a_file_unasked(db: Path, tmp_path: Path) -> None:
    target = tmp_path / "notes.md"
    target.write_text("the user's own notes")
    target.chmod(0o644)
    done = here("export", "t2", "-o", str(target), "--db", str(db))
    assert done.exit_code == 1
    assert one_error(done) == (
        f"error: '{target}' exists: add --force to replace it (nothing was written)"
    )
    assert target.read_text() == "the user's own notes"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["notes.md"]


def test_export_replaces_the_file_whole_private_and_through_a_symlink(
    db: Path, tmp_path: Path
) -> None:
    target = tmp_path / "real.md"
    target.write_text("an older export, longer than the new one " * 10_000)
    target.chmod(0o644)
    link = tmp_path / "link.md"
    link.symlink_to(target)
    assert here("export", "t2", "-o", str(link), "--force", "--db", str(db)).exit_code == 0
    assert link.is_symlink()
    text = target.read_text()
    assert text.startswith("# Thread t2") and "older" not in text
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.md", "real.md"]


def test_export_to_a_missing_folder_creates_nothing(db: Path, tmp_path: Path) -> None:
    done = here("export", "t2", "-o", "nothing/here/x.md", "--db", str(db))
    assert one_error(done) == (
        "error: the folder 'nothing/here' does not exist: create it first (nothing was written)"
    )
    assert not (Path.cwd() / "nothing").exists()


def test_export_to_a_device_says_it_failed(db: Path) -> None:
    done = here("export", "t2", "-o", "/dev/full", "--db", str(db))
    assert one_error(done) == (
        "error: cannot write '/dev/full': No space left on device (nothing was written)"
    )


def test_a_huge_path_is_cut_in_errors(db: Path) -> None:
    done = here("export", "t2", "-o", "a" * 120_000, "--db", str(db))
    line = one_error(done)
    assert line.endswith("…' (120,000 characters): File name too long (nothing was written)")
    assert len(line) < 400


# --- settings ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_env_file_that_is_not_a_file_says_what_it_is(db: Path, tmp_path: Path) -> None:
    """In-process, but the pipe in a process of its own: a command that opened it would wait
    for a writer for ever (the process's timeout ends that)."""
    fifo = tmp_path / "settings.fifo"
    os.mkfifo(fifo)
    said = {
        "/dev/zero": "is a device, not a file: give a file",
        str(tmp_path): "is a folder: give a file",
        str(fifo): "is a pipe, not a file (settings are read from it more than once): give a file",
        str(tmp_path / "none.env"): "does not exist: check --env-file",
    }
    for env_file, problem in said.items():
        for form in (["threads"], ["config"]):
            if env_file == str(fifo):
                line = only_line(run("--env-file", env_file, *form, CHATBOT_DB=str(db)), 2)
            else:
                line = one_error(here("--env-file", env_file, *form, CHATBOT_DB=str(db)), 2)
            assert line == f"error: env file '{env_file}' {problem}"


def test_the_env_file_dev_null_is_none(db: Path) -> None:
    done = here("--env-file", "/dev/null", "threads", CHATBOT_DB=str(db))
    assert done.exit_code == 0 and "t2" in done.stdout


def test_a_timeout_too_short_to_connect_names_chatbot_timeout(
    openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    cli = Cli(openai_server, tmp_path / "timeout.sqlite")
    line = one_error(cli.ask("hello", CHATBOT_TIMEOUT="0.0001"))
    assert "CHATBOT_TIMEOUT" in line and "cannot reach" not in line
    assert "your message is kept in thread 't1'" in line


# --- thread ids --------------------------------------------------------------------------------


def test_a_huge_thread_id_is_cut_in_errors(db: Path) -> None:
    from chatbot.cli.commands import app

    huge = "a" * 120_000
    shown = f"'{'a' * 40}…' (120,000 characters)"
    forms = [
        ["show", huge],
        ["export", huge],
        ["history", huge],
        ["show", "t1", "--checkpoint", huge],
        ["search", "x", "--thread", huge],
        ["ask", "hi", "--thread", huge],
        ["chat", "--thread", huge],
        ["fork", "t1", "--to", huge],
    ]
    for form in forms:
        result = runner.invoke(app, [*form, "--db", str(db)])
        assert result.exit_code in (1, 2)
        (line,) = result.stderr.strip().splitlines()
        assert shown in line and len(line) < 300, line[:300]


def test_a_thread_id_starting_with_a_dash_is_refused_where_threads_are_named(
    db: Path, tmp_path: Path
) -> None:
    database = tmp_path / "dash.sqlite"
    refused = (
        "error: '-x' is not a usable thread id: it starts with '-', which commands read as an "
        "option: start it with another character"
    )
    for form in (
        ["ask", "hi", "--thread", "-x"],
        ["ask", "hi", "--thread=-x"],
        ["chat", "--thread", "-x"],
        ["fork", "t2", "--to=-x"],
    ):
        db_here = str(db if form[0] == "fork" else database)
        assert one_error(here(*form, "--db", db_here), 2) == refused
    assert not database.exists()
    chatted = here("chat", "--thread", "t9", "--db", str(database), stdin="/thread -x\n")
    assert "'-x' is not a usable thread id" in chatted.stdout + chatted.stderr


HIDDEN_IDS = {
    "a\u200bb": "U+200B (ZERO WIDTH SPACE)",
    "\u202eab": "U+202E (RIGHT-TO-LEFT OVERRIDE)",
    "a\u2066b": "U+2066 (LEFT-TO-RIGHT ISOLATE)",
    "\ufeffab": "U+FEFF (ZERO WIDTH NO-BREAK SPACE)",
}
NOT_UTF8_IDS = [os.fsdecode(b"\xff"), os.fsdecode(b"ab\xc3")]  # (argv bytes, as Python has them)


def test_a_thread_id_that_would_show_as_another_is_refused_where_threads_are_named(
    db: Path, tmp_path: Path
) -> None:
    """Listings show thread ids: one with an invisible character, or with bytes that are not
    UTF-8 (read as U+FFFD), looks like another thread's id there."""
    database = tmp_path / "hidden.sqlite"
    for thread, name in HIDDEN_IDS.items():
        line = one_error(here("ask", "hi", "--thread", thread, "--db", str(database)), 2)
        assert line == (
            f"error: {thread!r} is not a usable thread id: it contains {name}, which listings "
            "would not show; use printable characters without spaces"
        )
    for thread in NOT_UTF8_IDS:
        line = one_error(here("ask", "hi", "--thread", thread, "--db", str(database)), 2)
        assert line.endswith(
            "is not a usable thread id: it holds bytes that are not UTF-8 text; use printable "
            "characters without spaces"
        ), line
    for form in (["chat", "--thread", "a\u200bb"], ["fork", "t2", "--to", NOT_UTF8_IDS[0]]):
        db_here = str(db if form[0] == "fork" else database)
        assert "is not a usable thread id" in one_error(here(*form, "--db", db_here), 2)
    assert not database.exists()
    chatted = here(
        "chat",
        "--thread",
        "t9",
        "--db",
        str(database),
        stdin="/thread a\u200bb\n/rename \u202eab\n",
    )
    said = chatted.stdout + chatted.stderr
    assert said.count("is not a usable thread id: it contains U+") == 2, said


def test_an_older_thread_named_with_a_dash_is_reached_after_a_double_dash(tmp_path: Path) -> None:
    from chatbot.config.settings import Settings
    from chatbot.engine.graph import build_graph
    from chatbot.engine.models import OfflineChatModel
    from chatbot.store.sqlite import Store
    from chatbot.threads.backend import LocalBackend

    database = tmp_path / "older.sqlite"
    with Store(database) as store:  # (made as before such ids were refused)
        graph = build_graph(
            OfflineChatModel(),
            OfflineChatModel(role="summary"),
            Settings(_env_file=None),  # type: ignore[call-arg]
            store.saver,
        )
        list(LocalBackend(graph, store).send("-x", "kept"))
    hint = one_error(here("show", "-x", "--db", str(database)), 2)
    assert hint == (
        "error: no such option: -x (see 'chatbot show --help'; a thread id starting with '-' "
        "goes after '--': chatbot show -- ID)"
    )
    shown = here("show", "--db", str(database), "--json", "--", "-x")
    assert json.loads(shown.stdout)["messages"][0]["content"] == "kept"
    forked = here("fork", "--db", str(database), "--", "-x")
    assert forked.exit_code == 0 and forked.stdout.strip() == "x-fork1"


# --- the editor ----------------------------------------------------------------------------------


def test_edit_without_a_terminal_starts_no_editor(db: Path, tmp_path: Path) -> None:
    ran = tmp_path / "editor-ran"
    editor = tmp_path / "editor"
    editor.write_text(f'#!/bin/sh\ntouch "{ran}"\necho edited > "$1"\n')
    editor.chmod(0o755)
    database = tmp_path / "edit.sqlite"
    done = here(
        "chat", "--thread", "e1", "--db", str(database), stdin="/edit hello\n", VISUAL=str(editor)
    )
    assert done.exit_code == 0
    assert "error: the editor needs a terminal (stdin is not one): nothing sent" in (
        done.stdout + done.stderr
    )
    assert not ran.exists()
    shown = here("show", "e1", "--json", "--db", str(database))
    assert shown.exit_code == 1 or json.loads(shown.stdout)["messages"] == []
