"""Benchmark: the bytes a turn takes on disk, by part, against LangGraph's tutorial on its savers.

    uv run --group dev python benchmarks/stores.py [--turns 2000] [--at 100,1000,2000]
        [--default-settings] [--pg-url URL] [--json PATH]

One thread, ``--turns`` turns, user messages of 60-120 common English words (seeded), the
offline model, on up to four new databases taking turns, the same message each (the order
swapping every turn, so that whatever else the machine does weighs on all alike):

- **SQLite, chatbot** and **PostgreSQL, chatbot**: chatbot's store as it writes, each
  turn ``LocalBackend.send`` (``build_graph`` on LangGraph's ``SqliteSaver`` or
  ``PostgresSaver`` with chatbot's zstd serializer, ``messages`` and ``summary`` in
  LangGraph's ``DeltaChannel``, then the listing row and the turn's messages indexed for
  search);
- **SQLite, tutorial** and **PostgreSQL, tutorial**: the reference, LangGraph's summarization
  tutorial as ``benchmarks/turns.py`` runs it (a graph of the same shape: ``MessagesState``
  with ``summary``, a conversation node, a summarize node) on LangGraph's plain
  ``SqliteSaver`` or ``PostgresSaver`` with its default serializer, one ``graph.invoke`` a
  turn: what a LangGraph program following the tutorial stores.

Both sides fold at the same turns: chatbot runs with the tutorial's trigger and keep
(``messages:6``, ``messages:2``) and recall off, the tutorial's shape, so the columns differ
in how they store, not in what they keep. ``--default-settings`` runs chatbot as shipped
instead (trigger and keep by tokens, recall offered once there is a summary), the bytes a
turn of real use; the tutorial stays as written.

At each turn in ``--at``: the bytes the database grew by per turn since it was made (SQLite:
the file once its write-ahead log is folded in; PostgreSQL: the tables with their indexes and
TOAST) and their ratio to the UTF-8 bytes of text the turns added (message + reply); at the
last one, what each part grew by per turn (``chatbot db stats``' parts: checkpoints, pending
writes, search index, other; SQLite's counted in 4 KB pages), with its ratio to the text. The
CPU time of a turn (mean, ``time.process_time``) and the summary calls are printed too. No
network and no key; PostgreSQL is skipped (one line says so) without a server at
``--pg-url``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langchain_core.messages import HumanMessage  # noqa: E402

from benchmarks import concurrency, turns  # noqa: E402
from benchmarks._machine import machine  # noqa: E402
from chatbot.config.settings import Settings  # noqa: E402
from chatbot.config.sources import without_password  # noqa: E402
from chatbot.memory.tokens import ESTIMATE, TokenCounter, Tokenizer, estimate_tokens  # noqa: E402
from chatbot.store.base import PARTS, SqlStore, sum_parts  # noqa: E402
from chatbot.store.postgres import open_store  # noqa: E402

THREAD = "sizes"
SIDES = ("chatbot", "tutorial")


@dataclass
class Arm:
    """One database and the graph taking turns on it."""

    label: str
    kind: str
    """``SQLite`` or ``PostgreSQL``."""
    side: str
    """``chatbot`` or ``tutorial``."""
    turn: Callable[[str], int] = field(repr=False)
    """Takes a turn; the UTF-8 bytes of text it added (message + reply)."""
    size: Callable[[], int] = field(repr=False)
    """The database's bytes now."""
    parts: Callable[[], dict[str, int]] = field(repr=False)
    """Its bytes by part (:data:`PARTS`)."""
    start: int = 0
    start_parts: dict[str, int] = field(default_factory=dict)
    text: int = 0
    cpu: float = 0.0
    turns: int = 0
    marks: list[dict[str, Any]] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "database": self.kind,
            "side": self.side,
            "start_bytes": self.start,
            "start_parts": self.start_parts,
            "text_bytes": self.text,
            "turns": self.turns,
            "summary_calls": turns.TALLIES[self.arm_name].calls["summary"],
            "chat_calls": turns.TALLIES[self.arm_name].calls["chat"],
            "marks": self.marks,
        }

    @property
    def arm_name(self) -> str:
        """The name its models count under (``turns.TALLIES``)."""
        return f"{self.side}-{self.kind.lower()}"


def mark(arm: Arm) -> None:
    grown = arm.size() - arm.start
    parts = arm.parts()
    arm.marks.append(
        {
            "turns": arm.turns,
            "bytes_per_turn": grown / arm.turns,
            "times_text": grown / arm.text if arm.text else None,
            "text_per_turn": arm.text / arm.turns,
            "parts_per_turn": {
                part: (parts.get(part, 0) - arm.start_parts.get(part, 0)) / arm.turns
                for part in PARTS
            },
            "cpu_ms_per_turn": arm.cpu / arm.turns * 1000,
        }
    )


# --- the models -----------------------------------------------------------------------------


