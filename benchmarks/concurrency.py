"""Benchmark: turns through the graph on SQLite and on PostgreSQL, alone and four processes at once.

    uv run --no-sync python benchmarks/concurrency.py [--turns 300] [--workers 4] [--per-worker 25]
        [--rounds 3] [--window 50] [--pg-url URL] [--dir DIR] [--json PATH]

Every turn goes through the real graph (``build_graph`` with the offline model, default
settings, so the summary trigger folds as it does in real use) and ``LocalBackend.send``, with
user messages of 60-120 words (different every turn, seeded, so runs compare). No network and
no key: OPENAI_*, CHATBOT_* and LANGSMITH_* settings are removed from the environment.

- One thread, ``--turns`` turns, on a new SQLite file and on a new PostgreSQL database, in one
  process: the databases take turns (the same message each, the order swapping every turn, after
  one warm-up turn each on another thread), so that whatever else the machine does weighs on
  both alike. The milliseconds of each turn (median and p95; a turn is the whole ``send``,
  listing row included), and the bytes the database grew by per turn against the UTF-8 bytes
  of text the turn added (the user's message and the reply), over the whole run and in windows
  of ``--window`` turns (the first and the last are in the table, every one on the line below
  it and in the JSON), so growth over a long thread shows. Size: SQLite's file and write-ahead
  log after ``PRAGMA wal_checkpoint(TRUNCATE)``; PostgreSQL's ``pg_total_relation_size`` of
  LangGraph's and chatbot's tables (``stats().bytes`` of either store); measuring it is not
  timed.
- ``--workers`` processes (multiprocessing, spawn), each opening its own store and graph and
  taking one warm-up turn on a thread of its own before they all start together, then doing
  ``--per-worker`` turns: (a) each on its own thread, (b) all on the same thread, each on a new
  database, ``--rounds`` times (the table has the median and the range). Turns per second over
  the span from the first start to the last finish, the ratio of (b) to (a), and for (b), per
  round, how many of the user messages sent are in the thread's current lineage (its newest
  checkpoint and that one's ancestors: its state and its history), how many are anywhere in
  its checkpoints (the rest were lost), how many branches its history has (checkpoints nothing
  descends from), and the errors ("database is locked" counted apart). Whether turns took the
  thread's lease (calls of ``store.try_lease``) is reported too.

PostgreSQL runs on scratch databases made on the server ``--pg-url`` names (default: the local
one) and dropped afterwards; without a server that answers, only SQLite is measured (one line
says so). SQLite files go in ``--dir`` (kept) or a temporary folder (removed). The machine's
load average is printed: other work on it moves the timings, not the sizes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import multiprocessing.queues
import os
import queue
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._machine import machine  # noqa: E402
from chatbot.config.sources import without_password  # noqa: E402
from chatbot.store.base import SqlStore  # noqa: E402
from chatbot.store.postgres import open_store  # noqa: E402
from chatbot.store.sqlite import Store  # noqa: E402

LEAKY_PREFIXES = ("CHATBOT_", "OPENAI_", "LANGSMITH_", "LANGCHAIN_")
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
SERIAL_THREAD = "bench"
SHARED_THREAD = "shared"
SETUP_TIMEOUT = 300.0
"""Seconds the workers may take to start (imports, store, graph, warm-up turn)."""

# --- messages -----------------------------------------------------------------------------

_VOCABULARY = (
    "the of and to a in that is for it with as was on be at by this have from or one had not "
    "but what all were when we there can an your which their said if do will each about how "
    "up out them then she many some so these would other into has more her two like him see "
    "time could no make than first been its who now people my made over did down only way "
    "find use may water long little very after words called just where most know get through "
    "back much before go good new write our used me man too any day same right look think "
    "also around another came come work three word must because does part even place well "
    "such here take why things help put years different away again off went old number great "
    "tell men say small every found still between name should home big give air line set own "
    "under read last never us left end along while might next sound below saw something "
    "thought both few those always looked show large often together asked house world going "
    "want school important until form food keep children feet land side without boy once "
    "animals life enough took sometimes four head above kind began almost live page got earth "
    "need far hand high year mother light parts country father let night following picture "
    "being study second eyes soon times story boys since white days ever paper hard near "
    "sentence better best across during today others however sure means knew try told young "
    "miles sun ways thing whole hear example heard several change answer room sea against top "
    "turned learn point city play toward five using himself usually money seen car morning "
    "garden budget project report meeting schedule recipe weather train flight invoice "
    "database server python function error version release customer contract holiday "
    "doctor appointment kitchen window bicycle library museum question problem solution"
)
WORDS = tuple(_VOCABULARY.split())
"""Common English words, most frequent first (drawn Zipf-like, so text compresses as prose)."""

_WEIGHTS = [1.0 / (rank + 8) for rank in range(len(WORDS))]


def message(rng: random.Random, tag: str) -> str:
    """A user message of 60-120 words in sentences, starting with ``tag`` (which makes it
    unique and findable)."""
    target = rng.randint(60, 120)
    sentences: list[str] = []
    count = 0
    while count < target:
        length = min(rng.randint(6, 18), target - count)
        words = rng.choices(WORDS, _WEIGHTS, k=length)
        sentence = " ".join(words)
        sentences.append(sentence[0].upper() + sentence[1:] + rng.choice(".....?!"))
        count += length
    return f"[{tag}] " + " ".join(sentences)


# --- databases ----------------------------------------------------------------------------


def postgres_problem(url: str) -> str | None:
    """Why PostgreSQL cannot be measured at ``url`` (one line), or ``None`` if it can."""
    import psycopg

    from chatbot.errors import redact, remember_secret

    remember_secret(urlsplit(url).password)
    try:
        psycopg.connect(url, connect_timeout=3, autocommit=True).close()
    except psycopg.Error as error:
        return redact(" ".join(str(error).split())[:160]) or type(error).__name__
    return None


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@contextlib.contextmanager
def scratch_postgres(url: str, label: str) -> Iterator[str]:
    """A new, empty database on the server ``url`` names, dropped afterwards."""
    import psycopg

    name = f"chatbot_bench_{label}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield _with_database(url, name)
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextlib.contextmanager
def scratch_sqlite(folder: Path, label: str) -> Iterator[str]:
    """A new SQLite file's path in ``folder``."""
    path = folder / f"{label}.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    yield str(path)


