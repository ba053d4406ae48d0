"""The user's memories across threads, through the CLI against the scripted OpenAI-compatible
server: noted at a fold (the summary call's own reply), carried by every thread's requests,
forgotten for good, corrected by a newer value, kept out of other threads' exports, never
holding a secret (docs/memory.md#memories-across-threads)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.fake_openai import FakeOpenAI, RecordedRequest
from tests.helpers import (
    SECRET,
    Cli,
    chat_requests,
    is_summary_request,
    ok,
    summarizing,
    summary_requests,
    worth_folding,
)

HEADING = "What you remember about the user"
LANCE = ["The user's name is Lance", "Allergic to peanuts", "Lives in Lisbon"]


def memories_block(request: RecordedRequest) -> str:
    """The system message of a chat request that carries the user's memories ('' if none)."""
    for message in request.messages:
        text = message.get("content") if message.get("role") == "system" else ""
        if isinstance(text, str) and text.startswith(HEADING):
            return text
    return ""


def facts_reply(*facts: str, summary: str = "- the user introduced themselves") -> str:
    """A summary call's reply: the summary, then its memories section."""
    listed = "".join(f"- {fact}\n" for fact in facts)
    return f"{summary}\n\n<memories>\n{listed}</memories>"


def answering(summary_reply: Any) -> Any:
    """A responder: ``summary_reply`` (text, or a function of the request) to summary calls,
    ``noted.`` to chat calls."""

    def respond(body: dict[str, Any]) -> str:
        if is_summary_request(body):
            return summary_reply(body) if callable(summary_reply) else summary_reply
        return "noted."

    return respond


def listed(cli: Cli, *args: str) -> list[dict[str, Any]]:
    result = ok(cli.invoke("memory", "list", "--json", *args, "--db", str(cli.db)))
    return list(json.loads(result.stdout))


def repl(cli: Cli, thread: str, *lines: str, **env: str) -> str:
    """The REPL on ``thread``, fed ``lines``; its output."""
    stdin = "".join(f"{line}\n" for line in (*lines, "/exit"))
    return ok(
        cli.invoke("chat", "--thread", thread, "--db", str(cli.db), stdin=stdin, **env)
    ).output


def learn_lance(cli: Cli, openai_server: FakeOpenAI) -> None:
    """Thread a: three messages, a fold whose summary call notes the three facts."""
    openai_server.responder = answering(facts_reply(*LANCE))
    for text in ("I'm Lance", "I'm allergic to peanuts", "I live in Lisbon"):
        ok(cli.ask(worth_folding(text), thread="a", **summarizing()))


