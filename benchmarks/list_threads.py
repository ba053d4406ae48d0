"""Benchmark: listing threads with plain SQL vs. reading every thread's state.

    uv run python benchmarks/list_threads.py [--threads 200] [--turns 10] [--db PATH]

Builds a database with the offline model (no network), then times ``Store.list_threads()``
(what `chatbot threads` and /threads do) against deserialising each thread's latest checkpoint.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.engine.models import OfflineChatModel
from chatbot.store.base import thread_config
from chatbot.store.sqlite import Store
from chatbot.threads.backend import LocalBackend


def populate(store: Store, threads: int, turns: int) -> None:
    settings = Settings(_env_file=None, model="offline", summary_trigger="messages:12",
                        summary_keep="messages:4")  # fmt: skip
    graph = build_graph(OfflineChatModel(), OfflineChatModel(role="summary"), settings, store.saver)
    backend = LocalBackend(graph, store)
    for thread in range(threads):
        for turn in range(turns):
            text = f"thread {thread} turn {turn}: " + "some words to make it realistic " * 20
            list(backend.send(f"t{thread:05d}", text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--db", type=Path, default=None)
    args = parser.parse_args()
    db = args.db or Path(tempfile.mkdtemp()) / "bench.sqlite"
    with Store(db) as store:
        if not store.list_threads():
            started = time.perf_counter()
            populate(store, args.threads, args.turns)
            print(f"populated {args.threads} threads x {args.turns} turns "
                  f"in {time.perf_counter() - started:.1f}s")  # fmt: skip
        size = os.path.getsize(db) / 1e6
        started = time.perf_counter()
        listing = store.list_threads()
        sql = time.perf_counter() - started
        graph = build_graph(OfflineChatModel(), checkpointer=store.saver)
        started = time.perf_counter()
        for info in listing:
            graph.get_state(thread_config(info.thread_id))
        full = time.perf_counter() - started
    print(f"{len(listing)} threads, {size:.1f} MB: plain SQL listing {sql * 1000:.1f} ms; "
          f"reading each thread's latest state {full * 1000:.0f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
