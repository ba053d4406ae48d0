"""The one rule for a count and its noun (``chatbot.plural``), used by the CLI and the REPL."""

from __future__ import annotations

from chatbot.plural import counted


def test_a_count_of_one_takes_the_singular_and_any_other_the_plural() -> None:
    assert [counted(n, "message") for n in (0, 1, 2)] == ["0 messages", "1 message", "2 messages"]
    assert counted(1, "older turn") == "1 older turn"


def test_an_irregular_plural_is_given() -> None:
    assert [counted(n, "reply", "replies") for n in (1, 3)] == ["1 reply", "3 replies"]


def test_the_number_is_formatted_as_asked() -> None:
    assert counted(2000, "thread") == "2000 threads"
    assert counted(2000, "thread", spec=",") == "2,000 threads"
    assert [counted(d, "day", spec="g") for d in (1.0, 0.5, 30.0)] == [
        "1 day",
        "0.5 days",
        "30 days",
    ]
