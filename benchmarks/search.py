"""Benchmark: `chatbot search` on a big database, and what indexing costs a turn.

    uv run --group dev python benchmarks/search.py [--threads 1000] [--turns 24] [--runs 5]
        [--data DIR] [--json PATH]

- **The database**: ``--threads`` threads of ``--turns`` turns (default 1,000 × 14, about
  250 MB), written as synthetic checkpoints through chatbot's own saver (so indexed as a real
  turn is): each turn a checkpoint with the user's message and one with the reply, older
  messages folded into a growing summary past 12 messages, as the graph does. Text is English
  prose from a word list, a tenth of the threads Chinese; a few messages carry rare words. It
  is kept in ``--data`` (default: a temporary folder), so a rerun with the same folder starts
  measuring at once.
- **Queries in-process**: the time of :func:`chatbot.store.search.search` (21 rows, as the command
  asks for 20) for a rare word, a common word, two words, a phrase, Chinese of four and of two
  characters (the ``LIKE`` path, and one found nowhere: its worst case) and one thread only;
  the median of ``--runs``, against the goal of 100 ms.
- **The command**: ``chatbot search WORD --json`` against ``chatbot --version`` (the process
  doing nothing) and against ``chatbot threads --json`` on a one-thread database (the start-up
  every reading command has: settings, opening the database), run in turns; the median
  differences are the work beyond start-up.
- **Indexing per turn**: a turn's two checkpoint writes on a thread of as many turns as SQLite's
  index takes rows at once (two batches of rows: what merging them costs is counted), with the
  index on and off, in turns on fresh files (SQLite's usual durability); the difference per
  turn.
- **A database made before search**: its index dropped, then :func:`index_existing` timed, as
  the first `/search` in the REPL does it once (`chatbot search` only reads).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402

from chatbot.store.search import index_existing, search  # noqa: E402
from chatbot.store.sqlite import SEARCH_BATCH, Store  # noqa: E402

GOAL = 0.100
WINDOW = 12
WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "it",
    "for",
    "was",
    "on",
    "are",
    "as",
    "with",
    "his",
    "they",
    "at",
    "be",
    "this",
    "have",
    "from",
    "or",
    "one",
    "had",
    "by",
    "word",
    "but",
    "not",
    "what",
    "all",
    "were",
    "we",
    "when",
    "your",
    "can",
    "said",
    "there",
    "use",
    "an",
    "each",
    "which",
    "she",
    "do",
    "how",
    "their",
    "if",
    "will",
    "up",
    "other",
    "about",
    "out",
    "many",
    "then",
    "them",
    "these",
    "so",
    "some",
    "her",
    "would",
    "make",
    "like",
    "him",
    "into",
    "time",
    "has",
    "look",
    "two",
    "more",
    "write",
    "go",
    "see",
    "number",
    "no",
    "way",
    "could",
    "people",
    "my",
    "than",
    "first",
    "water",
    "been",
    "call",
    "who",
    "oil",
    "its",
    "now",
    "find",
    "long",
    "down",
    "day",
    "did",
    "get",
    "come",
    "made",
    "may",
    "part",
    "garden",
    "project",
    "budget",
    "meeting",
    "deadline",
    "python",
    "database",
    "summary",
    "thread",
    "model",
    "server",
    "question",
    "answer",
    "report",
    "travel",
    "flight",
    "hotel",
    "kitchen",
    "recipe",
    "music",
    "guitar",
    "football",
    "weather",
    "market",
]
CHINESE = (
    "我们今天讨论一下项目的进度和预算。北京的天气很好，适合出去散步。请帮我总结这份报告的要点。"
    "数据库的索引需要重新设计，查询太慢了。下周去上海出差，需要订酒店和机票。这个模型的回答不太准确。"
)
RARE = ("Mozzarella", "quetzalcoatl", "北京大学图书馆")
LEAKY_PREFIXES = ("CHATBOT_", "OPENAI_", "LANGSMITH_", "LANGCHAIN_")


def _text(rng: random.Random, chinese: bool, length: int) -> str:
    if chinese:
        start = rng.randrange(len(CHINESE))
        return (CHINESE * (length // len(CHINESE) + 2))[start : start + length // 2]
    words: list[str] = []
    size = 0
    while size < length:
        words.append(rng.choice(WORDS))
        size += len(words[-1]) + 1
    return " ".join(words).capitalize() + "."


def _write_thread(
    store: Store, thread_id: str, turns: int, rng: random.Random, rare: dict[int, str]
) -> None:
    """One thread's checkpoints through the store's saver, as the graph would write them."""
    saver = store.saver
    chinese = rng.random() < 0.1
    checkpoint = empty_checkpoint()
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    messages: list[Any] = []
    summary = ""
    version: Any = None
    for turn in range(turns):
        for kind in (HumanMessage, AIMessage):
            text = _text(rng, chinese, rng.randint(150, 600 if kind is HumanMessage else 1200))
            if kind is HumanMessage and turn in rare:
                text = f"{text} {rare[turn]} {text}"
            messages.append(kind(content=text, id=str(uuid6())))
            if len(messages) > WINDOW:  # folded: gone from the state, kept in older checkpoints
                folded, messages = messages[:-4], messages[-4:]
                summary = (summary + " " + " ".join(m.text[:80] for m in folded))[-3000:]
            version = saver.get_next_version(version, None)
            checkpoint = {
                **checkpoint,
                "id": str(uuid6(clock_seq=turn)),
                "ts": checkpoint["ts"],
                "channel_values": {"messages": list(messages), "summary": summary},
                "channel_versions": {"messages": version, "summary": version},
            }
            config = saver.put(
                config,
                checkpoint,
                {"source": "loop", "step": turn},
                {
                    "messages": version,
                    "summary": version,
                },
            )


def build(path: Path, threads: int, turns: int, seed: int = 7) -> None:
    """The benchmark database (made once per ``--data`` folder)."""
    rng = random.Random(seed)
    partial = path.with_suffix(".partial")
    for leftover in partial.parent.glob(partial.name + "*"):
        leftover.unlink()
    store = Store(partial)
    store.conn.execute("PRAGMA synchronous = OFF")  # building only: nothing to lose
    try:
        for number in range(threads):
            rare = {}
            if number % max(1, threads // 3) == 0:  # a few messages carry rare words
                rare[rng.randrange(turns)] = RARE[number // max(1, threads // 3) % len(RARE)]
            _write_thread(store, f"thread-{number:04d}", turns, rng, rare)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        store.close()
    partial.rename(path)


def median_time(action: Callable[[], object], runs: int) -> float:
    action()  # warm: SQLite's page cache, Python's imports
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(LEAKY_PREFIXES)}


def command_times(commands: Sequence[Sequence[str]], runs: int) -> list[float]:
    """Median wall time of each ``chatbot`` command line, the commands run in turns."""
    chatbot = str(Path(sys.prefix) / "bin" / "chatbot")
    samples: list[list[float]] = [[] for _ in commands]
    for round_ in range(runs + 1):
        for number, args in enumerate(commands):
            started = time.perf_counter()
            done = subprocess.run([chatbot, *args], capture_output=True, env=_env(), check=False)
            elapsed = time.perf_counter() - started
            if done.returncode != 0:
                raise SystemExit(f"chatbot {' '.join(args)} failed: {done.stderr.decode()}")
            if round_:  # the first round warms up
                samples[number].append(elapsed)
    return [statistics.median(times) for times in samples]


def indexing_cost(folder: Path, turns: int, rounds: int) -> tuple[float, float]:
    """Seconds per turn (two checkpoint writes) with the index on and off."""
    times: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(rounds):
        for indexed in (True, False) if round_ % 2 else (False, True):
            path = folder / f"turns-{indexed}-{round_}.sqlite"
            store = Store(path)
            if not indexed:
                store.saver.message_index = None
            started = time.perf_counter()
            _write_thread(store, "t", turns, random.Random(round_), {})
            times[indexed].append((time.perf_counter() - started) / turns)
            store.close()
            for file in folder.glob(path.name + "*"):
                file.unlink()
    return statistics.median(times[True]), statistics.median(times[False])


def megabytes(path: Path) -> float:
    return sum(f.stat().st_size for f in path.parent.glob(path.name + "*")) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=14)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--data", type=Path, help="keep the database here (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    options = parser.parse_args()

    data = options.data or Path(tempfile.mkdtemp(prefix="chatbot-search-"))
    data.mkdir(parents=True, exist_ok=True)
    db = data / f"search-{options.threads}x{options.turns}.sqlite"
    if not db.exists():
        started = time.perf_counter()
        build(db, options.threads, options.turns)
        print(f"built {db} in {time.perf_counter() - started:.0f} s", file=sys.stderr)

    rows: list[dict[str, Any]] = []

    def row(measure: str, seconds: float, note: str = "", goal: bool = True) -> None:
        ratio = seconds / GOAL if goal else None
        rows.append({"measure": measure, "seconds": seconds, "goal_ratio": ratio, "note": note})

    with Store(db) as store:
        (messages,) = store._query("SELECT COUNT(*) FROM chatbot_messages")[0]
        (checkpoints,) = store._query("SELECT COUNT(*) FROM checkpoints")[0]
        size = megabytes(db)
        queries = {
            "rare word (Mozzarella)": ("Mozzarella", None),
            "common word (garden)": ("garden", None),
            "two words (budget flight)": ("budget flight", None),
            'a phrase ("the project")': ('"the project"', None),
            "Chinese, 4 characters (北京大学)": ("北京大学", None),
            "Chinese, 2 characters (上海: LIKE)": ("上海", None),
            "2 characters found nowhere (火锅: LIKE reads every row)": ("火锅", None),
            "one thread (--thread, garden)": ("garden", "thread-0500"),
        }
        for measure, (query, thread) in queries.items():
            found = len(search(store, query, thread_id=thread, limit=21))
            seconds = median_time(
                lambda q=query, t=thread: search(store, q, thread_id=t, limit=21), options.runs
            )
            row(f"query: {measure}", seconds, f"{found} hits (of 21 asked)")

    small = data / "one-thread.sqlite"
    if not small.exists():
        build(small, 1, 1)
    searched, bare, opened = command_times(
        [
            ["search", "garden", "--json", "--db", str(db)],
            ["--version"],
            ["threads", "--json", "--db", str(small)],
        ],
        options.runs,
    )
    row(
        "chatbot search garden --json, beyond threads --json of a 1-thread database",
        searched - opened,
        f"{searched * 1000:.0f} ms against {opened * 1000:.0f} ms (the start-up of every "
        "reading command: settings, opening the database)",
    )
    row(
        "chatbot search garden --json, beyond --version",
        searched - bare,
        f"{searched * 1000:.0f} ms against {bare * 1000:.0f} ms",
    )

    with tempfile.TemporaryDirectory(prefix="chatbot-turns-") as scratch:
        on, off = indexing_cost(Path(scratch), SEARCH_BATCH, max(2, options.runs))
    row(
        "indexing: extra time per turn",
        on - off,
        f"a turn's two writes take {on * 1000:.2f} ms indexed, {off * 1000:.2f} ms not",
        goal=False,
    )

    old = data / "old.sqlite"
    for file in data.glob("old.sqlite*"):
        file.unlink()
    shutil.copy(db, old)
    with Store(old) as store:  # as a version before search left it
        store._write(
            ("DROP TABLE chatbot_messages_fts", ()),
            ("DROP TABLE chatbot_messages_unindexed", ()),
            ("DROP TABLE chatbot_messages", ()),
            ("DROP TABLE chatbot_marks", ()),
            ("DELETE FROM chatbot_migrations WHERE version >= 3", ()),
        )
    with Store(old) as store:
        started = time.perf_counter()
        found = index_existing(store)
        backfill = time.perf_counter() - started
    for file in data.glob("old.sqlite*"):
        file.unlink()
    row(
        "first search of a database made before search: indexing it",
        backfill,
        f"{found:,} messages from {checkpoints:,} checkpoints, once",
        goal=False,
    )

    print(
        f"\n{options.threads:,} threads × {options.turns} turns: {checkpoints:,} checkpoints, "
        f"{messages:,} messages, {size:,.0f} MB · goal {GOAL * 1000:.0f} ms a query\n"
    )
    print("| measure | time | × goal | note |")
    print("|---|---|---|---|")
    for item in rows:
        print(
            f"| {item['measure']} | {item['seconds'] * 1000:,.1f} ms | "
            f"{'—' if item['goal_ratio'] is None else format(item['goal_ratio'], '.2f')} | "
            f"{item['note']} |"
        )
    if options.json:
        options.json.write_text(
            json.dumps(
                {
                    "threads": options.threads,
                    "turns": options.turns,
                    "megabytes": size,
                    "checkpoints": checkpoints,
                    "messages": messages,
                    "rows": rows,
                },
                indent=2,
                ensure_ascii=False,
            )
        )
    if options.data is None:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
