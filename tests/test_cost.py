"""What a thread cost: /tokens and the status line price the usage the provider reported, per
model that answered, with genai-prices; summaries separately; unknown models say so; the
offline model is free; /retry, /undo and forks keep what was spent.

The chat and summary models are the real ChatOpenAI against the fake OpenAI server, which
reports usage as OpenAI counts it; expected figures are priced from the server's own requests
with genai-prices' ``calc_price``, never from chatbot's record.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from genai_prices import Usage, calc_price
from langchain_core.messages import AIMessage, HumanMessage
from rich.console import Console

from chatbot.config.settings import Settings
from chatbot.engine.graph import build_graph
from chatbot.engine.models import resolve_models
from chatbot.memory.pricing import format_usd
from chatbot.store.base import thread_config
from chatbot.store.sqlite import Store
from chatbot.terminal.commands import dispatch
from chatbot.terminal.repl import Repl, ScriptedReader
from chatbot.threads.backend import LocalBackend
from tests.fake_openai import FakeOpenAI, RecordedRequest, prompt_tokens
from tests.helpers import SECRET, echo_or_summary, is_summary_request
from tests.reference_tokenizer import count


@dataclass
class World:
    """A graph with real OpenAI-compatible models against the fake server, on a temp SQLite."""

    server: FakeOpenAI
    settings: Settings
    store: Store
    backend: LocalBackend
    repls: list[Repl] = field(default_factory=list)

    def run(self, lines: Sequence[str], thread_id: str = "t1") -> str:
        buffer = io.StringIO()
        repl = Repl(
            backend=self.backend,
            console=Console(file=buffer, width=200, force_terminal=False),
            reader=ScriptedReader(lines),
            settings=self.settings,
            thread_id=thread_id,
            model_name=self.settings.model,
            dispatch=dispatch,
        )
        self.repls.append(repl)
        assert repl.run() == 0
        transcript = buffer.getvalue()
        assert "Traceback" not in transcript and "error:" not in transcript, transcript
        return transcript


@pytest.fixture
def make_world(openai_server: FakeOpenAI, tmp_path: Path) -> Iterator[Callable[..., World]]:
    openai_server.responder = echo_or_summary
    stores: list[Store] = []

    def make(**overrides: Any) -> World:
        values: dict[str, Any] = {
            "model": "gpt-4o-mini",
            "openai_api_key": SECRET,
            "openai_base_url": openai_server.base_url,
            "max_retries": 0,
            "db": str(tmp_path / f"chat{len(stores)}.sqlite"),
            "summary_trigger": "messages:4",
            "summary_keep": "messages:1",
            **overrides,
        }
        settings = Settings(_env_file=None, **values)  # type: ignore[call-arg]
        store = Store(settings.db)
        stores.append(store)
        models = resolve_models(settings)
        graph = build_graph(models.chat, models.summary, settings, store.saver)
        return World(openai_server, settings, store, LocalBackend(graph, store))

    yield make
    for store in stores:
        store.close()


def price(requests: Sequence[RecordedRequest]) -> Decimal:
    """What genai-prices charges for these requests, with the usage the fake server reported
    for each (its prompt count, and the reply it gave counted as it counts it)."""
    total = Decimal(0)
    for request in requests:
        reply = echo_or_summary(request.body)
        usage = Usage(input_tokens=prompt_tokens(request.body), output_tokens=max(1, count(reply)))
        total += calc_price(usage, str(request.body["model"])).total_price
    return total


def row(transcript: str, first_cell: str) -> str:
    """The text of the one /tokens table line starting with ``first_cell``."""
    (line,) = [line for line in transcript.splitlines() if line.startswith(first_cell + " ")]
    return " ".join(line.split()[1:])


def test_tokens_prices_chat_and_summary_calls_as_genai_prices_does(
    make_world: Callable[..., World],
) -> None:
    world = make_world()
    transcript = world.run(["one", "two", "three", "/tokens"])
    summaries = [r for r in world.server.requests if is_summary_request(r)]
    chats = [r for r in world.server.requests if not is_summary_request(r)]
    assert len(summaries) >= 1 and len(chats) == 3
    total = price(world.server.requests)
    assert row(transcript, "cost") == (
        f"{format_usd(total)}, 3 chat calls and {len(summaries)} summary call"
        + "s" * (len(summaries) != 1)
    )
    assert row(transcript, "summaries") == format_usd(price(summaries))
    assert Decimal(0) < price(summaries) < total
    # the status line shows the same total, read from the state's record
    toolbar = world.repls[-1].toolbar()
    assert f" · {format_usd(total)} · /help" in toolbar


def test_the_model_that_answered_each_call_is_priced(make_world: Callable[..., World]) -> None:
    world = make_world(summary_trigger="off")
    transcript = world.run(["one", "/model gpt-4o", "two", "/retry gpt-4.1-nano", "/tokens"])
    models = [r.body["model"] for r in world.server.requests]
    assert models == ["gpt-4o-mini", "gpt-4o", "gpt-4.1-nano"]
    # the retried reply's call still counts: money spent stays spent
    assert row(transcript, "cost").startswith(f"{format_usd(price(world.server.requests))}, 3 chat")
    assert row(transcript, "summaries") == "$0 (none made)"


def test_undo_keeps_what_the_undone_turn_cost_and_a_fork_starts_with_its_origins_record(
    make_world: Callable[..., World],
) -> None:
    world = make_world(summary_trigger="off")
    transcript = world.run(["one", "two", "/undo", "/tokens", "/fork", "/tokens"])
    paid = format_usd(price(world.server.requests))
    first, second = [line for line in transcript.splitlines() if line.startswith("cost ")]
    assert first.split()[1:5] == [f"{paid},", "2", "chat", "calls"]  # the undone turn counted
    # the fork carries what the messages it starts with cost (one call), not the undone turn
    carried = format_usd(price(world.server.requests[:1]))
    assert second.split()[1:5] == [f"{carried},", "1", "chat", "call"]
    three = world.run(["three", "/tokens"], thread_id=world.repls[-1].thread_id)
    requests = world.server.requests
    assert row(three, "cost").startswith(f"{format_usd(price([requests[0], requests[2]]))}, 2 chat")


@pytest.mark.parametrize("after", ["/system be brief", "/retry", "/compact", "three"])
def test_what_an_undone_turn_cost_stays_counted_through_the_next_change(
    after: str, make_world: Callable[..., World]
) -> None:
    # /undo keeps the undone turn's spend in its checkpoint's metadata; the next checkpoint
    # (a system prompt set, a retry's removed reply, a compaction, a new turn) must carry it on.
    world = make_world(summary_trigger="off")
    transcript = world.run(["one", "two", "/undo", after, "/tokens"])
    assert row(transcript, "cost").startswith(f"{format_usd(price(world.server.requests))}, ")


def test_a_model_without_a_price_is_unknown(make_world: Callable[..., World]) -> None:
    world = make_world(model="fake-chat-model-7", summary_trigger="off")
    transcript = world.run(["one", "/tokens"])
    assert row(transcript, "cost").startswith("unknown (no price for fake-chat-model-7)")
    assert " · cost unknown · " in world.repls[-1].toolbar()


def test_the_offline_model_is_free(make_world: Callable[..., World]) -> None:
    world = make_world(model="offline", summary_trigger="messages:2")
    transcript = world.run(["one", "two", "/tokens"])
    assert row(transcript, "cost").startswith("free (offline model), 2 chat calls and 1 summary")
    assert row(transcript, "summaries") == "free (offline model)"
    assert " · free · " in world.repls[-1].toolbar()


def test_a_thread_from_before_cost_records_says_its_older_turns_are_not_counted(
    make_world: Callable[..., World],
) -> None:
    world = make_world(summary_trigger="off")
    old = [HumanMessage("earlier", id="h0"), AIMessage("an old reply", id="a0")]
    world.backend.graph.update_state(
        thread_config("t1"), {"messages": old}, as_node="summarize_conversation"
    )
    transcript = world.run(["/tokens"])
    assert row(transcript, "cost") == "unknown (older turns not recorded)"
    assert " · cost unknown · " in world.repls[-1].toolbar()
    transcript = world.run(["one", "/tokens"])
    paid = format_usd(price(world.server.requests))
    assert row(transcript, "cost").startswith(f"{paid} (older turns not recorded), 1 chat call")
    assert f" · {paid}+ · " in world.repls[-1].toolbar()


def test_a_new_thread_has_cost_nothing(make_world: Callable[..., World]) -> None:
    world = make_world()
    transcript = world.run(["/tokens"])
    assert row(transcript, "cost").startswith("$0, 0 chat calls")


def test_each_call_is_priced_on_its_own_where_the_price_depends_on_its_size() -> None:
    from chatbot.memory.pricing import cost_rows, thread_cost, with_calls

    # Gemini 2.5 Pro charges more per token above 200k input tokens in one call: three calls
    # of 100k cost three times one, not what one call of 300k would
    def call(input_tokens: int) -> AIMessage:
        return AIMessage(
            "ok",
            usage_metadata={"input_tokens": input_tokens, "output_tokens": 1000, "total_tokens": 0},
            response_metadata={"model_name": "gemini-2.5-pro"},
        )

    record: Any = None
    for _ in range(3):
        calls = [("gemini-2.5-pro", call(100_000))]
        record = with_calls((record,), "chat", calls, earlier_turns=False)
    one = calc_price(Usage(input_tokens=100_000, output_tokens=1000), "gemini-2.5-pro")
    expected = format_usd(one.total_price * 3)
    (cost, _) = cost_rows(thread_cost(record, has_turns=True))
    assert cost == ("cost", f"{expected}, 3 chat calls and 0 summary calls")


def test_a_model_named_with_its_provider_in_front_is_priced(
    make_world: Callable[..., World],
) -> None:
    world = make_world(model="openai/gpt-4o-mini", summary_trigger="off")
    transcript = world.run(["one", "/tokens"])
    (request,) = world.server.requests
    usage = Usage(
        input_tokens=prompt_tokens(request.body),
        output_tokens=max(1, count(echo_or_summary(request.body))),
    )
    paid = calc_price(usage, "gpt-4o-mini", provider_id="openai").total_price
    assert row(transcript, "cost").startswith(f"{format_usd(paid)}, 1 chat call")
