"""Campaign: what a trusted store survives, counted, on SQLite and on PostgreSQL.

    uv run --no-sync python benchmarks/campaign.py [--kills 40] [--starts 10] [--processes 8]
        [--copies 15] [--copy-threads 500] [--only sqlite|postgresql] [--pg-url URL] [--dir DIR]
        [--seed N] [--json PATH]

Every round runs the installed ``chatbot`` as a user would, with the offline model (no network,
no key: OPENAI_*, CHATBOT_* and LANGSMITH_* settings are removed from the environment; nothing
is summarised, so a thread's state holds every message), and checks the database afterwards:

- **kill -9**: ``chatbot ask`` (a message of 1 to 100 KB, on a thread of its own each round) is
  killed with SIGKILL at a random moment between 0.8 times when an unkilled ask first wrote a
  checkpoint and 1.05 times when it ended (the medians of five measured first: before that an
  ask is Python starting), so some are killed before writing, some while writing, and some
  finish first (the counts say how many of each, and how many killed ones had saved the
  message). Then the database must be intact: SQLite's ``PRAGMA integrity_check`` is ok
  (PostgreSQL: every index of the schema is valid), ``chatbot threads --json`` exits 0, and
  every turn that finished so far (its ``ask`` exited 0) is there, its message and its reply
  in its thread's state. A round is counted intact when all of that holds.
- **start together**: ``--processes`` processes ``chatbot ask`` (each on its own thread) start
  at once on a new database (a new file; a new PostgreSQL database): all must exit 0 within
  three minutes and their turns be there.
- **start after kill -9**: the same, after a first wave of ``chatbot ask`` (threads of their
  own) on the new database was killed at a random moment of its start (a set-up cut short; on
  PostgreSQL it can leave an index half built). (Not ``chatbot threads``: reading commands
  make nothing in an empty database.)
- **copy after kill -9**: ``chatbot db copy`` of a SQLite database of ``--copy-threads`` threads
  (two turns each, made once, in-process, with the offline model) to a new database is killed
  at a random moment between a tenth and nine tenths of an unkilled copy's time, then run
  again. The second run must exit 0, and every thread must read the same on both sides: each
  checkpoint's id, metadata and pending writes (``saver.list``), and ``chatbot threads --json``
  (titles, counts, times).

PostgreSQL runs on scratch databases made on the server ``--pg-url`` names (default: the local
one) and dropped afterwards; without a server that answers, only SQLite runs (one line says
so). SQLite files go in ``--dir`` (kept) or a temporary folder (removed). Prints one count per
line (``kill -9 of chatbot ask, SQLite: 40 of 40 intact``) and exits 1 if any round failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._machine import machine  # noqa: E402
from benchmarks.concurrency import DEFAULT_PG_URL, postgres_problem, scratch_postgres  # noqa: E402
from chatbot.config.settings import Settings  # noqa: E402
from chatbot.config.sources import without_password  # noqa: E402
from chatbot.engine.graph import build_graph  # noqa: E402
from chatbot.engine.models import OfflineChatModel  # noqa: E402
from chatbot.store.base import is_postgres_url, thread_config  # noqa: E402
from chatbot.store.checkpoints import channel_values  # noqa: E402
from chatbot.store.postgres import open_store  # noqa: E402
from chatbot.threads.backend import LocalBackend  # noqa: E402

LEAKY_PREFIXES = ("CHATBOT_", "OPENAI_", "LANGSMITH_", "LANGCHAIN_")
START_DEADLINE = 180.0
"""Seconds a wave of processes starting together gets to finish (a hang counts as a failure)."""
WORDS = ("order", "ship", "pack", "label", "invoice", "parcel", "crate", "truck", "route")


def chatbot_command() -> list[str]:
    """The installed ``chatbot`` entry point (``python -m chatbot`` without one)."""
    script = Path(sys.executable).parent / "chatbot"
    return [str(script)] if script.exists() else [sys.executable, "-m", "chatbot"]


def environment(home: Path) -> dict[str, str]:
    """The processes' environment: the offline model, nothing summarised, no user settings."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(LEAKY_PREFIXES)}
    env.update(
        CHATBOT_MODEL="offline",
        CHATBOT_SUMMARY_TRIGGER="messages:100000",
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CACHE_HOME=str(home / "cache"),
    )
    return env