def database_bytes(store: SqlStore) -> int:
    """What the database takes: SQLite's file and log once the log is folded into the file,
    PostgreSQL's tables."""
    if isinstance(store, Store):
        with store.lock:
            store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return store.stats().bytes


def make_backend(store: SqlStore) -> Any:
    """``LocalBackend`` over the real graph with the offline models and default settings."""
    from chatbot.config.settings import Settings
    from chatbot.engine.graph import build_graph
    from chatbot.engine.models import OfflineChatModel
    from chatbot.threads.backend import LocalBackend

    settings = Settings(_env_file=None, model="offline")
    graph = build_graph(OfflineChatModel(), OfflineChatModel(role="summary"), settings, store.saver)
    return LocalBackend(graph, store)


@dataclass
class TurnResult:
    ms: float
    text_bytes: int
    """UTF-8 bytes of the user's message and the reply."""
    folded: bool


def take_turn(backend: Any, thread: str, text: str) -> TurnResult:
    """One turn, timed; the text it added, and whether it folded."""
    from chatbot.threads.events import Reply, Summarized, Token

    started = time.perf_counter()
    events = list(backend.send(thread, text))
    ms = (time.perf_counter() - started) * 1000
    replies = [e.message.text for e in events if isinstance(e, Reply)]
    reply = replies[-1] if replies else "".join(e.text for e in events if isinstance(e, Token))
    added = len(text.encode()) + len(reply.encode())
    return TurnResult(ms, added, any(isinstance(e, Summarized) for e in events))


# --- one thread, many turns ---------------------------------------------------------------


@dataclass
class Window:
    first: int
    last: int
    """Turns ``first``..``last`` (1-based, inclusive)."""
    grew: int
    text: int

    @property
    def turns(self) -> int:
        return self.last - self.first + 1

    def record(self) -> dict[str, Any]:
        return {
            "turns": [self.first, self.last],
            "bytes_grown": self.grew,
            "text_bytes": self.text,
            "bytes_per_turn": round(self.grew / self.turns),
            "text_bytes_per_turn": round(self.text / self.turns),
            "bytes_per_text_byte": round(self.grew / self.text, 2) if self.text else None,
        }


