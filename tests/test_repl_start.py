"""A REPL that starts before its slow parts: it greets from the thread listing (plain SQL) and
reads lines at once, while a daemon thread checks the settings and opens the backend (then
threads can be read), then makes the models and the graph (then turns can run).

No terminal here: lines come from a scripted reader and the console writes to a buffer, so
what is told once loading ends shows up before the next line. The stages are the real ones
(settings, SQLite, LangGraph, the offline and scripted models); a test that must know a line
was read before the models existed holds the second stage at a gate the reader opens.
"""

from __future__ import annotations

import contextlib
import io
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from chatbot.config.settings import Settings
from chatbot.config.sources import SettingsError
from chatbot.engine.graph import build_graph
from chatbot.engine.models import OfflineChatModel
from chatbot.errors import ModelCallFailed
from chatbot.store.sqlite import Store
from chatbot.terminal.commands import dispatch
from chatbot.terminal.repl import Repl
from chatbot.threads.backend import LocalBackend
from chatbot.threads.loading import READS, RUNS, Loaded, LoadingBackend, Opened
from tests.helpers import wait_until
from tests.scripted import ScriptedChatModel

NOTICE = "the offline model only echoes"
GATE_SECONDS = 20.0
"""How long the second stage waits at a closed gate before it fails the test."""

Line = str | BaseException | Callable[[], str]


class Reader:
    """Replays lines, then Ctrl-D; a callable line is called when read (to open a gate)."""

    def __init__(self, lines: list[Line]) -> None:
        self.lines: Iterator[Line] = iter(lines)

    def read(self, prompt: str, toolbar: Callable[[], str] | None = None) -> str:
        line = next(self.lines, None)
        if line is None:
            raise EOFError
        if isinstance(line, BaseException):
            raise line
        return line() if callable(line) else line


def settings_for(db: Path) -> Settings:
    return Settings(
        _env_file=None,
        model="offline",
        db=str(db),
        summary_trigger="messages:6",
        summary_keep="messages:2",
    )


def seed(db: Path, turns: dict[str, list[str]], chat_model: Any = None) -> None:
    """Threads with turns, written through the graph (the REPL opens them afterwards)."""
    settings = settings_for(db)
    with Store(db) as store:
        graph = build_graph(
            chat_model or ScriptedChatModel(),
            OfflineChatModel(role="summary"),
            settings,
            store.saver,
        )
        backend = LocalBackend(graph, store)
        for thread_id, texts in turns.items():
            for text in texts:
                with contextlib.suppress(ModelCallFailed):  # the turn stays unfinished
                    list(backend.send(thread_id, text))


class Start:
    """A REPL on ``db`` started before loading, as ``chatbot chat`` starts it in a terminal."""

    def __init__(
        self,
        db: Path,
        chat_model: ScriptedChatModel | None = None,
        gate: threading.Event | None = None,
        bad_setting: str = "",
    ) -> None:
        self.db = db
        self.chat_model = chat_model or ScriptedChatModel()
        self.gate = gate
        self.bad_setting = bad_setting
        self.store = Store(db) if db.exists() else None
        self.opened_store: Store | None = None
        self.loading = LoadingBackend(str(db), self.store, self.open_backend, self.load_models)
        self.buffer = io.StringIO()

    def open_backend(self) -> Opened:
        if self.bad_setting:
            raise SettingsError(self.bad_setting)
        settings = settings_for(self.db)
        store = self.store or Store(self.db)
        self.opened_store = store

        def build() -> Any:
            return build_graph(
                self.chat_model, OfflineChatModel(role="summary"), settings, store.saver
            )

        return Opened(LocalBackend(None, store, build=build), settings)

    def load_models(self, opened: Opened) -> Loaded:
        if self.gate is not None and not self.gate.wait(GATE_SECONDS):
            raise AssertionError("the REPL waited for the models where it should not have")
        opened.backend.run_settings(None)  # builds the graph
        return Loaded(model_name="scripted", notice=NOTICE)

    def repl(self, lines: list[Line], thread_id: str = "t1") -> Repl:
        return Repl(
            backend=self.loading.as_backend(),
            console=Console(file=self.buffer, width=200, force_terminal=False),
            reader=Reader(lines),
            settings=None,
            thread_id=thread_id,
            model_name="",
            dispatch=dispatch,
        )

    def run(self, lines: list[Line], thread_id: str = "t1") -> str:
        """Run a REPL over ``lines``; returns the transcript."""
        assert self.repl(lines, thread_id).run() == 0
        return self.transcript()

    def transcript(self) -> str:
        return "\n".join(line.rstrip() for line in self.buffer.getvalue().splitlines())

    def close(self) -> None:
        if self.gate is not None:
            self.gate.set()
        with contextlib.suppress(BaseException):  # (LoadFailed is no Exception)
            self.loading.wait()  # loading ends before its database is closed
        for store in {id(s): s for s in (self.store, self.opened_store) if s}.values():
            store.close()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Start]]:
    started: list[Start] = []

    def make(**options: Any) -> Start:
        started.append(Start(tmp_path / "chat.sqlite", **options))
        return started[-1]

    yield make
    for each in started:
        each.close()


