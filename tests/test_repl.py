"""The REPL loop without a terminal: scripted lines in, a Rich console writing to a buffer out.

Every test checks the transcript AND what the thread holds in SQLite afterwards. The chat model
is ``ScriptedChatModel`` (replies ``reply N`` unless scripted); the summary model is the offline
one, whose extractive summary lists the user's folded messages as ``- text`` bullets. With
``messages:6`` / ``messages:2`` the fourth turn folds 6 messages and the seventh folds 6 more.
"""

from __future__ import annotations

import io
import json
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from rich.console import Console
from rich.text import Text

from chatbot.backend import LocalBackend
from chatbot.commands import COMMANDS
from chatbot.graph import build_graph
from chatbot.models import OFFLINE_MAX_INPUT_TOKENS, OfflineChatModel
from chatbot.repl import (
    MAX_THREAD_ID,
    Repl,
    ScriptedReader,
    Tail,
    check_thread_id,
    new_thread_id,
)
from chatbot.settings import Settings
from chatbot.store import Store, thread_config
from chatbot.timeline import Snapshot, lineage, short_id
from tests.scripted import ScriptedChatModel

FOUR_TURNS = ["one", "two", "three", "four"]  # the fourth turn makes the first summary
SEVEN_TURNS = [*FOUR_TURNS, "five", "six", "seven"]  # the seventh makes the second


def offline_echo(text: str) -> str:
    """The start of the offline model's reply to ``text``."""
    return f'You said: "{text}"'


@dataclass
class World:
    """A store, a graph and a backend on a temporary SQLite file, and ways to run the REPL."""

    store: Store
    graph: Any
    backend: LocalBackend
    settings: Settings
    chat_model: ScriptedChatModel
    repls: list[Repl] = field(default_factory=list)

    def run(
        self,
        lines: Sequence[str | BaseException],
        thread_id: str = "t1",
        model_name: str = "scripted",
    ) -> str:
        """Run a REPL over ``lines`` until /exit or their end; returns the transcript."""
        buffer = io.StringIO()
        repl = Repl(
            backend=self.backend,
            console=Console(file=buffer, width=100, force_terminal=False),
            reader=ScriptedReader(lines),
            settings=self.settings,
            thread_id=thread_id,
            model_name=model_name,
        )
        self.repls.append(repl)
        assert repl.run() == 0
        transcript = "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
        assert "Traceback" not in transcript
        return transcript

    @property
    def repl(self) -> Repl:
        """The REPL of the latest run (its current thread, model, context)."""
        return self.repls[-1]

    def values(self, thread_id: str = "t1") -> dict[str, Any]:
        return self.graph.get_state(thread_config(thread_id)).values

    def texts(self, thread_id: str = "t1") -> list[str]:
        """The thread's live messages as text, read back from SQLite."""
        return [m.text for m in self.values(thread_id).get("messages", [])]

    def history(self, thread_id: str = "t1") -> list[Snapshot]:
        return self.backend.history(thread_id)

    def thread_ids(self) -> list[str]:
        return [t.thread_id for t in self.store.list_threads()]

    def checkpoint(self, thread_id: str, test: Callable[[Snapshot], bool]) -> Snapshot:
        """The one checkpoint of the thread's lineage that passes ``test``."""
        (found,) = [s for s in lineage(self.history(thread_id)) if test(s)]
        return found


@pytest.fixture
def make_world(tmp_path: Path) -> Iterator[Callable[..., World]]:
    """Build a world with a given chat model (default: a ScriptedChatModel)."""
    stores: list[Store] = []

    def make(chat_model: ScriptedChatModel | None = None) -> World:
        chat_model = chat_model or ScriptedChatModel()
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            model="offline",
            db=str(tmp_path / f"chat{len(stores)}.sqlite"),
            summary_trigger="messages:6",
            summary_keep="messages:2",
        )
        store = Store(settings.db)
        stores.append(store)
        graph = build_graph(chat_model, OfflineChatModel(role="summary"), settings, store.saver)
        return World(store, graph, LocalBackend(graph, store), settings, chat_model)

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def world(make_world: Callable[..., World]) -> World:
    return make_world()


def errors(transcript: str) -> list[str]:
    """The transcript's error lines."""
    return [line for line in transcript.splitlines() if line.startswith("error:")]


def flat(transcript: str) -> str:
    """The transcript with line wrapping undone (long lines wrap at the console's width)."""
    return " ".join(transcript.split())


def row(transcript: str, first_cell: str) -> list[str]:
    """The cells (split on spaces) of the one table line starting with ``first_cell``."""
    (line,) = [line for line in transcript.splitlines() if line.startswith(first_cell)]
    return line.split()


# --- chatting and the loop ----------------------------------------------------------------------