@dataclass
class SerialResult:
    kind: str
    location: str
    turns: list[TurnResult]
    windows: list[Window]
    start_bytes: int
    end_bytes: int
    checkpoints: int
    seconds: float

    @property
    def whole(self) -> Window:
        text = sum(t.text_bytes for t in self.turns)
        return Window(1, len(self.turns), self.end_bytes - self.start_bytes, text)

    def record(self) -> dict[str, Any]:
        ms = [t.ms for t in self.turns]
        return {
            "database": self.kind,
            "location": self.location,
            "turns": len(self.turns),
            "ms_median": round(statistics.median(ms), 2),
            "ms_p95": round(percentile(ms, 95), 2),
            "ms_mean": round(statistics.fmean(ms), 2),
            "folds": sum(t.folded for t in self.turns),
            "checkpoints": self.checkpoints,
            "start_bytes": self.start_bytes,
            "end_bytes": self.end_bytes,
            "whole": self.whole.record(),
            "windows": [w.record() for w in self.windows],
            "seconds": round(self.seconds, 2),
            "ms_per_turn": [round(m, 2) for m in ms],
        }


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def serial_runs(
    databases: Sequence[tuple[str, str]], turns: int, window: int, seed: int
) -> list[SerialResult]:
    """``turns`` turns on one thread of each new database (kind, location), timed; their size
    every ``window`` turns. The databases take turns, the same message each, the order
    swapping every turn, so that whatever else the machine does weighs on all alike."""
    rng = random.Random(seed)
    with contextlib.ExitStack() as stack:
        stores = [stack.enter_context(open_store(db)) for _, db in databases]
        backends = [make_backend(store) for store in stores]
        for backend in backends:  # first-use costs (imports, caches) out of the figures
            take_turn(backend, "warm-up", message(random.Random(seed - 1), "warm-up"))
        results: list[list[TurnResult]] = [[] for _ in stores]
        windows: list[list[Window]] = [[] for _ in stores]
        starts = [database_bytes(store) for store in stores]
        before = list(starts)
        for number in range(1, turns + 1):
            text = message(rng, f"turn {number}")
            order = range(len(stores)) if number % 2 else reversed(range(len(stores)))
            for n in order:
                results[n].append(take_turn(backends[n], SERIAL_THREAD, text))
            if number % window == 0 or number == turns:
                for n, store in enumerate(stores):
                    first = windows[n][-1].last + 1 if windows[n] else 1
                    grown = database_bytes(store)
                    added = sum(t.text_bytes for t in results[n][first - 1 :])
                    windows[n].append(Window(first, number, grown - before[n], added))
                    before[n] = grown
        return [
            SerialResult(
                kind=kind,
                location=store.path,
                turns=results[n],
                windows=windows[n],
                start_bytes=starts[n],
                end_bytes=before[n],
                checkpoints=store.stats().checkpoints,
                seconds=sum(t.ms for t in results[n]) / 1000,
            )
            for n, ((kind, _), store) in enumerate(zip(databases, stores, strict=True))
        ]


# --- several processes at once ------------------------------------------------------------


def worker(
    db: str,
    thread: str,
    tag: str,
    turns: int,
    seed: int,
    barrier: Barrier,
    results: multiprocessing.queues.Queue[dict[str, Any]],
) -> None:
    """A process's share: open the store, warm up on a thread of its own, wait for the others,
    take ``turns`` turns on ``thread``; its figures go to ``results`` as a dict."""
    for name in list(os.environ):
        if name.upper().startswith(LEAKY_PREFIXES):
            del os.environ[name]
    report: dict[str, Any] = {"tag": tag, "ms": [], "sent": [], "errors": [], "leases": 0}
    try:
        rng = random.Random(seed)
        with open_store(db) as store:
            original = store.try_lease
            lock = threading.Lock()

            def counted(*args: Any, **kwargs: Any) -> bool:
                with lock:
                    report["leases"] += 1
                return original(*args, **kwargs)

            setattr(store, "try_lease", counted)  # noqa: B010 (the lease code calls it)
            backend = make_backend(store)
            take_turn(backend, f"warm-up {tag}", message(rng, f"{tag} warm-up"))
            report["leases"] = 0
            barrier.wait(SETUP_TIMEOUT)
            report["start"] = time.monotonic()
            for number in range(1, turns + 1):
                text = message(rng, f"{tag} turn {number}")
                report["sent"].append(text)
                try:
                    report["ms"].append(take_turn(backend, thread, text).ms)
                except Exception as error:  # counted, and the worker goes on
                    report["errors"].append(f"{type(error).__name__}: {error}"[:300])
            report["end"] = time.monotonic()
    except Exception as error:
        report["failed"] = f"{type(error).__name__}: {error}"[:300]
        with contextlib.suppress(Exception):
            barrier.abort()
    results.put(report)


