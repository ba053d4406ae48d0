"""Benchmark: where a turn's CPU goes beyond the LangGraph tutorial's, part by part.

    uv run --group dev python benchmarks/turn_parts.py [--turns 600] [--skip 100] [--runs 5]
        [--json PATH]

``benchmarks/turns.py`` says how much heavier chatbot's turn is than the tutorial's; this says
which part of chatbot's graph the difference is in. Each row is a pair of graphs that differ
in one part, run side by side in one process (one turn each in turn, the order alternating),
in memory (LangGraph's ``InMemorySaver``: no database, so the store's share is not in here;
``turns.py`` has it), on the offline model with the tutorial's trigger and keep:

- **state**: the tutorial's graph, then the same graph on chatbot's state (eight keys, each
  checked when written, and its input and output schemas);
- **conversation node**: tutorial nodes on chatbot's state, then chatbot's ``conversation``
  in place of ``call_model`` (the guard, counting the request, the usage record; an async
  node, so that graph runs with ``ainvoke`` on the session's loop, as every graph with one
  of chatbot's nodes here does);
- **summarize node**: the same, with chatbot's ``summarize_conversation`` in place of the
  tutorial's (what it counts and plans, its summary request, which the offline model reads
  and counts as a provider would);
- **routers**: the same, with chatbot's ``fold_first`` (from START), ``should_continue`` and
  ``after_summary``;
- **whole graph**: the tutorial's graph, then chatbot's ``build_graph``, run with chatbot's
  durability (``DURABILITY``: each step's checkpoint saved before the next starts), as chatbot
  runs it; every other graph here runs with LangGraph's default (``async``), as the tutorial
  does.

CPU time is ``time.process_time`` around each turn, the mean over the turns after ``--skip``
(median over ``--runs``). Prints µs a turn and the ratio for each pair; a pair's difference
is what that part costs a turn (the parts' differences add up to about the whole's). Both
graphs of a pair make the same model calls (``--json`` has them, from the last run).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import statistics
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langchain_core.messages import HumanMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from benchmarks import turns  # noqa: E402
from benchmarks._machine import machine  # noqa: E402
from chatbot.engine import graph as chatbot_graph  # noqa: E402
from chatbot.engine.runsettings import RunResolver  # noqa: E402
from chatbot.memory.state import ChatInput, Context, RunState, State  # noqa: E402
from chatbot.memory.tokens import ESTIMATE, TokenCounter, Tokenizer, estimate_tokens  # noqa: E402
from chatbot.threads.runner import blocking  # noqa: E402

Graph = Any
Maker = Callable[[], Graph]


def _models(arm: str, *, tutorials_summary: bool) -> tuple[turns.Counted, turns.Counted]:
    """The offline chat and summary models, counted for ``arm`` (see ``turns.Counted``). The
    summary model reads the request it is given: chatbot's (the folded messages in one
    ``<conversation>`` text), or with ``tutorials_summary`` the tutorial's (the messages,
    then its create or extend prompt; ``turns.TutorialSummarizer``), so that both sides keep
    the same summaries."""
    settings = turns.settings_for_chatbot()
    turns.TALLIES[arm] = turns.Tally()
    turns.COUNTERS[arm] = TokenCounter(
        Tokenizer(ESTIMATE.name, functools.partial(estimate_tokens, lines={}))
    )
    chat = turns.offline(arm, "chat", settings)
    as_arm = f"tutorial-{arm}" if tutorials_summary else arm  # (how turns.offline tells them)
    summarizer = turns.offline(as_arm, "summary", settings)
    summarizer.arm = arm
    return chat, summarizer


def tutorial(arm: str) -> Graph:
    chat, summarizer = _models(arm, tutorials_summary=True)
    return turns.tutorial_graph(chat, summarizer, InMemorySaver())


SHIPPED: weakref.WeakSet[Graph] = weakref.WeakSet()
"""The graphs ``build_graph`` made: run with its durability, as chatbot runs them."""
AWAITED: weakref.WeakSet[Graph] = weakref.WeakSet()
"""The graphs with one of chatbot's nodes, which are async: run with ``ainvoke`` on the
session's loop, as chatbot runs them (the others with ``invoke``, as the tutorial does)."""


def chatbot(arm: str) -> Graph:
    chat, summarizer = _models(arm, tutorials_summary=False)
    graph = chatbot_graph.build_graph(
        chat, summarizer, turns.settings_for_chatbot(), InMemorySaver()
    )
    SHIPPED.add(graph)
    AWAITED.add(graph)
    return graph


