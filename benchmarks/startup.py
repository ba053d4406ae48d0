"""Benchmark: start-up, exit and reading commands against what they are built on, in one run.

    uv run --group dev python benchmarks/startup.py [--runs 5] [--data DIR] [--json PATH]
        [--only GROUP]

Every figure is measured next to its reference, in the same run, on the same machine:

- the REPL (`chatbot --db DB`, in a real pseudo-terminal of 120x40): from launch until the
  prompt appears, and from Ctrl-D until the process has exited, against a bare prompt_toolkit
  script (``PromptSession().prompt("> ")``), both launched the same way: the installed
  entry point (`.venv/bin/chatbot` against `.venv/bin/python bare.py`) and `uv run`
  (`uv run chatbot` against `uv run python bare.py`; uv checks its environment on every run).
  Cursor-position requests are answered as a terminal does;
- `chatbot threads --json` on 1,000 threads of 10 turns against a plain script running the same
  SQL and writing the same JSON with sqlite3 and json (for reference), and against that script
  inside the smallest Typer app (goal: 1.5×);
- `chatbot threads` (its table) on those 1,000 threads, and `chatbot history T` and
  `chatbot show T` on a thread of one turn, each against a bare Typer + Rich program that prints
  the same threads table from plain SQL (sqlite3) of the same database: what a command pays to
  start and print a table beyond what the framework and the rendering library pay (goal: 1.5×);
- `chatbot history T --limit 50`, `chatbot show T` and `chatbot show T --json` on a 2,000-turn
  thread (about 6,000 checkpoints) against LangGraph's own ``SqliteSaver.list(config,
  limit=K)`` (K: the checkpoints those 50 turns span, and K=50) and
  ``SqliteSaver.get_tuple(config)`` with the thread's messages rebuilt from their snapshot and
  the writes since, as LangGraph's ``DeltaChannel`` stores them (it prints their count: `show`
  also renders every message as Markdown, `show --json` writes them as JSON);
- `chatbot search WORD --json` on the many-threads database against the same FTS5 statement in
  a plain script (sqlite3 + json), and `chatbot export T -f json` on the long thread against
  LangGraph's ``SqliteSaver.list`` reading every checkpoint of it (its snapshot and its
  writes) and writing each message once as JSON (goal: 1.5×);
- on the same thread, `chatbot history T --limit 1` and the REPL's /undo, /retry and /tokens
  (piped into `chatbot chat --thread T`, on a fresh copy of the database each run): the time
  beyond start-up (the same process doing nothing: the history of a 1-turn thread, a chat
  that only says /exit) and the peak memory.

Each command runs ``--warmup`` times, then ``--runs`` times, the commands of one comparison
taking turns (the order rotates each round). Reported: the median wall time, the median CPU
time (user + system) and peak RSS of the process, read from its own rusage (``os.wait4``), and
the median of the per-round ratios (or differences). The test databases are made with the
offline model through the real graph (default settings) and kept in ``--data`` (default: a new
temporary folder), so a rerun with the same folder starts measuring at once; making them takes
about 80 s. Nothing here needs a network or a key: OPENAI_*, CHATBOT_* and LANGSMITH_* settings
are removed from the environment.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import functools
import json
import multiprocessing
import os
import re
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pexpect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._machine import machine  # noqa: E402

BIN = Path(sys.prefix) / "bin"

ROWS, COLUMNS = 40, 120
TIMEOUT = 120.0
SETTLE = 0.5
"""Seconds between the prompt appearing and Ctrl-D, as a person would take (cursor-position
requests are answered meanwhile, so the exit never waits for one)."""
CPR_REQUEST = re.escape("\x1b[6n")
CPR_ANSWER = "\x1b[1;1R"
FRESH_PROMPT = r"\x1b\[\?2004h(?:\x1b\[[0-9;?]*[A-Za-z])*{}>"
"""A new prompt_toolkit prompt: bracketed paste switched on, then only cursor and colour codes
before the prompt's text (chatbot's is the thread id; the bare script's is empty)."""

LEAKY_PREFIXES = ("CHATBOT_", "OPENAI_", "LANGSMITH_", "LANGCHAIN_", "PROMPT_TOOLKIT_")
LEAKY_NAMES = {"columns", "lines", "http_proxy", "https_proxy", "all_proxy", "no_proxy"}

PROMPT_GOAL = 1.6
"""The REPL's launch → prompt against the bare prompt_toolkit prompt's."""
EXIT_GOAL = 0.200
RATIO_GOAL = 1.3
READING_GOAL = 1.5
"""search and export against their plain-script references, and the reading commands against
the bare Typer (+ Rich) programs."""
BEYOND_GOAL = 0.2
MEMORY_GOAL_MB = 150.0

LONG, SHORT = "long", "short"
"""The thread ids of the long database: a long thread, and one of a single turn."""

BARE_PROMPT = """\
import contextlib

from prompt_toolkit import PromptSession

with contextlib.suppress(EOFError):  # Ctrl-D: leave quietly, as chatbot does
    PromptSession().prompt("> ")
"""