def stored(db: Path, thread_id: str = "t1") -> list[str]:
    with Store(db) as store:
        snapshot = LocalBackend(None, store).current(thread_id)
    return [m.text for m in snapshot.messages] if snapshot else []


# --- before loading -------------------------------------------------------------------------------


def test_the_greeting_and_the_thread_come_from_the_listing_and_leaving_does_not_wait(
    start: Callable[..., Start], tmp_path: Path
) -> None:
    seed(tmp_path / "chat.sqlite", {"t1": ["one"]})
    gate = threading.Event()  # the models are never made while the REPL runs
    session = start(gate=gate)
    transcript = session.run([])  # Ctrl-D at the first prompt
    lines = transcript.splitlines()
    assert lines[0].startswith("chatbot ") and "threads in" in lines[0]
    assert "model" not in lines[0], "the model is not known yet"
    assert lines[1] == "thread t1: 2 messages, no summary yet"
    assert NOTICE not in transcript
    assert not session.loading.finished, "leaving did not wait for loading"


def test_a_new_thread_or_a_missing_database_says_new_thread(
    start: Callable[..., Start], tmp_path: Path
) -> None:
    session = start()
    assert session.store is None
    transcript = session.run([], thread_id="fresh")
    assert transcript.splitlines()[1] == "new thread fresh"
    assert not (tmp_path / "chat.sqlite").exists(), "nothing is created before it is needed"


# --- a line sent before loading ends -------------------------------------------------------------


def test_a_message_sent_at_once_waits_for_the_models_then_is_answered(
    start: Callable[..., Start], tmp_path: Path
) -> None:
    gate = threading.Event()

    def send_then_open_the_gate() -> str:
        threading.Timer(0.2, gate.set).start()  # the models come after the line was sent
        return "hello"

    session = start(gate=gate)
    transcript = session.run([send_then_open_the_gate])
    assert "new thread t1" in transcript
    assert "reply 1" in transcript
    assert transcript.index(f"note: {NOTICE}") < transcript.index("reply 1")
    assert stored(tmp_path / "chat.sqlite") == ["hello", "reply 1"]


def test_reading_commands_run_before_the_models_exist(
    start: Callable[..., Start], tmp_path: Path
) -> None:
    seed(tmp_path / "chat.sqlite", {"t1": ["one"], "t2": ["two"]})
    gate = threading.Event()

    def open_the_gate_and_send() -> str:
        gate.set()
        return "three"

    session = start(gate=gate)
    transcript = session.run(
        ["/threads", "/history", "/thread t2", "/help", open_the_gate_and_send]
    )
    assert "t2" in transcript and "one" in transcript  # the listing and t1's history
    assert "thread t2: 2 messages, no summary yet" in transcript
    assert "/compact" in transcript  # the help
    assert transcript.index("/compact") < transcript.index(f"note: {NOTICE}")
    assert "reply 1" in transcript
    assert stored(tmp_path / "chat.sqlite", "t2") == ["two", "reply 2", "three", "reply 1"]


def test_an_unfinished_turn_is_told_once_loaded(
    start: Callable[..., Start], tmp_path: Path
) -> None:
    seed(tmp_path / "chat.sqlite", {"t1": ["hello"]}, ScriptedChatModel(script=[OSError("down")]))
    session = start()
    session.loading.wait()  # loading ends before the first prompt
    transcript = session.run([])
    lines = transcript.splitlines()
    assert lines[1] == "thread t1: 1 message, no summary yet"
    assert lines[2] == f"note: {NOTICE}"
    assert "The last turn in this thread did not finish" in lines[3]


