"""Benchmark: CPU to show a long streamed reply in the REPL (a real pty) vs. `chatbot ask`.

    uv run python benchmarks/render.py [--words 1500] [--runs 3]

A local fake OpenAI-compatible server (tests/fake_openai.py) streams the same Markdown reply
(paragraphs, a list, a code block), one word per chunk, to `chatbot chat` and to `chatbot ask`,
each started in a pseudo-terminal of 120x40. The figure is the whole process's CPU time
(user + system, start-up included), read from the reaped child's rusage; the REPL must stay
within 1.5x of `ask`, which prints plain text.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pexpect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fake_openai import FakeOpenAI, Reply  # noqa: E402

PROMPT = "bench> "


def markdown_reply(words: int) -> str:
    """About ``words`` words of Markdown: paragraphs, now and then a list or a code block."""
    parts: list[str] = []
    count = 0
    number = 0
    while count < words:
        number += 1
        if number % 5 == 0:
            parts.append("\n".join(f"- item {number}.{i} with a few words" for i in range(4)))
            count += 24
        elif number % 7 == 0:
            parts.append("```python\ndef f(x):\n    return x * 2\n```")
            count += 6
        else:
            parts.append(" ".join(f"word{count + i}" for i in range(60)))
            count += 60
    return "\n\n".join(parts)


def child_cpu(run: Callable[[], None]) -> float:
    """CPU seconds of the children reaped while ``run`` runs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def spawn(args: list[str], env: dict[str, str]) -> pexpect.spawn:
    chatbot = os.path.join(sys.prefix, "bin", "chatbot")
    return pexpect.spawn(
        chatbot, args, env=env, dimensions=(40, 120), encoding="utf-8", timeout=300
    )


def answer_cursor_requests(child: pexpect.spawn, pattern: str) -> None:
    """Wait for ``pattern``, answering prompt_toolkit's cursor-position requests."""
    while child.expect([r"\x1b\[6n", pattern]) == 0:
        child.send("\x1b[40;1R")


def run_repl(env: dict[str, str], server: FakeOpenAI, reply: Reply, last_word: str) -> None:
    child = spawn(["chat", "--thread", "bench"], env)
    answer_cursor_requests(child, r"bench>")
    server.script(reply)
    child.send("tell me everything\r")
    answer_cursor_requests(child, last_word)
    answer_cursor_requests(child, r"bench>")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()


def run_ask(env: dict[str, str], server: FakeOpenAI, reply: Reply) -> None:
    server.script(reply)
    child = spawn(["ask", "tell me everything", "--thread", "ask"], env)
    child.expect(pexpect.EOF)
    child.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--words", type=int, default=1500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chunk-delay", type=float, default=0.002)
    args = parser.parse_args()
    text = markdown_reply(args.words)
    last_word = text.split()[-1].strip("`")
    reply = Reply(text=text, chunk_delay=args.chunk_delay)
    with FakeOpenAI() as server, tempfile.TemporaryDirectory() as folder:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CHATBOT_", "OPENAI_"))}
        env.update(
            TERM="xterm-256color",
            XDG_DATA_HOME=folder,
            CHATBOT_DB=str(Path(folder) / "bench.sqlite"),
            OPENAI_API_KEY="sk-bench",
            OPENAI_BASE_URL=server.base_url,
            CHATBOT_MODEL="bench-model",
            CHATBOT_SUMMARY_TRIGGER="off",
        )
        repl, ask, walls = [], [], []
        for _ in range(args.runs):
            started = time.perf_counter()
            repl.append(child_cpu(lambda: run_repl(env, server, reply, last_word)))
            walls.append(time.perf_counter() - started)
            ask.append(child_cpu(lambda: run_ask(env, server, reply)))
    r, a = statistics.median(repl), statistics.median(ask)
    print(
        f"{len(text.split())} words streamed one per chunk, {args.runs} runs, median CPU of "
        f"the whole process:\n"
        f"  chatbot chat (Markdown, live)  {r:.2f} s   (wall {statistics.median(walls):.1f} s)\n"
        f"  chatbot ask  (plain text)      {a:.2f} s\n"
        f"  ratio chat / ask               {r / a:.2f}x   (target: <= 1.5x)"
    )


if __name__ == "__main__":
    main()