PLAIN_THREADS = """\
import json, sqlite3, sys, uuid
from datetime import UTC, datetime

OFFSET = 0x01B21DD213814000


def when(checkpoint_id):
    value = uuid.UUID(checkpoint_id).int
    ticks = ((value >> 80) << 12) | ((value >> 64) & 0x0FFF)
    return datetime.fromtimestamp((ticks - OFFSET) / 10_000_000, tz=UTC).isoformat()


rows = sqlite3.connect(sys.argv[1]).execute(
    '''
    SELECT c.thread_id, COUNT(*), MAX(c.checkpoint_id),
           t.title, t.message_count, t.has_summary, t.origin_thread, t.origin_checkpoint
    FROM checkpoints AS c
    LEFT JOIN chatbot_threads AS t ON t.thread_id = c.thread_id
    WHERE c.checkpoint_ns = ''
    GROUP BY c.thread_id
    ORDER BY MAX(c.checkpoint_id) DESC
    '''
).fetchall()
records = [
    {
        "thread_id": row[0],
        "messages": row[4],
        "has_summary": None if row[5] is None else bool(row[5]),
        "checkpoints": row[1],
        "last_active": when(row[2]),
        "title": row[3] or "",
        "origin": {"thread_id": row[6], "checkpoint_id": row[7]} if row[6] else None,
    }
    for row in rows
]
sys.stdout.write(json.dumps(records, ensure_ascii=False, indent=2) + "\\n")
"""

TYPER_THREADS = """\
import runpy, sys
from pathlib import Path

import typer

app = typer.Typer()


@app.command()
def threads(
    as_json: bool = typer.Option(False, "--json"), db: str = typer.Option(..., "--db")
) -> None:
    sys.argv = [sys.argv[0], db]
    runpy.run_path(str(Path(__file__).with_name("plain_threads.py")))


@app.command()
def other() -> None:
    pass


app()
"""
"""The plain script inside the smallest Typer app (the CLI framework chatbot is built on):
what any Typer command pays before its work."""

TYPER_RICH_THREADS = """\
import sqlite3, uuid
from datetime import UTC, datetime

import typer
from rich.console import Console
from rich.table import Table

OFFSET = 0x01B21DD213814000
SQL = '''
    SELECT c.thread_id, COUNT(*), MAX(c.checkpoint_id),
           t.title, t.message_count, t.has_summary
    FROM checkpoints AS c
    LEFT JOIN chatbot_threads AS t ON t.thread_id = c.thread_id
    WHERE c.checkpoint_ns = ''
    GROUP BY c.thread_id
    ORDER BY MAX(c.checkpoint_id) DESC
'''

app = typer.Typer()


def when(checkpoint_id):
    value = uuid.UUID(checkpoint_id).int
    ticks = ((value >> 80) << 12) | ((value >> 64) & 0x0FFF)
    moment = datetime.fromtimestamp((ticks - OFFSET) / 10_000_000, tz=UTC)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M")


@app.command()
def threads(db: str = typer.Option(..., "--db")) -> None:
    rows = sqlite3.connect(f"file:{db}?mode=ro", uri=True).execute(SQL).fetchall()
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("thread", "messages", "summary", "last active"):
        table.add_column(column, no_wrap=True)
    table.add_column("title", overflow="fold")
    for row in rows:
        summary = {None: "-", 0: "no", 1: "yes"}[row[5]]
        count = "-" if row[4] is None else str(row[4])
        table.add_row("  " + row[0], count, summary, when(row[2]), row[3] or "")
    Console(highlight=False, soft_wrap=True).print(table)


@app.command()
def other() -> None:
    pass


app()
"""
"""A bare Typer + Rich program: the threads table (as `chatbot threads` prints it) from plain
SQL, with sqlite3; what printing a table in the same framework costs."""

ZSTD_SAVER = """\
import zstandard
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.sqlite import SqliteSaver


class Zstd:  # LangGraph's serializers read "msgpack+zstd" as a cipher named "zstd"
    packer = zstandard.ZstdCompressor(level=3)
    unpacker = zstandard.ZstdDecompressor()

    def encrypt(self, plaintext):
        return "zstd", self.packer.compress(plaintext)

    def decrypt(self, ciphername, ciphertext):
        return self.unpacker.decompress(ciphertext)


def open_saver(path):
    return SqliteSaver(sqlite3.connect(path), serde=EncryptedSerializer(Zstd()))
"""
"""LangGraph's own ``SqliteSaver`` reading chatbot's compressed checkpoints: its
``EncryptedSerializer`` with zstd for a cipher (the type ``msgpack+zstd`` is its convention;
a value too small to gain is stored as it is, which it reads as it is)."""

LANGGRAPH_LIST = (
    """\
import sqlite3, sys
"""
    + ZSTD_SAVER
    + """
saver = open_saver(sys.argv[1])
config = {"configurable": {"thread_id": sys.argv[2]}}
print(len(list(saver.list(config, limit=int(sys.argv[3])))))
"""
)

