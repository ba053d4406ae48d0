"""Benchmark: the bytes a turn takes on disk, by part, against the text the turn adds.

    uv run --group dev python benchmarks/stores.py [--turns 2000] [--at 100,1000,2000]
        [--pg-url URL] [--json PATH]

One thread, ``--turns`` turns through the real graph and ``LocalBackend.send`` (the offline
model, default settings, so the trigger folds as in real use; user messages of 60-120 common
English words, seeded), on up to four new databases taking turns, the same message each:

- **SQLite, now** and **PostgreSQL, now**: chatbot as it is (checkpoints compressed, the
  message window and the summary stored only in snapshots: the compact layout);
- **SQLite, before** and **PostgreSQL, before**: the same, with the saver writing as LangGraph's
  plain savers do, uncompressed and whole (every checkpoint stores the window), as chatbot
  stored checkpoints before it compressed them and before the compact layout, and as it still
  writes on an adopted database (``db migrate`` rewrites such a database in today's form).

At each turn in ``--at``: the bytes the database grew by per turn since it was made (SQLite:
the file once its log is folded in; PostgreSQL: the tables, indexes and TOAST), its ratio to
the UTF-8 bytes of text the turns added (message + reply), and what each part takes per turn
(``chatbot db stats``' parts: checkpoints, pending writes, search index, other; SQLite's
counted in 4 KB pages). The CPU time of a turn is printed too (mean, ``time.process_time``),
for what compressing costs. No network and no key; PostgreSQL is skipped (one line says so)
without a server at ``--pg-url``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import concurrency  # noqa: E402
from benchmarks._machine import machine  # noqa: E402
from chatbot.config.sources import without_password  # noqa: E402
from chatbot.store.postgres import open_store  # noqa: E402
from chatbot.store.sqlite import PARTS, SqlStore  # noqa: E402

THREAD = "sizes"


def without_compression(store: SqlStore) -> None:
    """Write as LangGraph's plain savers do (the layout before compression and the compact
    layout): values go in uncompressed and whole, as on a database shared with another
    LangGraph program."""
    from chatbot.store.saver import DecodesInterruptibly

    saver = store.saver
    if not isinstance(saver, DecodesInterruptibly):
        raise SystemExit(f"the saver is not one this benchmark knows: {saver!r}")
    saver.keep_uncompressed()


@dataclass
class Arm:
    label: str
    location: str
    compressed: bool
    start: int = 0
    text: int = 0
    cpu: float = 0.0
    turns: int = 0
    marks: list[dict[str, Any]] = field(default_factory=list)


def mark(arm: Arm, store: SqlStore) -> None:
    grown = concurrency.database_bytes(store) - arm.start
    parts = dict(store.stats().parts)
    arm.marks.append(
        {
            "turns": arm.turns,
            "bytes_per_turn": grown / arm.turns,
            "times_text": grown / arm.text if arm.text else None,
            "text_per_turn": arm.text / arm.turns,
            "parts_per_turn": {part: parts.get(part, 0) / arm.turns for part in PARTS},
            "cpu_ms_per_turn": arm.cpu / arm.turns * 1000,
        }
    )


def kilobytes(value: float) -> str:
    return f"{value / 1000:,.1f} kB"


def report(arms: list[Arm], about: dict[str, Any]) -> list[str]:
    lines = [
        f"{about['cpu']} × {about['cpus']}, Python {about['python']}; "
        f"{', '.join(about['databases'])}; chatbot at {about['commit']}",
        f"one thread, offline model, default settings (trigger {about['trigger']}, keep "
        f"{about['keep']}); bytes a turn: what the database grew by since it was made / turns "
        "(× text: / the UTF-8 bytes of message + reply)",
        "",
        "| measure | " + " | ".join(arm.label for arm in arms) + " |",
        "|---|" + "---|" * len(arms),
    ]
    for index, at in enumerate(arms[0].marks):
        cells = [
            f"{kilobytes(arm.marks[index]['bytes_per_turn'])} "
            f"({arm.marks[index]['times_text']:.2f}× text)"
            for arm in arms
        ]
        lines.append(f"| bytes a turn, turns 1–{at['turns']:,} | " + " | ".join(cells) + " |")
    last = [arm.marks[-1] for arm in arms]
    for part in PARTS:
        cells = [kilobytes(m["parts_per_turn"][part]) for m in last]
        lines.append(f"| … of it {part}, a turn | " + " | ".join(cells) + " |")
    for index, at in enumerate(arms[0].marks):  # (issue 24: under twice the text)
        marks = [arm.marks[index] for arm in arms]
        cells = [
            f"{m['parts_per_turn']['search index'] / m['text_per_turn']:.2f}×"
            if m["text_per_turn"]
            else "—"
            for m in marks
        ]
        lines.append(
            f"| search index × text, turns 1–{at['turns']:,} | " + " | ".join(cells) + " |"
        )
    lines.append(
        "| text a turn added | " + " | ".join(kilobytes(m["text_per_turn"]) for m in last) + " |"
    )
    lines.append(
        "| CPU a turn (mean) | " + " | ".join(f"{m['cpu_ms_per_turn']:.1f} ms" for m in last) + " |"
    )
    for kind in ("SQLite", "PostgreSQL"):
        now = next((a for a in arms if a.label == f"{kind}, now"), None)
        before = next((a for a in arms if a.label == f"{kind}, before"), None)
        if now and before and now.marks[-1]["bytes_per_turn"] > 0:  # (a tiny run may not grow)
            shrink = before.marks[-1]["bytes_per_turn"] / now.marks[-1]["bytes_per_turn"]
            cpu = now.marks[-1]["cpu_ms_per_turn"] / before.marks[-1]["cpu_ms_per_turn"]
            lines.append(
                f"{kind}: now takes 1/{shrink:.1f} of the bytes a turn of before, at "
                f"{cpu:.2f}× its CPU a turn"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--at", default="100,1000,2000", help="turns to report, comma-separated")
    parser.add_argument("--pg-url", default=concurrency.DEFAULT_PG_URL)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    marks = sorted({int(n) for n in args.at.split(",") if n.strip()} | {args.turns})
    marks = [n for n in marks if 1 <= n <= args.turns]
    if args.turns < 1:
        parser.error("--turns must be at least 1")
    for name in list(os.environ):  # offline, default settings
        if name.upper().startswith(concurrency.LEAKY_PREFIXES):
            del os.environ[name]

    from chatbot.config.settings import Settings

    defaults = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    about = machine(sqlite=True)
    about["trigger"], about["keep"] = defaults.summary_trigger, defaults.summary_keep
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
            locations = [
                (
                    "SQLite, now",
                    stack.enter_context(concurrency.scratch_sqlite(folder, "now")),
                    True,
                ),
                (
                    "SQLite, before",
                    stack.enter_context(concurrency.scratch_sqlite(folder, "before")),
                    False,
                ),
            ]
            if not problem:
                for label, compressed in (("PostgreSQL, now", True), ("PostgreSQL, before", False)):
                    url = stack.enter_context(concurrency.scratch_postgres(args.pg_url, "sizes"))
                    locations.append((label, url, compressed))
            arms = [Arm(label, where, compressed) for label, where, compressed in locations]
            opened = [stack.enter_context(open_store(arm.location)) for arm in arms]
            backends = []
            for arm, store in zip(arms, opened, strict=True):
                if not arm.compressed:
                    without_compression(store)
                backends.append(concurrency.make_backend(store))
                store.vacuum()  # (a new database's migrations leave a few free pages)
                arm.start = concurrency.database_bytes(store)
            for number in range(1, args.turns + 1):
                text = concurrency.message(rng, f"turn {number}")
                order = range(len(arms)) if number % 2 else reversed(range(len(arms)))
                for n in order:
                    started = time.process_time()
                    result = concurrency.take_turn(backends[n], THREAD, text)
                    arms[n].cpu += time.process_time() - started
                    arms[n].text += result.text_bytes
                    arms[n].turns += 1
                if number in marks:
                    print(f"{number} turns…", file=sys.stderr, flush=True)
                    for arm, store in zip(arms, opened, strict=True):
                        mark(arm, store)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print("\n".join(report(arms, about)))
    if args.json:
        document = {"machine": about, "arms": [vars(arm) for arm in arms]}
        args.json.write_text(json.dumps(document, indent=2, default=str) + "\n")
        print(f"report: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