def test_a_message_gets_its_reply_rendered_and_the_turn_stored(world: World) -> None:
    transcript = world.run(["hello there", "   "])
    assert transcript.splitlines()[0].startswith("chatbot ")
    assert "model scripted" in transcript and world.store.path in transcript
    assert "new thread t1" in transcript
    assert "reply 1" in transcript
    assert world.texts() == ["hello there", "reply 1"]
    assert len(world.chat_model.calls) == 1, "a blank line sends nothing"
    (info,) = world.store.list_threads()
    assert (info.thread_id, info.title, info.message_count, info.has_summary) == (
        "t1",
        "hello there",
        2,
        False,
    )


def test_reopening_a_thread_continues_it_and_says_what_is_in_it(world: World) -> None:
    world.run(["first"])
    transcript = world.run(["second"])
    assert "thread t1: 2 messages, no summary yet" in transcript
    assert world.texts() == ["first", "reply 1", "second", "reply 2"]
    assert [m.text for m in world.chat_model.calls[-1]] == ["first", "reply 1", "second"]


def test_the_toolbar_shows_thread_model_and_messages_against_the_trigger(world: World) -> None:
    world.run(["hello"])
    assert world.repl.toolbar().split(" · ")[:3] == [" t1", "scripted", "2/6 messages"]
    assert world.repl.prompt() == "t1> "


def test_end_of_input_ends_the_loop_with_exit_code_0(world: World) -> None:
    transcript = world.run([])
    assert "new thread t1" in transcript
    assert world.thread_ids() == [] and world.chat_model.calls == []


def test_ctrl_c_at_the_prompt_clears_the_line_and_the_loop_goes_on(world: World) -> None:
    transcript = world.run([KeyboardInterrupt(), "still here", KeyboardInterrupt(), "/thread"])
    assert "reply 1" in transcript
    assert "thread t1: 2 messages, summary: no" in transcript
    assert errors(transcript) == []
    assert world.texts() == ["still here", "reply 1"]


@pytest.mark.parametrize("command", ["/exit", "/quit", "/q", "/EXIT"])
def test_exit_leaves_without_reading_further_lines(world: World, command: str) -> None:
    world.run(["hello", command, "never sent", "/thread"])
    assert world.texts() == ["hello", "reply 1"]
    assert len(world.chat_model.calls) == 1


def test_unknown_command_is_one_error_line_and_the_loop_goes_on(world: World) -> None:
    transcript = world.run(["/foo bar", "hello"])
    assert errors(transcript) == ["error: unknown command /foo: /help lists the commands"]
    assert "reply 1" in transcript and world.texts() == ["hello", "reply 1"]


def test_help_lists_every_command(world: World) -> None:
    transcript = world.run(["/help", "/?"])
    assert errors(transcript) == []
    lines = transcript.splitlines()
    for item in COMMANDS.values():
        listed = [line for line in lines if line.startswith(item.usage + " ")]
        assert len(listed) == 2, item.name
        assert all(line.endswith(item.help) for line in listed), item.name
    assert "Alt-Enter" in transcript and "Ctrl-D leaves" in transcript


def test_clear_without_a_terminal_prints_nothing_and_the_loop_goes_on(world: World) -> None:
    world.run(["hello"])
    assert world.run(["/clear"]) == world.run([]), "no escape codes, no error"
    world.run(["/clear", "again"])
    assert world.texts() == ["hello", "reply 1", "again", "reply 2"]


# --- a failing model -----------------------------------------------------------------------------


def test_a_failing_model_is_one_error_line_and_keeps_the_message(
    make_world: Callable[..., World],
) -> None:
    world = make_world(ScriptedChatModel(script=[RuntimeError("model is down"), "back up"]))
    transcript = world.run(["hello"])
    (line,) = errors(transcript)
    assert "RuntimeError: model is down" in line and "/retry" in line
    assert world.texts() == ["hello"], "the user's message stays in the thread"
    assert world.graph.get_state(thread_config("t1")).next == ("conversation",)

    reopened = world.run(["/retry", "more"])
    assert "The last turn in this thread did not finish" in reopened
    assert "/retry resumes it" in reopened
    assert "back up" in reopened and errors(reopened) == []
    assert world.texts() == ["hello", "back up", "more", "reply 3"]
    assert world.graph.get_state(thread_config("t1")).next == ()


def test_a_failure_on_a_later_turn_can_be_retried_too(make_world: Callable[..., World]) -> None:
    model = ScriptedChatModel(script=["fine", TimeoutError("slow"), "recovered"])
    world = make_world(model)
    transcript = world.run(["first", "second", "/retry"])
    assert len(errors(transcript)) == 1 and "TimeoutError: slow" in errors(transcript)[0]
    assert "recovered" in transcript
    assert world.texts() == ["first", "fine", "second", "recovered"]