def _unannotated(function: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``function`` without the tutorial's ``State`` annotation, which would make LangGraph
    read the tutorial's schema beside chatbot's."""

    def unannotated(state):  # type: ignore[no-untyped-def]
        return function(state)

    unannotated.__name__ = function.__name__
    return unannotated


def mixed(arm: str, *, conversation: bool, summarize: bool, routers: bool) -> Graph:
    """The tutorial's graph on chatbot's state, with the chosen parts of chatbot's."""
    chat, summarizer = _models(arm, tutorials_summary=not summarize)
    resolver = RunResolver(turns.settings_for_chatbot(), chat, summarizer)
    call_model, summarize_conversation, should_continue = map(
        _unannotated, turns.tutorial_nodes(chat, summarizer)
    )
    builder = StateGraph(
        RunState, context_schema=Context, input_schema=ChatInput, output_schema=State
    )
    builder.add_node(
        "conversation",
        chatbot_graph._node(chatbot_graph.conversation, resolver) if conversation else call_model,
    )
    builder.add_node(
        "summarize_conversation",
        chatbot_graph._node(chatbot_graph.summarize_conversation, resolver)
        if summarize
        else summarize_conversation,
    )
    if routers:
        builder.add_conditional_edges(
            START,
            chatbot_graph._router(chatbot_graph.fold_first, resolver),
            ["summarize_conversation", "conversation", END],
        )
        builder.add_conditional_edges(
            "conversation",
            chatbot_graph._router(chatbot_graph.should_continue, resolver),
            ["summarize_conversation", END],
        )
        builder.add_conditional_edges(
            "summarize_conversation", chatbot_graph.after_summary, ["conversation", END]
        )
    else:
        builder.add_edge(START, "conversation")
        builder.add_conditional_edges(
            "conversation", should_continue, ["summarize_conversation", END]
        )
        builder.add_edge("summarize_conversation", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    if conversation or summarize:
        AWAITED.add(graph)
    return graph


PAIRS: list[tuple[str, Callable[[str], Graph], Callable[[str], Graph]]] = [
    (
        "state",
        tutorial,
        functools.partial(mixed, conversation=False, summarize=False, routers=False),
    ),
    (
        "conversation node",
        functools.partial(mixed, conversation=False, summarize=False, routers=False),
        functools.partial(mixed, conversation=True, summarize=False, routers=False),
    ),
    (
        "summarize node",
        functools.partial(mixed, conversation=False, summarize=False, routers=False),
        functools.partial(mixed, conversation=False, summarize=True, routers=False),
    ),
    (
        "routers",
        functools.partial(mixed, conversation=False, summarize=False, routers=False),
        functools.partial(mixed, conversation=False, summarize=False, routers=True),
    ),
    ("whole graph", tutorial, chatbot),
]


def pair(
    make_a: Callable[[str], Graph], make_b: Callable[[str], Graph], texts: list[str], skip: int
) -> tuple[float, float]:
    """Seconds of CPU a turn for each of two graphs, turns interleaved (after ``skip``)."""
    graphs = {"a": make_a("a"), "b": make_b("b")}
    cpu: dict[str, list[float]] = {"a": [], "b": []}
    config = {"configurable": {"thread_id": "1"}}
    gc.collect()
    gc.freeze()
    try:
        for index, text in enumerate(texts):
            for name in ("a", "b") if index % 2 else ("b", "a"):
                graph = graphs[name]
                said = {"messages": [HumanMessage(text)]}
                started = time.process_time()
                durability = chatbot_graph.DURABILITY if graph in SHIPPED else None
                if graph in AWAITED:
                    blocking(graph.ainvoke(said, config, durability=durability))
                else:
                    graph.invoke(said, config, durability=durability)
                cpu[name].append(time.process_time() - started)
    finally:
        gc.unfreeze()
    return statistics.mean(cpu["a"][skip:]), statistics.mean(cpu["b"][skip:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--skip", type=int, default=100, help="first turns left out (warm-up)")
    parser.add_argument("--runs", type=int, default=5, help="the table has medians")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if not 0 <= args.skip < args.turns:
        parser.error("--skip must be below --turns")
    texts = turns.messages(args.turns, seed=21)
    about = machine(date=True)
    print(
        f"turn parts · {about['cpu']} × {about['cpus']}, Python {about['python']}, commit "
        f"{about['commit']}; {args.turns} turns a pair ({args.skip} left out), in memory, "
        f"offline model, trigger messages:{turns.TRIGGER}, keep messages:{turns.KEEP}; "
        f"{args.runs} run(s)\n"
    )
    print("| part | without | with | difference | ratio |\n|---|---|---|---|---|")
    rows = []
    for name, make_a, make_b in PAIRS:
        runs = [pair(make_a, make_b, texts, args.skip) for _ in range(args.runs)]
        without = statistics.median(a for a, _ in runs)
        with_part = statistics.median(b for _, b in runs)
        difference = statistics.median(b - a for a, b in runs)
        ratio = statistics.median(b / a for a, b in runs)
        calls = {"without": turns.TALLIES["a"].calls, "with": turns.TALLIES["b"].calls}
        rows.append(
            {
                "part": name,
                "without_us": round(without * 1e6, 1),
                "with_us": round(with_part * 1e6, 1),
                "difference_us": round(difference * 1e6, 1),
                "ratio": round(ratio, 3),
                "calls": calls,
            }
        )
        print(
            f"| {name} | {without * 1e6:,.0f} µs | {with_part * 1e6:,.0f} µs | "
            f"{difference * 1e6:+,.0f} µs | {ratio:.3f}× |",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps({"machine": about, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
