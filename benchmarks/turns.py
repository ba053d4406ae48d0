"""Benchmark: what a turn costs, in CPU and tokens, against LangGraph's summarization tutorial.

    uv run --group dev python benchmarks/turns.py [--turns 1000] [--windows 291-300,991-1000]
        [--runs 1] [--dir DIR] [--json PATH] [--profile ARM] [--full-sync] [--recall auto]

Four threads advance side by side, one turn each in turn (interleaved, the order rotating every
turn, so the machine's drift falls on all alike), each on its own new SQLite file:

- **tutorial, graph path**: the tutorial's graph as its text has it (``State(MessagesState)``
  with ``summary: str``; ``call_model`` puts ``Summary of conversation earlier: ...`` first;
  ``should_continue`` summarizes past 6 messages; ``summarize_conversation`` sends every
  message and its create or extend prompt, then removes all but the last 2 with
  ``RemoveMessage``) on LangGraph's ``SqliteSaver``: one ``graph.invoke`` a turn;
- **chatbot, graph path**: ``build_graph`` on chatbot's own store (LangGraph's ``SqliteSaver``
  with chatbot's zstd serializer; the graph's ``messages`` and ``summary`` in LangGraph's
  ``DeltaChannel``), with the tutorial's trigger and keep (``messages:6``, ``messages:2``):
  one ``graph.ainvoke`` a turn on the session's event loop (its nodes are async:
  ``chatbot.threads.runner.blocking``), with chatbot's durability (``DURABILITY``: each step's
  checkpoint saved before the next step starts), as chatbot runs its graph; no listing row
  and no search index are written on this path (``LocalBackend`` writes them, on the CLI
  path);
- **tutorial, CLI path**: the same tutorial graph driven by a bare loop over
  ``graph.stream(..., stream_mode="messages")`` keeping the conversation node's tokens, as a
  terminal front end on the tutorial would print them;
- **chatbot, CLI path**: the turn as ``chatbot ask`` and the REPL run it:
  ``LocalBackend.send`` (the thread's lease, the spend so far, three stream modes, events, the
  listing row and the turn's messages indexed for search) consumed by the session's
  ``TurnRunner`` on its event loop, with a display that draws nothing (drawing is the
  terminal's cost, not the turn's).

The tutorial's graph runs with LangGraph's default durability (``async``: a step's checkpoint
is written while the next step runs), as its text has it.

chatbot's store commits with SQLite's ``synchronous=NORMAL`` (it waits for the disk at WAL
checkpoints, not at every commit); the tutorial's plain connection waits at every commit
(``FULL``, the default). ``--full-sync`` runs chatbot's store with ``FULL`` too.

Both sides use chatbot's offline model and make their summary calls at the same turns (the
4th, then every 3rd: 333 in 1,000 turns). The offline summary model is extractive (one bullet
per user message folded in, the earlier bullets kept, the newest that fit in
``CHATBOT_MAX_SUMMARY_TOKENS``); the tutorial's request carries its messages as chat messages
rather than chatbot's ``<conversation>`` text, so its summarize call gets the same summarizer
reading its user messages from there. User messages are 3-120 words of common English,
seeded: both sides of a comparison send the same ones, the graph path's and the CLI path's
differ (chatbot counts tokens with a cache by text: its CLI arm must not find the counts its
graph arm paid for).

chatbot runs with recall off by default, the tutorial's shape (it has no tools): ``--recall
auto`` runs it as shipped, where once there is a summary each chat call offers the recall tool,
whose definition and note the offline model reports as input tokens, as a provider counts them,
and the offline model calls it for a question about something said earlier (a few of these
random messages read as one), a chat call more. docs/benchmarks.md quotes both.

CPU time is ``time.process_time`` around each turn (every thread of the process: LangGraph
writes checkpoints on its own), a turn's mean over each window of turns (median over
``--runs``). Tokens are every call's input and output as the offline model reports them (the
estimate tokenizer for both sides: each message's text plus 4 per message), summary calls
included. Prints the ratios of chatbot to the tutorial. ``--profile ARM`` runs cProfile (CPU
time of each thread) around that arm's turns in the last window and prints its top functions;
cProfile slows small functions most, so the timings of that run are not comparable.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import html
import io
import json
import os
import pstats
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage, SystemMessage  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402

from benchmarks._machine import machine  # noqa: E402
from benchmarks.concurrency import WORDS  # noqa: E402
from chatbot.config.settings import Settings  # noqa: E402
from chatbot.engine.graph import DURABILITY, build_graph  # noqa: E402
from chatbot.engine.models import OFFLINE_MAX_INPUT_TOKENS, OfflineChatModel, extractive_summary  # noqa: E402
from chatbot.memory.prompts import summary_request  # noqa: E402
from chatbot.memory.recall import definition_tokens  # noqa: E402
from chatbot.memory.tokens import ESTIMATE, TokenCounter, Tokenizer, estimate_tokens  # noqa: E402
from chatbot.store.base import thread_config  # noqa: E402
from chatbot.store.search import recaller  # noqa: E402
from chatbot.store.sqlite import Store  # noqa: E402
from chatbot.threads.backend import LocalBackend  # noqa: E402
from chatbot.threads.events import Event  # noqa: E402
from chatbot.threads.runner import TurnRunner, blocking  # noqa: E402

LEAKY_PREFIXES = ("CHATBOT_", "OPENAI_", "LANGSMITH_", "LANGCHAIN_")
TRIGGER, KEEP = 6, 2
"""The tutorial's: summarize past 6 messages, keep the last 2."""
ARMS = ("tutorial graph", "chatbot graph", "tutorial CLI", "chatbot CLI")
GOALS = {"graph": 1.05, "CLI": 1.25, "tokens": 1.0}
PROFILE_OUT: Path | None = None
"""Where ``--profile-out`` saves the profile (pstats), for ``python -m pstats`` or a diff."""

