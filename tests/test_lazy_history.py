"""History read lazily: the newest N turns, the last turn and what the summary saves read only
the checkpoints they need, and say exactly what reading everything says.

Threads are made with the real graph on SQLite (a scripted chat model, the offline summary
model, ``messages:6`` / ``messages:2``): turns, folds, /compact, failed turns and their resumes,
/undo, both kinds of /retry, side branches (a turn sent from an older checkpoint, two runs at
once whose checkpoints interleave) and forks. What a function reads is counted by giving it
snapshots whose ``load`` counts.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.engine.models import OfflineChatModel
from chatbot.history.lineage import by_id, find_checkpoint, last_turn, lineage
from chatbot.history.snapshots import ACTION_KEY, ORIGIN_KEY, Snapshot, snapshot_from_parts
from chatbot.history.summary import (
    compact_refusal,
    extend_fold_record,
    summary_folds,
    summary_savings,
)
from chatbot.history.turns import Fate, TurnEntry, history_rows, turn_count, turn_entries
from chatbot.memory.state import ChatGraph
from chatbot.memory.tokens import ESTIMATE, TokenCounter, tokenizer_for
from chatbot.store.base import thread_config
from chatbot.store.checkpoints import lazy_history
from chatbot.store.sqlite import Store
from chatbot.threads.backend import LocalBackend
from chatbot.threads.runner import blocking
from tests.scripted import ScriptedChatModel

# --- making threads ----------------------------------------------------------------------------

OPERATIONS = (
    "send",
    "fail",
    "resume",
    "undo",
    "retry",
    "regenerate",
    "compact",
    "branch",
    "interleave",
    "fork",
)


@dataclass
class Threads:
    """A SQLite file, the graph and a backend; operations as the REPL's commands do them."""

    store: Store
    chat: ScriptedChatModel
    backend: LocalBackend
    sent: Iterator[int] = field(default_factory=itertools.count)
    forks: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def graph(self) -> ChatGraph:
        return self.backend.graph

    def history(self, thread: str = "t") -> list[Snapshot]:
        return lazy_history(self.store, thread)

    def do(self, operation: str, thread: str = "t", choice: int = 0) -> None:
        """Run one operation; one that does not apply to the thread now does nothing."""
        backend, text = self.backend, f"message {next(self.sent)}"
        current = backend.current(thread)
        if operation == "send":
            list(backend.send(thread, text))
        elif operation == "fail":  # the reply fails: the turn is left unfinished
            self.chat.script.insert(0, RuntimeError("provider down"))
            with pytest.raises(Exception, match="provider down"):
                list(backend.send(thread, text))
        elif operation == "resume" and current is not None and current.unfinished:
            list(backend.resume(thread, None))
        elif operation == "undo" and current is not None and (current.messages or current.summary):
            turn = last_turn(self.history(thread))
            if turn is not None:
                before = turn.before.checkpoint_id if turn.before else None
                backend.restore(thread, before, "undo")
        elif operation == "retry" and current is not None:  # as /retry chooses
            turn = last_turn(self.history(thread))
            if current.unfinished:
                list(backend.resume(thread, None))
            elif turn is not None and turn.after_input is not None and current.messages:
                if turn.compacted:
                    list(backend.regenerate(thread))
                else:
                    list(backend.resume(thread, turn.after_input.checkpoint_id))
        elif operation == "regenerate" and current is not None and not current.unfinished:
            if current.messages and current.messages[-1].type == "ai":
                list(backend.regenerate(thread))
        elif operation == "compact" and current is not None and not current.unfinished:
            if compact_refusal(current) is None:
                list(backend.compact(thread))
        elif operation == "branch":  # a message sent from an older checkpoint of the lineage
            chain = lineage(self.history(thread))
            if len(chain) > 1:
                older = chain[:-1][choice % (len(chain) - 1)]
                config = thread_config(thread, older.checkpoint_id)
                blocking(self.graph.ainvoke({"messages": [HumanMessage(text)]}, config))
        elif operation == "interleave" and current is not None:  # two turns at once
            asyncio.run(self._two_at_once(thread, current.checkpoint_id, text))
        elif operation == "fork" and current is not None:
            chain = lineage(self.history(thread))
            source = chain[choice % len(chain)].checkpoint_id
            backend.fork(thread, source, f"{thread}-fork{next(self.forks)}")

    async def _two_at_once(self, thread: str, head: str, text: str) -> None:
        """Two runs from the same checkpoint, stepped in turn: their checkpoints interleave."""
        runs = [
            self.graph.astream(
                {"messages": [HumanMessage(f"{text}{n}")]}, thread_config(thread, head)
            )
            for n in ("a", "b")
        ]
        while runs:
            for run in list(runs):
                try:
                    await anext(run)
                except StopAsyncIteration:
                    runs.remove(run)

    def thread_ids(self) -> list[str]:
        return [info.thread_id for info in self.store.list_threads()]


