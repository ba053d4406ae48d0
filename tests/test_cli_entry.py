"""The entry point runs the commonest invocations without Typer (chatbot.cli.main): every form it
takes prints, fails and exits exactly as the Typer app does, and it never imports Typer."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from chatbot.cli.commands import app
from chatbot.cli.main import Invocation, parse
from tests.helpers import chatbot_argv, offline_threads, ok, runner


def _run(
    *args: str, typer: bool = False, blocked: str = "", stdin: str = "", cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        chatbot_argv(*args, typer=typer, blocked=blocked),
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "100"},
    )


def _on_both_paths(form: list[str], *, closing: int) -> list[tuple[int, str, str]]:
    """``chatbot FORM`` through the entry point, then through the Typer app, with the file
    descriptor ``closing`` closed in the child: each one's exit code, stdout and stderr."""
    outcomes = []
    for typer in (False, True):
        done = subprocess.run(
            chatbot_argv(*form, typer=typer),
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=lambda: os.close(closing),
        )
        outcomes.append((done.returncode, done.stdout, done.stderr))
    return outcomes


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


QUICK_FORMS: list[tuple[str, int | None]] = [
    # (``chatbot FORM``, its exit code): {db} a database of two threads (t1, t2), {missing} a
    # file that does not exist, {env_file} a .env naming {db}, {checkpoint} one of t1's
    ("threads --db {db}", 0),
    ("threads --json --db {db}", 0),
    ("--db {db} threads --json", 0),
    ("--db={db} threads", 0),
    ("--db {missing} threads --db={db} --json", 0),
    ("--env-file {env_file} threads --json", 0),
    ("-m offline --db {db} threads", 0),
    ("threads --db {missing}", 0),
    ("threads --json --db {missing}", 0),
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
    ("search two --db {missing}", 0),
    ("search two --url http://127.0.0.1:9", 2),
    ("--db {db}", 0),
    ("--db {db} --thread t2", 0),
    ("--db {db} -t 'bad id!'", 2),
    ("chat --db {db} -t t1", 0),
    ("chat --db {db} --thread t1 --new", 2),
    ("--url ftp://nowhere threads", 2),
    ("--db postgresql://u:secret@127.0.0.1:1/x threads --json", 2),
]
"""Every form the quick entry point runs, as the shell would split it (``shlex``)."""


def test_the_quick_forms_cover_success_failure_and_bad_input() -> None:
    assert {code for _, code in QUICK_FORMS} >= {0, 1, 2}


@pytest.mark.slow
@pytest.mark.parametrize(("form", "code"), QUICK_FORMS, ids=[form for form, _ in QUICK_FORMS])
def test_every_quick_form_is_the_typer_apps(
    form: str, code: int | None, db: Path, checkpoint: str, tmp_path: Path
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
    assert parse(argv) is not None, argv
    quick = _run(*argv, blocked="typer,click", stdin="/exit\n", cwd=tmp_path)
    reference = _run(*argv, typer=True, stdin="/exit\n", cwd=tmp_path)
    assert (quick.returncode, quick.stdout, quick.stderr) == (
        reference.returncode,
        reference.stdout,
        reference.stderr,
    ), argv
    assert "Traceback" not in quick.stderr, argv
    assert code is None or quick.returncode == code, (argv, quick.stderr)


@pytest.mark.slow
def test_the_quick_forms_do_what_they_say(db: Path) -> None:
    listed = json.loads(_run("threads", "--json", "--db", str(db), blocked="typer").stdout)
    assert [t["thread_id"] for t in listed] == ["t2", "t1"]
    shown = _run("show", "t1", "--db", str(db), blocked="typer")
    assert "three" in shown.stdout and "**" not in shown.stdout  # rendered as Markdown
    missing = _run("show", "nope", "--db", str(db), blocked="typer")
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: no thread 'nope'")


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
def test_a_closed_stdout_or_stderr_is_the_typer_apps(
    db: Path, closed: int, form: list[str]
) -> None:
    """``chatbot threads >&-``: Python starts with ``sys.stdout`` (or ``sys.stderr``) None; the
    quick path flushed both before exiting, a traceback and exit code 1 where the Typer app
    exited 0. Both now say in one line that stdout is closed, exit 1 (nothing could be shown),
    and go on quietly without a stderr."""
    form = [word.format(db=db) for word in form]
    quick, reference = _on_both_paths(form, closing=closed)
    assert quick == reference, form
    if closed == 1:
        assert reference[0] == 1, form
        assert reference[2].startswith("error: cannot write to stdout: it is closed"), form
        assert len(reference[2].splitlines()) == 1, form
    else:
        assert reference[0] == 0 and reference[1], form


@pytest.mark.slow
@pytest.mark.parametrize("typer", [False, True])
def test_a_reader_gone_ends_json_quietly_as_a_table(db: Path, typer: bool) -> None:
    """``chatbot threads --json | (exit)``: the pipe's reader is gone before the first write.
    Rich's console ends a table then with exit code 1 and nothing on stderr; JSON too."""
    for form in (["threads", "--db", str(db)], ["threads", "--json", "--db", str(db)]):
        read, write = os.pipe()
        os.close(read)
        try:
            gone = subprocess.run(
                chatbot_argv(*form, typer=typer),
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
    says there is no message; on both paths, without a traceback."""
    form = [word.format(db=db) for word in form]
    outcomes = _on_both_paths(form, closing=0)
    empty = subprocess.run(
        chatbot_argv(*form),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    for closed in outcomes:
        assert closed == (empty.returncode, empty.stdout, empty.stderr), form
    assert "Traceback" not in empty.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        ["threads", "--help"],
        ["search"],
        ["search", "a", "b"],
        ["search", "x", "-n", "0"],
        ["show"],
        ["show", "a", "b"],
        ["show", "-x"],
        ["--thread", "x", "threads"],
        ["--new", "chat"],
        ["threads", "--json=1"],
        ["-tx"],
        ["-t=x"],
        ["--db"],
        ["--db", "--json", "threads"],
        ["chat", "--thread", "-x"],
        ["threads", "--"],
        ["threads", "extra"],
        ["history", "t1", "--limit", "0"],
        ["history", "t1", "-n", "x"],
        ["history", "t1", "-n", "٣"],
        ["history", "t1", "-n", "9" * 5000],  # (int() refuses more than 4300 digits)
        ["history"],
        ["search", "x", "--all"],
        [""],
    ],
)
def test_everything_else_goes_to_the_typer_app(argv: list[str]) -> None:
    assert parse(argv) is None


def test_what_the_quick_forms_read() -> None:
    assert parse([]) == Invocation({}, None, [], {})
    assert parse(["--db=x", "-t", "a b", "--new"]) == Invocation(
        {"db": "x", "thread": "a b", "new": True}, None, [], {}
    )
    assert parse(["show", "T", "-c", "abc", "--json", "--db", "d", "--db", "e"]) == Invocation(
        {}, "show", ["T"], {"checkpoint": "abc", "as_json": True, "db": "e"}
    )


@pytest.mark.slow
def test_shell_completion_goes_to_the_typer_app() -> None:
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
