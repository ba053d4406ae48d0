"""One turn at a time per thread: leases on SQLite and PostgreSQL, across processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from chatbot.store.leases import HOLDER, Lease
from chatbot.store.postgres import open_store
from tests.helpers import wait_until


def test_a_lease_is_one_holders_until_released_or_expired(any_db: str) -> None:
    with open_store(any_db) as store:
        assert store.try_lease("t", "a", 30)
        assert store.try_lease("t", "a", 30), "its holder renews it"
        assert not store.try_lease("t", "b", 30)
        assert store.try_lease("other", "b", 30), "other threads never wait"
        store.release_lease("t", "b")  # not b's: nothing happens
        assert not store.try_lease("t", "b", 30)
        store.release_lease("t", "a")
        assert store.try_lease("t", "b", 0.3)
        wait_until(lambda: store.try_lease("t", "a", 30), timeout=5)


def test_a_waiting_turn_says_so_once_and_goes_on_when_free(any_db: str) -> None:
    with open_store(any_db) as store:
        assert store.try_lease("t", "someone else", 30)
        threading.Timer(0.5, lambda: store.release_lease("t", "someone else")).start()
        said: list[str] = []
        lease = Lease(store, "t")
        lease.acquire(on_wait=lambda: said.append("waiting"))
        assert said == ["waiting"]
        assert not store.try_lease("t", "someone else", 30)
        lease.release()
        assert store.try_lease("t", "someone else", 30)


_HOLD_AND_DIE = """
import sys, time
from chatbot.store.leases import Lease
from chatbot.store.postgres import open_store
store = open_store(sys.argv[1])
Lease(store, "t", seconds=float(sys.argv[2])).acquire()
print("held", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_killed_process_blocks_the_thread_no_longer_than_its_lease(any_db: str) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_AND_DIE, any_db, "1.5"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with open_store(any_db) as store:
            assert not store.try_lease("t", HOLDER, 30), "held by the other process"
            time.sleep(1.0)  # past two renewals: still held while it lives
            assert not store.try_lease("t", HOLDER, 30)
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait(10)
            waited = Lease(store, "t")
            started = time.monotonic()
            waited.acquire()
            assert time.monotonic() - started < 10, "free once its holder is dead"
            waited.release()
    finally:
        holder.kill()
        holder.wait(10)


_WORKERS = """
import json, os, sys, time, traceback
from chatbot.threads.backend import LocalBackend
from chatbot.engine.graph import build_graph
from chatbot.engine.models import OfflineChatModel
from chatbot.store.postgres import open_store
db, turns, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()
children = []
for n, thread in enumerate(threads):
    pid = os.fork()  # (a process of its own: its pid, its connections, its lease holder)
    if pid:
        children.append(pid)
        continue
    code, ready = 1, False
    try:
        store = open_store(db)
        graph = build_graph(OfflineChatModel(), OfflineChatModel(role="summary"), None, store.saver)
        backend = LocalBackend(graph, store)
        os.write(ready_w, b"r")
        ready = True
        os.read(go_r, 1)  # (every worker ready: their turns all overlap)
        done = []
        for turn in range(turns):
            text = f"w{n} turn {turn}"
            list(backend.send(thread.format(turn=turn), text))
            done.append([time.time(), text])
        os.write(1, (json.dumps(done) + "\\n").encode())  # (one write: lines never mix)
        code = 0
    except BaseException:
        traceback.print_exc()
        if not ready:
            os.write(ready_w, b"r")  # (the others go without it; its exit code fails the run)
    finally:
        os._exit(code)
for _ in children:
    os.read(ready_r, 1)
os.write(go_w, b"g" * len(children))
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
sys.exit(max(codes))
"""
"""Workers, each a process forked from one that imported what a turn needs (once, not per
worker), taking ``turns`` turns on ``db`` together: on the thread given (``{turn}`` in it
names a thread per turn); each prints the turns it took, when each ended."""


def _workers(db: str, turns: int, *threads: str) -> tuple[list[list[Any]], str]:
    """The turns :data:`_WORKERS` took, each ``[end time, text]``, and their stderr."""
    done = subprocess.run(
        [sys.executable, "-c", _WORKERS, db, str(turns), *threads],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == len(threads), done.stdout
    return [json.loads(line) for line in lines], done.stderr


@pytest.mark.slow
@pytest.mark.integration
def test_four_processes_taking_turns_on_one_thread_lose_nothing(any_db: str) -> None:
    workers, turns = 4, 8
    with open_store(any_db):
        pass  # the schema exists before the workers race to open it
    taken, err = _workers(any_db, turns, *["shared"] * workers)
    assert "Traceback" not in err and "locked" not in err, err
    finished = [turn for each in taken for turn in each]
    completed = [text for _, text in sorted(finished)]
    assert len(completed) == workers * turns

    with open_store(any_db) as store:
        from chatbot.history.lineage import lineage
        from chatbot.threads.backend import LocalBackend

        history = LocalBackend(None, store).history("shared")
        chain = lineage(history)
        seen: dict[str | None, str] = {}  # every message of the line, in order, once
        for snapshot in chain:
            for message in snapshot.messages:
                seen.setdefault(message.id, f"{message.type}: {message.text}")
        said = [text.removeprefix("human: ") for text in seen.values() if text[0] == "h"]
        replies = [text for text in seen.values() if text.startswith("ai: ")]
        assert said == completed, "every turn on the thread's one line, in order of completion"
        assert len(replies) == len(completed), "and every turn's reply"
        assert all(f'"{text}"' in reply for text, reply in zip(said, replies, strict=True))
        assert len(chain) == len(history), "no side branch: no turn was answered twice at once"


@pytest.mark.slow
@pytest.mark.integration
def test_four_processes_taking_turns_on_their_own_threads_never_meet_a_locked_database(
    any_db: str,
) -> None:
    """Turns on different threads run at once, each process writing as the others commit;
    LangGraph writes a turn's checkpoints from worker threads while ours read the same
    connection (the search index reads a thread's known messages at its first write: every
    turn here starts a thread): no turn may fail on "database is locked"."""
    workers, turns = 4, 8
    with open_store(any_db):
        pass
    taken, err = _workers(any_db, turns, *(f"own-{n}-{{turn}}" for n in range(workers)))
    assert "locked" not in err, err[-2000:]
    assert [len(each) for each in taken] == [turns] * workers
    with open_store(any_db) as store:
        counts = {t.thread_id: t.message_count for t in store.list_threads()}
    assert counts == {f"own-{n}-{t}": 2 for n in range(workers) for t in range(turns)}


def test_the_lease_is_released_however_a_turn_ends(tmp_path: Path) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    from chatbot.engine.graph import build_graph
    from chatbot.threads.backend import LocalBackend

    class Failing(GenericFakeChatModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("provider down")

    with open_store(str(tmp_path / "db.sqlite")) as store:
        backend = LocalBackend(build_graph(Failing(messages=iter([]))), store)
        with contextlib.suppress(Exception):
            list(backend.send("t", "hi"))
        assert store.try_lease("t", "next process", 30)


@pytest.mark.slow
def test_ask_on_a_busy_thread_says_it_waits_and_answers_when_free(any_db: str) -> None:
    with open_store(any_db) as store:
        assert store.try_lease("work", "the other window", 60)
        asking = subprocess.Popen(
            [sys.executable, "-m", "chatbot", "ask", "hello", "--thread", "work", "--db", any_db],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OPENAI_"))},
        )
        try:
            assert asking.stderr is not None
            line = ""
            while "waiting" not in line:
                line = asking.stderr.readline()
                assert line, "ask ended without saying it waits"
            assert line.strip() == (
                "thread work is answering in another window — waiting, Ctrl-C to stop"
            )
            assert asking.poll() is None, "it waits while the other turn runs"
            store.release_lease("work", "the other window")
            out, err = asking.communicate(timeout=60)
        finally:
            asking.kill()
            asking.wait(10)
        assert asking.returncode == 0, err
        assert 'You said: "hello"' in out