@pytest.fixture
def make_threads(tmp_path: Path) -> Iterator[Callable[[], Threads]]:
    stores: list[Store] = []

    def make() -> Threads:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            model="offline",
            summary_trigger="messages:6",
            summary_keep="messages:2",
        )
        store = Store(tmp_path / f"threads{len(stores)}.sqlite")
        stores.append(store)
        chat = ScriptedChatModel()
        graph = build_graph(chat, OfflineChatModel(role="summary"), settings, store.saver)
        return Threads(store, chat, LocalBackend(graph, store))

    yield make
    for store in stores:
        store.close()


def counted(history: Sequence[Snapshot]) -> tuple[list[Snapshot], Counter[str]]:
    """The same checkpoints, each state read through a load that counts."""
    reads: Counter[str] = Counter()

    def load(snapshot: Snapshot) -> Callable[[], object]:
        def read() -> object:
            reads[snapshot.checkpoint_id] += 1
            return snapshot.peek()

        return read

    return [
        Snapshot(
            s.checkpoint_id,
            s.parent_id,
            s.step,
            s.source,
            metadata=s.metadata,
            load=load(s),  # type: ignore[arg-type]
        )
        for s in history
    ], reads


# --- the definition: every state read --------------------------------------------------------


def _eager_runs(history: Sequence[Snapshot]) -> list[list[Snapshot]]:
    runs: list[list[Snapshot]] = []
    run_of: dict[str, list[Snapshot]] = {}
    for snapshot in sorted(history, key=lambda s: s.checkpoint_id):
        run = run_of.get(snapshot.parent_id or "") if snapshot.source == "loop" else None
        if run is None:
            run = []
            runs.append(run)
        run.append(snapshot)
        run_of[snapshot.checkpoint_id] = run
    return runs


def _eager_kind(first: Snapshot) -> str:
    action = str(first.metadata.get(ACTION_KEY) or "")
    if first.source == "input":
        return "compact" if action == "compact" else "turn"
    if first.source == "fork":
        return "retry"
    return action or "update" if first.source == "update" else first.source or "?"