LANGGRAPH_GET = (
    """\
import sqlite3, sys
"""
    + ZSTD_SAVER
    + """
saver = open_saver(sys.argv[1])
found = saver.get_tuple({"configurable": {"thread_id": sys.argv[2]}})
stored = found.checkpoint["channel_values"].get("messages")
if stored is None:  # (stored in a snapshot now and then: rebuilt from it and the writes since)
    history = saver.get_delta_channel_history(config=found.config, channels=["messages"])
    seed = history["messages"].get("seed", [])
    stored = list(getattr(seed, "value", seed))
    for _, _, written in history["messages"]["writes"]:
        new = written if isinstance(written, list) else [written]
        gone = {m.id for m in new if m.type == "remove"}
        stored = [m for m in stored if m.id not in gone] + [m for m in new if m.type != "remove"]
print(len(getattr(stored, "value", stored)))
"""
)

PLAIN_SEARCH = """\
import json, sqlite3, sys

conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
word = sys.argv[2]
rows = conn.execute(
    "SELECT m.thread_id, m.message_id, m.checkpoint_id, m.role, m.content "
    "FROM chatbot_messages AS m JOIN chatbot_messages_fts AS f ON f.rowid = m.id "
    "WHERE chatbot_messages_fts MATCH ? AND EXISTS (SELECT 1 FROM checkpoints AS c "
    "WHERE c.thread_id = m.thread_id AND c.checkpoint_ns = '' "
    "AND c.checkpoint_id = m.checkpoint_id) "
    "ORDER BY m.checkpoint_id DESC, m.id DESC LIMIT 256",
    (" AND ".join('"' + word[i : i + 3].replace('"', '""') + '"' for i in range(len(word) - 2)),),
).fetchall()
rows = [row for row in rows if word.lower() in row[4].lower()]
keys = ("thread_id", "message_id", "checkpoint_id", "role", "text")
found = [dict(zip(keys, row)) for row in rows[:20]]
print(json.dumps(found, indent=2, ensure_ascii=False))
"""
"""What `chatbot search WORD --json` asks of its FTS5 index, in a plain script: the messages
holding every trigram of the word (a word of three characters or more), of checkpoints still
there, newest first, checked to hold the word itself."""

LANGGRAPH_EXPORT = (
    """\
import json, sqlite3, sys
"""
    + ZSTD_SAVER
    + """
saver = open_saver(sys.argv[1])
seen = {}
for saved in saver.list({"configurable": {"thread_id": sys.argv[2]}}):
    stored = saved.checkpoint["channel_values"].get("messages", [])
    written = [v for _, ch, v in saved.pending_writes or () if ch == "messages"]
    for message in [*getattr(stored, "value", stored), *(m for w in written for m in w)]:
        if message.type != "remove":
            seen.setdefault(message.id, {"type": message.type, "content": message.content})
print(json.dumps(list(seen.values()), indent=2, ensure_ascii=False))
"""
)
"""What an export of every message ever in a thread needs from LangGraph alone: every
checkpoint read, each message kept once, written as JSON."""


# --- the test databases -------------------------------------------------------------------------


def _turn_text(thread: int, turn: int) -> str:
    return f"thread {thread} turn {turn}: " + "some words to make it realistic " * 20


def _populate(path: Path, threads: Sequence[tuple[str, int]]) -> None:
    """Write (thread id, turns) with the offline model through the real graph, to a file that
    only gets its name once complete."""
    from chatbot.config.settings import Settings
    from chatbot.engine.graph import build_graph
    from chatbot.engine.models import OfflineChatModel
    from chatbot.store.sqlite import Store
    from chatbot.threads.backend import LocalBackend

    part = path.with_name(path.name + ".part")
    for leftover in _database_files(part):
        leftover.unlink(missing_ok=True)
    settings = Settings(_env_file=None, model="offline")
    with Store(part) as store:
        chat, summary = OfflineChatModel(), OfflineChatModel(role="summary")
        backend = LocalBackend(build_graph(chat, summary, settings, store.saver), store)
        for number, (thread_id, turns) in enumerate(threads):
            for turn in range(turns):
                list(backend.send(thread_id, _turn_text(number, turn)))
    os.replace(part, path)


def _database_files(path: Path) -> list[Path]:
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]


def copy_database(source: Path, target: Path) -> None:
    """A fresh copy of a database (and its write-ahead log, if any) for a command that writes,
    flushed to disk: a user's database is not a file written a moment ago, and SQLite's
    checkpoint when the command closes it would otherwise wait for the whole copy (hundreds
    of MB) to reach the disk, counted as the command's."""
    for original, copy in zip(_database_files(source), _database_files(target), strict=True):
        copy.unlink(missing_ok=True)
        if original.exists():
            shutil.copyfile(original, copy)
            with copy.open("rb") as written:
                os.fsync(written.fileno())