# --- the models ---------------------------------------------------------------------------


@dataclass
class Tally:
    """Tokens and calls one side's models reported, per role."""

    tokens: dict[str, int] = field(default_factory=lambda: {"chat": 0, "summary": 0})
    calls: dict[str, int] = field(default_factory=lambda: {"chat": 0, "summary": 0})

    @property
    def total(self) -> int:
        return sum(self.tokens.values())


TALLIES: dict[str, Tally] = {}


COUNTERS: dict[str, TokenCounter] = {}


class Counted(OfflineChatModel):
    """chatbot's offline model, adding the usage it reports to its arm's :class:`Tally`.

    It counts as the offline model does (the estimate), but with a counter of the arm's own:
    the estimate's counts are cached by text, and an arm must not find counts another arm's
    model (or chatbot's code, which counts with the estimate too) has already paid for.
    """

    arm: str = ""

    def _usage(self, messages: list[BaseMessage], text: str, tools: Any = None) -> dict[str, int]:
        counter = COUNTERS[self.arm]
        input_tokens, output_tokens = counter.raw(messages), counter.text(text)
        if tools:  # (chatbot's recall tool, offered once there is a summary: a provider counts it)
            input_tokens += definition_tokens(counter)
        tally = TALLIES[self.arm]
        tally.tokens[self.role] += input_tokens + output_tokens
        tally.calls[self.role] += 1
        return {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        }


class TutorialSummarizer(Counted):
    """The offline summarizer for the tutorial's request (the messages, then the create or
    extend prompt): the same extractive summary, of the user messages sent."""

    def _reply(self, messages: list[BaseMessage]) -> str:
        folded = "".join(
            f"<user>{html.escape(m.text)}</user>" for m in messages[:-1] if m.type == "human"
        )
        request = f"{messages[-1].text}\n<conversation>{folded}</conversation>"
        return extractive_summary(request, self.max_summary_tokens)