def eager_turn_entries(history: Sequence[Snapshot]) -> list[TurnEntry]:
    """/history as it was worked out before it was read lazily: from every state."""
    if not history:
        return []
    index = by_id(history)
    current = {s.checkpoint_id for s in lineage(history)}
    ordered = sorted(history, key=lambda s: s.checkpoint_id)
    order = {s.checkpoint_id: position for position, s in enumerate(ordered)}
    runs = _eager_runs(history)
    undone: set[str] = set()  # each undo: its last turn, found on the checkpoints before it
    for position, snapshot in enumerate(ordered):
        if position and snapshot.metadata.get(ACTION_KEY) == "undo":
            earlier, head = ordered[:position], ordered[position - 1]
            turn = last_turn(earlier, head)
            if turn is not None and turn.input is not None:
                chain = [s.checkpoint_id for s in lineage(earlier, head)]
                undone.update(chain[chain.index(turn.input.checkpoint_id) :])
    written_by: dict[str | None, int] = {}  # a message id -> the first run that held it
    awaiting: dict[str, list[int]] = {}
    for number, run in enumerate(runs):
        for snapshot in run:
            for message in snapshot.messages:
                written_by.setdefault(message.id, number)
        first = run[0]
        if first.source == "input" and len(run) > 1 and _eager_kind(first) == "turn":
            awaiting.setdefault(run[1].checkpoint_id, []).append(number)
        elif first.source == "fork" and first.parent_id:
            awaiting.setdefault(first.parent_id, []).append(number)
    retried: set[int] = set()
    for number, run in enumerate(runs):
        first = run[0]
        if first.source == "fork" and first.parent_id:
            retried.update(n for n in awaiting.get(first.parent_id, []) if n < number)
        elif first.metadata.get(ACTION_KEY) == "retry" and first.parent_id in index:
            kept = {m.id for m in first.messages}
            for message in index[first.parent_id].messages:
                if message.type == "ai" and message.id not in kept and message.id in written_by:
                    retried.add(written_by[message.id])
    entries = []
    for number, run in enumerate(runs):
        first, last = run[0], run[-1]
        kind = _eager_kind(first)
        position = order[first.checkpoint_id]
        before = ordered[position - 1] if position else None
        folded = 0
        for previous, snapshot in itertools.pairwise(run):
            if snapshot.summary != previous.summary:
                kept = {m.id for m in snapshot.messages}
                folded += sum(1 for m in previous.messages if m.id not in kept)
        known = {m.id for m in first.messages} if first.source != "input" else set()
        known |= {m.id for m in before.messages} if before is not None else set()
        said = [m for s in run for m in s.messages if m.type == "human" and m.id not in known]
        if not said and kind == "retry":
            said = [m for m in last.messages if m.type == "human"][-1:]
        # (a run that stopped with its reply saved and only the fold after it to run is
        # finished: the reply is there; a compaction's fold is its whole work)
        fold_left = (
            kind != "compact"
            and last.next == ("summarize_conversation",)
            and bool(last.messages)
            and last.messages[-1].type == "ai"
        )
        fate: Fate = ""
        if last.checkpoint_id in undone:
            fate = "undone"
        elif number in retried:
            fate = "retried"
        elif last.checkpoint_id not in current:
            fate = "branch"
        entries.append(
            TurnEntry(
                kind=kind,
                checkpoint_id=last.checkpoint_id,
                first_checkpoint_id=first.checkpoint_id,
                created_at=first.created_at,
                text=said[0].text if said else "",
                messages_before=len(before.messages) if before is not None else 0,
                messages_after=len(last.messages),
                folded=folded,
                summary_changed=last.summary != (before.summary if before is not None else ""),
                finished=not last.next or fold_left,
                fate=fate,
                origin=str(first.metadata.get(ORIGIN_KEY) or "") if kind == "fork" else "",
                fold_left=fold_left,
            )
        )
    return list(reversed(entries))


def check_thread(threads: Threads, thread: str) -> None:
    """Everything read lazily, for every limit, is what reading every state says."""
    expected = eager_turn_entries(threads.history(thread))
    assert turn_entries(threads.history(thread)) == expected
    assert turn_count(threads.history(thread)) == len(expected)
    for limit in range(1, len(expected) + 2):
        assert turn_entries(threads.history(thread), limit) == expected[:limit], limit
    rows = history_rows(threads.history(thread))
    assert len(rows) == len(threads.history(thread))
    for limit in (1, 2, 3, 7, len(rows)):
        assert history_rows(threads.history(thread), limit) == rows[:limit]
    if "-fork" not in thread:  # (a fork's record also counts what its origin folded)
        head = lineage(threads.history(thread))[-1]
        recorded = summary_savings(head, lambda: threads.history(thread))
        read = summary_savings(head, lambda: threads.history(thread), use_record=False)
        assert recorded == read


LAST_BUT_ONE = -1
"""A branch's choice: the checkpoint before the newest (where the last step started)."""

Step = str | tuple[str, int]