def make_databases(data: Path, threads: int, turns: int, long_turns: int) -> tuple[Path, Path]:
    """The many-threads database and the long-thread one, made (in parallel, in fresh
    processes) unless ``data`` already holds them."""
    data.mkdir(parents=True, exist_ok=True)
    many = data / f"threads-{threads}x{turns}.sqlite"
    long = data / f"long-{long_turns}.sqlite"
    jobs = {
        many: [(f"t{n:05d}", turns) for n in range(threads)],
        long: [(SHORT, 1), (LONG, long_turns)],
    }
    missing = {path: plan for path, plan in jobs.items() if not path.exists()}
    if missing:
        names = ", ".join(path.name for path in missing)
        print(f"making {names} in {data} with the offline model…", file=sys.stderr, flush=True)
        started = time.perf_counter()
        spawn = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(len(missing), mp_context=spawn) as pool:
            for future in [pool.submit(_populate, path, plan) for path, plan in missing.items()]:
                future.result()
        print(f"made in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return many, long


def newest_thread(db: Path) -> str:
    """The thread `chatbot --db DB` opens: the one with the newest checkpoint."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        row = conn.execute(
            "SELECT thread_id FROM checkpoints WHERE checkpoint_ns = '' "
            "ORDER BY checkpoint_id DESC LIMIT 1"
        ).fetchone()
    return str(row[0])


def checkpoints_of_turns(db: Path, thread_id: str, turns: int) -> tuple[int, int]:
    """(K, all): how many of a thread's newest checkpoints its newest ``turns`` turns span,
    counting the checkpoint before the oldest of them (what its row compares with), and how
    many checkpoints the thread has. A turn starts at a checkpoint not written by the graph's
    own loop (an input, a fork, an update)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT metadata FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '' "
            "ORDER BY checkpoint_id DESC",
            (thread_id,),
        ).fetchall()
    starts = 0
    for position, (metadata,) in enumerate(rows):
        if json.loads(metadata or "{}").get("source") != "loop":
            starts += 1
            if starts == turns:
                return min(position + 2, len(rows)), len(rows)
    return len(rows), len(rows)


# --- running and timing -------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One run of a process: wall seconds, CPU seconds (user + system) and peak RSS in MB.

    For a REPL run, ``wall`` is launch to prompt and ``exit`` is Ctrl-D to exited; the CPU and
    memory are the whole session's."""

    wall: float
    cpu: float
    rss_mb: float
    exit: float = 0.0


@dataclass(frozen=True)
class Process:
    """A command to run to completion, with what it reads on stdin."""

    argv: list[str]
    stdin: bytes = b""
    fresh_copy: tuple[Path, Path] | None = None
    """(database, copy): copied before each run, outside the timing."""


@dataclass(frozen=True)
class Context:
    env: dict[str, str]
    cwd: Path


def _usage(rusage: resource.struct_rusage) -> tuple[float, float]:
    return rusage.ru_utime + rusage.ru_stime, rusage.ru_maxrss / 1024


def run_process(process: Process, context: Context) -> Sample:
    """Run a command to its end; its own CPU and peak memory come from its rusage."""
    if process.fresh_copy:
        copy_database(*process.fresh_copy)
    with tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        child = subprocess.Popen(
            process.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            env=context.env,
            cwd=context.cwd,
        )
        assert child.stdin is not None
        try:
            child.stdin.write(process.stdin)
            child.stdin.close()
        except BrokenPipeError:
            pass
        _, status, rusage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            errors.seek(0)
            message = errors.read().decode(errors="replace").strip()[-2000:]
            raise RuntimeError(f"{' '.join(process.argv)} exited {child.returncode}: {message}")
    cpu, rss = _usage(rusage)
    return Sample(wall, cpu, rss)


def _wait_for(child: pexpect.spawn, pattern: Any, timeout: float = TIMEOUT) -> None:
    """Read until ``pattern``, answering cursor-position requests as a terminal does."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = max(0.0, deadline - time.monotonic())
        if child.expect([CPR_REQUEST, pattern], timeout=remaining) == 1:
            return
        child.send(CPR_ANSWER)


def _settle(child: pexpect.spawn, seconds: float) -> None:
    """Go on answering cursor-position requests for a while, as a terminal would."""
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        if child.expect([CPR_REQUEST, pexpect.TIMEOUT], timeout=remaining) == 0:
            child.send(CPR_ANSWER)


def run_repl(argv: list[str], prompt: str, context: Context) -> Sample:
    """Launch a prompt in a pseudo-terminal, wait for ``prompt``, press Ctrl-D, wait for the
    process to exit (reaped: its own rusage)."""
    started = time.perf_counter()
    child = pexpect.spawn(
        argv[0],
        argv[1:],
        env=context.env,
        cwd=str(context.cwd),
        dimensions=(ROWS, COLUMNS),
        encoding="utf-8",
        codec_errors="replace",
        timeout=TIMEOUT,
    )
    try:
        _wait_for(child, prompt)
        shown = time.perf_counter() - started
        _settle(child, SETTLE)
        leaving = time.perf_counter()
        child.sendeof()
        # pexpect asks whether the child lives (waitpid) whenever no output is ready, and so
        # reaped a child that had just exited, before the os.wait4 below that reads its rusage
        # (ChildProcessError, on a busy machine): until then it is told the child lives.
        child.ptyproc.isalive = lambda: True
        try:
            _wait_for(child, pexpect.EOF)
            _, status, rusage = os.wait4(child.pid, 0)
        finally:
            del child.ptyproc.isalive
        gone = time.perf_counter() - leaving
    except (pexpect.TIMEOUT, pexpect.EOF) as error:
        child.terminate(force=True)
        raise RuntimeError(f"{' '.join(argv)}: {type(error).__name__}: {child.before!r}") from None
    child.ptyproc.terminated = True  # reaped above: pexpect must not wait for it again
    child.ptyproc.delayafterclose = 0
    child.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {os.waitstatus_to_exitcode(status)}")
    cpu, rss = _usage(rusage)
    return Sample(shown, cpu, rss, exit=gone)


def take_turns(
    runs: dict[str, Callable[[], Sample]], rounds: int, warmup: int
) -> dict[str, list[Sample]]:
    """Run each command ``warmup`` times unrecorded, then ``rounds`` times, all commands once a
    round, the starting one rotating from round to round."""
    names = list(runs)
    samples: dict[str, list[Sample]] = {name: [] for name in names}
    for number in range(warmup + rounds):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            sample = runs[name]()
            if number >= warmup:
                samples[name].append(sample)
    return samples


# --- the table ----------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the table. ``figure`` is what is held to ``goal`` (less is better)."""

    measure: str
    chatbot: str
    reference: str
    ratio: float | None
    figure: str
    goal: str
    within: bool | None
    numbers: dict[str, Any] = field(default_factory=dict)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def seconds(value: float) -> str:
    return f"{value:.3f} s"


