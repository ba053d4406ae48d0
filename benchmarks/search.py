"""Benchmark: `chatbot search` on a big database, what indexing costs a turn, and catching up.

    uv run --group dev python benchmarks/search.py [--threads 1000] [--turns 14] [--runs 5]
        [--data DIR] [--json PATH]

- **The database**: ``--threads`` threads of ``--turns`` turns (default 1,000 × 14), each turn
  through the real graph (``build_graph`` on chatbot's SQLite store, with chatbot's
  durability) and recorded as a turn is (``SqlStore.record_turn``: the listing row, and the
  messages the turn's checkpoints added indexed for search), older messages folded into a
  summary past 12 messages (``messages:12``, keeping 4). The user's text is English prose
  from a word list, a tenth of the threads Chinese, a few messages carrying rare words; the
  replies are prose of the same kind (150-1,200 characters, seeded by the message: the
  offline chat model answering with them rather than quoting), the summaries the offline
  summarizer's. It is kept in ``--data`` (default: a temporary folder), so a rerun with the
  same folder starts measuring at once.
- **Queries in-process**: the time of :func:`chatbot.store.search.search` (21 rows, as the
  command asks for 20) for each kind of term: a long word (three characters or more: FTS5's
  trigram index), rare and common, and two of them; a short ASCII word (``LIKE``), common and
  found nowhere (its worst case: every row read); a phrase (its words by the index, the phrase
  checked in Python); Chinese of four characters (the index) and of two (no index: the rows
  read newest first and checked in Python), found and found nowhere; one thread only; and a
  common word while one thread's index lags (its checkpoints read beside the index, as
  `chatbot search`, which only reads, does). The median of ``--runs``, against the goal of
  100 ms of work a query.
- **The command**: ``chatbot search WORD --json`` against ``chatbot --version`` (the process
  doing nothing) and against ``chatbot threads --json`` on a one-turn database (the start-up
  every reading command has: settings, opening the database), run in turns; the median
  differences are the work beyond start-up, against the same goal.
- **Indexing a turn**: ``--turns`` turns on one thread (``--runs`` rounds, at least two, each on
  new files, SQLite's usual durability), a turn being ``graph.invoke`` and ``record_turn``, on
  two stores taking turns: one indexing as chatbot does, one whose ``record_turn`` writes the
  listing row alone (its index statements left out); the median turn of each, their
  difference and ratio.
- **Catching up**: one thread of the database whose index lags (its search rows and its mark
  deleted, as after a turn killed between its checkpoints and its listing row), then
  :func:`chatbot.store.search.catch_up` timed (what the REPL's /search does first), median of
  ``--runs``, against the goal of a query.

No network and no key: OPENAI_*, CHATBOT_* and LANGSMITH_* settings are removed from the
environment.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langchain_core.messages import BaseMessage, HumanMessage  # noqa: E402

from chatbot.config.settings import Settings  # noqa: E402
from chatbot.engine.graph import DURABILITY, build_graph  # noqa: E402
from chatbot.engine.models import OfflineChatModel  # noqa: E402
from chatbot.parts import readable_text  # noqa: E402
from chatbot.store.base import thread_config  # noqa: E402
from chatbot.store.search import catch_up, index_statements, search  # noqa: E402
from chatbot.store.sqlite import Store  # noqa: E402
from chatbot.threads.events import make_title  # noqa: E402
from chatbot.threads.runner import blocking  # noqa: E402

GOAL = 0.100
TRIGGER, KEEP = "messages:12", "messages:4"
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


class ProseModel(OfflineChatModel):
    """The offline model, answering with prose of the benchmark's own (150-1,200 characters,
    Chinese to a Chinese message) seeded by the user's message, where the offline chat model
    would quote it: the replies are text to search, as a real model's are."""

    def _reply(self, messages: list[BaseMessage]) -> str:
        last = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        said = readable_text(last.content) if last is not None else ""
        rng = random.Random(zlib.crc32(said.encode()))
        return _text(rng, not said.isascii(), rng.randint(150, 1200))


def settings() -> Settings:
    return Settings(
        _env_file=None,
        model="offline",
        summary_trigger=TRIGGER,
        summary_keep=KEEP,
        recall="off",
    )