def offline(arm: str, role: Literal["chat", "summary"], settings: Settings) -> Counted:
    """The offline model as chatbot makes it (``chatbot.engine.models.make_model``), counted."""
    tutorial = arm.startswith("tutorial")
    kind = TutorialSummarizer if tutorial and role == "summary" else Counted
    return kind(
        arm=arm,
        role=role,
        max_summary_tokens=settings.max_summary_tokens,
        profile={"max_input_tokens": OFFLINE_MAX_INPUT_TOKENS},
    )


# --- the tutorial's graph -----------------------------------------------------------------


class State(MessagesState):
    summary: str


def tutorial_nodes(chat: Any, summarizer: Any) -> tuple[Callable[..., Any], ...]:
    """The tutorial's ``call_model``, ``summarize_conversation`` and ``should_continue``, as
    written (its ``model`` is two here: the offline model answers as a chat model or as a
    summarizer, not both)."""

    def call_model(state: State) -> dict[str, Any]:
        summary = state.get("summary", "")
        if summary:
            system_message = f"Summary of conversation earlier: {summary}"
            messages = [SystemMessage(content=system_message)] + state["messages"]
        else:
            messages = state["messages"]
        response = chat.invoke(messages)
        return {"messages": response}

    def summarize_conversation(state: State) -> dict[str, Any]:
        summary = state.get("summary", "")
        if summary:
            summary_message = (
                f"This is summary of the conversation to date: {summary}\n\n"
                "Extend the summary by taking into account the new messages above:"
            )
        else:
            summary_message = "Create a summary of the conversation above:"
        messages = state["messages"] + [HumanMessage(content=summary_message)]
        response = summarizer.invoke(messages)
        delete_messages = [RemoveMessage(id=m.id) for m in state["messages"][:-KEEP]]
        return {"summary": response.content, "messages": delete_messages}

    def should_continue(state: State) -> Literal["summarize_conversation", "__end__"]:
        if len(state["messages"]) > TRIGGER:
            return "summarize_conversation"
        return END

    return call_model, summarize_conversation, should_continue


def tutorial_graph(chat: Any, summarizer: Any, checkpointer: Any) -> Any:
    """LangGraph's chatbot-summarization tutorial, as written."""
    call_model, summarize_conversation, should_continue = tutorial_nodes(chat, summarizer)
    workflow = StateGraph(State)
    workflow.add_node("conversation", call_model)
    workflow.add_node(summarize_conversation)
    workflow.add_edge(START, "conversation")
    workflow.add_conditional_edges("conversation", should_continue)
    workflow.add_edge("summarize_conversation", END)
    return workflow.compile(checkpointer=checkpointer)


# --- the arms -----------------------------------------------------------------------------


class Quiet:
    """A turn display that draws nothing (see :class:`chatbot.threads.runner.Display`)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def show(self, event: Event) -> None:
        self.events.append(event)

    def tick(self) -> None:
        pass


@dataclass
class Arm:
    name: str
    turn: Callable[[str], None]
    close: Callable[[], None]
    cpu: list[float] = field(default_factory=list)
    """Seconds of CPU of each turn."""


RECALL = "off"
"""chatbot's ``CHATBOT_RECALL`` in the run (``--recall``): ``off``, the tutorial's shape."""


def settings_for_chatbot() -> Settings:
    return Settings(
        _env_file=None,
        model="offline",
        summary_trigger=f"messages:{TRIGGER}",
        summary_keep=f"messages:{KEEP}",
        recall=RECALL,
    )


def make_arms(folder: Path, full_sync: bool = False) -> list[Arm]:
    """The four arms, each on a new SQLite file in ``folder``; with ``full_sync`` chatbot's
    store waits for the disk at every commit, as the tutorial's plain connection does."""
    settings = settings_for_chatbot()
    TALLIES.clear()
    arms: list[Arm] = []
    for name in ARMS:
        side, path = name.split()
        arm = name.replace(" ", "-")
        TALLIES[arm] = Tally()
        COUNTERS[arm] = TokenCounter(
            Tokenizer(ESTIMATE.name, functools.partial(estimate_tokens, lines={}))
        )
        chat, summary = offline(arm, "chat", settings), offline(arm, "summary", settings)
        if side == "tutorial":
            conn = sqlite3.connect(folder / f"{arm}.sqlite", check_same_thread=False)
            graph = tutorial_graph(chat, summary, SqliteSaver(conn))
            arms.append(Arm(name, tutorial_turn(graph, path), conn.close))
        else:
            store = Store(folder / f"{arm}.sqlite")
            if full_sync:
                with store.lock:
                    store.conn.execute("PRAGMA synchronous = FULL")
            graph = build_graph(chat, summary, settings, store.saver, recaller(store))
            arms.append(Arm(name, chatbot_turn(graph, store, path), store.close))
    return arms