def test_ctrl_c_during_a_reply_keeps_the_message_and_retry_finishes_it(
    make_world: Callable[..., World],
) -> None:
    world = make_world(ScriptedChatModel(script=[KeyboardInterrupt(), "finished"]))
    transcript = world.run(["hello", "/thread", "/retry"])
    assert "interrupted - your message is kept; /retry regenerates the reply" in transcript
    assert "thread t1: 1 messages, summary: no" in transcript
    assert "finished" in transcript and errors(transcript) == []
    assert world.texts() == ["hello", "finished"]


# --- /thread, /threads, /new ---------------------------------------------------------------------


def test_thread_alone_shows_the_current_thread(world: World) -> None:
    transcript = world.run(["/thread", "hello", "/thread"])
    assert "thread t1: 0 messages, summary: no" in transcript
    assert "thread t1: 2 messages, summary: no" in transcript


def test_thread_switches_to_another_thread_creating_it_if_new(world: World) -> None:
    transcript = world.run(["in one", "/thread t2", "in two", "/thread t1", "/thread"])
    assert "new thread t2" in transcript
    assert "thread t1: 2 messages, no summary yet" in transcript
    assert transcript.rstrip().endswith("thread t1: 2 messages, summary: no")
    assert world.repl.thread_id == "t1"
    assert world.texts("t1") == ["in one", "reply 1"]
    assert world.texts("t2") == ["in two", "reply 2"]
    assert sorted(world.thread_ids()) == ["t1", "t2"]


def test_thread_with_an_unusable_id_is_an_error(world: World) -> None:
    transcript = world.run(["/thread has space", "/thread " + "x" * (MAX_THREAD_ID + 1), "hello"])
    assert len(errors(transcript)) == 2
    assert flat(transcript).count("is not a usable thread id") == 2
    assert world.repl.thread_id == "t1" and world.texts("t1") == ["hello", "reply 1"]


def test_threads_lists_ids_counts_summaries_and_titles_with_the_current_marked(
    world: World,
) -> None:
    world.run(FOUR_TURNS)
    transcript = world.run(["talk about cats", "/threads"], thread_id="cats")
    assert row(transcript, "thread") == ["thread", "messages", "summary", "last", "active", "title"]
    current = row(transcript, "* cats")
    assert current[2:4] == ["2", "no"] and current[-3:] == ["talk", "about", "cats"]
    other = row(transcript, "  t1")
    assert other[1:3] == ["2", "yes"] and other[-1] == "one"
    assert world.thread_ids() == ["cats", "t1"], "newest activity first"
    assert [t.has_summary for t in world.store.list_threads()] == [False, True]


def test_threads_on_an_empty_database_and_with_an_argument(world: World) -> None:
    transcript = world.run(["/threads", "/threads all"])
    assert "no threads yet" in transcript
    assert errors(transcript) == ["error: /threads takes no argument: /threads"]


def test_new_starts_a_fresh_thread_with_a_generated_id(world: World) -> None:
    transcript = world.run(["hello", "/new", "second", "/new please"])
    fresh = world.repl.thread_id
    assert fresh != "t1" and check_thread_id(fresh) == fresh
    assert f"new thread {fresh}" in transcript
    assert errors(transcript) == ["error: /new takes no argument: /new"]
    assert world.texts("t1") == ["hello", "reply 1"]
    assert world.texts(fresh) == ["second", "reply 2"]


# --- /rename, /delete ----------------------------------------------------------------------------


def test_rename_moves_every_checkpoint_to_the_new_id(world: World) -> None:
    world.run(["hello", "again"])
    checkpoints = [s.checkpoint_id for s in world.history("t1")]
    transcript = world.run(["/rename renamed", "/thread"])
    assert "renamed t1 to renamed" in transcript
    assert "thread renamed: 4 messages, summary: no" in transcript
    assert world.repl.thread_id == "renamed"
    assert [s.checkpoint_id for s in world.history("renamed")] == checkpoints
    assert world.history("t1") == [] and world.values("t1") == {}
    (info,) = world.store.list_threads()
    assert (info.thread_id, info.title, info.message_count) == ("renamed", "hello", 4)

    world.run(["third"], thread_id="renamed")
    assert world.texts("renamed")[-2:] == ["third", "reply 3"]


def test_rename_onto_an_existing_thread_or_with_bad_arguments_is_refused(world: World) -> None:
    world.run(["in two"], thread_id="t2")
    transcript = world.run(["in one", "/rename t2", "/rename", "/rename a b"])
    assert errors(transcript) == [
        "error: thread 't2' already exists: pick another name",
        "error: give the new name: /rename NEW",
        "error: 'a b' is not a usable thread id: use 1-100 characters without spaces",
    ]
    assert world.repl.thread_id == "t1"
    assert world.texts("t1") == ["in one", "reply 2"]
    assert world.texts("t2") == ["in two", "reply 1"]