@dataclass
class ConcurrentResult:
    kind: str
    shared: bool
    workers: int
    per_worker: int
    turns: int
    seconds: float
    ms: list[float]
    errors: list[str]
    leases: int
    failed: list[str] = field(default_factory=list)
    sent: int = 0
    in_lineage: int | None = None
    anywhere: int | None = None
    branches: int | None = None
    checkpoints: int | None = None

    @property
    def throughput(self) -> float:
        return self.turns / self.seconds if self.seconds > 0 else 0.0

    @property
    def locked(self) -> int:
        return sum("database is locked" in e for e in self.errors)

    def record(self) -> dict[str, Any]:
        kinds = Counter(e.split(":", 1)[0] for e in self.errors)
        return {
            "database": self.kind,
            "threads": "one" if self.shared else "own",
            "workers": self.workers,
            "turns_per_worker": self.per_worker,
            "turns_done": self.turns,
            "seconds": round(self.seconds, 3),
            "turns_per_second": round(self.throughput, 2),
            "ms_median": round(statistics.median(self.ms), 2) if self.ms else None,
            "ms_p95": round(percentile(self.ms, 95), 2) if self.ms else None,
            "errors": len(self.errors),
            "database_is_locked": self.locked,
            "error_kinds": dict(kinds),
            "error_examples": sorted(set(self.errors))[:5],
            "lease_requests": self.leases,
            "workers_failed": self.failed,
            "messages_sent": self.sent,
            "messages_in_lineage": self.in_lineage,
            "messages_in_any_checkpoint": self.anywhere,
            "branches": self.branches,
            "checkpoints": self.checkpoints,
        }


def concurrent_run(
    kind: str, db: str, workers: int, per_worker: int, shared: bool, seed: int
) -> ConcurrentResult:
    """``workers`` processes taking ``per_worker`` turns each, on one thread or their own."""
    with open_store(db):  # the schema, made once before the workers race to make it
        pass
    spawn = multiprocessing.get_context("spawn")
    barrier = spawn.Barrier(workers)
    results: multiprocessing.queues.Queue[dict[str, Any]] = spawn.Queue()
    processes = []
    for n in range(workers):
        tag = f"w{n}"
        thread = SHARED_THREAD if shared else f"own-{tag}"
        process = spawn.Process(
            target=worker,
            args=(db, thread, tag, per_worker, seed * 1000 + n, barrier, results),
            name=f"bench-{tag}",
        )
        process.start()
        processes.append(process)
    reports: list[dict[str, Any]] = []
    failed: list[str] = []
    deadline = time.monotonic() + SETUP_TIMEOUT + 60 * per_worker
    while len(reports) < workers:
        try:
            reports.append(results.get(timeout=max(1.0, deadline - time.monotonic())))
        except queue.Empty:
            failed.append(f"{workers - len(reports)} workers did not report in time")
            break
    for process in processes:
        process.join(timeout=30)
        if process.is_alive():
            process.terminate()
            process.join()
    failed += [f"{r['tag']}: {r['failed']}" for r in reports if "failed" in r]
    timed = [r for r in reports if "end" in r]
    span = max(r["end"] for r in timed) - min(r["start"] for r in timed) if timed else 0.0
    result = ConcurrentResult(
        kind=kind,
        shared=shared,
        workers=workers,
        per_worker=per_worker,
        turns=sum(len(r["ms"]) for r in timed),
        seconds=span,
        ms=[m for r in timed for m in r["ms"]],
        errors=[e for r in timed for e in r["errors"]],
        leases=sum(r["leases"] for r in reports),
        failed=failed,
    )
    if shared:
        sent = [text for r in timed for text in r["sent"]]
        result.sent = len(sent)
        with open_store(db) as store:
            lineage, anywhere, branches, checkpoints = find_messages(store, SHARED_THREAD, sent)
        result.in_lineage, result.anywhere = lineage, anywhere
        result.branches, result.checkpoints = branches, checkpoints
    return result


