"""The user's memories across threads: noted at a fold, carried by every thread's requests,
forgotten for good, corrected by a newer value (docs/memory.md#memories-across-threads)."""

from __future__ import annotations

import json
from typing import Any

from tests.fake_openai import FakeOpenAI, RecordedRequest
from tests.helpers import Cli, chat_requests, is_summary_request, ok, summarizing

FACTS_A = "<memories>\n- The user's name is Lance\n- Allergic to peanuts\n- Writes Rust\n</memories>"


def memories_block(request: RecordedRequest) -> str:
    """The system message of a chat request that carries the user's memories ('' if none)."""
    for message in request.messages:
        text = message.get("content") if message.get("role") == "system" else ""
        if isinstance(text, str) and text.startswith("What you remember about the user"):
            return text
    return ""


def scripted(summary_reply: str) -> Any:
    def respond(body: dict[str, Any]) -> str:
        if is_summary_request(body):
            return summary_reply
        return "noted."

    return respond


def memory_list(cli: Cli) -> list[dict[str, Any]]:
    result = ok(cli.invoke("memory", "list", "--json", "--db", str(cli.db)))
    return list(json.loads(result.stdout))


def test_facts_told_in_one_thread_reach_the_next_and_forgotten_ones_do_not(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    openai_server.responder = scripted(f"- Lance chats about Rust.\n{FACTS_A}")
    env = summarizing()
    ok(cli.ask("I'm Lance", thread="a", **env))
    ok(cli.ask("I'm allergic to peanuts", thread="a", **env))
    ok(cli.ask("I write Rust", thread="a", **env))
    summaries = [r for r in openai_server.requests if is_summary_request(r)]
    assert summaries and "<memories>" in summaries[0].messages[0]["content"]
    assert "<memories>" not in cli.show("a")["summary"]  # (never part of the summary)

    openai_server.requests.clear()
    ok(cli.ask("What should I cook tonight?", thread="b"))
    (first,) = chat_requests(openai_server)
    block = memories_block(first)
    for fact in ("The user's name is Lance", "Allergic to peanuts", "Writes Rust"):
        assert fact in block
    roles = [m["role"] for m in first.messages]
    assert roles[0] == "system" and memories_block(RecordedRequest("", None, {"messages": first.messages[:1]}))

