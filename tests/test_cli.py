"""The command line through Typer's CliRunner: output, exit codes and what lands in SQLite."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chatbot import __version__
from chatbot.cli.commands import app
from chatbot.store.sqlite import Store
from tests.fake_openai import FakeOpenAI, Reply
from tests.helpers import Cli, echo_or_summary, one_error, runner, summarizing, worth_folding


def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), input=input, env=env)


def test_version_and_help() -> None:
    assert invoke("--version").stdout.strip() == f"chatbot {__version__}"
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("ask", "show"):
        assert command in result.stdout


def test_ask_prints_the_reply_and_stores_the_turn(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    result = invoke("ask", "hello there", "--thread", "t1", "--db", str(db))
    assert result.exit_code == 0, result.output
    assert 'You said: "hello there"' in result.stdout
    assert "offline model" in result.stderr
    with Store(db) as store:
        (info,) = store.list_threads()
    assert info.thread_id == "t1" and info.title == "hello there" and info.message_count == 2


def test_ask_tells_a_fold_before_the_call_before_the_reply_and_one_after_it_after(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "c.sqlite")
    off = {"CHATBOT_SUMMARY_TRIGGER": "off", "CHATBOT_SUMMARY_KEEP": "messages:2"}
    for text in ["one", "two", "three"]:
        assert invoke("ask", text, "-t", "t1", "--db", db, env=off).exit_code == 0
    folding = {**off, "CHATBOT_SUMMARY_TRIGGER": "messages:4"}
    first = invoke("ask", "four", "-t", "t1", "--db", db, env=folding)  # folds, then answers
    assert first.exit_code == 0, first.output
    assert first.output.index("summarized 5 messages") < first.output.index('You said: "four"')
    after = invoke("ask", "five", "-t", "t1", "--db", db, env=folding)  # answers, then folds
    assert after.output.index('You said: "five"') < after.output.index("summarized")


def test_ask_reads_stdin_with_dash(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    result = invoke("--db", str(db), "ask", "-", input="piped question\n")
    assert result.exit_code == 0, result.output
    assert "piped question" in result.stdout


def test_empty_message_is_refused_with_one_line(tmp_path: Path) -> None:
    result = invoke("ask", "   ", "--db", str(tmp_path / "c.sqlite"))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: the message is empty: give some text to send"
    ]


def test_show_json_has_summary_and_messages(tmp_path: Path) -> None:
    db = str(tmp_path / "c.sqlite")
    env = {"CHATBOT_SUMMARY_TRIGGER": "messages:2", "CHATBOT_SUMMARY_KEEP": "messages:2"}
    for text in [worth_folding("my name is Ada"), "I like tea"]:  # (the first: worth folding)
        assert invoke("ask", text, "-t", "ada", "--db", db, env=env).exit_code == 0
    result = invoke("show", "ada", "--json", "--db", db)
    document = json.loads(result.stdout)
    assert set(document) == {"thread_id", "system_prompt", "system_role", "summary", "messages"}
    assert "- my name is Ada" in document["summary"]
    assert document["messages"][0]["content"] == "I like tea"
    assert all(set(m) == {"type", "content", "id"} for m in document["messages"])


def test_show_renders_for_people(tmp_path: Path) -> None:
    db = str(tmp_path / "c.sqlite")
    invoke("ask", "**bold** move", "-t", "x", "--db", db)
    result = invoke("show", "x", "--db", db)
    assert result.exit_code == 0 and "bold move" in result.stdout


def test_show_unknown_thread_fails_with_one_line(tmp_path: Path) -> None:
    Store(tmp_path / "c.sqlite").close()
    result = invoke("show", "nope", "--db", str(tmp_path / "c.sqlite"))
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no thread 'nope'")


def test_invalid_setting_stops_start_up_with_the_valid_forms(tmp_path: Path) -> None:
    result = invoke(
        "ask", "hi", "--db", str(tmp_path / "c.sqlite"), env={"CHATBOT_SUMMARY_KEEP": "lots"}
    )
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "CHATBOT_SUMMARY_KEEP='lots' is not valid" in line and "messages:N" in line
    assert not (tmp_path / "c.sqlite").exists(), "nothing is created before settings are valid"


def test_fraction_without_known_context_size_is_explained(tmp_path: Path) -> None:
    env = {
        "CHATBOT_SUMMARY_TRIGGER": "fraction:0.5",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "CHATBOT_MODEL": "my-local-model",
    }
    result = invoke("ask", "hi", "--db", str(tmp_path / "c.sqlite"), env=env)
    assert result.exit_code == 2
    assert "CHATBOT_MAX_INPUT_TOKENS" in result.stderr


def test_env_file_option_reads_settings_from_that_file(tmp_path: Path) -> None:
    env_file = tmp_path / "custom.env"
    env_file.write_text("CHATBOT_SYSTEM_PROMPT=Be terse\nCHATBOT_LANGUAGE=klingon\n")
    result = invoke("--env-file", str(env_file), "ask", "hi", "--db", str(tmp_path / "c.sqlite"))
    assert result.exit_code == 2
    assert "CHATBOT_LANGUAGE='klingon' is not valid" in result.stderr
    missing = invoke("--env-file", str(tmp_path / "missing.env"), "ask", "hi")
    assert missing.exit_code == 2 and "does not exist" in missing.stderr


def test_dot_env_in_the_working_directory_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("CHATBOT_SUMMARY_TRIGGER=nonsense\n")
    result = invoke("ask", "hi", "--db", str(tmp_path / "c.sqlite"))
    assert result.exit_code == 2 and "CHATBOT_SUMMARY_TRIGGER='nonsense'" in result.stderr


def test_ask_refuses_a_thread_id_that_cannot_be_typed(tmp_path: Path) -> None:
    result = invoke("ask", "hi", "--thread", "two words", "--db", str(tmp_path / "c.sqlite"))
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "is not a usable thread id" in line
    assert not (tmp_path / "c.sqlite").exists()


READING = (
    ["threads"],
    ["threads", "--json"],
    ["show", "x"],
    ["history", "x"],
    ["export", "x"],
    ["search", "anything"],
    ["delete", "x", "--yes"],
    ["db", "stats"],
    ["db", "vacuum"],
    ["prune", "--inactive-days", "1"],
)
"""Commands that make no database: they read one, or change one that is there."""


@pytest.mark.parametrize("command", READING, ids=" ".join)
def test_a_named_path_with_no_database_is_said_to_be_one(
    command: list[str], tmp_path: Path
) -> None:
    db = tmp_path / "nested" / "never.sqlite"
    default = tmp_path / "data" / "chatbot" / "chatbot.sqlite"
    for named in ({"args": ["--db", str(db)]}, {"env": {"CHATBOT_DB": str(db)}}):
        result = invoke(*command, *named.get("args", []), env=named.get("env"))
        option = "--db" if "args" in named else "CHATBOT_DB"
        assert one_error(result) == (
            f"error: there is no database at {str(db)!r}: check {option} (the default database "
            f"is {default}); 'chatbot chat' or 'chatbot ask' makes a new one"
        ), command
        assert result.stdout == ""
    assert not (tmp_path / "nested").exists() and not default.parent.exists()


def test_on_a_fresh_install_reading_commands_say_there_is_nothing_yet(tmp_path: Path) -> None:
    default = tmp_path / "data" / "chatbot" / "chatbot.sqlite"
    listing = invoke("threads")
    assert listing.exit_code == 0 and listing.stderr.strip() == f"no threads in {default}"
    assert invoke("threads", "--json").stdout.strip() == "[]"
    found = invoke("search", "anything")
    assert found.exit_code == 0 and "nothing found for 'anything'" in found.stderr
    stats = invoke("db", "stats")
    assert stats.exit_code == 0 and stats.stderr.strip() == (
        f"{default} does not exist yet: nothing to do"
    )
    for command in (["show", "x"], ["history", "x"], ["export", "x"]):
        line = one_error(invoke(*command))
        assert line == f"error: no thread 'x': {default} does not exist yet", command
    assert not default.parent.exists(), "reading makes no database"


COMMANDS = ["chat", "ask", "threads", "history", "show", "export", "fork", "compact", "delete"]


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_option_is_one_line_naming_the_help(command: str, tmp_path: Path) -> None:
    args = [command] if command in ("chat", "ask", "threads") else [command, "t"]
    result = invoke(*args, "--foo")
    assert result.exit_code == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: no such option: --foo")
    assert line.endswith(f"(see 'chatbot {command} --help')")


def test_a_group_given_no_command_lists_its_commands_and_says_one_is_needed() -> None:
    result = invoke("db")
    assert result.exit_code == 2
    assert "vacuum" in result.stdout + result.stderr, "its commands are listed"
    last = result.stderr.strip().splitlines()[-1]
    assert last == "error: 'chatbot db' needs a command: one of those above"


ARGUMENTS = {
    "chat": [],
    "ask": ["hello"],
    "threads": [],
    "history": ["t"],
    "show": ["t"],
    "export": ["t"],
    "fork": ["t"],
    "compact": ["t"],
    "delete": ["t", "--yes"],
}


def test_every_command_takes_db_and_url_after_it() -> None:
    from typer.main import get_command

    commands = get_command(app).commands  # type: ignore[attr-defined]
    maintenance = ["db", "prune"]  # about the database itself: --db, never a server
    maintenance += ["roles", "config"]  # the user's config folder and settings: no thread
    maintenance += ["models"]  # the model endpoint's listing: no thread, no database
    local = ["search", "import"]  # --db and --url, and on a server says it reads local threads only
    maintenance += ["memory"]  # a group: its commands (list, forget, export) take --db and --url
    assert sorted(ARGUMENTS) == sorted(COMMANDS) == sorted(set(commands) - {*maintenance, *local})
    for name, command in commands.items():
        options = {opt for param in command.params for opt in param.opts}
        if name in maintenance:
            continue
        assert {"--db", "--url"} <= options, name
    assert "--db" in {opt for param in commands["prune"].params for opt in param.opts}


@pytest.mark.parametrize("command", COMMANDS)
def test_url_after_the_command_works_as_before_it(command: str, refused_port: int) -> None:
    url = f"http://127.0.0.1:{refused_port}"  # no LangGraph server there
    after = invoke(command, *ARGUMENTS[command], "--url", url)
    before = invoke("--url", url, command, *ARGUMENTS[command])
    line = one_error(after)
    assert line == one_error(before)
    assert line.startswith(f"error: cannot reach the LangGraph server at {url}")
    assert f"{url} (the connection was refused): " in line, "why, in words, not an error's class"


@pytest.mark.parametrize("port", [None, 2024])
def test_a_server_that_is_down_is_met_with_the_command_that_starts_one(
    refused_port: int, port: int | None
) -> None:
    """`uv run langgraph dev` fails on a fresh clone (langgraph-cli is in the dev group): the
    hint gives the command that works, with the port asked for (2024 is its default)."""
    url = f"http://127.0.0.1:{port or refused_port}"
    if port is not None:  # (a port that nothing serves: 2024 may be taken, so only the hint)
        line = one_error(invoke("threads", "--url", "http://localhost:2024"))
        if "answered HTTP" in line:
            pytest.skip("something serves port 2024 here")
    else:
        line = one_error(invoke("threads", "--url", url))
    start = "uv run --group dev langgraph dev" + (f" --port {refused_port}" if port is None else "")
    assert line.endswith(f"is it running? Start it: {start}"), line


def test_a_remote_server_that_is_down_is_not_met_with_a_local_command() -> None:
    line = one_error(invoke("threads", "--url", "http://chatbot-test.invalid:2024"))
    assert line.startswith("error: cannot reach the LangGraph server at http://chatbot-test.inv")
    assert "(its host name does not resolve)" in line and "gaierror" not in line
    assert "langgraph dev" not in line and line.endswith("is it running, at that address?")


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_lists_flags_as_flags(command: str) -> None:
    result = invoke(*([command] if command else []), "--help")
    assert result.exit_code == 0
    assert "<bool>" not in result.stdout
    flags = re.findall(r"(--(?:json|new|yes|version|help))\s+(\S+)", result.stdout)
    assert flags and all(not word.startswith("<") for _, word in flags), flags
    assert re.search(r"--db\s+<str>", result.stdout), "an option with a value still shows it"


HELP_PANELS = {
    "Chat": ["chat", "ask"],
    "Threads": ["threads", "history", "show", "fork", "compact", "delete", "memory"],
    "Search and export": ["search", "export", "import"],
    "Settings": ["config", "models", "roles"],
    "Database": ["db", "prune"],
}


def help_panels(text: str) -> dict[str, list[list[str]]]:
    """The boxed panels of a --help: each one's title, and its rows as lists of words."""
    panels = {}
    for title, body in re.findall(r"╭─ (.+?) ─+╮\n(.*?)╰", text, flags=re.S):
        panels[title] = [line.strip("│ ").split() for line in body.splitlines()]
    return panels