def find_messages(store: SqlStore, thread: str, sent: Sequence[str]) -> tuple[int, int, int, int]:
    """How many of ``sent`` are in the thread's current lineage (its newest checkpoint and that
    one's ancestors), how many in any of its checkpoints, how many branches (checkpoints no
    other one descends from) it has, and how many checkpoints."""
    from langchain_core.messages import HumanMessage

    from chatbot.store.checkpoints import read_checkpoint

    index = store.checkpoint_parents(thread)
    parents = dict(index)
    lineage: set[str] = set()
    at = index[0][0] if index else None
    while at is not None and at not in lineage:
        lineage.add(at)
        at = parents.get(at)
    seen_in_lineage: set[str] = set()
    seen: set[str] = set()
    for checkpoint, _ in index:
        state = read_checkpoint(store, thread, checkpoint).state
        texts = {m.text for m in state.messages if isinstance(m, HumanMessage)}
        seen |= texts
        if checkpoint in lineage:
            seen_in_lineage |= texts
    wanted = set(sent)
    has_children = {parent for parent in parents.values() if parent is not None}
    leaves = sum(1 for checkpoint in parents if checkpoint not in has_children)
    return len(wanted & seen_in_lineage), len(wanted & seen), leaves, len(index)


# --- the report ---------------------------------------------------------------------------


def postgres_version(url: str) -> str:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]).split()[0] if row else "?"


def size(value: float) -> str:
    """Bytes, in B, kB or MB (decimal)."""
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f} MB"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.1f} kB"
    return f"{value:.0f} B"


def per_turn(window: Window) -> str:
    grew = window.grew / window.turns
    ratio = f" ({window.grew / window.text:.1f}× text)" if window.text else ""
    return f"{size(grew)}{ratio}"


def ratio(a: float | None, b: float | None) -> str:
    """``b / a`` (PostgreSQL over SQLite)."""
    if a is None or b is None or a == 0:
        return ""
    return f"{b / a:.2f}×"


@dataclass
class Line:
    measure: str
    cells: list[str]
    ratio: str = ""