def megabytes(value: float) -> str:
    return f"{value:,.0f} MB"


def timed(samples: Sequence[Sample]) -> str:
    """Median wall and CPU time of some runs."""
    return (
        f"{seconds(median([s.wall for s in samples]))} (cpu {median([s.cpu for s in samples]):.3f})"
    )


def ratios(a: Sequence[float], b: Sequence[float]) -> float:
    """The median of the per-round ratios."""
    return median([x / y if y else float("inf") for x, y in zip(a, b, strict=True)])


def summary(samples: Sequence[Sample]) -> dict[str, float]:
    return {
        "wall_s": median([s.wall for s in samples]),
        "cpu_s": median([s.cpu for s in samples]),
        "peak_rss_mb": median([s.rss_mb for s in samples]),
        "runs": len(samples),
    }


def ratio_row(measure: str, a: list[Sample], b: list[Sample], reference: str) -> Row:
    """A command held to ``RATIO_GOAL`` times its reference (wall time)."""
    ratio = ratios([s.wall for s in a], [s.wall for s in b])
    return Row(
        measure,
        timed(a),
        f"{timed(b)} {reference}",
        ratio,
        f"{ratio:.2f}×",
        f"≤ {RATIO_GOAL}×",
        ratio <= RATIO_GOAL,
        {"chatbot": summary(a), "reference": summary(b), "reference_is": reference},
    )


def repl_rows(how: str, chatbot: list[Sample], bare: list[Sample]) -> list[Row]:
    numbers = {"chatbot": summary(chatbot), "reference": summary(bare), "launched": how}
    prompt = median([s.wall for s in chatbot])
    leave = median([s.exit for s in chatbot])
    exit_ratio = ratios([s.exit for s in chatbot], [s.exit for s in bare])
    prompt_ratio = ratios([s.wall for s in chatbot], [s.wall for s in bare])
    return [
        Row(
            f"REPL {how}: launch → prompt",
            seconds(prompt),
            seconds(median([s.wall for s in bare])),
            prompt_ratio,
            f"{prompt_ratio:.2f}×",
            f"≤ {PROMPT_GOAL}×",
            prompt_ratio <= PROMPT_GOAL,
            numbers,
        ),
        Row(
            f"REPL {how}: Ctrl-D → exited",
            seconds(leave),
            seconds(median([s.exit for s in bare])),
            exit_ratio,
            seconds(leave),
            f"≤ {seconds(EXIT_GOAL)}",
            leave <= EXIT_GOAL,
            {
                "chatbot_exit_s": leave,
                "reference_exit_s": median([s.exit for s in bare]),
                "launched": how,
            },
        ),
        Row(
            f"REPL {how}: session CPU, peak memory",
            f"{median([s.cpu for s in chatbot]):.3f} s, "
            f"{megabytes(median([s.rss_mb for s in chatbot]))}",
            f"{median([s.cpu for s in bare]):.3f} s, {megabytes(median([s.rss_mb for s in bare]))}",
            ratios([s.cpu for s in chatbot], [s.cpu for s in bare]),
            "",
            "",
            None,
            numbers,
        ),
    ]


def beyond_rows(measure: str, a: list[Sample], idle: list[Sample], reference: str) -> list[Row]:
    """Time beyond start-up (per-round difference with the idle process) and peak memory."""
    beyond = median([x.wall - y.wall for x, y in zip(a, idle, strict=True)])
    peak = median([s.rss_mb for s in a])
    numbers = {
        "chatbot": summary(a),
        "reference": summary(idle),
        "reference_is": reference,
        "beyond_start_up_s": beyond,
    }
    return [
        Row(
            f"{measure}: time beyond start-up",
            timed(a),
            f"{timed(idle)} {reference}",
            ratios([s.wall for s in a], [s.wall for s in idle]),
            f"{'+' if beyond >= 0 else ''}{seconds(beyond)}",
            f"≤ +{seconds(BEYOND_GOAL)}",
            beyond <= BEYOND_GOAL,
            numbers,
        ),
        Row(
            f"{measure}: peak memory",
            megabytes(peak),
            f"{megabytes(median([s.rss_mb for s in idle]))} {reference}",
            ratios([s.rss_mb for s in a], [s.rss_mb for s in idle]),
            megabytes(peak),
            f"≤ {megabytes(MEMORY_GOAL_MB)}",
            peak <= MEMORY_GOAL_MB,
            numbers,
        ),
    ]


