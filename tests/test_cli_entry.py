"""The console script's entry point (chatbot.cli.main) runs the Typer app: the command lines
people type most, and what a process meets (closed or gone streams, shell completion), each
with its exit code and one-line errors, never a traceback."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from chatbot.cli.commands import app
from tests.helpers import chatbot_argv, offline_threads, ok, runner


def _run(*args: str, stdin: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        chatbot_argv(*args),
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "100"},
    )


def _closing(form: list[str], closing: int) -> tuple[int, str, str]:
    """``chatbot FORM`` with the file descriptor ``closing`` closed in the child: its exit code,
    stdout and stderr."""
    done = subprocess.run(
        chatbot_argv(*form),
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: os.close(closing),
    )
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return offline_threads(
        tmp_path_factory.mktemp("quick") / "db.sqlite", ("one", "**two** in `code`", "three")
    )


@pytest.fixture(scope="module")
def checkpoint(db: Path) -> str:
    """The id of the third checkpoint of ``t1``, newest first (``history t1 --all --json``)."""
    listed = json.loads(
        ok(runner.invoke(app, ["history", "t1", "--all", "--json", "--db", str(db)])).stdout
    )
    return str(listed[2]["checkpoint_id"])


COMMON_FORMS: list[tuple[str, int | None]] = [
    # (``chatbot FORM``, its exit code): {db} a database of two threads (t1, t2), {missing} a
    # file that does not exist, {env_file} a .env naming {db}, {checkpoint} one of t1's; no
    # --db: the default database, not made yet
    ("threads --db {db}", 0),
    ("threads --json --db {db}", 0),
    ("--db {db} threads --json", 0),
    ("--db={db} threads", 0),
    ("--db {missing} threads --db={db} --json", 0),
    ("--env-file {env_file} threads --json", 0),
    ("-m offline --db {db} threads", 0),
    ("threads --db {missing}", 1),
    ("threads --json --db {missing}", 1),
    ("threads", 0),
    ("show t1 --db {db}", 0),
    ("show t1 --json --db {db}", 0),
    ("show --db {db} t2", 0),
    ("show t1 -c {checkpoint} --db {db}", 0),
    # (``{checkpoint8}``, its first 8 characters, is ambiguous unless the checkpoints were
    # made across one of the 27-second steps those characters count: exit 1, or 0)
    ("show t1 --checkpoint {checkpoint8} --json --db {db}", None),
    ("show t1 --checkpoint=nope --db {db}", 1),
    ("show nope --db {db}", 1),
    ("show t1 --db {missing}", 1),
    ("history t1 --db {db}", 0),
    ("history t1 --json -n 1 --db {db}", 0),
    ("history t1 -a --limit=3 --db {db}", 0),
    ("history t1 --all --json --db {db}", 0),
    ("history nope --db {db}", 1),
    ("search two --db {db}", 0),
    ("search two --json --db {db}", 0),
    ("search --db {db} one -t t1 -n 1", 0),
    ("search three --thread=t2 --limit=1 --json --db {db}", 0),
    ("search two -t nope --db {db}", 1),
    ("search nothing-like-it --db {db}", 0),
    ("search '\"unclosed' --json --db {db}", 0),
    ("search '' --db {db}", 2),
    ("search two --db {missing}", 1),
    ("search two", 0),
    ("search two --url http://127.0.0.1:9", 2),
    ("--db {db}", 0),
    ("--db {db} --thread t2", 0),
    ("--db {db} -t 'bad id!'", 2),
    ("chat --db {db} -t t1", 0),
    ("chat --db {db} --thread t1 --new", 2),
    ("--url ftp://nowhere threads", 2),
    ("--db postgresql://u:secret@127.0.0.1:1/x threads --json", 2),
]
"""The commonest command lines, as the shell would split them (``shlex``)."""


def test_the_forms_cover_success_failure_and_bad_input() -> None:
    assert {code for _, code in COMMON_FORMS} >= {0, 1, 2}


@pytest.mark.parametrize(("form", "code"), COMMON_FORMS, ids=[form for form, _ in COMMON_FORMS])
def test_every_common_form_ends_with_its_code_and_at_most_one_error_line(
    form: str,
    code: int | None,
    db: Path,
    checkpoint: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env_file = tmp_path / "other.env"
    env_file.write_text(f"CHATBOT_DB={db}\n", encoding="utf-8")
    values = {
        "db": str(db),
        "missing": str(tmp_path / "missing.sqlite"),
        "env_file": str(env_file),
        "checkpoint": checkpoint,
        "checkpoint8": checkpoint[:8],
    }
    argv = [word.format(**values) for word in shlex.split(form)]
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, argv, input="/exit\n")
    assert "Traceback" not in result.output, argv
    assert code is None or result.exit_code == code, (argv, result.output)
    if result.exit_code:
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, (argv, result.stderr)
    else:
        assert "error:" not in result.stderr, (argv, result.stderr)


def test_the_common_forms_do_what_they_say(db: Path) -> None:
    listed = json.loads(ok(runner.invoke(app, ["threads", "--json", "--db", str(db)])).stdout)
    assert [t["thread_id"] for t in listed] == ["t2", "t1"]
    shown = ok(runner.invoke(app, ["show", "t1", "--db", str(db)]))
    assert "three" in shown.stdout and "**" not in shown.stdout  # rendered as Markdown
    missing = runner.invoke(app, ["show", "nope", "--db", str(db)])
    assert missing.exit_code == 1
    assert missing.stderr.startswith("error: no thread 'nope'")


@pytest.mark.slow
def test_the_entry_point_prints_and_exits_as_the_app_does(db: Path, tmp_path: Path) -> None:
    for argv, code in (
        (["threads", "--json", "--db", str(db)], 0),
        (["show", "t1", "--json", "--db", str(db)], 0),
        (["show", "nope", "--db", str(db)], 1),
        (["--db", str(db), "-t", "bad id!"], 2),
        (["--db", str(db), "--thread", "t2"], 0),
    ):
        process = _run(*argv, stdin="/exit\n", cwd=tmp_path)
        in_app = runner.invoke(app, argv, input="/exit\n", env={"COLUMNS": "100"})
        assert process.returncode == in_app.exit_code == code, (argv, process.stderr)
        assert (process.stdout, process.stderr) == (in_app.stdout, in_app.stderr), argv
        assert "Traceback" not in process.stderr, argv


@pytest.mark.slow
@pytest.mark.parametrize("closed", [1, 2])
@pytest.mark.parametrize(
    "form",
    [
        ["threads", "--db", "{db}"],
        ["history", "t1", "--db", "{db}"],
        ["threads", "--json", "--db", "{db}"],
        ["show", "t1", "--json", "--db", "{db}"],
    ],
    ids=" ".join,
)
def test_a_closed_stdout_is_one_line_and_a_closed_stderr_nothing(
    db: Path, closed: int, form: list[str]
) -> None:
    """``chatbot threads >&-``: Python starts with ``sys.stdout`` (or ``sys.stderr``) None. A
    closed stdout is said in one line, exit 1 (nothing could be shown); without a stderr the
    command goes on quietly."""
    form = [word.format(db=db) for word in form]
    code, stdout, stderr = _closing(form, closed)
    if closed == 1:
        assert code == 1, form
        assert stderr.startswith("error: cannot write to stdout: it is closed"), form
        assert len(stderr.splitlines()) == 1, form
    else:
        assert code == 0 and stdout, form


@pytest.mark.slow
def test_a_reader_gone_ends_json_quietly_as_a_table(db: Path) -> None:
    """``chatbot threads --json | (exit)``: the pipe's reader is gone before the first write.
    Rich's console ends a table then with exit code 1 and nothing on stderr; JSON too."""
    for form in (["threads", "--db", str(db)], ["threads", "--json", "--db", str(db)]):
        read, write = os.pipe()
        os.close(read)
        try:
            gone = subprocess.run(
                chatbot_argv(*form),
                stdout=write,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
            )
        finally:
            os.close(write)
        assert (gone.returncode, gone.stderr) == (1, ""), form


@pytest.mark.slow
@pytest.mark.parametrize(
    "form", [["--db", "{db}", "-t", "t1"], ["ask", "--db", "{db}"]], ids=" ".join
)
def test_a_closed_stdin_is_an_empty_one(db: Path, form: list[str]) -> None:
    """``chatbot <&-``: the REPL reads no line and leaves, as with ``< /dev/null``; ``ask``
    says there is no message; without a traceback."""
    form = [word.format(db=db) for word in form]
    empty = subprocess.run(
        chatbot_argv(*form),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert _closing(form, 0) == (empty.returncode, empty.stdout, empty.stderr), form
    assert "Traceback" not in empty.stderr


@pytest.mark.slow
def test_shell_completion_through_the_entry_point() -> None:
    completed = subprocess.run(
        chatbot_argv("threads"),
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "_CHATBOT_COMPLETE": "complete_bash",
            "COMP_WORDS": "chatbot thr",
            "COMP_CWORD": "1",
        },
    )
    assert "threads" in completed.stdout