def test_renaming_a_thread_without_checkpoints_is_an_error(world: World) -> None:
    transcript = world.run(["/rename other"])
    assert errors(transcript) == ["error: no thread 't1'"]
    assert world.thread_ids() == [] and world.repl.thread_id == "t1"


def test_delete_asks_first_and_only_yes_deletes(world: World) -> None:
    world.run(["doomed"], thread_id="t2")
    lines: list[str | BaseException] = ["keep me", "/delete t2", "n", "/delete t2", ""]
    lines += ["/delete t2", KeyboardInterrupt(), "/delete t2", "Y"]
    transcript = world.run(lines)
    assert transcript.count("kept") == 3
    assert "deleted t2" in transcript and errors(transcript) == []
    assert world.thread_ids() == ["t1"]
    assert world.values("t2") == {} and not world.store.thread_exists("t2")
    assert world.repl.thread_id == "t1" and world.texts("t1") == ["keep me", "reply 2"]


def test_deleting_the_current_thread_switches_to_a_fresh_one(world: World) -> None:
    transcript = world.run(["hello", "/delete t1", "yes", "after"])
    fresh = world.repl.thread_id
    assert "deleted t1" in transcript and f"new thread {fresh}" in transcript
    assert fresh != "t1"
    assert world.thread_ids() == [fresh]
    assert world.texts(fresh) == ["after", "reply 2"]
    assert world.values("t1") == {}


def test_delete_of_an_unknown_or_missing_id_is_an_error(world: World) -> None:
    transcript = world.run(["hello", "/delete nope", "/delete", "/thread"])
    assert errors(transcript) == [
        "error: no thread 'nope' (/threads lists them)",
        "error: give the thread to delete: /delete ID (/threads lists them)",
    ]
    assert "thread t1: 2 messages, summary: no" in transcript
    assert world.thread_ids() == ["t1"]


# --- /summary, /history, /show -------------------------------------------------------------------


def test_summary_says_none_yet_then_shows_the_summary(world: World) -> None:
    transcript = world.run(["/summary", *FOUR_TURNS, "/summary", "/summary please"])
    assert "no summary yet: one is made when the conversation passes messages:6" in transcript
    assert "summarized 6 messages" in transcript
    summary = world.values()["summary"]
    assert summary.splitlines()[1:] == ["- one", "- two", "- three"]
    assert re.search(r"summary \(\d+ tokens\)", transcript)
    shown = transcript.split("summarized 6 messages", 1)[1]
    assert "Offline extractive summary" in shown and "three" in shown
    assert errors(transcript) == ["error: unknown argument 'please': /summary or /summary history"]
    assert world.texts() == ["four", "reply 4"], "the folded messages left the thread"


def test_summary_history_has_one_entry_per_summary_change(world: World) -> None:
    early = world.run(["/summary history", "hello", "/summary history"])
    assert errors(early) == [
        "error: thread t1 has no checkpoints yet: say something first",
    ]
    assert "the summary has not changed yet in this thread" in early

    world.run(SEVEN_TURNS[1:])
    transcript = world.run(["/summary history"])
    entries = re.findall(r"#(\d) step (\d+) .* folded (\d+) messages", transcript)
    assert [(number, folded) for number, _, folded in entries] == [("1", "6"), ("2", "6")]
    summaries = [s for s in lineage(world.history()) if s.summary]
    first, second = summaries[0], summaries[-1]
    assert [int(step) for _, step, _ in entries] == [first.step, second.step]
    assert short_id(first.checkpoint_id) in transcript
    assert short_id(second.checkpoint_id) in transcript
    assert "- hello" in first.summary and "- five" in second.summary
    assert world.values()["summary"] == second.summary


def test_history_lists_the_checkpoints_newest_first_and_n_limits_them(world: World) -> None:
    world.run(["hello"])
    chain = lineage(world.history())
    assert [s.source for s in chain] == ["input", "loop", "loop"]
    transcript = world.run(["/history"])
    ids = [short_id(s.checkpoint_id) for s in reversed(chain)]
    lines = [line for line in transcript.splitlines() if line[:8] in ids]
    assert [line[:8] for line in lines] == ids, "newest first"
    assert lines[0].split()[1:4] == ["1", "conversation", "-"]
    assert lines[-1].split()[1:4] == ["-1", "input", "__start__"]

    limited = world.run(["/history 2"])
    assert [line[:8] for line in limited.splitlines() if line[:8] in ids] == ids[:2]
    assert "... 1 older checkpoints (/history 3)" in limited