def test_facts_told_in_one_thread_reach_the_next_forgotten_ones_do_not_corrections_win(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    learn_lance(cli, openai_server)
    (asked, *_) = summary_requests(openai_server)  # the summary call asked for the facts too
    assert "<memories>" in asked.messages[0]["content"]
    assert "<memories>" not in cli.show("a")["summary"]  # parsed off, never in the summary
    assert [m["text"] for m in listed(cli)] == LANCE
    assert {m["thread_id"] for m in listed(cli)} == {"a"}

    # Thread B's first request carries them, after the system prompt, before anything else.
    openai_server.requests.clear()
    ok(cli.ask("What should I cook tonight?", thread="b", CHATBOT_SYSTEM_PROMPT="Be brief."))
    (first,) = chat_requests(openai_server)
    assert [m["role"] for m in first.messages] == ["system", "system", "user"]
    assert first.messages[0]["content"] == "Be brief."
    assert all(fact in memories_block(first) for fact in LANCE)

    # Forgotten in the REPL: gone from the store and from thread C's request.
    said = repl(cli, "b", "/memory forget peanuts")
    assert "forgotten" in said and "Allergic to peanuts" in said
    assert "peanuts" not in json.dumps(listed(cli, "--all"))
    openai_server.requests.clear()
    ok(cli.ask("Any dessert ideas?", thread="c"))
    (third,) = chat_requests(openai_server)
    assert "peanuts" not in json.dumps(third.body)
    assert "Lance" in memories_block(third)

    # A correction in D, noted at its fold as replacing the memory it names, wins.
    lisbon = next(m["id"] for m in listed(cli) if m["text"] == "Lives in Lisbon")

    def correcting(body: dict[str, Any]) -> str:
        known = RecordedRequest("", None, body).messages[0]["content"]
        named = re.search(r"(m[0-9a-f]{6}): Lives in Lisbon", known)
        assert named is not None, "the summary call names the known memories by id"
        return facts_reply(f"replaces {named[1]}: Lives in Porto")

    openai_server.responder = answering(correcting)
    for text in ("I moved to Porto last month", "The flat is near the river", "It is sunny"):
        ok(cli.ask(worth_folding(text), thread="d", **summarizing()))
    in_force = {m["text"]: m for m in listed(cli)}
    assert "Lives in Porto" in in_force and "Lives in Lisbon" not in in_force
    (old,) = [m for m in listed(cli, "--all") if m["id"] == lisbon]
    assert old["superseded_by"] == in_force["Lives in Porto"]["id"]
    assert in_force["Lives in Porto"]["replaces"] == lisbon
    assert in_force["Lives in Porto"]["thread_id"] == "d"
    openai_server.requests.clear()
    ok(cli.ask("Where should I go running?", thread="e"))
    block = memories_block(chat_requests(openai_server)[0])
    assert "Lives in Porto" in block and "Lisbon" not in block


def test_memory_commands_add_edit_list_off_and_on(cli: Cli, openai_server: FakeOpenAI) -> None:
    openai_server.responder = answering("- nothing")
    said = repl(cli, "t", "/memory", "/memory add I write Rust", "/memory")
    assert "nothing is remembered yet" in said
    (memory,) = listed(cli)
    assert memory["text"] == "I write Rust" and memory["origin"] == "added"
    assert memory["id"] in said and "thread t" in said  # listed with its id and source
    repl(cli, "t", f"/memory edit {memory['id']} I write Rust and Go")
    assert [m["text"] for m in listed(cli)] == ["I write Rust and Go"]

    openai_server.requests.clear()
    said = repl(cli, "t", "/memory off", "hello", "/memory")
    assert "off in this thread" in said
    assert all(not memories_block(r) for r in chat_requests(openai_server))
    ok(cli.ask("still off?", thread="t"))
    assert not memories_block(chat_requests(openai_server)[-1])
    ok(cli.ask("and elsewhere?", thread="u"))
    assert "Rust and Go" in memories_block(chat_requests(openai_server)[-1])
    repl(cli, "t", "/memory on")
    ok(cli.ask("on again?", thread="t"))
    assert "Rust and Go" in memories_block(chat_requests(openai_server)[-1])

    ok(cli.ask("on for all?", thread="u", CHATBOT_MEMORY="off"))  # the setting for all
    assert not memories_block(chat_requests(openai_server)[-1])

    said = repl(cli, "t", "/memory forget nothing-like-it", "/memory edit", "/memory frobnicate")
    assert said.count("error:") == 3


def test_asking_to_remember_stores_the_fact_for_the_very_request(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    openai_server.responder = answering("- nothing")
    ok(cli.ask("Please remember that I prefer metric units", thread="t"))
    assert [m["text"] for m in listed(cli)] == ["I prefer metric units"]
    assert listed(cli)[0]["origin"] == "request"
    assert "I prefer metric units" in memories_block(chat_requests(openai_server)[-1])


def test_chatbot_memory_list_forget_and_export(cli: Cli, openai_server: FakeOpenAI) -> None:
    assert listed(cli) == []  # (no database yet: nothing, and nothing made)
    assert not cli.db.exists()
    learn_lance(cli, openai_server)
    shown = ok(cli.invoke("memory", "list", "--db", str(cli.db))).stdout
    assert all(fact in shown for fact in LANCE) and "thread a" in shown
    gone = ok(cli.invoke("memory", "forget", "Lisbon", "--db", str(cli.db)))
    assert "forgotten" in gone.stderr
    assert [m["text"] for m in listed(cli)] == LANCE[:2]
    missing = cli.invoke("memory", "forget", "Madrid", "--db", str(cli.db))
    assert missing.exit_code == 1 and "no memory" in missing.stderr
    assert "Traceback" not in missing.output
    several = cli.invoke("memory", "forget", "e", "--db", str(cli.db))
    assert several.exit_code == 1 and "give one id" in several.stderr

    out = cli.db.parent / "memories.json"
    ok(cli.invoke("memory", "export", "-o", str(out), "--db", str(cli.db)))
    assert [m["text"] for m in json.loads(out.read_text())] == LANCE[:2]
    assert out.stat().st_mode & 0o777 == 0o600
    again = cli.invoke("memory", "export", "-o", str(out), "--db", str(cli.db))
    assert again.exit_code == 1 and "--force" in again.stderr


def test_a_threads_export_holds_its_own_memories_and_no_other_threads(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    learn_lance(cli, openai_server)
    openai_server.responder = answering(facts_reply("Plays the cello"))
    for text in ("I play the cello", "in an orchestra", "on Sundays"):
        ok(cli.ask(worth_folding(text), thread="other", **summarizing()))
    mine = json.loads(ok(cli.invoke("export", "a", "-f", "json", "--db", str(cli.db))).stdout)
    assert [m["text"] for m in mine["memories"]] == LANCE
    theirs = ok(cli.invoke("export", "other", "-f", "json", "--db", str(cli.db))).stdout
    assert [m["text"] for m in json.loads(theirs)["memories"]] == ["Plays the cello"]
    assert not any(fact in theirs for fact in LANCE)
    markdown = ok(cli.invoke("export", "other", "-f", "md", "--db", str(cli.db))).stdout
    assert "Lance" not in markdown


def test_the_api_key_and_url_passwords_never_become_memories(
    cli: Cli, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    base = openai_server.base_url.replace("http://", "http://proxyuser:hunter2pass@")
    openai_server.responder = answering(
        facts_reply(f"API key is {SECRET}", "Proxy password hunter2pass", "Likes tea")
    )
    for text in ("my key is in the config", "and the proxy too", "I like tea"):
        ok(cli.ask(worth_folding(text), thread="a", OPENAI_BASE_URL=base, **summarizing()))
    assert [m["text"] for m in listed(cli)] == ["Likes tea"]
    said = repl(cli, "a", f"/memory add my key is {SECRET}", OPENAI_BASE_URL=base)
    assert "never remembered" in said and SECRET not in said
    stored = cli.db_bytes()
    assert SECRET.encode() not in stored and b"hunter2pass" not in stored


def test_deleting_a_thread_offers_to_forget_what_came_from_it(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    learn_lance(cli, openai_server)
    kept = ok(cli.invoke("delete", "a", "--yes", "--db", str(cli.db)))
    assert "kept 3 memories" in kept.stderr
    assert len(listed(cli)) == 3
    openai_server.responder = answering(facts_reply("Speaks Portuguese"))
    for text in ("Falo português", "desde pequeno", "em casa"):
        ok(cli.ask(worth_folding(text), thread="p", **summarizing()))
    said = repl(cli, "q", "/delete p", "y", "y")
    assert "forgotten 1 memory from p" in said
    assert [m["text"] for m in listed(cli)] == LANCE


def test_a_thread_that_never_folded_is_read_once_for_facts_when_left(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    openai_server.responder = answering(facts_reply("Is vegan"))
    said = repl(cli, "x", "I'm vegan, by the way", "/thread y")
    assert "remembered 1 fact about you from x" in said
    (left,) = summary_requests(openai_server)  # one call, for what thread x said
    assert "I&#x27;m vegan" in left.last_user_text or "I'm vegan" in left.last_user_text
    (memory,) = listed(cli)
    assert (memory["text"], memory["origin"], memory["thread_id"]) == ("Is vegan", "leave", "x")
    assert memory["message_id"]  # (the message it came from)
    # Nothing new in x: leaving it again asks nothing; a thread not spoken in is not read.
    repl(cli, "x", "/thread y", "/thread x")
    assert len(summary_requests(openai_server)) == 1
    assert len(listed(cli)) == 1


def test_the_graph_reads_the_store_it_runs_with(tmp_path: Path) -> None:
    """``langgraph dev`` gives a graph compiled without a store the server's: the graph reads
    and writes whatever store its runs have (here one given at compile)."""
    import asyncio

    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.memory import InMemoryStore

    from chatbot.config.settings import Settings
    from chatbot.engine.graph import DURABILITY, build_graph
    from chatbot.engine.remembering import NAMESPACE
    from chatbot.memory.facts import Memory
    from tests.scripted import ScriptedChatModel

    store = InMemoryStore()
    store.put(NAMESPACE, "m000001", Memory("m000001", "Writes Rust", "elsewhere").value())
    chat = ScriptedChatModel()
    settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    graph = build_graph(chat, ScriptedChatModel(), settings, InMemorySaver(), store=store)
    config = {"configurable": {"thread_id": "t"}}
    ask = graph.ainvoke(
        {"messages": [HumanMessage("remember that I live in Porto")]}, config, durability=DURABILITY
    )
    asyncio.run(ask)
    (sent,) = chat.calls
    assert sent[0].text.startswith(HEADING) and "Writes Rust" in sent[0].text
    assert "I live in Porto" in sent[0].text  # (asked to remember: carried at once)
    texts = [item.value["text"] for item in store.search(NAMESPACE)]
    assert sorted(texts) == ["I live in Porto", "Writes Rust"]
    assert "memories" not in graph.get_state(config).values  # (never in a checkpoint)

    import graphs.chatbot

    assert graphs.chatbot.graph.store is None  # (the server brings its own)


def test_each_database_keeps_the_memories_in_langgraphs_store(any_db: str) -> None:
    from chatbot.store.postgres import open_store
    from chatbot.threads.reading import LocalReader

    store = open_store(any_db)
    try:
        book = LocalReader(store).memory_book()
        kept = book.add("Writes Rust", "t")
        book.add("Allergic to peanuts", "u")
        assert [m.text for m in book.all()] == ["Writes Rust", "Allergic to peanuts"]
        book.set_thread("t", on=False)
        assert not book.thread_on("t") and book.thread_on("u")
    finally:
        store.close()
    again = open_store(any_db)  # (set up once: opened again, nothing is made twice)
    try:
        book = LocalReader(again).memory_book()
        assert [m.id for m in book.forget(kept.id)] == [kept.id]
        assert [m.text for m in book.in_force()] == ["Allergic to peanuts"]
    finally:
        again.close()
    reading = open_store(any_db, read_only=True)
    try:
        assert [m.text for m in LocalReader(reading).memory_book().all()] == ["Allergic to peanuts"]
    finally:
        reading.close()


def test_a_renamed_thread_keeps_its_memories_and_its_switch(
    cli: Cli, openai_server: FakeOpenAI
) -> None:
    learn_lance(cli, openai_server)
    repl(cli, "a", "/memory off", "/rename lance")
    assert {m["thread_id"] for m in listed(cli)} == {"lance"}
    said = repl(cli, "lance", "/memory")
    assert "(off in this thread: /memory on)" in said, said
    kept = ok(cli.invoke("delete", "lance", "--forget-memories", "--yes", "--db", str(cli.db)))
    assert "forgotten 3 memories from lance" in kept.stderr, kept.stderr
    assert listed(cli) == []


def test_memories_that_tip_a_request_past_the_budget_fold_it_before_the_call() -> None:
    """The router before a turn's first call cannot read the store: the chat node, once it has
    read the memories, sends the turn to fold first when they tip the request past the model's
    input budget, and the call it then makes fits."""
    import asyncio

    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.memory import InMemoryStore

    from chatbot.config.settings import Settings
    from chatbot.engine.graph import DURABILITY, build_graph, run_resolver
    from chatbot.engine.remembering import NAMESPACE
    from chatbot.memory.facts import Memory
    from tests.scripted import ScriptedChatModel

    store = InMemoryStore()
    chat = ScriptedChatModel(default="ok " + "word " * 40)
    summary = ScriptedChatModel(default="- the summary")
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        model="offline",
        max_input_tokens=1200,
        summary_trigger="messages:100",
        summary_keep="messages:2",
    )
    graph = build_graph(chat, summary, settings, InMemorySaver(), store=store)
    config = {"configurable": {"thread_id": "t"}}

    def say(text: str) -> None:
        ask = graph.ainvoke({"messages": [HumanMessage(text)]}, config, durability=DURABILITY)
        asyncio.run(ask)

    for n in range(11):
        say(f"message {n} " + "talk " * 40)
    assert not summary.calls, "without memories every request fits"
    for n in range(5):
        fact = Memory(f"m00000{n}", f"Fact {n}: " + "detail " * 12, "elsewhere")
        store.put(NAMESPACE, fact.id, fact.value())
    run = run_resolver(graph)(None, "")
    budget = run.policy.input_budget()
    assert budget is not None
    sent = len(chat.calls)
    say("the last message " + "talk " * 40)
    assert summary.calls, "the memories tipped it over: folded first"
    (last,) = chat.calls[sent:]
    assert "Fact 0" in last[0].text, "the call carries the memories"
    assert run.counter.raw(last) <= budget
    assert graph.get_state(config).values["summary"] == "- the summary"


def test_a_view_drawn_while_an_event_loop_runs_counts_the_memories(tmp_path: Path) -> None:
    """The REPL draws its status line from the prompt's event loop: the memories block is read
    with the store's own calls there, and counted as it is outside a loop."""
    import asyncio
    import warnings

    from chatbot.config.settings import Settings
    from chatbot.engine.graph import build_graph
    from chatbot.engine.models import OfflineChatModel
    from chatbot.store.sqlite import Store
    from chatbot.threads.backend import LocalBackend
    from chatbot.threads.memorybook import MemoryBook

    settings = Settings(_env_file=None, model="offline")  # type: ignore[call-arg]
    with Store(str(tmp_path / "t.sqlite")) as store:
        graph = build_graph(
            OfflineChatModel(), None, settings, store.saver, store=store.memory_store
        )
        backend = LocalBackend(graph, store)
        list(backend.send("t", "hello"))
        snapshot = backend.current("t")
        assert snapshot is not None
        without = backend.context_tokens(snapshot, thread_id="t")
        MemoryBook(store.memory_store).add("Writes Rust in Lisbon every single day")
        outside = backend.context_tokens(snapshot, thread_id="t")

        async def inside() -> int:
            return backend.context_tokens(snapshot, thread_id="t")

        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (a coroutine never awaited would warn)
            drawn = asyncio.run(inside())
    assert outside > without
    assert drawn == outside