def test_once_loaded_the_status_line_shows_the_model_and_the_context(
    start: Callable[..., Start], tmp_path: Path
) -> None:
    seed(tmp_path / "chat.sqlite", {"t1": ["one"]})
    session = start()
    repl = session.repl([])
    assert "loading" in repl.toolbar()
    session.loading.wait()
    assert repl.run() == 0
    assert repl.toolbar().split(" · ")[:3] == [" t1", "scripted", "2/6 messages"]
    assert repl.settings is not None and not isinstance(repl.backend, LoadingBackend)


# --- a failed loading ----------------------------------------------------------------------------


BAD = "CHATBOT_SUMMARY_KEEP='lots' is not valid: use messages:N"


@pytest.mark.parametrize("line", ["hello", "/history", "/retry"])
def test_a_bad_setting_found_while_loading_ends_the_repl_with_that_error(
    start: Callable[..., Start], tmp_path: Path, line: str
) -> None:
    session = start(bad_setting=BAD)
    repl = session.repl([line, "never read"])
    with pytest.raises(SettingsError, match="CHATBOT_SUMMARY_KEEP='lots'"):
        repl.run()
    transcript = session.transcript()
    assert "error:" not in transcript, "the CLI says it, once"
    assert session.chat_model.calls == []
    assert not (tmp_path / "chat.sqlite").exists()


def test_a_failure_is_raised_at_the_next_prompt_without_a_line(
    start: Callable[..., Start],
) -> None:
    session = start(bad_setting=BAD)

    def wait_for_loading_then_send_nothing() -> str:
        wait_until(lambda: session.loading.finished, GATE_SECONDS, "loading to fail")
        return ""

    repl = session.repl([wait_for_loading_then_send_nothing, "never read"])
    repl.prompt_shown()  # as a terminal's reader does once the prompt is drawn
    with pytest.raises(SettingsError):
        repl.run()


# --- the backend while loading -------------------------------------------------------------------


def test_every_backend_operation_waits_for_the_stage_it_needs() -> None:
    from chatbot.threads.remote import RemoteBackend

    def public(kind: type) -> set[str]:
        return {n for n in dir(kind) if not n.startswith("_") and callable(getattr(kind, n))}

    operations = public(LocalBackend) & public(RemoteBackend)  # what a Backend is
    assert operations <= READS | RUNS, operations - (READS | RUNS)
    assert not READS & RUNS


# --- the terminal's side: output above the prompt, a history file made when needed --------------


def test_output_from_another_thread_appears_at_the_prompt_and_its_error_ends_the_read(
    tmp_path: Path,
) -> None:
    from prompt_toolkit.application import create_app_session
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from chatbot.terminal.lineinput import PromptToolkitReader, SlashCompleter

    history = tmp_path / "data" / "chatbot" / "input_history"
    said: list[str] = []
    answers: list[bool] = []
    threads: list[threading.Thread] = []

    def boom() -> None:
        raise SettingsError("found behind the prompt")

    with create_pipe_input() as keys, create_app_session(input=keys, output=DummyOutput()):

        def from_another_thread(action: Callable[[], None], then_type: str = "") -> None:
            def run() -> None:
                answers.append(reader.interject(action))
                if then_type:
                    wait_until(lambda: said, GATE_SECONDS, "the action to run")
                    keys.send_text(then_type)

            threads.append(threading.Thread(target=run))
            threads[-1].start()

        reader = PromptToolkitReader(
            history,
            SlashCompleter(list, list, list),
            shown=lambda: from_another_thread(lambda: said.append("said"), "typed\r"),
        )
        assert not reader.interject(lambda: None), "no prompt is up"
        assert not history.exists(), "starting creates nothing"
        assert reader.read("> ") == "typed"
        assert said == ["said"]

        reader.shown = lambda: from_another_thread(boom)
        with pytest.raises(SettingsError, match="found behind the prompt"):
            reader.read("> ")
    for thread in threads:
        thread.join(GATE_SECONDS)
    assert answers == [True, True]
    assert history.read_text().count("typed") == 1
    assert stat.S_IMODE(history.stat().st_mode) == 0o600, "made private at the first line"