@pytest.mark.parametrize("argument", ["x", "0", "-1", "2.5"])
def test_history_with_a_bad_n_is_an_error(world: World, argument: str) -> None:
    world.run(["hello"])
    transcript = world.run([f"/history {argument}", "/thread"])
    assert errors(transcript) == [
        f"error: /history takes a number of checkpoints, not '{argument}'",
    ]
    assert "thread t1: 2 messages" in transcript


def test_history_of_a_thread_without_checkpoints_is_an_error(world: World) -> None:
    transcript = world.run(["/history"])
    assert errors(transcript) == ["error: thread t1 has no checkpoints yet: say something first"]


def test_show_displays_messages_that_were_later_folded_into_the_summary(world: World) -> None:
    world.run(FOUR_TURNS)
    assert "one" not in world.texts() and "reply 1" not in world.texts()
    before_summary = world.checkpoint("t1", lambda s: len(s.messages) == 8 and not s.summary)
    transcript = world.run([f"/show {short_id(before_summary.checkpoint_id)}"])
    assert (
        f"checkpoint {short_id(before_summary.checkpoint_id)} · step {before_summary.step}"
        in transcript
    )
    shown = transcript.split("· step", 1)[1].splitlines()
    for text in ("one", "reply 1", "two", "reply 2", "three", "reply 3", "four", "reply 4"):
        assert text in shown
    assert shown.count("you") == 4 and shown.count("assistant") == 4
    assert errors(transcript) == []


def test_show_accepts_a_full_checkpoint_id_and_shows_the_summary(world: World) -> None:
    world.run(FOUR_TURNS)
    head = lineage(world.history())[-1]
    transcript = world.run([f"/show {head.checkpoint_id}"])
    assert f"checkpoint {short_id(head.checkpoint_id)}" in transcript
    assert "summary" in transcript and "Offline extractive summary" in transcript
    assert "reply 4" in transcript and "reply 1" not in transcript


def test_show_of_an_unknown_or_ambiguous_checkpoint_is_an_error(world: World) -> None:
    world.run(["hello"])
    ids = [s.checkpoint_id for s in world.history()]
    prefix = ids[0][:4]
    assert len(ids) == 3 and all(i.startswith(prefix) for i in ids), "time-ordered ids"
    transcript = world.run(["/show", "/show zzzzzzzz", f"/show {prefix}", "/thread"])
    assert errors(transcript) == [
        "error: give a checkpoint id from /history: /show CHECKPOINT",
        "error: no checkpoint 'zzzzzzzz' in this thread (see /history)",
        f"error: '{prefix}' matches 3 checkpoints: give more of the id",
    ]
    assert "thread t1: 2 messages" in transcript


# --- /fork, /undo, /retry ------------------------------------------------------------------------


def test_fork_at_a_checkpoint_starts_a_new_thread_with_that_state(world: World) -> None:
    world.run(["one", "two"])
    after_one = world.checkpoint("t1", lambda s: len(s.messages) == 2 and not s.next)
    transcript = world.run([f"/fork {short_id(after_one.checkpoint_id)}", "in the fork"])
    assert (
        f"forked t1 at checkpoint {short_id(after_one.checkpoint_id)} into t1-fork1" in transcript
    )
    assert "thread t1-fork1: 2 messages, no summary yet" in transcript
    assert world.repl.thread_id == "t1-fork1"
    assert world.texts("t1-fork1") == ["one", "reply 1", "in the fork", "reply 3"]
    assert world.texts("t1") == ["one", "reply 1", "two", "reply 2"], "the origin is untouched"
    info = world.store.thread_info("t1-fork1")
    assert info is not None
    assert (info.origin_thread, info.origin_checkpoint) == ("t1", after_one.checkpoint_id)
    assert info.title == "one"


def test_fork_without_a_checkpoint_branches_from_now_with_numbered_ids(world: World) -> None:
    world.run(FOUR_TURNS)
    head = lineage(world.history())[-1]
    transcript = world.run(["/fork", "/thread t1", "/fork"])
    assert "into t1-fork1" in transcript and "into t1-fork2" in transcript
    assert world.repl.thread_id == "t1-fork2"
    for fork in ("t1-fork1", "t1-fork2"):
        assert world.values(fork) == world.values("t1")
        info = world.store.thread_info(fork)
        assert info is not None and info.has_summary is True
        assert (info.origin_thread, info.origin_checkpoint) == ("t1", head.checkpoint_id)


def test_fork_of_an_unknown_checkpoint_or_an_empty_thread_is_an_error(world: World) -> None:
    transcript = world.run(["/fork", "hello", "/fork zzzzzzzz"])
    assert errors(transcript) == [
        "error: thread t1 has no checkpoints yet: say something first",
        "error: no checkpoint 'zzzzzzzz' in this thread (see /history)",
    ]
    assert world.thread_ids() == ["t1"] and world.repl.thread_id == "t1"