def table(head: list[str], lines: Sequence[Line]) -> str:
    rows = [head, *([line.measure, *line.cells, line.ratio][: len(head)] for line in lines)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]

    def format_row(values: list[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([format_row(head), rule, *(format_row(row) for row in rows[1:])])


@dataclass
class ConcurrentRuns:
    """The rounds of one database's concurrency runs: own threads, and one thread."""

    kind: str
    own: list[ConcurrentResult] = field(default_factory=list)
    one: list[ConcurrentResult] = field(default_factory=list)


def median_rate(results: Sequence[ConcurrentResult]) -> float | None:
    rates = [r.throughput for r in results if r.ms]
    return statistics.median(rates) if rates else None


def rate_cell(results: Sequence[ConcurrentResult]) -> str:
    rates = [r.throughput for r in results if r.ms]
    if not rates:
        return "failed"
    if len(rates) == 1:
        return f"{rates[0]:.1f}"
    return f"{statistics.median(rates):.1f} ({min(rates):.1f}–{max(rates):.1f})"


def per_round(values: Sequence[int | None], of: Sequence[int]) -> str:
    shown = ", ".join("?" if v is None else str(v) for v in values)
    totals = sorted(set(of))
    return f"{shown} of {'/'.join(str(t) for t in totals)}" if totals else shown


def report_lines(serial: list[SerialResult], concurrent: list[ConcurrentRuns]) -> list[Line]:
    """The table's rows: one column per database, then PostgreSQL / SQLite."""
    two = len(serial) == 2

    def line(measure: str, cells: list[str], values: Sequence[float | None] = ()) -> Line:
        shown = ratio(values[0], values[1]) if two and len(values) == 2 else ""
        return Line(measure, cells, shown)

    lines: list[Line] = []
    turns = len(serial[0].turns)
    ms = [[t.ms for t in s.turns] for s in serial]
    medians: list[float | None] = [statistics.median(m) for m in ms]
    p95s: list[float | None] = [percentile(m, 95) for m in ms]
    lines.append(line(f"{turns} turns, one thread: ms per turn, median", milliseconds(medians),
                      medians))  # fmt: skip
    lines.append(line("ms per turn, p95", milliseconds(p95s), p95s))
    first = [s.windows[0] for s in serial]
    last = [s.windows[-1] for s in serial]
    whole = [s.whole for s in serial]
    for label, windows in (
        (f"bytes per turn, turns {first[0].first}–{first[0].last}", first),
        (f"bytes per turn, turns {last[0].first}–{last[0].last}", last),
        (f"bytes per turn, all {turns} turns", whole),
    ):
        values: list[float | None] = [w.grew / w.turns for w in windows]
        lines.append(line(label, [per_turn(w) for w in windows], values))
    text = [s.whole.text / len(s.turns) for s in serial]
    lines.append(line("text a turn added (message + reply)", [size(t) for t in text]))
    lines.append(
        line(
            "database at the end (checkpoints)",
            [f"{size(s.end_bytes)} ({s.checkpoints:,})" for s in serial],
            [s.end_bytes for s in serial],
        )
    )
    lines.append(line("summary folds", [str(sum(t.folded for t in s.turns)) for s in serial]))
    if not concurrent or not concurrent[0].own:
        return lines
    sample = concurrent[0].own[0]
    rounds = len(concurrent[0].own)
    head = f"{sample.workers} processes × {sample.per_worker} turns"
    spread = f", median of {rounds} (range)" if rounds > 1 else ""
    own_rates = [median_rate(c.own) for c in concurrent]
    one_rates = [median_rate(c.one) for c in concurrent]
    lines.append(
        line(f"{head}, own threads: turns/s{spread}", [rate_cell(c.own) for c in concurrent],
             own_rates)
    )  # fmt: skip
    lines.append(
        line(f"{head}, one thread: turns/s{spread}", [rate_cell(c.one) for c in concurrent],
             one_rates)
    )  # fmt: skip
    lines.append(
        line(
            "one thread / own threads",
            [ratio(a, b) for a, b in zip(own_rates, one_rates, strict=True)],
        )
    )
    turn_ms = [
        [
            statistics.median(m) if (m := [x for r in runs for x in r.ms]) else None
            for runs in (c.own, c.one)
        ]
        for c in concurrent
    ]
    lines.append(
        line(
            "ms per turn meanwhile, median (own / one thread)",
            [" / ".join(milliseconds(pair)) for pair in turn_ms],
        )
    )
    lines.append(
        line(
            "one thread: user messages in its lineage",
            [per_round([r.in_lineage for r in c.one], [r.sent for r in c.one]) for c in concurrent],
        )
    )
    lines.append(
        line(
            "one thread: in any of its checkpoints",
            [per_round([r.anywhere for r in c.one], [r.sent for r in c.one]) for c in concurrent],
        )
    )
    lines.append(
        line(
            "one thread: branches of its history",
            [per_round([r.branches for r in c.one], []) for c in concurrent],
        )
    )
    lines.append(
        line(
            'errors (of them "database is locked")',
            [
                f"own {sum(len(r.errors) for r in c.own)} ({sum(r.locked for r in c.own)}), "
                f"one {sum(len(r.errors) for r in c.one)} ({sum(r.locked for r in c.one)})"
                for c in concurrent
            ],
        )
    )
    lines.append(
        line(
            "lease requests (own / one thread)",
            [
                f"{sum(r.leases for r in c.own)} / {sum(r.leases for r in c.one)}"
                for c in concurrent
            ],
        )
    )
    return lines


def milliseconds(values: Sequence[float | None]) -> list[str]:
    return [f"{v:.1f} ms" if v is not None else "" for v in values]


def print_report(
    about: dict[str, Any],
    serial: list[SerialResult],
    concurrent: list[ConcurrentRuns],
    notes: list[str],
) -> None:
    kinds = [s.kind for s in serial]
    print(
        f"{about['cpu']}, {about['cpus']} CPUs, load average {about['load']}; "
        f"{about['system']}; Python {about['python']}; {', '.join(about['databases'])}; "
        f"chatbot at {about['commit']}"
    )
    print(
        "offline model, default settings (summary trigger "
        f"{about['summary_trigger']}, keep {about['summary_keep']}); user messages of 60-120 "
        "words; the databases take turns, one turn each; bytes per turn: the database's growth "
        "/ turns (× text: / the UTF-8 bytes of message + reply)"
    )
    head = ["measure", *kinds, *(["PostgreSQL / SQLite"] if len(kinds) == 2 else [])]
    print(table(head, report_lines(serial, concurrent)))
    for s in serial:
        windows = " ".join(size(w.grew / w.turns) for w in s.windows)
        print(f"{s.kind}, bytes per turn by {s.windows[0].turns}-turn window: {windows}")
    for note in notes:
        print(note)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=300, help="turns on one thread")
    parser.add_argument("--window", type=int, default=50, help="turns per size window")
    parser.add_argument("--workers", type=int, default=4, help="processes at once")
    parser.add_argument("--per-worker", type=int, default=25, help="turns of each process")
    parser.add_argument(
        "--pg-url",
        default=DEFAULT_PG_URL,
        help="a PostgreSQL server where scratch databases may be made and dropped",
    )
    parser.add_argument("--dir", type=Path, default=None, help="keep the SQLite files here")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the concurrency runs")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    if min(args.turns, args.window, args.workers, args.per_worker, args.rounds) < 1:
        parser.error("--turns, --window, --workers, --per-worker and --rounds must be at least 1")
    for name in list(os.environ):  # offline, default settings
        if name.upper().startswith(LEAKY_PREFIXES):
            del os.environ[name]

    from chatbot.config.settings import Settings

    defaults = Settings(_env_file=None, model="offline")
    about = machine(sqlite=True)
    about["summary_trigger"], about["summary_keep"] = (
        defaults.summary_trigger,
        defaults.summary_keep,
    )
    notes: list[str] = []
    about["databases"] = [f"SQLite {sqlite3.sqlite_version}"]
    problem = postgres_problem(args.pg_url)
    if problem:
        print(
            f"PostgreSQL: not measured, no server answers at {without_password(args.pg_url)} "
            f"({problem}); SQLite only"
        )
    else:
        about["databases"].append(f"PostgreSQL {postgres_version(args.pg_url)}")
    folder = args.dir or Path(tempfile.mkdtemp(prefix="chatbot-concurrency-"))
    folder.mkdir(parents=True, exist_ok=True)
    targets: list[tuple[str, Any]] = [("SQLite", lambda label: scratch_sqlite(folder, label))]
    if not problem:
        targets.append(("PostgreSQL", lambda label: scratch_postgres(args.pg_url, label)))
    concurrent = [ConcurrentRuns(kind) for kind, _ in targets]
    load = os.getloadavg()[0]
    try:
        print(f"{args.turns} turns on one thread…", file=sys.stderr, flush=True)
        with contextlib.ExitStack() as stack:
            databases = [
                (kind, stack.enter_context(scratch("serial"))) for kind, scratch in targets
            ]
            serial = serial_runs(databases, args.turns, args.window, args.seed)
        for number in range(args.rounds):
            order = list(zip(targets, concurrent, strict=True))
            for (kind, scratch), runs in order if number % 2 == 0 else reversed(order):
                for shared in (False, True):
                    mode = "one thread" if shared else "own threads"
                    print(
                        f"round {number + 1}/{args.rounds}, {kind}: {args.workers} processes × "
                        f"{args.per_worker} turns, {mode}…",
                        file=sys.stderr,
                        flush=True,
                    )
                    with scratch(f"{'one' if shared else 'own'}{number + 1}") as db:
                        result = concurrent_run(
                            kind, db, args.workers, args.per_worker, shared, args.seed + number
                        )
                    (runs.one if shared else runs.own).append(result)
    finally:
        if args.dir is None:
            shutil.rmtree(folder, ignore_errors=True)
    about["load"] = f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    for runs in concurrent:
        for result in (*runs.own, *runs.one):
            mode = "one thread" if result.shared else "own threads"
            for failure in result.failed:
                notes.append(f"{result.kind}, {mode}: worker failed: {failure}")
            for example in sorted(set(result.errors))[:3]:
                notes.append(f"{result.kind}, {mode}: error: {example}")
    if all(r.leases == 0 for runs in concurrent for r in (*runs.own, *runs.one)):
        notes.append("no turn took a thread lease: turns on one thread are not serialised")
    print_report(about, serial, concurrent, notes)
    if args.json:
        document = {
            "machine": about,
            "settings": {k: str(v) for k, v in vars(args).items() if k != "pg_url"}
            | {"pg_url": without_password(args.pg_url)},
            "serial": [s.record() for s in serial],
            "concurrent": [
                {**r.record(), "round": number}
                for runs in concurrent
                for mode in (runs.own, runs.one)
                for number, r in enumerate(mode, start=1)
            ],
            "notes": notes,
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        print(f"report: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