@pytest.mark.parametrize("columns", ["80", "100", "200"])
def test_help_groups_the_commands_one_line_each(columns: str) -> None:
    """`chatbot --help` lists the commands in groups, as llm and gh do, each with a one-line
    summary (a docstring's line breaks made ragged rows)."""
    panels = help_panels(invoke("--help", env={"COLUMNS": columns}).stdout)
    assert list(panels) == ["Options", *HELP_PANELS]
    for title, names in HELP_PANELS.items():
        assert [row[0] for row in panels[title]] == names, f"{title}: one line a command"
    for rows in list(panels.values())[1:]:
        assert all(not row[-1].endswith((",", "(")) for row in rows)


def test_the_cheat_sheet_lists_the_commands_as_the_help_does() -> None:
    from chatbot.cli.cheatsheet import shell_lines

    shown = [re.match(r"\| `chatbot (\w+)", row).group(1) for row in shell_lines()]  # type: ignore[union-attr]
    assert list(dict.fromkeys(shown)) == [n for names in HELP_PANELS.values() for n in names]
    assert "| `chatbot chat` |" in "\n".join(shell_lines())
    assert any(row.startswith("| `chatbot db copy SRC DST` |") for row in shell_lines())


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--bogus"], "error: no such option: --bogus (see 'chatbot --help')"),
        (["bogus"], "error: no such command 'bogus' (see 'chatbot --help')"),
        (["ask", "--foo"], "error: no such option: --foo (see 'chatbot ask --help')"),
        (["history"], "error: missing argument 'THREAD' (see 'chatbot history --help')"),
        (
            ["ask", "a", "b"],
            "error: got unexpected extra argument(s) (b) (see 'chatbot ask --help')",
        ),
    ],
)
def test_usage_errors_are_one_line_with_exit_code_2(args: list[str], line: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [line]


@pytest.mark.parametrize("value", ["abc", "0"])
def test_a_bad_limit_is_one_line(value: str) -> None:
    result = invoke("history", "t", "--limit", value)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: invalid value for '--limit' / '-n': ")
    assert line.endswith("(see 'chatbot history --help')")


def test_help_and_version_still_exit_0_after_one_line_errors() -> None:
    assert invoke("ask", "--help").exit_code == 0
    assert "Usage: chatbot ask" in invoke("ask", "--help").stdout
    assert invoke("--version").exit_code == 0


@pytest.mark.slow
def test_a_usage_error_in_a_new_process_is_one_line(tmp_path: Path) -> None:
    """Through the console script's own ``main``, as a user sees it."""
    result = subprocess.run(
        [sys.executable, "-m", "chatbot", "history", "t", "--limit", "x"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: invalid value for '--limit'") and "Usage" not in line


BLANK_OPTIONS = [
    ["--model", "", "ask", "hi"],
    ["--model=", "threads"],
    ["--url", " ", "threads"],
    ["threads", "--url", ""],
    ["--env-file", "", "threads"],
    ["fork", "t", "--to", ""],
    ["show", "t", "--checkpoint", ""],
    ["-t", ""],
    ["chat", "--thread="],
]


@pytest.mark.parametrize("args", BLANK_OPTIONS, ids=[" ".join(a) for a in BLANK_OPTIONS])
def test_an_option_given_a_blank_value_is_refused_in_one_line(
    args: list[str], tmp_path: Path
) -> None:
    """A blank value (a variable left empty: ``--model "$MODEL"``) went unnoticed: the
    default model answered, the local database was read instead of a server."""
    db = str(tmp_path / "chat.sqlite")
    line = one_error(invoke(*args, "--db", db), 2)
    option = next(a for a in args if a.startswith("-")).rstrip("=")
    option = "--thread" if option == "-t" else option
    assert f"invalid value for '{option}'" in line and "it is blank" in line, line
    assert not Path(db).exists(), "nothing was opened"


@pytest.mark.slow
def test_a_blank_option_is_refused_by_the_console_scripts_main_in_the_same_line(
    tmp_path: Path,
) -> None:
    """Through the console script's own ``main``, a main option and a command's alike."""
    db = str(tmp_path / "chat.sqlite")
    for args in (["--model", "", "ask", "hi"], ["chat", "--thread="]):
        line = one_error(invoke(*args, "--db", db), 2)
        result = subprocess.run(
            [sys.executable, "-m", "chatbot", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "CHATBOT_DB": db},
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines()[-1] == line
        assert not Path(db).exists(), "nothing was opened"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["ask", "--model", "m", "hi"], "--model goes before the command: chatbot --model NAME"),
        (["history", "t", "-m", "m"], "-m goes before the command: chatbot -m NAME history"),
        (["db", "stats", "--env-file", "f"], "chatbot --env-file FILE db stats ..."),
    ],
)
def test_an_option_of_the_main_command_given_after_a_command_says_where_it_goes(
    args: list[str], said: str
) -> None:
    line = one_error(invoke(*args), 2)
    assert said in line, line


@pytest.mark.parametrize("tail", ["", "/", "/?sslmode=disable"])
def test_a_postgresql_url_naming_no_database_is_refused(
    postgres_url: str, tail: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libpq would connect to its default database (the user's name): chatbot's tables would
    land in a database nobody named."""
    server = postgres_url.rsplit("/", 1)[0]  # postgresql://postgres@127.0.0.1:5432
    monkeypatch.delenv("PGDATABASE", raising=False)
    monkeypatch.delenv("PGSERVICE", raising=False)
    for args in (["threads"], ["ask", "hi"]):
        line = one_error(invoke(*args, env={"CHATBOT_DB": server + tail}), 2)
        assert "it names no database" in line and "postgresql://user@host:5432/DBNAME" in line
    named = postgres_url.rsplit("/", 1)[1]
    listed = invoke("threads", env={"CHATBOT_DB": f"{server}/?dbname={named}"})
    assert listed.exit_code == 0, listed.output  # (named in libpq's dbname= parameter)

    from chatbot.store.errors import StoreError
    from chatbot.store.postgres import open_store

    with pytest.raises(StoreError, match="it names no database"):  # (db copy's arguments too)
        open_store("postgresql://postgres:secret@127.0.0.1:5432")


def test_a_postgresql_database_that_does_not_exist_is_refused_never_created(
    postgres_url: str,
) -> None:
    import psycopg

    from tests.conftest import POSTGRES_ADMIN_URL

    missing = postgres_url + "_missing"
    name = missing.rsplit("/", 1)[1]
    for args in (["threads"], ["ask", "hi"]):
        line = one_error(invoke(*args, env={"CHATBOT_DB": missing}), 2)
        assert f'database "{name}" does not exist' in line, line
    with psycopg.connect(POSTGRES_ADMIN_URL) as admin:
        found = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchall()
    assert found == []


@pytest.mark.parametrize("code", [400, 404])
def test_a_failing_summary_model_is_named_by_its_own_setting(
    code: int, cli: Cli, openai_server: FakeOpenAI
) -> None:
    def answer(body: dict[str, Any]) -> str | Reply:
        if body.get("model") == "fake-summary-model":
            return Reply(status=code, error_message="The model does not exist")
        return echo_or_summary(body)

    openai_server.responder = answer
    env = summarizing(CHATBOT_SUMMARY_MODEL="fake-summary-model")
    for text in (worth_folding("one"), "two", "three"):
        result = cli.ask(text, **env)
        assert result.exit_code == 0, result.output
    said = result.stderr
    assert f"HTTP {code}" in said and "check CHATBOT_SUMMARY_MODEL" in said, said
    assert "CHATBOT_MODEL " not in said and "CHATBOT_MODEL," not in said, said


@pytest.mark.parametrize("where", ["loop", "loop/c.sqlite", "to-loop"])
def test_a_database_path_through_a_loop_of_symbolic_links_is_one_line_in_words(
    tmp_path: Path, where: str
) -> None:
    (tmp_path / "loop").symlink_to(tmp_path / "round")
    (tmp_path / "round").symlink_to(tmp_path / "loop")
    (tmp_path / "to-loop").symlink_to(tmp_path / "loop")
    db = str(tmp_path / where)
    for args in (["threads"], ["ask", "hi"], ["history", "t1"]):
        line = one_error(invoke(*args, "--db", db), 2)
        assert "symbolic links lead round in a loop" in line and "Errno" not in line, line

    from chatbot.store.errors import StoreError
    from chatbot.store.postgres import open_store

    with pytest.raises(StoreError, match="lead round in a loop"):  # (db copy's DST too)
        open_store(db)


def test_a_long_value_is_cut_in_every_error_line(tmp_path: Path) -> None:
    db = str(tmp_path / "c.sqlite")
    assert invoke("ask", "hi", "-t", "t1", "--db", db).exit_code == 0
    value = "v" * 120_000
    for args in (
        ["threads", value],
        [value],
        ["export", "t1", "-f", value, "--db", db],
        ["ask", "-f", value, "hi", "--db", db],
        ["--db", str(tmp_path / value), "threads"],
    ):
        result = invoke(*args, env={"CHATBOT_MODEL": "offline"})
        line = one_error(result, 2)
        assert len(line) < 400 and "v" * 30 + "…" in line, (args[0], len(line), line[:300])


def test_a_database_path_whose_folder_does_not_exist_is_refused_before_writing(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    db = missing / "x.sqlite"
    said = (
        f"error: the folder {str(missing)!r} does not exist: create it first, or choose another "
        "--db (nothing was written)"
    )
    for named in ({"args": ["--db", str(db)]}, {"env": {"CHATBOT_DB": str(db)}}):
        asked = invoke("ask", "hi", *named.get("args", []), env=named.get("env"))
        assert one_error(asked, 2) == said
        chat = invoke("chat", *named.get("args", []), env=named.get("env"), input="hi\n")
        assert said in chat.stderr and chat.exit_code != 0, chat.output
    assert not (tmp_path / "nonexistent").exists()
    ours = tmp_path / "data" / "chatbot" / "work" / "x.sqlite"  # chatbot's own data folder
    assert invoke("ask", "hi", "--db", str(ours)).exit_code == 0
    assert ours.is_file()


@pytest.mark.parametrize(
    "args",
    [
        ["search", "x"],
        ["db", "stats"],
        ["db", "adopt", "--yes"],
        ["prune", "--inactive-days", "1", "--yes"],
        ["models"],
    ],
)
def test_a_server_urls_password_is_never_shown_by_a_command_that_refuses_or_notes_it(
    args: list[str],
) -> None:
    result = invoke(*args, env={"CHATBOT_URL": "http://user:s3cretpw@127.0.0.1:9/"})
    said = result.stdout + result.stderr
    assert "127.0.0.1:9" in said, said
    assert "s3cretpw" not in said and "user:***@" in said, said


@pytest.mark.parametrize(
    "command",
    [["memory", "list"], ["memory", "export"], ["memory", "forget"], ["db", "stats"], ["threads"]],
)
def test_a_flag_in_the_help_takes_no_value(command: list[str]) -> None:
    shown = invoke(*command, "--help", env={"COLUMNS": "100"})
    assert shown.exit_code == 0, shown.output
    assert "--help" in shown.stdout and "<bool>" not in shown.stdout, shown.stdout