def turn_taker(store: Store) -> Callable[[str, str], None]:
    """A turn on ``store``: the graph's run (chatbot's durability), then the thread recorded
    as ``LocalBackend`` records it once the turn is saved (listing row, search index)."""
    graph = build_graph(ProseModel(), OfflineChatModel(role="summary"), settings(), store.saver)

    def turn(thread_id: str, text: str) -> None:
        out = blocking(
            graph.ainvoke(
                {"messages": [HumanMessage(text)]}, thread_config(thread_id), durability=DURABILITY
            )
        )
        messages = out.get("messages") or []
        first = next((m for m in messages if isinstance(m, HumanMessage)), None)
        store.record_turn(
            thread_id,
            title=make_title(first.content if first else ""),
            message_count=len(messages),
            has_summary=bool(out.get("summary")),
            indexed=index_statements(store, thread_id) if _INDEXING[0] else (),
        )

    return turn


def user_texts(rng: random.Random, turns: int, rare: dict[int, str]) -> Iterator[str]:
    """A thread's user messages (a tenth of the threads Chinese; ``rare``: a rare word in the
    message of that turn)."""
    chinese = rng.random() < 0.1
    for turn in range(turns):
        text = _text(rng, chinese, rng.randint(150, 600))
        yield f"{text} {rare[turn]} {text}" if turn in rare else text