def test_undo_rewinds_the_last_turn_and_history_keeps_it(world: World) -> None:
    world.run(["one", "two", "three"])
    transcript = world.run(["/undo"])
    assert "rewound the last turn" in transcript and "(4 messages)" in transcript
    assert world.texts() == ["one", "reply 1", "two", "reply 2"]
    state = world.graph.get_state(thread_config("t1"))
    assert state.metadata["chatbot_action"] == "undo" and state.next == ()
    assert any("three" in [m.text for m in s.messages] for s in world.history()), (
        "the undone turn is still in the history"
    )

    again = world.run(["/undo", "/history 1"])
    assert "(2 messages)" in again and "undo" in again
    assert world.texts() == ["one", "reply 1"]

    world.run(["after undo"])
    assert world.texts() == ["one", "reply 1", "after undo", "reply 4"]


def test_undo_of_the_first_turn_empties_the_thread_and_then_there_is_nothing_left(
    world: World,
) -> None:
    transcript = world.run(["/undo", "hello", "/undo now", "/undo", "/undo", "/retry"])
    assert errors(transcript) == [
        "error: nothing to undo in this thread",
        "error: /undo takes no argument: /undo",
        "error: nothing to undo in this thread",
        "error: nothing to retry in this thread",
    ]
    assert "back to the empty thread" in transcript
    assert world.texts() == []
    assert any([m.text for m in s.messages] == ["hello", "reply 1"] for s in world.history())
    (info,) = world.store.list_threads()
    assert info.message_count == 0


def test_retry_regenerates_the_last_reply_and_history_keeps_the_first(
    make_world: Callable[..., World],
) -> None:
    world = make_world(ScriptedChatModel(script=["fine", "first answer", "second answer"]))
    transcript = world.run(["hi", "question", "/retry"])
    assert "first answer" in transcript and "second answer" in transcript
    assert world.texts() == ["hi", "fine", "question", "second answer"]
    messages = world.values()["messages"]
    assert isinstance(messages[-1], AIMessage) and isinstance(messages[-2], HumanMessage)
    assert any("first answer" in [m.text for m in s.messages] for s in world.history())
    assert [m.text for m in world.chat_model.calls[-1]] == ["hi", "fine", "question"]
    (info,) = world.store.list_threads()
    assert info.message_count == 4


def test_retry_works_on_the_first_turn_of_a_thread(make_world: Callable[..., World]) -> None:
    world = make_world(ScriptedChatModel(script=["first answer", "second answer"]))
    transcript = world.run(["question", "/retry", "/retry"])
    assert errors(transcript) == []
    assert world.texts() == ["question", "reply 3"]
    replies = {m.text for s in world.history() for m in s.messages if isinstance(m, AIMessage)}
    assert replies == {"first answer", "second answer", "reply 3"}


def test_retry_with_a_model_name_uses_it_for_that_retry_only(world: World) -> None:
    transcript = world.run(["question", "/retry offline", "next"])
    assert offline_echo("question") in transcript
    texts = world.texts()
    assert texts[0] == "question" and texts[1].startswith(offline_echo("question"))
    assert texts[2:] == ["next", "reply 2"], "the next turn is back on the session's model"
    assert world.repl.model_name == "scripted" and "chat_model" not in world.repl.context


def test_retry_refuses_a_model_without_credentials_and_nothing_to_retry(world: World) -> None:
    transcript = world.run(["/retry", "question", "/retry gpt-4o", "/retry two words"])
    lines = errors(transcript)
    assert lines[0] == "error: nothing to retry in this thread"
    assert lines[1].startswith("error: model 'gpt-4o' needs OPENAI_API_KEY or OPENAI_BASE_URL")
    assert lines[2] == "error: 'two words' is not a model name"
    assert len(lines) == 3
    assert world.texts() == ["question", "reply 1"] and len(world.chat_model.calls) == 1


# --- /export -------------------------------------------------------------------------------------


def test_export_writes_summary_folded_and_live_messages_to_private_files(
    world: World, tmp_path: Path
) -> None:
    world.run(FOUR_TURNS)
    transcript = world.run(["/export", "/export out/conversation.md", "/export conversation.json"])
    assert errors(transcript) == []
    assert flat(transcript).count("(6 folded + 2 live messages)") == 3
    (default,) = tmp_path.glob("chatbot-t1-*.md")
    assert default.name in flat(transcript)
    assert "exported t1 to out/conversation.md" in transcript
    markdown_files = [default, tmp_path / "out" / "conversation.md"]
    json_file = tmp_path / "conversation.json"
    for path in [*markdown_files, json_file]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path

    for path in markdown_files:
        text = path.read_text()
        summary, rest = text.split("## Summary", 1)[1].split("## Messages folded", 1)
        folded, live = rest.split("## Conversation", 1)
        assert "- one\n- two\n- three" in summary
        for kept in ("one", "reply 1", "two", "reply 2", "three", "reply 3"):
            assert f"\n{kept}\n" in folded
        assert "\nfour\n" in live and "\nreply 4\n" in live and "reply 1" not in live

    document = json.loads(json_file.read_text())
    assert document["thread_id"] == "t1"
    assert document["summary"] == world.values()["summary"]
    assert [m["content"] for m in document["folded_messages"]] == [
        "one",
        "reply 1",
        "two",
        "reply 2",
        "three",
        "reply 3",
    ]
    assert [m["content"] for m in document["messages"]] == ["four", "reply 4"]
    assert [c["folded_messages"] for c in document["summary_history"]] == [6]