def models(arm: str, settings: Settings) -> tuple[turns.Counted, turns.Counted]:
    """The offline chat and summary models, counted as ``arm`` (``turns.Counted``); a
    tutorial arm's summarizer reads the tutorial's request (``turns.TutorialSummarizer``), so
    both sides keep the same summaries."""
    turns.TALLIES[arm] = turns.Tally()
    turns.COUNTERS[arm] = TokenCounter(
        Tokenizer(ESTIMATE.name, functools.partial(estimate_tokens, lines={}))
    )
    return turns.offline(arm, "chat", settings), turns.offline(arm, "summary", settings)


# --- chatbot's store ------------------------------------------------------------------------


def chatbot_arm(kind: str, store: SqlStore, settings: Settings) -> Arm:
    """chatbot's store, each turn through ``LocalBackend.send`` as ``chatbot ask`` takes it."""
    from chatbot.engine.graph import build_graph
    from chatbot.store.search import recaller
    from chatbot.threads.backend import LocalBackend

    name = f"chatbot-{kind.lower()}"
    chat, summary = models(name, settings)
    graph = build_graph(chat, summary, settings, store.saver, recaller(store))
    backend = LocalBackend(graph, store)
    store.vacuum()  # (a new database's set-up may leave a few free pages)
    return Arm(
        f"{kind}, chatbot",
        kind,
        "chatbot",
        turn=lambda text: concurrency.take_turn(backend, THREAD, text).text_bytes,
        size=lambda: concurrency.database_bytes(store),
        parts=lambda: dict(store.stats().parts),
    )


# --- the tutorial on LangGraph's plain savers -----------------------------------------------


def tutorial_turn(graph: Any) -> Callable[[str], int]:
    config = {"configurable": {"thread_id": THREAD}}

    def turn(text: str) -> int:
        out = graph.invoke({"messages": [HumanMessage(content=text)]}, config)
        reply = out["messages"][-1].text
        return len(text.encode()) + len(reply.encode())

    return turn


def sqlite_bytes(path: str) -> int:
    total = 0
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            total += os.stat(path + suffix).st_size
    return total


@contextlib.contextmanager
def tutorial_sqlite(path: str) -> Iterator[Arm]:
    """The tutorial on ``SqliteSaver`` over a plain connection (its own journal, its own
    durability), as the tutorial and ``benchmarks/turns.py`` make it."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        chat, summary = models("tutorial-sqlite", turns.settings_for_chatbot())
        graph = turns.tutorial_graph(chat, summary, saver)

        def size() -> int:
            with saver.lock:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # (none unless in WAL mode)
            return sqlite_bytes(path)

        def parts() -> dict[str, int]:
            with saver.lock:
                rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
                return dict(sum_parts(rows.fetchall()))

        with saver.lock:
            conn.execute("VACUUM")
        yield Arm("SQLite, tutorial", "SQLite", "tutorial", tutorial_turn(graph), size, parts)
    finally:
        conn.close()


@contextlib.contextmanager
def tutorial_postgres(url: str) -> Iterator[Arm]:
    """The tutorial on ``PostgresSaver`` over one connection, as LangGraph's documentation
    makes it (autocommit, dict rows)."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row, tuple_row

    with psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        saver = PostgresSaver(conn)
        saver.setup()
        chat, summary = models("tutorial-postgresql", turns.settings_for_chatbot())
        graph = turns.tutorial_graph(chat, summary, saver)

        def sizes() -> list[tuple[str, int]]:
            with saver.lock, conn.cursor(row_factory=tuple_row) as cursor:
                cursor.execute(
                    "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class AS c "
                    "JOIN pg_namespace AS n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
                )
                return [(str(name), int(size)) for name, size in cursor.fetchall()]

        with saver.lock:
            conn.execute("VACUUM (ANALYZE)")
        yield Arm(
            "PostgreSQL, tutorial",
            "PostgreSQL",
            "tutorial",
            tutorial_turn(graph),
            size=lambda: sum(size for _, size in sizes()),
            parts=lambda: dict(sum_parts(sizes())),
        )


# --- the report -----------------------------------------------------------------------------


def kilobytes(value: float) -> str:
    return f"{value / 1000:,.1f} kB"


def times(value: float, text: float) -> str:
    return f"{value / text:.2f}× text" if text else "— × text"


