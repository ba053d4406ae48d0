"""One suite for every Backend: the operations the CLI and the REPL use, run against threads in
a local SQLite file and against threads on a real ``langgraph dev`` (marked integration).

Both run the offline model with ``messages:4`` / ``messages:2``: the third turn (six messages)
folds the oldest four into the summary. Thread names are unique per test, because the server
is shared by the whole run.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.engine.models import resolve_models
from chatbot.history.lineage import last_turn, lineage
from chatbot.history.summary import summary_savings
from chatbot.history.turns import turn_entries
from chatbot.memory.tokens import TokenCounter
from chatbot.store.search import recaller
from chatbot.store.sqlite import Store
from chatbot.threads.backend import Backend, BackendError, LocalBackend
from chatbot.threads.events import Event, NothingToFold, Reply, Summarized, Token, TurnStream
from chatbot.threads.remote import RemoteBackend
from tests.helpers import DevServer, offline_echo

TRIGGER, KEEP = "messages:4", "messages:2"  # as DevServer runs the graph


@pytest.fixture(
    params=["local", pytest.param("remote", marks=[pytest.mark.integration, pytest.mark.slow])]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A LocalBackend on a fresh SQLite file, or a RemoteBackend on the shared dev server."""
    if request.param == "remote":
        server: DevServer = request.getfixturevalue("dev_server")
        yield RemoteBackend(server.url)
        return
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        model="offline",
        db=str(tmp_path / "threads.sqlite"),
        summary_trigger=TRIGGER,
        summary_keep=KEEP,
    )
    models = resolve_models(settings)
    with Store(settings.db) as store:
        graph = build_graph(models.chat, models.summary, settings, store.saver, recaller(store))
        yield LocalBackend(graph, store)


@pytest.fixture
def thread() -> str:
    return f"suite-{uuid.uuid4().hex[:10]}"


def texts(backend: Backend, thread_id: str) -> list[str]:
    current = backend.current(thread_id)
    assert current is not None
    return [m.text for m in current.messages]


def reply_of(events: list[Event]) -> str:
    (reply,) = [e for e in events if isinstance(e, Reply)]
    return reply.message.text


async def collect(turn: TurnStream) -> list[Event]:
    """A turn the way the REPL and ``ask`` run it: ``async for`` in a task."""
    return [event async for event in turn]


def test_a_thread_that_was_never_used_has_nothing(backend: Backend, thread: str) -> None:
    assert not backend.thread_exists(thread)
    assert backend.current(thread) is None
    assert backend.history(thread) == []
    assert thread not in {t.thread_id for t in backend.threads()}


def test_a_turn_streams_its_reply_and_the_thread_holds_it(backend: Backend, thread: str) -> None:
    events = list(backend.send(thread, "hello there"))
    reply = reply_of(events)
    assert reply.startswith(offline_echo("hello there"))
    assert "".join(e.text for e in events if isinstance(e, Token)) == reply, "streamed whole"
    assert backend.thread_exists(thread)
    assert texts(backend, thread) == ["hello there", reply]
    (info,) = [t for t in backend.threads() if t.thread_id == thread]
    assert (info.title, info.message_count, info.has_summary) == ("hello there", 2, False)


def test_a_turn_run_as_a_task_gives_the_same_events(backend: Backend, thread: str) -> None:
    events = asyncio.run(collect(backend.send(thread, "from a task")))
    reply = reply_of(events)
    assert "".join(e.text for e in events if isinstance(e, Token)) == reply
    assert texts(backend, thread) == ["from a task", reply]


def test_the_third_turn_folds_the_oldest_messages_and_history_keeps_them(
    backend: Backend, thread: str
) -> None:
    for text in ("one", "two"):
        assert not any(isinstance(e, Summarized) for e in backend.send(thread, text))
    events = list(backend.send(thread, "three"))
    (summarized,) = [e for e in events if isinstance(e, Summarized)]
    assert (summarized.messages, summarized.reason) == (4, "trigger")
    current = backend.current(thread)
    assert current is not None
    assert len(current.messages) == 2 and current.messages[0].text == "three"
    assert "- one" in current.summary and "- two" in current.summary
    history = backend.history(thread)
    assert max(len(s.messages) for s in history) == 6, "a checkpoint still holds all six"
    assert lineage(history)[-1].checkpoint_id == current.checkpoint_id