def test_export_with_a_bad_extension_or_two_paths_is_an_error(world: World, tmp_path: Path) -> None:
    transcript = world.run(["/export", "hello", "/export notes.txt", "/export a.md b.md"])
    assert errors(transcript) == [
        "error: thread t1 has no checkpoints yet: say something first",
        "error: cannot tell the format of 'notes.txt': end it in .md or .json, or give --format",
        "error: /export takes one path (quote it if it has spaces)",
    ]
    for name in ("notes.txt", "a.md", "b.md"):
        assert not (tmp_path / name).exists()
    assert list(tmp_path.glob("chatbot-*")) == []


def test_export_to_a_quoted_path_with_spaces(world: World, tmp_path: Path) -> None:
    transcript = world.run(["hello", "/export 'my notes.md'"])
    assert errors(transcript) == []
    assert "\nhello\n" in (tmp_path / "my notes.md").read_text()


# --- /tokens, /model -----------------------------------------------------------------------------


def test_tokens_shows_context_trigger_keep_and_what_summaries_save(world: World) -> None:
    empty = world.run(["/tokens"])
    assert row(empty, "context now")[2:] == ["0", "tokens", "in", "0", "messages"]
    world.run(FOUR_TURNS)
    transcript = world.run(["/tokens", "/tokens now"])
    context = row(transcript, "context now")
    assert context[3:] == ["tokens", "in", "2", "messages"] and int(context[2]) > 0
    assert row(transcript, "trigger") == ["trigger", "messages:6"]
    assert row(transcript, "keep") == ["keep", "messages:2"]
    saved = row(transcript, "saved")
    assert int(saved[1]) > 0 and saved[-3:] == ["(6", "messages", "folded)"]
    assert int(row(transcript, "summary")[1]) > 0
    assert errors(transcript) == ["error: /tokens takes no argument: /tokens"]


def test_model_shows_and_switches_to_the_offline_model(world: World) -> None:
    transcript = world.run(["/model", "/model offline", "/model", "hello"])
    assert "chat model: scripted" in transcript
    assert "chat model is now offline for this session" in transcript
    assert "chat model: offline" in transcript
    assert offline_echo("hello") in transcript
    assert world.chat_model.calls == []
    assert world.texts()[1].startswith(offline_echo("hello"))
    assert world.repl.model_name == "offline"
    assert world.repl.max_input_tokens == OFFLINE_MAX_INPUT_TOKENS


def test_model_without_credentials_is_refused_with_one_line(world: World) -> None:
    transcript = world.run(["/model gpt-4o", "hello", "/model"])
    (line,) = errors(transcript)
    assert line.startswith("error: model 'gpt-4o' needs OPENAI_API_KEY or OPENAI_BASE_URL")
    assert "chat model: scripted" in transcript
    assert world.texts() == ["hello", "reply 1"]


# --- helpers of the module -----------------------------------------------------------------------


def test_tail_renders_only_the_last_lines() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=20, force_terminal=False)
    console.print(Tail(Text("1\n2\n3\n4\n5"), 2))
    console.print(Tail(Text("a\nb"), 0))
    assert buffer.getvalue().split() == ["4", "5", "b"]


def test_tail_counts_wrapped_lines() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=10, force_terminal=False)
    console.print(Tail(Text("aaaaaaaaaa" + "bbbbbbbbbb" + "cc"), 2))
    assert buffer.getvalue().split() == ["bbbbbbbbbb", "cc"]


def test_new_thread_id_is_a_readable_usable_id() -> None:
    made = new_thread_id(datetime(2024, 5, 6, 7, 8, 9))
    assert re.fullmatch(r"0506-0708-[0-9a-f]{4}", made)
    assert check_thread_id(made) == made
    assert re.fullmatch(r"\d{4}-\d{4}-[0-9a-f]{4}", new_thread_id())
    assert len({new_thread_id() for _ in range(50)}) > 40, "ids made in one minute differ"