def message(rng: random.Random, tag: str) -> str:
    """A message of 1 to 100 KB (within the offline model's context), starting with its tag."""
    size = rng.randint(1_000, 100_000)
    words = [rng.choice(WORDS) for _ in range(size // 6)]
    return f"[{tag}] " + " ".join(words)


@dataclass
class Count:
    """One line of the report: how many rounds of a kind held, and what failed."""

    label: str
    rounds: int = 0
    held: int = 0
    notes: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def add(self, ok: bool, failure: str = "") -> None:
        self.rounds += 1
        self.held += ok
        if not ok:
            self.failures.append(failure)

    def note(self, what: str) -> None:
        self.notes[what] = self.notes.get(what, 0) + 1

    def line(self, word: str) -> str:
        extra = ", ".join(f"{n} {what}" for what, n in sorted(self.notes.items()))
        return f"{self.label}: {self.held} of {self.rounds} {word}" + (
            f" ({extra})" if extra else ""
        )


# --- checking a database ---------------------------------------------------------------------


def integrity_problem(db: str) -> str | None:
    """What is wrong with the database itself, or None: SQLite's integrity check, or an
    invalid index in PostgreSQL's schema."""
    if is_postgres_url(db):
        import psycopg

        with psycopg.connect(db, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT string_agg(c.relname, ', ') FROM pg_index AS i "
                "JOIN pg_class AS c ON c.oid = i.indexrelid "
                "JOIN pg_namespace AS n ON n.oid = c.relnamespace "
                "WHERE NOT i.indisvalid AND n.nspname = current_schema()"
            ).fetchone()
        return f"invalid indexes: {row[0]}" if row and row[0] else None
    reader = sqlite3.connect(Path(db).absolute().as_uri() + "?mode=ro", uri=True)
    try:
        found = [row[0] for row in reader.execute("PRAGMA integrity_check(3)")]
    finally:
        reader.close()
    return None if found == ["ok"] else "; ".join(found)


def missing_turns(db: str, finished: dict[str, str], reply: bool = True) -> list[str]:
    """The threads of ``finished`` (thread -> message) whose turn is not all there: the
    message, and (with ``reply``) a reply after it, in the thread's state."""
    missing = []
    with open_store(db, read_only=True) as store:
        saver = store.saver
        for thread, text in finished.items():
            saved = saver.get_tuple(thread_config(thread))
            # (the state as LangGraph rebuilds it: the nearest snapshot and the writes since)
            messages = channel_values(saver, saved).get("messages", []) if saved else []
            said = [(m.type, m.content) for m in messages]
            if ("human", text) not in said or (reply and said[-1][0] != "ai"):
                missing.append(thread)
    return missing


def cli_reads(db: str, env: dict[str, str]) -> str | None:
    """``chatbot threads --json`` on the database: None if it exits 0, else its last line."""
    done = subprocess.run(
        [*chatbot_command(), "threads", "--json", "--db", db],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]


# --- the rounds ------------------------------------------------------------------------------


def ask(db: str, thread: str, text: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """``chatbot ask`` of ``text`` (read from a file, so that the process gets it at once)."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as message_file:
        message_file.write(text)
        message_file.seek(0)
        return subprocess.Popen(
            [*chatbot_command(), "ask", "-", "--thread", thread, "--db", db],
            env=env,
            stdin=message_file,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )


def timed_ask(db: str, thread: str, text: str, env: dict[str, str]) -> tuple[float, float]:
    """One unkilled ask (which must work): seconds from its start until its first checkpoint
    is in the database, and until it ended."""
    with open_store(db) as store:  # (made now if new: the ask's own set-up is not timed)
        started = time.monotonic()
        process = ask(db, thread, text, env)
        first_write = None
        while process.poll() is None:
            if first_write is None and store.latest_checkpoint_id(thread) is not None:
                first_write = time.monotonic() - started
            time.sleep(0.005)
        ended = time.monotonic() - started
    stderr = process.stderr.read() if process.stderr else ""
    if process.returncode != 0:
        raise SystemExit(f"an ask failed before the campaign began: {stderr.strip()[-300:]}")
    return first_write or ended, ended


def kill_rounds(db: str, kind: str, rounds: int, rng: random.Random, env: dict[str, str]) -> Count:
    """``rounds`` asks killed at random moments, each checked as the module says."""
    count = Count(f"kill -9 of chatbot ask, {kind}")
    spans = [timed_ask(db, f"warm-{n}", message(rng, f"warm-{n}"), env) for n in range(5)]
    finished: dict[str, str] = {}
    earliest = 0.8 * statistics.median(first for first, _ in spans)
    latest = 1.05 * statistics.median(ended for _, ended in spans)
    for n in range(rounds):
        thread, text = f"kill-{n}", message(rng, f"kill-{n}")
        process = ask(db, thread, text, env)
        deadline = time.monotonic() + rng.uniform(earliest, latest)
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        stderr = process.stderr.read() if process.stderr else ""
        if process.returncode == 0:
            finished[thread] = text
            count.note("finished before the kill")
        elif process.returncode == -signal.SIGKILL:
            kept = not integrity_problem(db) and not missing_turns(db, {thread: text}, reply=False)
            count.note("killed after saving the message" if kept else "killed before")
        else:
            count.add(False, f"{thread}: exit {process.returncode}: {stderr.strip()[-200:]}")
            continue
        problem = integrity_problem(db) or cli_reads(db, env)
        lost = [] if problem else missing_turns(db, finished)
        if lost:
            problem = f"finished turns missing: {', '.join(lost)}"
        count.add(problem is None, f"{thread}: {problem}")
    return count


def start_wave(
    db: str, processes: int, env: dict[str, str], rng: random.Random, killed_first: bool
) -> str | None:
    """``processes`` asks starting together on ``db`` (after a killed wave of asks with
    ``killed_first``); None if all came up with their turns there, else what failed."""
    if killed_first:
        first = [ask(db, f"k{n}", "killed as it starts", env) for n in range(processes)]
        time.sleep(rng.uniform(0.2, 2.0))
        for started in first:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(started.pid, signal.SIGKILL)
            started.wait()
    texts = {f"p{n}": f"[p{n}] hello from process {n}" for n in range(processes)}
    wave = [(thread, ask(db, thread, text, env)) for thread, text in texts.items()]
    deadline = time.monotonic() + START_DEADLINE
    failures = []
    for thread, process in wave:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            failures.append(f"{thread} still running after {START_DEADLINE:g} s")
            continue
        if process.returncode != 0:
            said = process.stderr.read().strip() if process.stderr else ""
            failures.append(f"{thread} exit {process.returncode}: {said[-200:]}")
    if failures:
        return "; ".join(failures)
    problem = integrity_problem(db)
    lost = [] if problem else missing_turns(db, texts)
    return problem or (f"turns missing: {', '.join(lost)}" if lost else None)


@contextlib.contextmanager
def new_database(kind: str, folder: Path, pg_url: str, label: str) -> Iterator[str]:
    if kind == "PostgreSQL":
        with scratch_postgres(pg_url, label) as url:
            yield url
        return
    path = folder / f"{label}-{os.urandom(4).hex()}.sqlite"
    yield str(path)


def start_rounds(
    kind: str,
    rounds: int,
    processes: int,
    folder: Path,
    pg_url: str,
    rng: random.Random,
    env: dict[str, str],
) -> list[Count]:
    together = Count(f"{processes} processes starting together on a new database, {kind}")
    after_kill = Count(f"{processes} processes starting after kill -9 mid-set-up, {kind}")
    for n in range(rounds):
        for count, killed_first in ((together, False), (after_kill, True)):
            with new_database(kind, folder, pg_url, f"campaign_start{n}") as db:
                problem = start_wave(db, processes, env, rng, killed_first)
            count.add(problem is None, f"round {n}: {problem}")
    return [together, after_kill]


def copy_source(folder: Path, threads: int) -> str:
    """A SQLite database of ``threads`` threads of two turns each, made in-process."""
    source = folder / f"copy-source-{threads}.sqlite"
    if source.exists():
        return str(source)
    settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    with open_store(str(source)) as store:
        graph = build_graph(OfflineChatModel(), OfflineChatModel(role="summary"), settings,
                            store.saver)  # fmt: skip
        backend = LocalBackend(graph, store)
        for n in range(threads):
            for turn in range(2):
                list(backend.send(f"c{n:04d}", f"thread {n} turn {turn}: pack the crate"))
    return str(source)


def copy_command(source: str, target: str) -> list[str]:
    return [*chatbot_command(), "db", "copy", source, target]


def threads_of(db: str, env: dict[str, str]) -> list[Any]:
    done = subprocess.run(
        [*chatbot_command(), "threads", "--json", "--db", db],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def copy_difference(source: str, target: str, env: dict[str, str]) -> str | None:
    """None if every thread of ``source`` reads the same on ``target``, else the first that
    does not and how."""
    with open_store(source, read_only=True) as a, open_store(target, read_only=True) as b:
        for info in a.list_threads():
            config = thread_config(info.thread_id)
            left, right = list(a.saver.list(config)), list(b.saver.list(config))
            if [t.checkpoint["id"] for t in left] != [t.checkpoint["id"] for t in right]:
                return f"{info.thread_id}: checkpoints differ"
            if [t.metadata for t in left] != [t.metadata for t in right]:
                return f"{info.thread_id}: metadata differs"
            if [sorted(map(str, t.pending_writes or [])) for t in left] != [
                sorted(map(str, t.pending_writes or [])) for t in right
            ]:
                return f"{info.thread_id}: pending writes differ"
    if threads_of(source, env) != threads_of(target, env):
        return "the threads' listings differ"
    return None


def copy_rounds(
    kind: str,
    rounds: int,
    threads: int,
    folder: Path,
    pg_url: str,
    rng: random.Random,
    env: dict[str, str],
) -> Count:
    """``rounds`` copies killed at a random moment, then run again, each checked."""
    count = Count(f"db copy of {threads} threads killed with kill -9, then run again, {kind}")
    source = copy_source(folder, threads)
    with new_database(kind, folder, pg_url, "campaign_copy_timed") as target:
        started = time.monotonic()
        subprocess.run(copy_command(source, target), env=env, capture_output=True, check=True)
        whole = time.monotonic() - started
    for n in range(rounds):
        with new_database(kind, folder, pg_url, f"campaign_copy{n}") as target:
            process = subprocess.Popen(
                copy_command(source, target), env=env, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            deadline = time.monotonic() + rng.uniform(0.1, 0.9) * whole
            while process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                count.note("killed mid-copy")
            else:
                count.note("finished before the kill")
            process.wait()
            again = subprocess.run(
                copy_command(source, target), env=env, capture_output=True, text=True,
                timeout=600, check=False,
            )  # fmt: skip
            if again.returncode != 0:
                said = again.stderr.strip().splitlines() or [f"exit {again.returncode}"]
                count.add(False, f"round {n}: the second copy failed: {said[-1][-200:]}")
                continue
            problem = integrity_problem(target) or copy_difference(source, target, env)
            count.add(problem is None, f"round {n}: {problem}")
    return count


# --- the report ------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=40, help="kill -9 rounds per database")
    parser.add_argument("--starts", type=int, default=10, help="start rounds per database")
    parser.add_argument("--processes", type=int, default=8, help="processes starting together")
    parser.add_argument("--copies", type=int, default=15, help="db copy rounds per database")
    parser.add_argument("--copy-threads", type=int, default=500, help="threads a copy moves")
    parser.add_argument("--only", choices=("sqlite", "postgresql"), help="one database only")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, help="PostgreSQL server (admin)")
    parser.add_argument("--dir", type=Path, help="where SQLite files go (kept)")
    parser.add_argument("--seed", type=int, default=20, help="random moments and messages")
    parser.add_argument("--json", type=Path, help="write the counts here too")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    folder = args.dir or Path(tempfile.mkdtemp(prefix="chatbot-campaign-"))
    folder.mkdir(parents=True, exist_ok=True)
    env = environment(folder)
    kinds = ["SQLite", "PostgreSQL"]
    if args.only:
        kinds = ["SQLite" if args.only == "sqlite" else "PostgreSQL"]
    if "PostgreSQL" in kinds and (problem := postgres_problem(args.pg_url)):
        print(f"PostgreSQL skipped: no server at {without_password(args.pg_url)} ({problem})")
        kinds.remove("PostgreSQL")

    about = machine(sqlite=True, date=True)
    print(", ".join(f"{key} {value}" for key, value in about.items()))
    counts: list[tuple[Count, str]] = []
    try:
        for kind in kinds:
            with new_database(kind, folder, args.pg_url, "campaign_kills") as db:
                count = kill_rounds(db, kind, args.kills, rng, env)
            counts.append((count, "intact"))
            print(count.line("intact"), flush=True)
            if args.copies:
                count = copy_rounds(
                    kind, args.copies, args.copy_threads, folder, args.pg_url, rng, env
                )
                counts.append((count, "read the same"))
                print(count.line("read the same"), flush=True)
            if not args.starts:
                continue
            for count in start_rounds(
                kind, args.starts, args.processes, folder, args.pg_url, rng, env
            ):
                counts.append((count, "all up"))
                print(count.line("all up"), flush=True)
    finally:
        if args.dir is None:
            shutil.rmtree(folder, ignore_errors=True)
    failed = [failure for count, _ in counts for failure in count.failures]
    for failure in failed:
        print(f"  failed: {failure}")
    if args.json:
        document: dict[str, Any] = {
            "machine": about,
            "counts": [
                {
                    "what": count.label,
                    "rounds": count.rounds,
                    "held": count.held,
                    "notes": count.notes,
                    "failures": count.failures,
                }
                for count, _ in counts
            ],
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