def test_resuming_where_the_message_arrived_answers_it_again_on_a_branch(
    backend: Backend, thread: str
) -> None:
    first = reply_of(list(backend.send(thread, "question")))
    turn = last_turn(backend.history(thread))
    assert turn is not None and turn.after_input is not None
    assert [m.text for m in turn.after_input.messages] == ["question"]
    again = reply_of(list(backend.resume(thread, turn.after_input.checkpoint_id)))
    assert texts(backend, thread) == ["question", again]
    replies = {m.text for s in backend.history(thread) for m in s.messages if m.type == "ai"}
    assert first in replies, "the first reply stays in history"


def test_compact_folds_now_and_regenerate_answers_from_the_compacted_state(
    backend: Backend, thread: str
) -> None:
    # (a first message long enough that folding it, with the recall tool a first summary
    # brings, makes the context smaller)
    for text in ("one " + "more words " * 20, "two"):
        list(backend.send(thread, text))
    (folded,) = [
        e for e in backend.compact(thread, "keep the numbers") if isinstance(e, Summarized)
    ]
    assert (folded.messages, folded.reason) == (2, "compact")
    compacted = backend.current(thread)
    assert compacted is not None and "- one" in compacted.summary
    assert len(compacted.messages) == 2 and compacted.messages[0].text == "two"
    again = reply_of(list(backend.regenerate(thread)))
    current = backend.current(thread)
    assert current is not None and current.summary == compacted.summary, "still compacted"
    assert [m.text for m in current.messages] == ["two", again]


def test_a_compaction_with_nothing_to_fold_writes_nothing(backend: Backend, thread: str) -> None:
    list(backend.send(thread, "only this"))  # two messages: the keep window holds them all
    checkpoints = sorted(s.checkpoint_id for s in backend.history(thread))
    listing = backend.threads()
    for run in (list, lambda turn: asyncio.run(collect(turn))):  # as ``compact`` and the REPL
        events = run(backend.compact(thread))
        assert [type(e) for e in events] == [NothingToFold]
    assert sorted(s.checkpoint_id for s in backend.history(thread)) == checkpoints
    assert backend.threads() == listing, "the listing (last active too) is as it was"
    kinds = [entry.kind for entry in turn_entries(backend.history(thread))]
    assert kinds == ["turn"], "no /compact row: /undo has nothing new to undo"


def test_a_fork_copies_the_state_and_records_its_origin(backend: Backend, thread: str) -> None:
    list(backend.send(thread, "the original"))
    origin = backend.current(thread)
    assert origin is not None
    backend.fork(thread, None, f"{thread}-fork1")
    fork = backend.current(f"{thread}-fork1")
    assert fork is not None
    assert [m.text for m in fork.messages] == [m.text for m in origin.messages]
    (info,) = [t for t in backend.threads() if t.thread_id == f"{thread}-fork1"]
    assert (info.origin_thread, info.origin_checkpoint) == (thread, origin.checkpoint_id)
    assert info.title == "the original"
    list(backend.send(f"{thread}-fork1", "only in the fork"))
    assert texts(backend, thread) == [m.text for m in origin.messages], "the origin is untouched"
    with pytest.raises(BackendError, match="already exists"):
        backend.fork(thread, None, f"{thread}-fork1")
    with pytest.raises(BackendError):
        backend.fork(f"{thread}-missing", None, f"{thread}-other")


def test_the_newest_checkpoint_ids_and_turns_are_those_of_the_whole_history(
    backend: Backend, thread: str
) -> None:
    for text in ("one", "two", "three"):
        list(backend.send(thread, text))
    history = backend.history(thread)
    ids = [s.checkpoint_id for s in history]
    assert backend.recent_checkpoint_ids(thread, 4) == ids[:4]
    assert backend.recent_checkpoint_ids(thread, 1000) == ids
    assert backend.recent_checkpoint_ids(f"{thread}-missing", 4) == []
    entries = turn_entries(history)
    assert [(e.kind, e.text, e.fate) for e in entries] == [
        ("turn", text, "") for text in ("three", "two", "one")
    ]
    assert entries[0].folded == 4
    assert turn_entries(backend.history(thread), 2) == entries[:2]