def tutorial_turn(graph: Any, path: str) -> Callable[[str], None]:
    config = {"configurable": {"thread_id": "1"}}
    if path == "graph":
        return lambda text: graph.invoke({"messages": [HumanMessage(content=text)]}, config)

    def streamed(text: str) -> None:
        shown: list[str] = []
        for message, metadata in graph.stream(
            {"messages": [HumanMessage(content=text)]}, config, stream_mode="messages"
        ):
            if metadata["langgraph_node"] == "conversation":
                shown.append(message.text)
        assert shown, "the tutorial's loop streamed no reply"

    return streamed


def chatbot_turn(graph: Any, store: Store, path: str) -> Callable[[str], None]:
    if path == "graph":
        config = thread_config("1")
        return lambda text: blocking(
            graph.ainvoke({"messages": [HumanMessage(content=text)]}, config, durability=DURABILITY)
        )
    backend = LocalBackend(graph, store)
    runner = TurnRunner()

    def sent(text: str) -> None:
        display = Quiet()
        outcome = runner.run(backend.send("1", text), display)
        if outcome.error is not None:
            raise outcome.error
        assert display.events, "the turn gave no events"

    return sent


# --- messages -----------------------------------------------------------------------------


def messages(turns: int, seed: int = 21) -> list[str]:
    """User messages of 3-120 words (most short, some long, as people write), seeded."""
    rng = random.Random(seed)
    weights = [1.0 / (rank + 8) for rank in range(len(WORDS))]
    out: list[str] = []
    for number in range(1, turns + 1):
        length = min(120, max(3, int(rng.lognormvariate(3.0, 0.8))))
        words = rng.choices(WORDS, weights, k=length)
        text = " ".join(words)
        out.append(f"{text[0].upper()}{text[1:]} ({number})?")
    return out


# --- running ------------------------------------------------------------------------------


def windows_of(text: str, turns: int) -> list[tuple[int, int]]:
    """``291-300,991-1000`` as ``[(291, 300), (991, 1000)]``, checked against ``turns``."""
    out = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        window = (int(first), int(last or first))
        if not 1 <= window[0] <= window[1] <= turns:
            raise SystemExit(f"error: window {part.strip()} is not within turns 1-{turns}")
        out.append(window)
    return out