def markdown_table(rows: Sequence[Row]) -> str:
    head = ["measure", "chatbot", "reference", "ratio", "figure", "goal", "within goal"]
    cells = [
        [
            row.measure,
            row.chatbot,
            row.reference,
            "" if row.ratio is None else f"{row.ratio:.2f}×",
            row.figure,
            row.goal,
            "" if row.within is None else ("yes" if row.within else "NO"),
        ]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [head, *cells]) for i in range(len(head))]

    def line(values: list[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(head), rule, *(line(c) for c in cells)])


# --- the machine --------------------------------------------------------------------------------


def child_environment(home: Path) -> dict[str, str]:
    """This environment without chatbot's settings, keys, proxies and size overrides."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith(LEAKY_PREFIXES) and name.lower() not in LEAKY_NAMES
    }
    env.update(
        TERM="xterm-256color",
        XDG_DATA_HOME=str(home / "data"),
        XDG_CONFIG_HOME=str(home / "config"),
        LANGGRAPH_CLI_NO_ANALYTICS="1",
    )
    return env


# --- the comparisons ----------------------------------------------------------------------------


def measure_repl(
    context: Context, db: Path, scripts: Path, rounds: int, warmup: int, uv: str | None
) -> list[Row]:
    thread = newest_thread(db)
    chatbot_prompt = FRESH_PROMPT.format(re.escape(thread))
    bare_prompt = FRESH_PROMPT.format("")
    bare = str(scripts / "bare_prompt.py")
    launches = {".venv/bin/chatbot": ([str(BIN / "chatbot")], [str(BIN / "python")])}
    if uv:
        uv_run = [uv, "run", "--project", str(ROOT)]
        launches["uv run"] = ([*uv_run, "chatbot"], [*uv_run, "python"])
    rows = []
    for how, (chatbot, python) in launches.items():
        samples = take_turns(
            {
                "chatbot": functools.partial(
                    run_repl, [*chatbot, "--db", str(db)], chatbot_prompt, context
                ),
                "bare": functools.partial(run_repl, [*python, bare], bare_prompt, context),
            },
            rounds,
            warmup,
        )
        rows += repl_rows(how, samples["chatbot"], samples["bare"])
    return rows


def check_same_listing(context: Context, db: Path, scripts: Path) -> str:
    """'' if `chatbot threads --json` and the plain script print the same JSON, else why not."""
    outputs = [
        subprocess.run(
            argv, capture_output=True, env=context.env, cwd=context.cwd, check=True
        ).stdout
        for argv in (
            [str(BIN / "chatbot"), "threads", "--json", "--db", str(db)],
            [str(BIN / "python"), str(scripts / "plain_threads.py"), str(db)],
        )
    ]
    if json.loads(outputs[0]) != json.loads(outputs[1]):
        return "the plain script's JSON differs from chatbot's"
    return ""


def measure_threads(
    context: Context, db: Path, scripts: Path, rounds: int, warmup: int, threads: int, turns: int
) -> list[Row]:
    chatbot = Process([str(BIN / "chatbot"), "threads", "--json", "--db", str(db)])
    plain = Process([str(BIN / "python"), str(scripts / "plain_threads.py"), str(db)])
    typer_script = str(scripts / "typer_threads.py")
    typer_app = Process([str(BIN / "python"), typer_script, "threads", "--json", "--db", str(db)])
    samples = take_turns(
        {
            "chatbot": functools.partial(run_process, chatbot, context),
            "plain": functools.partial(run_process, plain, context),
            "typer": functools.partial(run_process, typer_app, context),
        },
        rounds,
        warmup,
    )
    measure = f"threads --json ({threads:,} threads × {turns} turns)"
    plain = ratio_row(measure, samples["chatbot"], samples["plain"], "sqlite3 + json")
    plain.goal, plain.within = "(for reference)", None
    in_typer = ratio_row(
        measure, samples["chatbot"], samples["typer"], "the same in a bare Typer app"
    )
    in_typer.goal, in_typer.within = f"≤ {READING_GOAL}×", (in_typer.ratio or 0) <= READING_GOAL
    return [plain, in_typer]


def measure_tables(
    context: Context, many: Path, long: Path, scripts: Path, rounds: int, warmup: int
) -> list[Row]:
    python, chatbot = str(BIN / "python"), str(BIN / "chatbot")
    reference = str(scripts / "typer_rich_threads.py")
    runs = {
        "threads": Process([chatbot, "threads", "--db", str(many)]),
        "table of many": Process([python, reference, "threads", "--db", str(many)]),
        "history": Process([chatbot, "history", SHORT, "--db", str(long)]),
        "show": Process([chatbot, "show", SHORT, "--db", str(long)]),
        "table of long": Process([python, reference, "threads", "--db", str(long)]),
    }
    samples = take_turns(
        {name: functools.partial(run_process, process, context) for name, process in runs.items()},
        rounds,
        warmup,
    )
    what = "Typer + Rich: the threads table from plain SQL"
    rows = [
        ratio_row(f"threads ({many.name})", samples["threads"], samples["table of many"], what),
        ratio_row("history T (1 turn)", samples["history"], samples["table of long"], what),
        ratio_row("show T (1 turn)", samples["show"], samples["table of long"], what),
    ]
    for row in rows:
        row.goal, row.within = f"≤ {READING_GOAL}×", (row.ratio or 0) <= READING_GOAL
    return rows


def measure_reading(
    context: Context, db: Path, scripts: Path, rounds: int, warmup: int, limit: int
) -> list[Row]:
    spanned, total = checkpoints_of_turns(db, LONG, limit)
    python, chatbot = str(BIN / "python"), str(BIN / "chatbot")
    listing = str(scripts / "langgraph_list.py")
    runs = {
        "history": Process([chatbot, "history", LONG, "--limit", str(limit), "--db", str(db)]),
        "list K": Process([python, listing, str(db), LONG, str(spanned)]),
        "list N": Process([python, listing, str(db), LONG, str(limit)]),
        "show": Process([chatbot, "show", LONG, "--db", str(db)]),
        "show --json": Process([chatbot, "show", LONG, "--json", "--db", str(db)]),
        "get_tuple": Process([python, str(scripts / "langgraph_get.py"), str(db), LONG]),
    }
    samples = take_turns(
        {name: functools.partial(run_process, process, context) for name, process in runs.items()},
        rounds,
        warmup,
    )
    what = f"({total:,} checkpoints)"
    rows = [
        ratio_row(
            f"history T --limit {limit} {what}",
            samples["history"],
            samples["list K"],
            f"SqliteSaver.list(limit={spanned})",
        ),
        ratio_row(
            f"history T --limit {limit} {what}",
            samples["history"],
            samples["list N"],
            f"SqliteSaver.list(limit={limit})",
        ),
        ratio_row(f"show T {what}", samples["show"], samples["get_tuple"], "SqliteSaver.get_tuple"),
        ratio_row(
            f"show T --json {what}",
            samples["show --json"],
            samples["get_tuple"],
            "SqliteSaver.get_tuple",
        ),
    ]
    return rows


def measure_search_export(
    context: Context, many: Path, long: Path, scripts: Path, rounds: int, warmup: int
) -> list[Row]:
    python, chatbot = str(BIN / "python"), str(BIN / "chatbot")
    word = "realistic"  # (in every message: the newest 20 of 20,000 hits)
    runs = {
        "search": Process([chatbot, "search", word, "--json", "--db", str(many)]),
        "plain search": Process([python, str(scripts / "plain_search.py"), str(many), word]),
        "export": Process([chatbot, "export", LONG, "-f", "json", "--db", str(long)]),
        "list all": Process([python, str(scripts / "langgraph_export.py"), str(long), LONG]),
    }
    samples = take_turns(
        {name: functools.partial(run_process, process, context) for name, process in runs.items()},
        rounds,
        warmup,
    )
    rows = [
        ratio_row(
            f"search WORD --json ({many.name})",
            samples["search"],
            samples["plain search"],
            "the same FTS5 query: sqlite3 + json",
        ),
        ratio_row(
            f"export T -f json ({long.name})",
            samples["export"],
            samples["list all"],
            "SqliteSaver.list (every checkpoint) + json",
        ),
    ]
    for row in rows:
        row.goal, row.within = f"≤ {READING_GOAL}×", (row.ratio or 0) <= READING_GOAL
    return rows


def measure_history_one(context: Context, db: Path, rounds: int, warmup: int) -> list[Row]:
    chatbot = str(BIN / "chatbot")
    history = {
        "long": Process([chatbot, "history", LONG, "--limit", "1", "--db", str(db)]),
        "short": Process([chatbot, "history", SHORT, "--limit", "1", "--db", str(db)]),
    }
    samples = take_turns(
        {
            name: functools.partial(run_process, process, context)
            for name, process in history.items()
        },
        rounds,
        warmup,
    )
    return beyond_rows(
        "history T --limit 1", samples["long"], samples["short"], "(a 1-turn thread)"
    )


def measure_slash_commands(context: Context, db: Path, rounds: int, warmup: int) -> list[Row]:
    chatbot = str(BIN / "chatbot")
    copy = context.cwd / "copy.sqlite"
    chat = [chatbot, "chat", "--thread", LONG, "--db", str(copy)]
    lines = {
        "idle": "/exit",
        "/undo": "/undo\n/exit",
        "/retry": "/retry\n/exit",
        "/tokens": "/tokens\n/exit",
    }
    repl = {
        name: Process(chat, stdin=f"{text}\n".encode(), fresh_copy=(db, copy))
        for name, text in lines.items()
    }
    samples = take_turns(
        {name: functools.partial(run_process, process, context) for name, process in repl.items()},
        rounds,
        warmup,
    )
    rows = []
    for name in ("/undo", "/retry", "/tokens"):
        rows += beyond_rows(f"REPL {name}", samples[name], samples["idle"], "(only /exit)")
    for leftover in _database_files(copy):
        leftover.unlink(missing_ok=True)
    return rows


def compile_project() -> None:
    """Compile chatbot's own modules, as Python does at a first run (uv compiles the
    dependencies at install; an editable project is left to Python, which on a machine that
    sets PYTHONDONTWRITEBYTECODE would compile them again at every start)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(
        [str(BIN / "python"), "-m", "compileall", "-q", str(ROOT / "chatbot")],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="recorded runs of each command")
    parser.add_argument("--warmup", type=int, default=1, help="unrecorded runs first")
    parser.add_argument("--data", type=Path, default=None, help="where the databases are kept")
    parser.add_argument("--json", type=Path, default=None, help="also write the table as JSON")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="measure only the groups whose title starts with this (REPL, threads, history, …)",
    )
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=10, help="turns of each of --threads")
    parser.add_argument("--long-turns", type=int, default=2000, help="turns of the long thread")
    parser.add_argument("--limit", type=int, default=50, help="history --limit on the long thread")
    args = parser.parse_args()
    for name in list(os.environ):  # the databases are made offline, with default settings
        if name.upper().startswith(LEAKY_PREFIXES):
            del os.environ[name]
    os.environ["LANGGRAPH_CLI_NO_ANALYTICS"] = "1"

    compile_project()
    data = args.data or Path(tempfile.mkdtemp(prefix="chatbot-startup-"))
    many, long = make_databases(data, args.threads, args.turns, args.long_turns)
    uv = shutil.which("uv")
    with tempfile.TemporaryDirectory(prefix="chatbot-startup-run-") as folder:
        home = Path(folder)
        scripts = home / "scripts"
        scripts.mkdir()
        for name, text in {
            "bare_prompt.py": BARE_PROMPT,
            "plain_threads.py": PLAIN_THREADS,
            "typer_threads.py": TYPER_THREADS,
            "typer_rich_threads.py": TYPER_RICH_THREADS,
            "langgraph_list.py": LANGGRAPH_LIST,
            "langgraph_get.py": LANGGRAPH_GET,
            "plain_search.py": PLAIN_SEARCH,
            "langgraph_export.py": LANGGRAPH_EXPORT,
        }.items():
            (scripts / name).write_text(text)
        work = home / "cwd"  # no .env of the project's is read
        work.mkdir()
        context = Context(child_environment(home), work)
        notes: list[str] = []
        try:
            if problem := check_same_listing(context, many, scripts):
                notes.append(f"warning: {problem}")
        except subprocess.CalledProcessError as error:
            notes.append(f"warning: could not compare the listings: {error}")
        rounds = (args.runs, args.warmup)
        groups: list[tuple[str, Callable[[], list[Row]]]] = [
            ("REPL", lambda: measure_repl(context, many, scripts, *rounds, uv)),
            (
                "threads --json",
                lambda: measure_threads(context, many, scripts, *rounds, args.threads, args.turns),
            ),
            (
                "tables: threads, history, show",
                lambda: measure_tables(context, many, long, scripts, *rounds),
            ),
            (
                "history, show",
                lambda: measure_reading(context, long, scripts, *rounds, args.limit),
            ),
            (
                "search, export",
                lambda: measure_search_export(context, many, long, scripts, *rounds),
            ),
            ("history T --limit 1", lambda: measure_history_one(context, long, *rounds)),
            ("REPL /undo, /retry, /tokens", lambda: measure_slash_commands(context, long, *rounds)),
        ]
        if args.only:
            groups = [(t, m) for t, m in groups if any(t.startswith(o) for o in args.only)]
        rows = []
        for title, measure in groups:
            try:
                rows += measure()
            except RuntimeError as error:  # a command failed: the other figures still count
                notes.append(f"failed: {title}: {error}")
                rows.append(Row(title, "failed (see below)", "", None, "", "", False))
    spanned, total = checkpoints_of_turns(long, LONG, args.limit)

    about = machine(memory=True, uv=True, date=True)
    size = {path.name: f"{path.stat().st_size / 1e6:,.0f} MB" for path in (many, long)}
    print(
        f"{about['cpu']}, {about['cpus']} CPUs, {about['memory']}; {about['system']}; "
        f"Python {about['python']}; {about['uv'] or 'no uv'}; chatbot at {about['commit']}"
    )
    print(
        f"chatbot, reference: median wall time (CPU) of {args.runs} runs after {args.warmup} "
        "warm-up; ratio: median of the per-round ratios (of wall time; of CPU for a REPL "
        "session, of peak RSS for memory); figure: what the goal holds"
    )
    print(markdown_table(rows))
    print(
        f"databases in {data}: {', '.join(f'{k} {v}' for k, v in size.items())}; the long "
        f"thread has {total:,} checkpoints, its newest {args.limit} turns span {spanned}. "
        "REPL: chatbot --db on the many-threads database (it opens the newest thread) against "
        "a bare PromptSession().prompt(); its CPU and memory are the whole session's."
    )
    if not uv:
        notes.append("uv is not on PATH: the `uv run` rows are left out")
    for note in notes:
        print(note)
    failed = any(note.startswith("failed") for note in notes)
    if args.json:
        document = {
            "machine": about,
            "settings": {**{k: str(v) for k, v in vars(args).items()}, "data": str(data)},
            "long_thread_checkpoints": total,
            "checkpoints_of_newest_turns": spanned,
            "notes": notes,
            "rows": [asdict(row) for row in rows],
        }
        args.json.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