def test_the_summary_records_what_it_holds_and_a_fork_carries_the_record(
    backend: Backend, thread: str
) -> None:
    for text in ("one", "two", "three"):  # the third turn folds four messages
        list(backend.send(thread, text))
    current = backend.current(thread)
    assert current is not None and current.fold_record is not None
    assert current.fold_record["messages"] == 4
    counter = TokenCounter()
    saved = summary_savings(current, lambda: backend.history(thread), counter)
    read = summary_savings(current, lambda: backend.history(thread), counter, use_record=False)
    assert saved == read and saved.messages == 4
    backend.fork(thread, None, f"{thread}-fork1")
    fork = backend.current(f"{thread}-fork1")
    assert fork is not None and fork.fold_record == current.fold_record


def test_rename_delete_and_undo_are_local_only(backend: Backend, thread: str) -> None:
    list(backend.send(thread, "keep me"))
    if backend.local_only_note:  # a server: refused, with the reason, and nothing changes
        for refused in (
            lambda: backend.rename(thread, f"{thread}-renamed"),
            lambda: backend.delete(thread),
            lambda: backend.restore(thread, None, "undo"),
        ):
            with pytest.raises(BackendError, match="works on local threads only"):
                refused()
        assert backend.thread_exists(thread) and len(texts(backend, thread)) == 2
        return
    backend.restore(thread, None, "undo")
    assert texts(backend, thread) == []
    backend.rename(thread, f"{thread}-renamed")
    assert not backend.thread_exists(thread) and backend.thread_exists(f"{thread}-renamed")
    assert backend.delete(f"{thread}-renamed")
    assert not backend.thread_exists(f"{thread}-renamed")


def test_run_settings_are_the_graphs_here_and_the_servers_there(backend: Backend) -> None:
    run = backend.run_settings({"summary_keep": "messages:1"})
    if backend.local_only_note:
        assert run is None, "a server resolves its runs with its own settings"
        return
    assert run is not None
    assert (str(run.policy.trigger[0]), str(run.policy.keep)) == (TRIGGER, "messages:1")


def test_the_threads_system_prompt_is_stored_carried_by_forks_and_kept_by_turns(
    backend: Backend, thread: str
) -> None:
    assert backend.set_system_prompt(thread, "Be terse.")  # a new thread: made with it
    assert not backend.set_system_prompt(thread, "Be terse."), "unchanged: nothing written"
    for text in ("one", "two", "three"):  # the third folds: the prompt is not folded
        list(backend.send(thread, text))
    current = backend.current(thread)
    assert current is not None and current.summary and current.system_prompt == "Be terse."
    assert "Be terse" not in current.summary
    assert backend.set_system_prompt(thread, "Write haiku.", "poet")
    current = backend.current(thread)
    assert current is not None
    assert (current.system_prompt, current.system_role) == ("Write haiku.", "poet")
    kinds = [e.kind for e in turn_entries(backend.history(thread))]
    assert kinds == ["system", "turn", "turn", "turn", "system"]
    backend.fork(thread, None, f"{thread}-fork")
    fork = backend.current(f"{thread}-fork")
    assert fork is not None and (fork.system_prompt, fork.system_role) == ("Write haiku.", "poet")
    assert backend.set_system_prompt(thread, "")
    cleared = backend.current(thread)
    assert cleared is not None and cleared.system_prompt == "" and cleared.system_role == ""


def test_a_thread_given_its_system_prompt_first_is_titled_by_its_first_message(
    backend: Backend, thread: str
) -> None:
    assert backend.set_system_prompt(thread, "Be terse.")  # the thread is made, untitled
    list(backend.send(thread, "the first words"))
    list(backend.send(thread, "later words"))
    (info,) = [t for t in backend.threads() if t.thread_id == thread]
    assert info.title == "the first words"
    backend.fork(thread, None, f"{thread}-fork")
    (fork,) = [t for t in backend.threads() if t.thread_id == f"{thread}-fork"]
    assert fork.title == "the first words"


def test_a_forks_history_starts_with_the_fork_and_its_origin_even_with_a_system_prompt(
    backend: Backend, thread: str
) -> None:
    assert backend.set_system_prompt(thread, "Be terse.")
    list(backend.send(thread, "one"))
    origin = backend.current(thread)
    assert origin is not None
    backend.fork(thread, None, f"{thread}-fork")
    (entry,) = turn_entries(backend.history(f"{thread}-fork"))
    assert (entry.kind, entry.origin) == ("fork", f"{thread}@{origin.checkpoint_id}")