def build(path: Path, threads: int, turns: int, seed: int = 7) -> None:
    """The benchmark database (made once per ``--data`` folder)."""
    rng = random.Random(seed)
    partial = path.with_suffix(".partial")
    for leftover in partial.parent.glob(partial.name + "*"):
        leftover.unlink()
    store = Store(partial)
    store.conn.execute("PRAGMA synchronous = OFF")  # building only: nothing to lose
    try:
        turn = turn_taker(store)
        for number in range(threads):
            rare = {}
            if number % max(1, threads // 3) == 0:  # a few messages carry rare words
                rare[rng.randrange(turns)] = RARE[number // max(1, threads // 3) % len(RARE)]
            thread_id = f"thread-{number:04d}"
            for text in user_texts(rng, turns, rare):
                turn(thread_id, text)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        store.close()
    partial.rename(path)


def median_time(
    action: Callable[[], object], runs: int, before: Callable[[], object] | None = None
) -> float:
    """The median seconds of ``action`` over ``runs`` runs after one to warm up (SQLite's page
    cache, Python's imports); ``before`` runs ahead of each, untimed."""
    samples = []
    for run in range(runs + 1):
        if before is not None:
            before()
        started = time.perf_counter()
        action()
        if run:
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


_INDEXING = [True]
"""False: a turn's ``record_turn`` writes the listing row alone, without its index statements."""


@contextmanager
def index_left_out(left_out: bool) -> Iterator[None]:
    """With ``left_out``, ``record_turn`` writes the listing row alone."""
    _INDEXING[0] = not left_out
    try:
        yield
    finally:
        _INDEXING[0] = True


def indexing_cost(folder: Path, turns: int, rounds: int) -> tuple[float, float]:
    """The median seconds of a turn (the graph's run and ``record_turn``) with the index and
    without, the two stores taking turns, on new files each round."""
    times: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(rounds):
        paths = {indexed: folder / f"turns-{indexed}-{round_}.sqlite" for indexed in times}
        stores = {indexed: Store(path) for indexed, path in paths.items()}
        try:
            takers = {indexed: turn_taker(store) for indexed, store in stores.items()}
            texts = list(user_texts(random.Random(round_), turns + 1, {}))
            for number, text in enumerate(texts):
                for indexed in (True, False) if (round_ + number) % 2 else (False, True):
                    with index_left_out(not indexed):
                        started = time.perf_counter()
                        takers[indexed]("t", text)
                        elapsed = time.perf_counter() - started
                    if number:  # (the first turn warms up)
                        times[indexed].append(elapsed)
        finally:
            for store in stores.values():
                store.close()
        for path in paths.values():
            for file in folder.glob(path.name + "*"):
                file.unlink()
    return statistics.median(times[True]), statistics.median(times[False])


def lag(store: Store, thread_id: str) -> None:
    """Make a thread's index lag: its search rows and its mark deleted."""
    store.write(
        ("DELETE FROM chatbot_messages WHERE thread_id = ?", (thread_id,)),
        ("DELETE FROM chatbot_indexed WHERE thread_id = ?", (thread_id,)),
    )


def megabytes(path: Path) -> float:
    return sum(f.stat().st_size for f in path.parent.glob(path.name + "*")) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=14)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--data", type=Path, help="keep the database here (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    options = parser.parse_args()
    if min(options.threads, options.turns, options.runs) < 1:
        parser.error("--threads, --turns and --runs must be at least 1")
    for name in list(os.environ):  # offline, default settings
        if name.upper().startswith(LEAKY_PREFIXES):
            del os.environ[name]

    data = options.data or Path(tempfile.mkdtemp(prefix="chatbot-search-"))
    data.mkdir(parents=True, exist_ok=True)
    db = data / f"threads-{options.threads}x{options.turns}.sqlite"
    if not db.exists():
        started = time.perf_counter()
        build(db, options.threads, options.turns)
        print(f"built {db} in {time.perf_counter() - started:.0f} s", file=sys.stderr)

    rows: list[dict[str, Any]] = []

    def row(
        measure: str,
        seconds: float,
        note: str = "",
        reference: float = GOAL,
        against: str = f"goal {GOAL * 1000:.0f} ms",
    ) -> None:
        rows.append(
            {
                "measure": measure,
                "seconds": seconds,
                "against": against,
                "reference_seconds": reference,
                "ratio": seconds / reference if reference else None,
                "note": note,
            }
        )

    lagging = "thread-0000"
    middle = f"thread-{options.threads // 2:04d}"
    with Store(db) as store:
        (messages,) = store.query("SELECT COUNT(*) FROM chatbot_messages")[0]
        (checkpoints,) = store.query("SELECT COUNT(*) FROM checkpoints")[0]
        size = megabytes(db)
        queries = {
            "long word, rare (Mozzarella)": ("Mozzarella", None),
            "long word, common (garden)": ("garden", None),
            "two long words (budget flight)": ("budget flight", None),
            "short word, common (go: LIKE)": ("go", None),
            "short word found nowhere (qz: LIKE reads every row)": ("qz", None),
            'a phrase ("the project")': ('"the project"', None),
            "Chinese, 4 characters (北京大学)": ("北京大学", None),
            "Chinese, 2 characters (上海: rows read newest first)": ("上海", None),
            "Chinese, 2 characters found nowhere (火锅: every row read)": ("火锅", None),
            f"one thread (--thread {middle}, garden)": ("garden", middle),
        }
        for measure, (query, thread) in queries.items():
            found = len(search(store, query, thread_id=thread, limit=21))
            seconds = median_time(
                functools.partial(search, store, query, thread_id=thread, limit=21), options.runs
            )
            row(f"query: {measure}", seconds, f"{found} hits (of 21 asked)")

    lagged = data / "lagging.sqlite"
    for file in data.glob(lagged.name + "*"):
        file.unlink()
    shutil.copy(db, lagged)
    with Store(lagged) as store:
        (behind,) = store.query(
            "SELECT COUNT(*) FROM chatbot_messages WHERE thread_id = ?", (lagging,)
        )[0]
        (spanned,) = store.query(
            "SELECT COUNT(*) FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ''",
            (lagging,),
        )[0]
        lag(store, lagging)
        found = len(search(store, "garden", limit=21))
        seconds = median_time(lambda: search(store, "garden", limit=21), options.runs)
        row(
            f"query: long word, common (garden), with {lagging}'s index lagging",
            seconds,
            f"{found} hits (of 21 asked); the lagging thread's {spanned:,} checkpoints read "
            "beside the index",
        )
        added: list[int] = []
        seconds = median_time(
            lambda: added.append(catch_up(store)), options.runs, before=lambda: lag(store, lagging)
        )
        row(
            f"catch_up: a thread of {options.turns} turns whose index lags",
            seconds,
            f"{added[-1]:,} rows (of its {behind:,}) from its {spanned:,} checkpoints, and its "
            "mark",
        )
    for file in data.glob(lagged.name + "*"):
        file.unlink()

    small = data / "one-turn.sqlite"
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
        on, off = indexing_cost(Path(scratch), options.turns, max(2, options.runs))
    row(
        "indexing: a turn with its messages indexed",
        on,
        f"{(on - off) * 1000:+.2f} ms a turn for the index (graph.invoke and record_turn, "
        f"{options.turns} turns on one thread)",
        reference=off,
        against=f"the same without the index ({off * 1000:.2f} ms)",
    )

    print(
        f"\n{options.threads:,} threads × {options.turns} turns: {checkpoints:,} checkpoints, "
        f"{messages:,} messages, {size:,.0f} MB · goal {GOAL * 1000:.0f} ms a query\n"
    )
    print("| measure | time | against | ratio | note |")
    print("|---|---|---|---|---|")
    for item in rows:
        ratio = "—" if item["ratio"] is None else f"{item['ratio']:.2f}×"
        print(
            f"| {item['measure']} | {item['seconds'] * 1000:,.1f} ms | {item['against']} | "
            f"{ratio} | {item['note']} |"
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
