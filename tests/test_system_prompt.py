"""A system prompt per thread (/system, ask --system), roles (/role, ask --role, chatbot roles).

What the model receives is read from what it was sent: the fake OpenAI server's recorded
requests (CLI) or the scripted chat model's recorded calls (REPL). Roles live under
``$XDG_CONFIG_HOME/chatbot/roles``, set per test.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from chatbot.config.roles import RoleError, effective_prompt, list_roles, load_role
from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.engine.models import OfflineChatModel
from chatbot.history.lineage import lineage
from chatbot.history.turns import turn_entries
from chatbot.store.sqlite import Store
from chatbot.terminal.commands import dispatch
from chatbot.terminal.repl import Repl, ScriptedReader
from chatbot.threads.backend import LocalBackend
from tests.fake_openai import FakeOpenAI, RecordedRequest
from tests.helpers import (
    SUMMARY_TEXT,
    Cli,
    chat_requests,
    echo_or_summary,
    ok,
    one_error,
    summarizing,
    summary_requests,
    worth_folding,
)
from tests.scripted import ScriptedChatModel, chat_calls


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``XDG_CONFIG_HOME`` for the test; returns the roles folder (not yet made)."""
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home / "chatbot" / "roles"


def write_role(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.md"
    path.write_text(text, encoding="utf-8")
    return path


def system_of(request: RecordedRequest) -> list[str]:
    """The system messages a chat request carried, in order."""
    return [m["content"] for m in request.messages if m.get("role") == "system"]


def ask(cli: Cli, *args: str, **env: str) -> Any:
    return cli.invoke("ask", *args, "--db", str(cli.db), **env)


# --- the precedence rule ----------------------------------------------------------------------


def test_precedence_is_run_context_then_thread_then_setting() -> None:
    assert effective_prompt("Run.", "Thread.", "", "Default.") == ("Run.", "run context")
    assert effective_prompt("", "Thread.", "", "Default.").source == "this thread"
    assert effective_prompt("", "Thread.", "rev", "Default.").source == "role rev"
    assert effective_prompt(" ", "", "", "Default.") == ("Default.", "CHATBOT_SYSTEM_PROMPT")
    assert effective_prompt("", "", "", "") == ("", "none")


# --- the CLI, against the fake OpenAI server --------------------------------------------------


def test_ask_system_is_sent_stored_and_kept_for_later_turns(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    openai_server.responder = echo_or_summary
    ok(ask(cli, "--system", "Answer in French.", "-t", "t1", "hello"))
    ok(cli.ask("again"))  # a new invocation: the prompt was stored with the thread
    first, second = chat_requests(openai_server)
    assert system_of(first) == ["Answer in French."]
    assert system_of(second) == ["Answer in French."]
    assert first.messages[0]["role"] == "system", "the system prompt comes first"
    shown = cli.show("t1")
    assert (shown["system_prompt"], shown["system_role"]) == ("Answer in French.", "")
    assert [m["type"] for m in shown["messages"]] == ["human", "ai"] * 2, "no system message"


def test_the_thread_prompt_beats_the_setting_which_stays_the_default(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    openai_server.responder = echo_or_summary
    ok(cli.ask("plain", thread="other", CHATBOT_SYSTEM_PROMPT="Default."))
    ok(ask(cli, "--system", "Mine.", "-t", "t1", "one", CHATBOT_SYSTEM_PROMPT="Default."))
    plain, own = chat_requests(openai_server)
    assert system_of(plain) == ["Default."]
    assert system_of(own) == ["Mine."]


def test_a_fork_carries_the_prompt(cli: Cli, openai_server: FakeOpenAI) -> None:
    openai_server.responder = echo_or_summary
    ok(ask(cli, "--system", "Be brief.", "-t", "t1", "hello"))
    ok(cli.invoke("fork", "t1", "--to", "t2", "--db", str(cli.db)))
    ok(cli.ask("in the fork", thread="t2"))
    assert system_of(chat_requests(openai_server)[-1]) == ["Be brief."]
    assert cli.show("t2")["system_prompt"] == "Be brief."


def test_the_prompt_is_never_folded_and_is_still_sent_after_a_fold(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    openai_server.responder = echo_or_summary
    prompt = "ZEBRA-RULES: always answer about zebras."
    env = summarizing()
    ok(ask(cli, "--system", prompt, "-t", "t1", worth_folding("one"), **env))
    for text in ("two", "three"):
        ok(cli.ask(text, **env))
    assert summary_requests(openai_server), "a summary was made"
    for request in summary_requests(openai_server):
        assert "ZEBRA" not in json.dumps(request.body), "the summary call never sees it"
    shown = cli.show("t1")
    assert shown["summary"] == SUMMARY_TEXT and "ZEBRA" not in shown["summary"]
    assert shown["system_prompt"] == prompt
    last = chat_requests(openai_server)[-1]
    assert system_of(last)[0] == prompt and any(SUMMARY_TEXT in s for s in system_of(last))


def test_ask_role_uses_the_role_from_the_config_folder(
    cli: Cli, openai_server: FakeOpenAI, config_home: Path
) -> None:
    openai_server.responder = echo_or_summary
    write_role(config_home, "reviewer", "You review code.\nBe strict.\n")
    ok(ask(cli, "--role", "reviewer", "-t", "t1", "look at this"))
    assert system_of(chat_requests(openai_server)[-1]) == ["You review code.\nBe strict."]
    shown = cli.show("t1")
    assert shown["system_role"] == "reviewer"


def test_roles_lists_name_and_first_line_as_table_and_json(cli: Cli, config_home: Path) -> None:
    empty = ok(cli.invoke("roles"))
    assert str(config_home / "NAME.md") in " ".join(empty.stderr.split()), "says how to add"
    assert json.loads(ok(cli.invoke("roles", "--json")).stdout) == []
    write_role(config_home, "reviewer", "\nYou review code.\nBe strict.\n")
    write_role(config_home, "poet", "Write haiku.")
    table = ok(cli.invoke("roles")).stdout
    assert "reviewer" in table and "You review code." in table and "Be strict" not in table
    listed = json.loads(ok(cli.invoke("roles", "--json")).stdout)
    assert [r["name"] for r in listed] == ["poet", "reviewer"]
    assert listed[1]["prompt"] == "You review code.\nBe strict."


def test_a_missing_role_names_the_folder_and_the_roles_there(
    cli: Cli, openai_server: FakeOpenAI, config_home: Path
) -> None:
    write_role(config_home, "poet", "Write haiku.")
    line = one_error(ask(cli, "--role", "nope", "hello"), code=2)
    assert "'nope'" in line and str(config_home) in line and "poet" in line
    assert openai_server.requests == [] and not cli.db.exists(), "nothing ran, nothing made"


def test_system_and_role_together_is_one_error(cli: Cli, config_home: Path) -> None:
    write_role(config_home, "poet", "Write haiku.")
    line = one_error(ask(cli, "--system", "x", "--role", "poet", "hello"), code=2)
    assert "--system or --role" in line


def test_role_names_and_files_are_checked(config_home: Path) -> None:
    write_role(config_home, "empty", "  \n")
    with pytest.raises(RoleError, match="empty"):
        load_role("empty")
    with pytest.raises(RoleError, match="not a role name"):
        load_role("../secrets")
    (config_home / "latin1.md").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(RoleError, match="UTF-8"):
        load_role("latin1")
    (config_home / "my role.md").write_text("spaces in the name")
    listed = {r.name: r.first_line for r in list_roles()}
    assert listed == {
        "empty": "(cannot be used: it is empty)",
        "latin1": "(cannot be used: save it as UTF-8)",
        "my role": "(cannot be used: rename the file: letters, digits, '-', '_' and '.' only)",
    }


# --- the REPL ------------------------------------------------------------------------------------


class World:
    """A REPL over a local SQLite thread, its chat model scripted (and recording)."""

    def __init__(self, tmp_path: Path, **settings: Any) -> None:
        self.settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            model="offline",
            db=str(tmp_path / "chat.sqlite"),
            summary_trigger="messages:6",
            summary_keep="messages:2",
            **settings,
        )
        self.store = Store(self.settings.db)
        self.model = ScriptedChatModel()
        self.graph = build_graph(
            self.model, OfflineChatModel(role="summary"), self.settings, self.store.saver
        )
        self.backend = LocalBackend(self.graph, self.store)

    def run(self, lines: Sequence[str], thread_id: str = "t1", **context: Any) -> str:
        buffer = io.StringIO()
        repl = Repl(
            backend=self.backend,
            console=Console(file=buffer, width=120, force_terminal=False),
            reader=ScriptedReader(lines),
            settings=self.settings,
            thread_id=thread_id,
            model_name="scripted",
            dispatch=dispatch,
            context=dict(context),
        )
        assert repl.run() == 0
        transcript = buffer.getvalue()
        assert "Traceback" not in transcript
        return " ".join(transcript.split())

    def systems(self) -> list[list[str]]:
        """Each chat call's system messages."""
        return [[m.text for m in call if m.type == "system"] for call in chat_calls(self.model)]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(tmp_path, system_prompt="Default.")
    yield made
    made.store.close()


def test_system_shows_sets_and_clears_saying_where_the_prompt_comes_from(world: World) -> None:
    said = world.run(
        ["/system", "/system Be terse.", "/system", "hi", "/system clear", "/system", "again"]
    )
    assert said.count("from CHATBOT_SYSTEM_PROMPT: Default.") == 2
    assert "system prompt set for thread t1" in said
    assert "from this thread: Be terse." in said
    assert "removed the system prompt of thread t1; CHATBOT_SYSTEM_PROMPT applies" in said
    assert world.systems() == [["Be terse."], ["Default."]]


def test_the_prompt_survives_a_restart(world: World, tmp_path: Path) -> None:
    world.run(["/system Be terse.", "hi"])
    world.store.close()
    again = World(tmp_path, system_prompt="Default.")
    try:
        said = again.run(["/system", "more"])
        assert "from this thread: Be terse." in said
        assert again.systems() == [["Be terse."]]
    finally:
        again.store.close()
    world.store = Store(world.settings.db)  # (the fixture closes it)


def test_role_lists_sets_and_names_the_role(world: World, config_home: Path) -> None:
    said = world.run(["/role"])
    assert "no roles yet" in said and str(config_home / "NAME.md") in said
    write_role(config_home, "pirate", "Talk like a pirate.\nArr.")
    said = world.run(["/role", "/role pirate", "/system", "hello", "/role nope"])
    assert "pirate Talk like a pirate." in said, "name and first line"
    assert "system prompt set from role pirate" in said
    assert "from role pirate: Talk like a pirate. Arr." in said
    assert f"error: no role 'nope' in {config_home} (roles there: pirate)" in said
    assert world.systems() == [["Talk like a pirate.\nArr."]]


def test_a_run_context_prompt_beats_the_thread_prompt(world: World) -> None:
    said = world.run(["/system Thread.", "/system", "hi"], system_prompt="Run.")
    assert "from run context: Run." in said
    assert world.systems() == [["Run."]]


def test_history_shows_the_system_row_and_export_includes_the_prompt(
    world: World, tmp_path: Path
) -> None:
    out = tmp_path / "t1.json"
    said = world.run(["hi", "/system Be terse.", "/history", f"/export {out}"])
    assert "/system Be terse." in said
    kinds = [e.kind for e in turn_entries(world.backend.history("t1"))]
    assert kinds == ["system", "turn"]
    document = json.loads(out.read_text())
    assert document["system_prompt"] == "Be terse."
    markdown = tmp_path / "t1.md"
    world.run([f"/export {markdown}"])
    assert "## System prompt" in markdown.read_text() and "Be terse." in markdown.read_text()


def test_undo_after_system_rewinds_the_turn_and_keeps_the_prompt(world: World) -> None:
    world.run(["one", "two", "/system Be terse.", "/undo", "three"])
    current = world.backend.current("t1")
    assert current is not None and current.system_prompt == "Be terse."
    assert [m.text for m in current.messages] == ["one", "reply 1", "three", "reply 3"]
    assert world.systems()[-1] == ["Be terse."]
    world.run(["/undo", "/undo"])  # back past the first turn: the prompt still stays
    current = world.backend.current("t1")
    assert current is not None and not current.messages and current.system_prompt == "Be terse."


def test_retry_after_system_answers_again_with_the_new_prompt(world: World) -> None:
    world.run(["hi", "/system Be terse.", "/retry"])
    assert world.systems() == [["Default."], ["Be terse."]]
    current = world.backend.current("t1")
    assert current is not None and current.system_prompt == "Be terse."
    assert [m.text for m in current.messages] == ["hi", "reply 2"]


def test_the_same_prompt_again_writes_nothing(world: World) -> None:
    said = world.run(["/system Be terse.", "/system Be terse.", "/system clear", "/system clear"])
    assert "unchanged" in said and "has no system prompt of its own" in said
    kinds = [e.kind for e in turn_entries(world.backend.history("t1"))]
    assert kinds == ["system", "system"]


def test_the_context_meter_counts_the_prompt(world: World) -> None:
    world.run(["hi"])
    before = world.run(["/tokens"])
    world.run(["/system " + "many words here " * 50])
    after = world.run(["/tokens"])

    def context_now(said: str) -> int:
        return int(said.split("context now ")[1].split(" tokens")[0].replace(",", ""))

    assert context_now(after) > context_now(before) + 100
    head = lineage(world.backend.history("t1"))[-1]
    assert head.system_prompt.startswith("many words here")


def test_a_prompt_the_models_input_cannot_hold_is_refused(
    tmp_path: Path, config_home: Path
) -> None:
    small = World(tmp_path, max_input_tokens=1000)
    write_role(config_home, "novel", "word " * 3000)
    try:
        said = small.run(["/system " + "word " * 3000, "/role novel", "/system", "hi"])
        assert said.count("system prompt is about 3,000 tokens") == 2
        assert "takes 1,000 at most" in said and "nothing was changed" in said
        current = small.backend.current("t1")
        assert current is not None and current.system_prompt == ""
        assert [m.text for m in current.messages] == ["hi", "reply 1"], "the turn still works"
    finally:
        small.store.close()


def test_ask_with_a_prompt_too_big_for_the_model_sends_nothing(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    result = ask(cli, "--system", "word " * 3000, "-t", "t1", "hi", CHATBOT_MAX_INPUT_TOKENS="1000")
    assert "takes 1,000 at most" in one_error(result, code=2)
    assert openai_server.requests == []
    assert "t1" not in ok(cli.invoke("threads", "--db", str(cli.db))).stdout, "nothing stored"


def test_roles_lists_a_one_line_prompt_of_any_size_on_one_row(cli: Cli, config_home: Path) -> None:
    write_role(config_home, "wall", "x" * 100_000)
    table = ok(cli.invoke("roles")).stdout
    assert len(table) < 500 and "…" in table