SCENARIOS: dict[str, list[Step]] = {
    "turns, folds and a compaction": ["send", "send", "send", "send", "send", "compact", "send"],
    "undo and both kinds of retry": [
        *("send", "send", "send", "send", "undo", "retry", "send", "compact", "retry"),
        *("regenerate", "undo", "undo", "send"),
    ],
    "failed turns resumed and retried": ["send", "fail", "resume", "fail", "retry", "fail", "send"],
    "side branches": ["send", "send", "branch", "interleave", "send", "interleave", "undo"],
    # /undo back to where a reply had been written: LangGraph's update applies the finished
    # step's writes, so the undo's checkpoint holds the reply too; a regenerate then replaces
    # the reply of the turn that wrote it, not the undo.
    "a reply brought back by an undo, then regenerated": [
        *("send", "send", ("branch", LAST_BUT_ONE), "undo", "regenerate", "send"),
    ],
    # The same with a fold: the undo's checkpoint is where the summary changes.
    "a fold brought back by an undo": [
        *("send", "send", "send", "send", ("branch", LAST_BUT_ONE), "undo", "send", "send"),
    ],
    "forks, and what happens in them": ["send", "send", "send", "fork", "send", "fork"],
    # An /undo back to a reply whose fold was still to run: its checkpoint has only the fold
    # left (found by the property test below).
    "an undo back to a reply with its fold still to run": [
        *("send", ("branch", 0), "send", "compact", ("branch", 7), "undo"),
    ],
}


@pytest.mark.parametrize("operations", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_the_newest_entries_read_lazily_are_those_reading_everything_gives(
    make_threads: Callable[[], Threads], operations: list[Step]
) -> None:
    threads = make_threads()
    for number, step in enumerate(operations):
        operation, choice = step if isinstance(step, tuple) else (step, number * 7)
        threads.do(operation, choice=choice)
        if operation == "fork":
            forked = threads.thread_ids()[0]
            threads.do("send", forked)
            threads.do("undo", forked)
    for thread in threads.thread_ids():
        check_thread(threads, thread)


@pytest.mark.slow
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(
        st.tuples(st.sampled_from(OPERATIONS), st.integers(min_value=0, max_value=50)),
        min_size=4,
        max_size=22,
    )
)
def test_any_mix_of_operations_reads_the_same_lazily(
    make_threads: Callable[[], Threads], steps: list[tuple[str, int]]
) -> None:
    threads = make_threads()
    for operation, choice in [("send", 0), *steps]:
        threads.do(operation, choice=choice)
    for thread in threads.thread_ids():
        check_thread(threads, thread)


# --- what is read ------------------------------------------------------------------------------


def _long_thread(threads: Threads, turns: int) -> None:
    for number in range(turns):
        threads.do("send")
        if number % 9 == 4:
            threads.do("retry")
        if number % 11 == 7:
            threads.do("undo")
            threads.do("regenerate")


@pytest.mark.parametrize("turns", [12, 36])
def test_the_newest_turns_read_only_their_own_checkpoints(
    make_threads: Callable[[], Threads], turns: int
) -> None:
    threads = make_threads()
    _long_thread(threads, turns)
    history, reads = counted(threads.history())
    assert len(history) > 3 * turns

    (entry,) = turn_entries(history, 1)
    assert 0 < sum(reads.values()) <= 6, "the last run (and a /retry's trail) only"
    assert max(reads.values()) == 1, "each once"
    assert not any(s.loaded for s in history), "nothing kept on the snapshots"

    reads.clear()
    turn_entries(history, 5)
    assert sum(reads.values()) <= 5 * 4 + 4

    reads.clear()
    history_rows(history, 10)
    assert sum(reads.values()) <= 11 and max(reads.values()) == 1

    reads.clear()
    assert last_turn(history) is not None
    assert sum(reads.values()) <= 1, "the checkpoint after the last input, to see if it ran"

    reads.clear()
    found = find_checkpoint(history, entry.checkpoint_id[-8:])
    assert found.checkpoint_id == entry.checkpoint_id and not reads, "found by id alone"

    reads.clear()
    assert turn_count(history) == len(turn_entries(threads.history()))
    assert not reads


def test_a_pass_over_every_checkpoint_keeps_none_of_their_states(
    make_threads: Callable[[], Threads],
) -> None:
    threads = make_threads()
    _long_thread(threads, 20)
    history, reads = counted(threads.history())
    entries = turn_entries(history)
    assert len(entries) > 20 and not any(s.loaded for s in history)
    assert set(reads) == {s.checkpoint_id for s in history}, "every run's checkpoints"
    reads.clear()
    history_rows(history)
    assert not any(s.loaded for s in history) and max(reads.values()) == 1
    reads.clear()
    assert summary_folds(history), "the thread has folded"
    assert max(reads.values()) == 1 and not any(s.loaded for s in history)