def test_check_thread_id_strips_and_rejects_what_cannot_be_typed() -> None:
    assert check_thread_id("  my-thread ") == "my-thread"
    assert check_thread_id("x" * MAX_THREAD_ID) == "x" * MAX_THREAD_ID
    for bad in ("", "   ", "two words", "tab\there", "x" * (MAX_THREAD_ID + 1)):
        with pytest.raises(ValueError, match="is not a usable thread id"):
            check_thread_id(bad)


def test_scripted_reader_raises_given_exceptions_then_acts_like_ctrl_d() -> None:
    reader = ScriptedReader(["a", KeyboardInterrupt()])
    assert reader.read("> ") == "a"
    with pytest.raises(KeyboardInterrupt):
        reader.read("> ")
    with pytest.raises(EOFError):
        reader.read("> ")


# --- resuming, help for one command, long fork ids ------------------------------------------------


def test_retry_finishes_an_interrupted_summary_without_regenerating_the_reply(
    tmp_path: Path,
) -> None:
    chat = ScriptedChatModel()
    summarizer = ScriptedChatModel(script=[KeyboardInterrupt(), "THE SUMMARY"])
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        model="offline",
        summary_trigger="messages:6",
        summary_keep="messages:2",
    )
    with Store(tmp_path / "c.sqlite") as store:
        graph = build_graph(chat, summarizer, settings, store.saver)
        world = World(store, graph, LocalBackend(graph, store), settings, chat)
        transcript = world.run([*FOUR_TURNS])
        assert "interrupted" in transcript
        head = world.backend.current("t1")
        assert head is not None and head.next == ("summarize_conversation",)
        assert len(head.messages) == 8, "the reply was saved before the summary was cut short"

        transcript = world.run(["/retry"])
        assert "did not finish" in transcript
        assert "summarized 6 messages" in transcript
        assert world.values()["summary"] == "THE SUMMARY"
        assert world.texts() == ["four", "reply 4"]
        assert len(chat.calls) == 4, "resuming finished the summary; the reply was not redone"


def test_help_explains_one_command(world: World) -> None:
    transcript = world.run(["/help retry", "/help /fork", "/help nope", "/exit now", "/clear x"])
    assert "/retry [MODEL]" in transcript and "regenerate the last reply" in transcript
    assert "/fork [CHECKPOINT]" in transcript
    assert errors(transcript) == [
        "error: no command /nope: /help lists them",
        "error: /exit takes no argument: /exit",
        "error: /clear takes no argument: /clear",
    ]


def test_fork_of_a_thread_with_a_long_id_stays_a_usable_id(world: World) -> None:
    long_id = "x" * MAX_THREAD_ID
    world.run(["hello", "/fork"], thread_id=long_id)
    forked = world.repl.thread_id
    assert forked.endswith("-fork1") and len(forked) <= MAX_THREAD_ID
    assert check_thread_id(forked) == forked
    assert world.texts(forked) == ["hello", "reply 1"]


# --- completion -------------------------------------------------------------------------------


def completions(completer: Any, text: str) -> list[str]:
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    return [c.text for c in completer.get_completions(Document(text), CompleteEvent())]


def test_tab_completes_commands_thread_ids_and_checkpoints() -> None:
    from chatbot.lineinput import SlashCompleter

    completer = SlashCompleter(
        commands=lambda: COMMANDS,
        thread_ids=lambda: ["main", "main-fork1", "work"],
        checkpoint_ids=lambda: ["1a2b3c4d", "9f8e7d6c"],
    )
    assert completions(completer, "/thr") == ["thread", "threads"]
    assert completions(completer, "/thread ma") == ["main", "main-fork1"]
    assert completions(completer, "/delete w") == ["work"]
    assert completions(completer, "/show 9") == ["9f8e7d6c"]
    assert completions(completer, "/fork ") == ["1a2b3c4d", "9f8e7d6c"]
    assert completions(completer, "/summary h") == ["history"]
    assert completions(completer, "hello /thr") == []
    assert completions(completer, "/model gp") == []
    assert set(completions(completer, "/")) == set(COMMANDS)


def test_input_history_file_is_private(tmp_path: Path) -> None:
    from chatbot.lineinput import private_history_file

    path = private_history_file(tmp_path / "data" / "chatbot" / "input_history")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_angle_brackets_in_messages_stay_visible(make_world: Callable[..., World]) -> None:
    world = make_world(
        ScriptedChatModel(default="Use `List<T>` or just <T> with #include <stdio.h>")
    )
    transcript = world.run(["what about <T>?"])
    assert "just <T> with #include <stdio.h>" in transcript
    assert "List<T>" in transcript
    from chatbot.render import state_view

    buffer = io.StringIO()
    current = world.backend.current("t1")
    assert current is not None
    Console(file=buffer, width=100).print(state_view(current))
    assert "what about <T>?" in buffer.getvalue()
