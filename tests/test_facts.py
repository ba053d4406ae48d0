"""The rules of the user's memories (chatbot/memory/facts.py): the summary reply's memories
section, superseding, which memories a request carries within its budget."""

from __future__ import annotations

import itertools

from chatbot.errors import remember_secret
from chatbot.memory.facts import (
    Memory,
    Noted,
    choose,
    clean,
    facts_request,
    note,
    remember_request,
    render,
    source_of,
    split_facts,
)

NOW = "2026-01-02T03:04:05.000000+00:00"


def ids() -> object:
    counter = itertools.count(1)
    return lambda: f"m{next(counter):06x}"


def test_the_memories_section_is_parsed_off_the_summary() -> None:
    reply = (
        "## User\n- Lance, writes Rust\n\n<memories>\n- Name is Lance\n* writes Rust\n"
        "1. replaces m00000a: lives in Porto\n- none\n- Name is Lance\n</memories>\n"
    )
    summary, noted = split_facts(reply)
    assert summary == "## User\n- Lance, writes Rust"
    assert noted == [
        Noted("Name is Lance"),
        Noted("writes Rust"),
        Noted("lives in Porto", replaces="m00000a"),
    ]
    assert split_facts("just a summary") == ("just a summary", [])
    assert split_facts("cut <memories>\n- likes tea") == ("cut", [Noted("likes tea")])
    assert split_facts("x <MEMORIES></MEMORIES>") == ("x", [])


def test_a_newer_value_supersedes_the_one_it_replaces() -> None:
    lisbon = Memory("m00000a", "lives in Lisbon", "a", created_at=NOW)
    changes = note(
        [lisbon],
        [Noted("lives in Porto", replaces="m00000a"), Noted("lives in Lisbon")],
        thread_id="d",
        now=NOW,
        make_id=ids(),  # type: ignore[arg-type]
    )
    (porto,) = changes.added  # (the known one again, word for word, is not added twice)
    assert porto.text == "lives in Porto" and porto.replaces == "m00000a"
    (old,) = changes.superseded
    assert old.superseded_by == porto.id and not old.active
    again = note([old, porto], [Noted("lives in Porto")], thread_id="e", now=NOW)
    assert again.added == [] and again.superseded == []


def test_facts_noted_at_once_keep_their_order_and_their_source() -> None:
    said = [("h1", "I'm Lance"), ("h2", "I'm allergic to peanuts")]
    changes = note(
        [],
        [Noted("Name is Lance"), Noted("Allergic to peanuts")],
        thread_id="a",
        message_id=lambda text: source_of(text, said),
        now=NOW,
    )
    first, second = changes.added
    assert first.created_at < second.created_at
    assert (first.message_id, second.message_id) == ("h1", "h2")


def test_every_memory_is_carried_while_they_fit_else_the_most_relevant() -> None:
    memories = [
        Memory(f"m{n:06x}", text, created_at=NOW)
        for n, text in enumerate(
            ["Allergic to peanuts", "Writes Rust", "Lives in Porto", "Has a dog called Rex"]
        )
    ]
    count = len  # (one token a character, for the test)
    assert choose(memories, "anything", 1000, count) == memories
    chosen = choose(memories, "what can I cook without peanuts?", 30, count)
    assert [m.text for m in chosen] == ["Allergic to peanuts"]
    gone = [memories[0].__class__(**{**memories[0].__dict__, "superseded_by": "m9"})]
    assert choose(gone, "peanuts", 1000, count) == []
    block = render(memories[:2])
    assert block.splitlines()[1:] == ["- Allergic to peanuts", "- Writes Rust"]
    assert "你记得" in render(memories[:1], "zh") and render([]) == ""


def test_asking_to_remember_is_recognised_in_english_and_chinese() -> None:
    assert remember_request("Please remember that I write Rust.") == "I write Rust."
    assert remember_request("remember: my son is Tom") == "my son is Tom"
    assert remember_request("记住：我对花生过敏") == "我对花生过敏"
    assert remember_request("Do you remember that film?") is None
    assert remember_request("remember that") is None


def test_a_fact_holding_a_secret_is_never_kept() -> None:
    remember_secret("hunter2pass-xyz")
    assert clean("the proxy password is hunter2pass-xyz") is None
    assert clean("my key is sk-abcdefghijklmnop") is None
    assert clean("  likes   green tea ") == "likes green tea"
    assert clean("x" * 400) is not None and len(clean("x" * 400) or "") == 300


def test_the_summary_call_is_given_the_known_memories_by_id() -> None:
    known = [Memory("m00000a", "lives in Lisbon"), Memory("m00000b", "old", superseded_by="x")]
    asked = facts_request(known)
    assert "<memories>" in asked and "m00000a: lives in Lisbon" in asked
    assert "old" not in asked  # (a superseded one is not in force)
    assert "m00000a" not in facts_request([])
    assert "<memories>" in facts_request(known, "zh")