def run_once(
    texts: dict[str, list[str]],
    folder: Path,
    profile: str | None,
    last_window: tuple[int, int],
    full_sync: bool = False,
) -> tuple[list[Arm], dict[str, Tally], str]:
    """All the turns on every arm, interleaved; the arms with their CPU per turn. The graph
    path's two arms send ``texts["graph"]``, the CLI path's ``texts["CLI"]``: the same
    messages on both sides of a comparison, others across them, so that no count chatbot's
    graph arm cached serves its CLI arm."""
    arms = make_arms(folder, full_sync)
    profiler = cProfile.Profile(time.thread_time) if profile else None
    in_threads: list[cProfile.Profile] = []

    def profile_thread(*_: Any) -> None:  # (LangGraph writes checkpoints on its own threads)
        threading.setprofile(None)
        in_thread = cProfile.Profile(time.thread_time)
        in_threads.append(in_thread)
        in_thread.enable()

    gc.collect()
    gc.freeze()  # what was made before the turns (imports, graphs) is not walked again
    try:
        for index in range(len(texts["graph"])):
            number = index + 1
            order = arms[index % len(arms) :] + arms[: index % len(arms)]
            for arm in order:
                profiling = (
                    profiler is not None
                    and arm.name == profile
                    and last_window[0] <= number <= last_window[1]
                )
                if profiling:
                    threading.setprofile(profile_thread)
                    profiler.enable()  # type: ignore[union-attr]
                started = time.process_time()
                arm.turn(texts[arm.name.split()[1]][index])
                arm.cpu.append(time.process_time() - started)
                if profiling:
                    profiler.disable()  # type: ignore[union-attr]
                    threading.setprofile(None)
    finally:
        for arm in arms:
            arm.close()
        gc.unfreeze()
    report = ""
    if profiler is not None:
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        for in_thread in in_threads:
            stats.add(in_thread)
        if PROFILE_OUT is not None:
            stats.dump_stats(PROFILE_OUT)
        stats.sort_stats("tottime").print_stats(60)
        report = out.getvalue()
    return arms, {name: TALLIES[name] for name in TALLIES}, report