# --- what the summary saves ------------------------------------------------------------------


def test_what_the_summary_saves_is_read_from_its_record(
    make_threads: Callable[[], Threads],
) -> None:
    threads = make_threads()
    for _ in range(7):  # two folds: 6 messages, then 6 more
        threads.do("send")
    head = threads.backend.current("t")
    assert head is not None and head.fold_record is not None
    folded = summary_folds(threads.history())
    counter = TokenCounter()
    assert dict(head.fold_record) == {
        "messages": 12,
        "tokens": {"estimate": counter.raw(folded)},
    }

    def unread() -> list[Snapshot]:
        raise AssertionError("the history was read")

    saved = summary_savings(head, unread, counter)
    assert saved.messages == 12
    assert saved.folded == counter.messages(folded) > 0
    assert saved == summary_savings(head, threads.history, counter, use_record=False)


def test_another_tokenizer_or_no_record_reads_the_checkpoints(
    make_threads: Callable[[], Threads],
) -> None:
    threads = make_threads()
    for _ in range(4):
        threads.do("send")
    head = threads.backend.current("t")
    assert head is not None and head.summary
    other = TokenCounter(tokenizer_for("gpt-4o"))
    assert summary_savings(head, threads.history, other) == summary_savings(
        head, threads.history, other, use_record=False
    )
    # A thread summarized before records existed (its state has no "folded"), as a server or
    # an older version reports it.
    values = {"messages": list(head.messages), "summary": head.summary}
    unrecorded = snapshot_from_parts(
        checkpoint_id=head.checkpoint_id,
        parent_id=head.parent_id,
        metadata=head.metadata,
        values=values,
    )
    assert unrecorded.fold_record is None
    assert summary_savings(unrecorded, threads.history) == summary_savings(head, threads.history)
    assert summary_savings(unrecorded, threads.history).messages == 6


def test_undo_of_the_first_turn_empties_the_summary_and_a_fork_carries_its_record(
    make_threads: Callable[[], Threads],
) -> None:
    threads = make_threads()
    for _ in range(4):
        threads.do("send")
    head = threads.backend.current("t")
    assert head is not None and head.fold_record is not None
    threads.backend.fork("t", None, "copy")
    copy = threads.backend.current("copy")
    assert copy is not None and copy.fold_record == head.fold_record
    assert summary_savings(copy, lambda: []) == summary_savings(head, lambda: [])

    threads.backend.restore("t", None, "undo")  # what /undo does to the first turn
    emptied = threads.backend.current("t")
    assert emptied is not None and not emptied.summary and not emptied.messages
    assert summary_savings(emptied, threads.history) == (0, 0)
    for _ in range(4):  # folds again from nothing: a new record
        threads.do("send")
    again = threads.backend.current("t")
    assert again is not None and again.fold_record is not None
    assert again.fold_record["messages"] == 6
    assert summary_savings(again, threads.history) == summary_savings(
        again, threads.history, use_record=False
    )


def test_a_fold_record_grows_with_each_fold_and_keeps_its_tokenizers() -> None:
    messages = [HumanMessage("one two three", id="a"), HumanMessage("four", id="b")]
    estimate = TokenCounter(ESTIMATE)
    counters = {"estimate": estimate}
    first = extend_fold_record(None, "", messages[:1], counters)
    assert first == {"messages": 1, "tokens": {"estimate": estimate.raw(messages[:1])}}
    second = extend_fold_record(first, "summary", messages[1:], counters)
    assert second == {"messages": 2, "tokens": {"estimate": estimate.raw(messages)}}
    assert extend_fold_record(None, "a summary from before records", messages, counters) is None
    dropped = extend_fold_record({"messages": 1, "tokens": {"o200k_base": 9}}, "s", messages, {})
    assert dropped == {"messages": 3, "tokens": {}}
    fresh = extend_fold_record(second, "", messages, counters)  # the summary was emptied
    assert fresh == {"messages": 2, "tokens": {"estimate": estimate.raw(messages)}}