def report(arms: list[Arm], about: dict[str, Any]) -> list[str]:
    lines = [
        f"{about['cpu']} × {about['cpus']}, Python {about['python']}; "
        f"{', '.join(about['databases'])}; chatbot at {about['commit']}",
        f"one thread, offline model; chatbot: {about['chatbot']}; the tutorial: its graph as "
        "written (summarizes past 6 messages, keeps 2) on LangGraph's plain savers, default "
        "serializer; bytes a turn: what the database grew by since it was made / turns "
        "(× text: / the UTF-8 bytes of message + reply)",
        "",
        "| measure | " + " | ".join(arm.label for arm in arms) + " |",
        "|---|" + "---|" * len(arms),
    ]
    for index, at in enumerate(arms[0].marks):
        cells = [
            f"{kilobytes(m['bytes_per_turn'])} ({times(m['bytes_per_turn'], m['text_per_turn'])})"
            for m in (arm.marks[index] for arm in arms)
        ]
        lines.append(f"| bytes a turn, turns 1–{at['turns']:,} | " + " | ".join(cells) + " |")
    last = [arm.marks[-1] for arm in arms]
    for part in PARTS:
        cells = [
            f"{kilobytes(m['parts_per_turn'][part])} "
            f"({times(m['parts_per_turn'][part], m['text_per_turn'])})"
            for m in last
        ]
        lines.append(f"| … of it {part}, a turn | " + " | ".join(cells) + " |")
    lines.append(
        "| text a turn added | " + " | ".join(kilobytes(m["text_per_turn"]) for m in last) + " |"
    )
    calls = [turns.TALLIES[arm.arm_name].calls["summary"] for arm in arms]
    lines.append("| summary calls | " + " | ".join(str(n) for n in calls) + " |")
    lines.append(
        "| CPU a turn (mean) | " + " | ".join(f"{m['cpu_ms_per_turn']:.1f} ms" for m in last) + " |"
    )
    for kind in ("SQLite", "PostgreSQL"):
        ours = next((a for a in arms if a.label == f"{kind}, chatbot"), None)
        theirs = next((a for a in arms if a.label == f"{kind}, tutorial"), None)
        if not (ours and theirs):
            continue
        mine, reference = ours.marks[-1], theirs.marks[-1]
        if mine["bytes_per_turn"] <= 0 or reference["bytes_per_turn"] <= 0:
            lines.append(f"{kind}: a database did not grow (too few turns to compare)")
            continue
        share = mine["bytes_per_turn"] / reference["bytes_per_turn"]
        cpu = mine["cpu_ms_per_turn"] / reference["cpu_ms_per_turn"]
        lines.append(
            f"{kind}: chatbot takes {share:.2f}× the tutorial's bytes a turn "
            f"(1/{1 / share:.1f}), at {cpu:.2f}× its CPU a turn"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--at", default="100,1000,2000", help="turns to report, comma-separated")
    parser.add_argument(
        "--default-settings",
        action="store_true",
        help="chatbot as shipped (its default trigger, keep and recall) rather than with the "
        "tutorial's trigger and keep",
    )
    parser.add_argument("--pg-url", default=concurrency.DEFAULT_PG_URL)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    if args.turns < 1:
        parser.error("--turns must be at least 1")
    marks = sorted({int(n) for n in args.at.split(",") if n.strip()} | {args.turns})
    marks = [n for n in marks if 1 <= n <= args.turns]
    for name in list(os.environ):  # offline, default settings
        if name.upper().startswith(concurrency.LEAKY_PREFIXES):
            del os.environ[name]

    if args.default_settings:
        settings = Settings(_env_file=None, model="offline")
        chosen = (
            f"as shipped (trigger {settings.summary_trigger}, keep {settings.summary_keep}, "
            f"recall {settings.recall})"
        )
    else:
        settings = turns.settings_for_chatbot()
        chosen = (
            f"the tutorial's trigger and keep ({settings.summary_trigger}, "
            f"{settings.summary_keep}), recall {settings.recall}"
        )
    about = machine(sqlite=True)
    about["chatbot"] = chosen
    about["databases"] = [f"SQLite {sqlite3.sqlite_version}"]
    problem = concurrency.postgres_problem(args.pg_url)
    if problem:
        print(f"PostgreSQL: not measured ({without_password(args.pg_url)}: {problem})")
    else:
        about["databases"].append(f"PostgreSQL {concurrency.postgres_version(args.pg_url)}")
    folder = Path(tempfile.mkdtemp(prefix="chatbot-stores-"))
    rng = random.Random(args.seed)
    try:
        with contextlib.ExitStack() as stack:
            ours = stack.enter_context(open_store(str(folder / "chatbot.sqlite")))
            arms = [
                chatbot_arm("SQLite", ours, settings),
                stack.enter_context(tutorial_sqlite(str(folder / "tutorial.sqlite"))),
            ]
            if not problem:
                url = stack.enter_context(concurrency.scratch_postgres(args.pg_url, "sizes"))
                arms.append(
                    chatbot_arm("PostgreSQL", stack.enter_context(open_store(url)), settings)
                )
                url = stack.enter_context(concurrency.scratch_postgres(args.pg_url, "tutorial"))
                arms.append(stack.enter_context(tutorial_postgres(url)))
            for arm in arms:
                arm.start, arm.start_parts = arm.size(), arm.parts()
            for number in range(1, args.turns + 1):
                text = concurrency.message(rng, f"turn {number}")
                order = arms if number % 2 else arms[::-1]
                for arm in order:
                    started = time.process_time()
                    arm.text += arm.turn(text)
                    arm.cpu += time.process_time() - started
                    arm.turns += 1
                if number in marks:
                    print(f"{number} turns…", file=sys.stderr, flush=True)
                    for arm in arms:
                        mark(arm)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print("\n".join(report(arms, about)))
    if args.json:
        document = {"machine": about, "arms": [arm.record() for arm in arms]}
        args.json.write_text(json.dumps(document, indent=2, default=str) + "\n")
        print(f"report: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