def test_regenerating_after_a_new_system_prompt_is_a_retry_that_replaces_the_reply(
    backend: Backend, thread: str
) -> None:
    list(backend.send(thread, "one"))
    list(backend.send(thread, "two"))
    assert backend.set_system_prompt(thread, "Be long.")
    reply_of(list(backend.regenerate(thread)))
    entries = turn_entries(backend.history(thread))
    assert [(e.kind, e.text, e.fate) for e in entries] == [
        ("retry", "two", ""),
        ("system", "Be long.", ""),
        ("turn", "two", "retried"),
        ("turn", "one", ""),
    ]


def test_undo_rewinds_turn_by_turn_to_the_empty_thread_and_keeps_what_it_undid(
    backend: Backend, thread: str
) -> None:
    with pytest.raises(BackendError, match="nothing to undo"):
        backend.undo(thread)
    list(backend.send(thread, "one"))
    list(backend.send(thread, "two"))
    if backend.local_only_note:  # a server: refused, with the reason, and nothing changes
        with pytest.raises(BackendError, match="works on local threads only"):
            backend.undo(thread)
        assert len(texts(backend, thread)) == 4
        return
    newest = backend.current(thread)
    assert newest is not None
    undone = backend.undo(thread)
    assert undone.restored is not None and texts(backend, thread)[0] == "one"
    assert [m.text for m in undone.restored.messages] == texts(backend, thread)
    assert undone.undone_checkpoint_id == newest.checkpoint_id
    assert newest.checkpoint_id in {s.checkpoint_id for s in backend.history(thread)}
    assert backend.undo(thread).restored is None  # the first turn: back to the empty thread
    assert texts(backend, thread) == []
    with pytest.raises(BackendError, match="nothing to undo"):
        backend.undo(thread)


def test_retry_answers_the_last_message_again_and_the_history_says_so(
    backend: Backend, thread: str
) -> None:
    with pytest.raises(BackendError, match="nothing to retry"):
        backend.retry(thread)
    list(backend.send(thread, "one"))
    list(backend.send(thread, "two"))
    reply = reply_of(list(backend.retry(thread)))
    assert texts(backend, thread)[2:] == ["two", reply]
    entries = turn_entries(backend.history(thread))
    assert [(e.kind, e.text, e.fate) for e in entries][:2] == [
        ("retry", "two", ""),
        ("turn", "two", "retried"),
    ]


def test_retry_after_a_new_system_prompt_answers_from_the_state_now(
    backend: Backend, thread: str
) -> None:
    list(backend.send(thread, "one"))
    assert backend.set_system_prompt(thread, "Be brief.")
    reply_of(list(backend.retry(thread)))  # (going back would drop the new prompt)
    current = backend.current(thread)
    assert current is not None and current.system_prompt == "Be brief."
    assert [m.text for m in current.messages[:1]] == ["one"] and len(current.messages) == 2


def test_search_finds_folded_messages_here_and_is_refused_on_a_server(
    backend: Backend, thread: str
) -> None:
    word = f"zebra{uuid.uuid4().hex[:6]}"
    for text in (f"first {word}", "second", "third"):  # the third turn folds the first
        list(backend.send(thread, text))
    if backend.local_only_note:
        with pytest.raises(BackendError, match="works on local threads only"):
            backend.search(word)
        return
    current = backend.current(thread)
    assert current is not None and all(word not in m.text for m in current.messages)
    hits = backend.search(word)
    assert hits and {hit.thread_id for hit in hits} == {thread}
    assert backend.search(word, thread_id="another") == []


def test_context_tokens_count_what_the_next_call_would_send(backend: Backend, thread: str) -> None:
    list(backend.send(thread, "hello"))
    before = backend.current(thread)
    assert before is not None
    short = backend.context_tokens(before)
    assert short > 0
    list(backend.send(thread, "a much longer message " * 40))
    after = backend.current(thread)
    assert after is not None and backend.context_tokens(after) > short + 100
    assert backend.set_system_prompt(thread, "You are terse. " * 30)
    prompted = backend.current(thread)
    assert prompted is not None
    assert backend.context_tokens(prompted) > backend.context_tokens(after) + 50