def instructions_tokens() -> dict[str, int]:
    """Tokens of chatbot's summary request beyond the messages and the summary (create, extend)."""
    counter = TokenCounter(ESTIMATE)
    settings = settings_for_chatbot()
    limit = settings.max_summary_tokens
    create = counter.raw(summary_request([], "", max_summary_tokens=limit))
    extend = counter.raw(summary_request([], "x", max_summary_tokens=limit)) - counter.text("x")
    return {"create": create, "extend": extend}


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--windows", default="291-300,991-1000", help="turns to report, N-M,...")
    parser.add_argument("--runs", type=int, default=1, help="whole runs; the table has medians")
    parser.add_argument("--dir", type=Path, default=None, help="where the databases go (kept)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    parser.add_argument("--profile", choices=ARMS, default=None, help="cProfile one arm")
    parser.add_argument("--profile-out", type=Path, default=None, help="also save its pstats")
    parser.add_argument(
        "--recall",
        choices=("auto", "off"),
        default="off",
        help="chatbot's recall tool: off (the tutorial's shape, the default) or auto (as "
        "shipped: offered once there is a summary)",
    )
    parser.add_argument(
        "--full-sync",
        action="store_true",
        help="chatbot's SQLite waits for the disk at every commit too (synchronous=FULL)",
    )
    args = parser.parse_args(argv)
    global PROFILE_OUT, RECALL
    PROFILE_OUT = args.profile_out
    RECALL = args.recall
    windows = windows_of(args.windows, args.turns)
    for name in list(os.environ):  # offline, default settings
        if name.upper().startswith(LEAKY_PREFIXES):
            del os.environ[name]
    texts = {"graph": messages(args.turns, seed=21), "CLI": messages(args.turns, seed=22)}
    about = machine(sqlite=True, date=True)
    print(
        f"turns · {about['cpu']} × {about['cpus']}, Python {about['python']}, "
        f"SQLite {about['sqlite']}, commit {about['commit']}; load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{args.turns} turns × 4 arms, interleaved; trigger messages:{TRIGGER}, keep "
        f"messages:{KEEP} (the tutorial's), offline model; recall {args.recall}; "
        f"{args.runs} run(s); SQLite waits "
        f"for the disk at {'every commit' if args.full_sync else 'WAL checkpoints only'} for "
        "chatbot (synchronous=" + ("FULL" if args.full_sync else "NORMAL") + "), at every "
        "commit for the tutorial (FULL, a plain connection's default)"
    )
    cpu: dict[str, dict[tuple[int, int], list[float]]] = {a: {w: [] for w in windows} for a in ARMS}
    tallies: dict[str, Tally] = {}
    started = time.perf_counter()
    for run in range(args.runs):
        folder = Path(tempfile.mkdtemp(prefix="chatbot-turns-")) if args.dir is None else args.dir
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.sqlite*"):
            old.unlink()
        try:
            arms, tallies, profiled = run_once(
                texts, folder, args.profile, windows[-1], args.full_sync
            )
        finally:
            if args.dir is None:
                shutil.rmtree(folder, ignore_errors=True)
        for arm in arms:
            for first, last in windows:
                turns = arm.cpu[first - 1 : last]
                cpu[arm.name][(first, last)].append(sum(turns) / len(turns))
        if profiled:
            print(f"\ncProfile of {args.profile}, turns {windows[-1][0]}-{windows[-1][1]}:")
            print(profiled)
        print(f"run {run + 1}: {time.perf_counter() - started:.0f} s", file=sys.stderr)

    rows: list[dict[str, Any]] = []
    header = "| measure | chatbot | tutorial | ratio | goal |"
    print(f"\n{header}\n|---|---|---|---|---|")
    for path in ("graph", "CLI"):
        for window in windows:
            ours = median(cpu[f"chatbot {path}"][window])
            theirs = median(cpu[f"tutorial {path}"][window])
            ratio = ours / theirs if theirs else float("nan")
            measure = f"CPU per turn, {path} path, turns {window[0]}-{window[1]}"
            rows.append(
                {
                    "measure": measure,
                    "chatbot_ms": round(ours * 1000, 3),
                    "tutorial_ms": round(theirs * 1000, 3),
                    "ratio": round(ratio, 3),
                    "goal": GOALS[path],
                    "runs_chatbot_ms": [round(v * 1000, 3) for v in cpu[f"chatbot {path}"][window]],
                    "runs_tutorial_ms": [
                        round(v * 1000, 3) for v in cpu[f"tutorial {path}"][window]
                    ],
                }
            )
            print(
                f"| {measure} | {ours * 1000:.2f} ms | {theirs * 1000:.2f} ms | {ratio:.2f}× "
                f"| ≤ {GOALS[path]}× |"
            )
    details: dict[str, Any] = {}
    for path in ("graph", "CLI"):
        ours_t, theirs_t = tallies[f"chatbot-{path}"], tallies[f"tutorial-{path}"]
        ratio = ours_t.total / theirs_t.total if theirs_t.total else float("nan")
        measure = f"tokens over {args.turns} turns, summary calls included ({path} path's messages)"
        print(
            f"| {measure} | {ours_t.total:,} | {theirs_t.total:,} | {ratio:.2f}× "
            f"| ≤ {GOALS['tokens']}× |"
        )
        rows.append(
            {
                "measure": measure,
                "chatbot": ours_t.total,
                "tutorial": theirs_t.total,
                "ratio": round(ratio, 3),
                "goal": GOALS["tokens"],
            }
        )
        details[path] = {
            side: {"tokens": tally.tokens, "calls": tally.calls}
            for side, tally in (("chatbot", ours_t), ("tutorial", theirs_t))
        }
    overhead = instructions_tokens()
    print()
    for path, sides in details.items():
        ours_d, theirs_d = sides["chatbot"], sides["tutorial"]
        print(
            f"tokens, {path} path's messages: chatbot {ours_d['tokens']['chat']:,} in "
            f"{ours_d['calls']['chat']} chat calls, {ours_d['tokens']['summary']:,} in "
            f"{ours_d['calls']['summary']} summary calls; the tutorial "
            f"{theirs_d['tokens']['chat']:,} in {theirs_d['calls']['chat']}, "
            f"{theirs_d['tokens']['summary']:,} in {theirs_d['calls']['summary']}"
        )
    print(
        f"chatbot's summary request beyond the messages and the summary: {overhead['create']} "
        f"tokens (create), {overhead['extend']} (extend)"
    )
    if args.json:
        document = {
            "machine": about,
            "turns": args.turns,
            "runs": args.runs,
            "windows": windows,
            "rows": rows,
            "tokens": {**details, "instructions": overhead},
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
