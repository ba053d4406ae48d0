"""Benchmark: cleaning a reply of terminal escapes stays linear on long and adversarial text.

    uv run --group dev python benchmarks/sanitize.py [--scale 1.0] [--runs 3]

A reply is cleaned (``chatbot.sanitize.sanitize``) before it is shown: a model, or a file it
quotes, can send escape sequences that never end, and a cleaner that backtracks would take
quadratic time on them. Each input is cleaned at its size and at four times it; the CPU time
(``time.process_time``, the best of ``--runs``) of both, their growth (linear: about 4×;
quadratic: 16×; the goal is ≤ 6×), and the CPU against a reference run in the same process on
the same text: one pass of a plain regular expression removing every control character.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chatbot.sanitize import sanitize  # noqa: E402

INPUTS: list[tuple[str, Callable[[int], str]]] = [
    (
        "prose with colours, links and Chinese",
        lambda n: "word \x1b[31mred\x1b[0m \x1b]8;;http://x\x07link\x1b]8;;\x07 中文\n" * (n // 50),
    ),
    ("an OSC string that never ends", lambda n: "\x1b]" + "a" * n),
    ("CSI introducers that never end", lambda n: "\x1b[" * (n // 2)),
    ("lone escapes", lambda n: "\x1b" * n),
    ("carriage returns", lambda n: "\r" * n),
]
GROWTH_GOAL = 6.0
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def reference(text: str) -> str:
    """One pass of a plain regular expression: every control character but tab and newline."""
    return CONTROLS.sub("", text)


def best_cpu(clean: Callable[[str], object], text: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.process_time()
        clean(text)
        times.append(time.process_time() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="sizes × this (1: 1-4 M chars)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    size = max(1_000, int(1_000_000 * args.scale))
    print(
        f"sanitize: each input at {size:,} and {4 * size:,} characters, CPU (best of "
        f"{args.runs}); reference: one re.sub of every control character; growth goal ≤ "
        f"{GROWTH_GOAL:g}× for 4× the text"
    )
    print()
    print(
        "| input | CPU at 1× | CPU at 4× | growth | reference at 4× | × reference | within goal |"
    )
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for name, make in INPUTS:
        small, large = make(size), make(4 * size)
        one = best_cpu(sanitize, small, args.runs)
        four = best_cpu(sanitize, large, args.runs)
        plain = best_cpu(reference, large, args.runs)
        growth = four / one if one > 0 else 0.0
        worst = max(worst, growth)
        times = f"{four / plain:.1f}×" if plain > 0 else "-"
        print(
            f"| {name} | {one * 1000:.1f} ms | {four * 1000:.1f} ms | {growth:.1f}× | "
            f"{plain * 1000:.1f} ms | {times} | {'yes' if growth <= GROWTH_GOAL else 'NO'} |"
        )
    print()
    print(f"worst growth: {worst:.1f}× for 4× the text (linear: about 4×)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
