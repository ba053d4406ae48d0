"""Tests of the pure summarization policy: parsing, triggers, safe cutoffs, plans, chunking.

Everything is built from real langchain-core messages; no model, no graph, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from chatbot.memory.policy import (
    VALID_FORMS,
    Limit,
    PolicyError,
    SummaryPlan,
    SummaryPolicy,
    find_safe_cutoff,
    find_safe_cutoff_after,
    first_human_index,
    fitted_to_window,
    keep_target,
    overflow_room,
    parse_keep,
    parse_limit,
    parse_trigger,
    summary_size,
    trigger_fired,
    unsafe_cutoffs,
)
from chatbot.memory.policy import chunk_for_summary as _chunk_for_summary
from chatbot.memory.policy import plan_summary as _plan_summary
from chatbot.memory.policy import split_message as _split_message
from chatbot.memory.tokens import TokenCounter
from chatbot.parts import text_and_media

COUNTER = TokenCounter()
"""The estimate: what counts tokens for models without a known tokenizer (and in these tests)."""


def plan_summary(
    messages: Sequence[BaseMessage],
    policy_: SummaryPolicy,
    counts: Sequence[int] | None = None,
    **options: int,
) -> SummaryPlan:
    """The policy's plan, with the counter's per-message counts unless given."""
    chosen = COUNTER.per_message(messages) if counts is None else counts
    return _plan_summary(messages, policy_, chosen, **options)


def chunk_for_summary(messages: Sequence[BaseMessage], budget: int) -> list[list[BaseMessage]]:
    return _chunk_for_summary(messages, budget, COUNTER)


def split_message(message: BaseMessage, budget: int) -> list[BaseMessage]:
    return _split_message(message, budget, COUNTER)


# --- message builders -------------------------------------------------------------------


def human(text: str = "hello") -> HumanMessage:
    return HumanMessage(content=text)


def ai(text: str = "hi", *call_ids: str) -> AIMessage:
    calls = [
        {"name": "lookup", "args": {"query": text[:10]}, "id": call_id, "type": "tool_call"}
        for call_id in call_ids
    ]
    return AIMessage(content=text, tool_calls=calls)


def tool(call_id: str, text: str = "result") -> ToolMessage:
    return ToolMessage(content=text, tool_call_id=call_id)


def policy(keep: str, *, keep_first_message: bool = False, trigger: str = "messages:1000"):
    """A policy for planning: the trigger plays no part in plan_summary."""
    return SummaryPolicy(parse_trigger(trigger), parse_keep(keep), keep_first_message)


def kept_indices(plan: SummaryPlan, length: int) -> list[int]:
    """The indices the model keeps seeing: the pinned one (if folded-around) plus the window."""
    kept = list(range(plan.cutoff, length))
    if plan.pinned is not None and plan.pinned < plan.cutoff:
        kept.insert(0, plan.pinned)
    return kept


def tool_call_ids(message: BaseMessage) -> set[str]:
    if isinstance(message, AIMessage):
        return {call["id"] for call in message.tool_calls if call.get("id")}
    return set()


def separated_tool_pairs(messages: Sequence[BaseMessage], cutoff: int) -> list[tuple[int, int]]:
    """(AIMessage index, ToolMessage index) pairs that the cutoff puts on different sides.

    Computed independently of ``unsafe_cutoffs``: a ToolMessage answers an AIMessage when it
    comes after it and carries the id of one of its tool calls.
    """
    pairs = []
    for i, message in enumerate(messages):
        ids = tool_call_ids(message)
        for j in range(i + 1, len(messages)):
            answer = messages[j]
            if (
                isinstance(answer, ToolMessage)
                and answer.tool_call_id in ids
                and (i < cutoff) != (j < cutoff)
            ):
                pairs.append((i, j))
    return pairs


def eight_message_tutorial() -> list[BaseMessage]:
    return [
        human("hi! I'm bob"),
        ai("Hi Bob! How can I help?"),
        human("what's my name?"),
        ai("Your name is Bob."),
        human("i like the celtics!"),
        ai("Great team!"),
        human("i like how much they win"),
        ai("They do win a lot."),
    ]


# --- parsing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("messages:6", Limit("messages", 6)),
        ("messages:1", Limit("messages", 1)),
        ("tokens:4000", Limit("tokens", 4000)),
        ("tokens:1", Limit("tokens", 1)),
        ("fraction:0.8", Limit("fraction", 0.8)),
        ("fraction:1", Limit("fraction", 1.0)),
        ("fraction:0.001", Limit("fraction", 0.001)),
        ("  Messages : 6  ", Limit("messages", 6)),
        ("TOKENS:250", Limit("tokens", 250)),
    ],
)
def test_every_limit_form_parses_to_its_kind_and_value(text: str, expected: Limit) -> None:
    assert parse_limit(text) == expected
    assert parse_keep(text) == expected
    assert parse_trigger(text) == (expected,)


@pytest.mark.parametrize("text", ["messages:6", "tokens:4000", "fraction:0.8", "fraction:1.0"])
def test_limit_prints_back_as_the_form_it_was_parsed_from(text: str) -> None:
    assert str(parse_limit(text)) == text


INVALID_FORMS = [
    "msgs:3",
    "messages:0",
    "messages:1.5",
    "messages:-3",
    "messages:",
    "messages:abc",
    "messages:1e3",
    "tokens:-1",
    "tokens:0",
    "tokens:2.5",
    "tokens:",
    "fraction:0",
    "fraction:-0.5",
    "fraction:1.5",
    "fraction:abc",
    "fraction:nan",
    "fraction:inf",
    "fraction:",
    "",
    "   ",
    "messages",
    "tokens",
    ":6",
    "6",
]


def assert_names_setting_and_valid_forms(error: PolicyError, setting: str) -> None:
    message = str(error)
    assert setting in message
    assert VALID_FORMS in message
    for form in ("messages:N", "tokens:N", "fraction:F"):
        assert form in message


@pytest.mark.parametrize("text", INVALID_FORMS)
def test_invalid_trigger_form_raises_policy_error_naming_setting_and_valid_forms(
    text: str,
) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_trigger(text)
    assert_names_setting_and_valid_forms(caught.value, "CHATBOT_SUMMARY_TRIGGER")


@pytest.mark.parametrize("text", INVALID_FORMS)
def test_invalid_keep_form_raises_policy_error_naming_setting_and_valid_forms(text: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_keep(text)
    assert_names_setting_and_valid_forms(caught.value, "CHATBOT_SUMMARY_KEEP")


@pytest.mark.parametrize("text", ["messages:2,tokens:500", "messages:2,", "tokens:100, tokens:200"])
def test_keep_with_a_comma_is_rejected_naming_setting_and_valid_forms(text: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_keep(text)
    assert_names_setting_and_valid_forms(caught.value, "CHATBOT_SUMMARY_KEEP")


def test_invalid_forms_are_rejected_through_from_strings_too() -> None:
    with pytest.raises(PolicyError, match="CHATBOT_SUMMARY_TRIGGER"):
        SummaryPolicy.from_strings("msgs:3", "messages:2")
    with pytest.raises(PolicyError, match="CHATBOT_SUMMARY_KEEP"):
        SummaryPolicy.from_strings("messages:6", "messages:0")


def test_policy_error_is_a_value_error() -> None:
    assert issubclass(PolicyError, ValueError)


@pytest.mark.parametrize("text", ["off", "OFF", " off "])
def test_trigger_off_means_no_automatic_summary(text: str) -> None:
    assert parse_trigger(text) == ()
    policy_ = SummaryPolicy.from_strings(text, "messages:2")
    assert not policy_.automatic
    assert policy_.trigger_tokens() is None
    assert not trigger_fired(policy_, 10_000, 10_000_000)


def test_trigger_off_still_validates_the_keep() -> None:
    with pytest.raises(PolicyError, match=r"fraction:0\.5 needs the model's max input tokens"):
        SummaryPolicy.from_strings("off", "fraction:0.5")  # no max input tokens known
    assert (
        SummaryPolicy.from_strings("off", "fraction:0.5", max_input_tokens=1000).automatic is False
    )


def test_input_budget_is_a_margin_below_the_models_max_input() -> None:
    assert SummaryPolicy.from_strings("off", "messages:2").input_budget() is None
    budget = SummaryPolicy.from_strings("off", "messages:2", max_input_tokens=2000).input_budget()
    assert budget == 1800


def test_comma_joined_trigger_parses_every_limit_in_order() -> None:
    assert parse_trigger("messages:6, tokens:4000,fraction:0.5") == (
        Limit("messages", 6),
        Limit("tokens", 4000),
        Limit("fraction", 0.5),
    )


def test_comma_joined_trigger_ignores_empty_parts() -> None:
    assert parse_trigger("messages:6,") == (Limit("messages", 6),)
    assert parse_trigger(",tokens:10,,") == (Limit("tokens", 10),)


@pytest.mark.parametrize("text", [",", " , ,", "messages:6,msgs:3", "tokens:100,fraction:2"])
def test_comma_joined_trigger_with_no_or_a_bad_part_is_rejected(text: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_trigger(text)
    assert_names_setting_and_valid_forms(caught.value, "CHATBOT_SUMMARY_TRIGGER")


# --- fraction resolution ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("trigger", "keep"),
    [
        ("fraction:0.8", "messages:2"),
        ("messages:6", "fraction:0.2"),
        ("tokens:9,fraction:1", "tokens:1"),
    ],
)
def test_fraction_without_max_input_tokens_raises_pointing_at_the_setting(
    trigger: str, keep: str
) -> None:
    with pytest.raises(PolicyError, match="CHATBOT_MAX_INPUT_TOKENS"):
        SummaryPolicy.from_strings(trigger, keep)


def test_fraction_as_tokens_without_max_input_tokens_raises() -> None:
    with pytest.raises(PolicyError, match="CHATBOT_MAX_INPUT_TOKENS"):
        Limit("fraction", 0.5).as_tokens(None)


def test_fraction_resolves_to_that_share_of_max_input_tokens() -> None:
    assert Limit("fraction", 0.8).as_tokens(10_000) == 8000
    assert Limit("fraction", 1.0).as_tokens(128_000) == 128_000
    policy_ = SummaryPolicy.from_strings("fraction:0.8", "fraction:0.2", max_input_tokens=10_000)
    assert policy_.trigger_tokens() == 8000
    assert policy_.keep.as_tokens(policy_.max_input_tokens) == 2000


def test_tiny_fraction_resolves_to_at_least_one_token() -> None:
    assert Limit("fraction", 0.0001).as_tokens(100) == 1


def test_token_and_message_limits_resolve_without_max_input_tokens() -> None:
    assert Limit("tokens", 4000).as_tokens(None) == 4000
    assert Limit("messages", 6).as_tokens(None) is None
    assert Limit("messages", 6).as_tokens(10_000) is None


def test_trigger_tokens_is_the_lowest_token_threshold() -> None:
    policy_ = SummaryPolicy.from_strings(
        "messages:50,tokens:9000,fraction:0.5", "messages:2", max_input_tokens=10_000
    )
    assert policy_.trigger_tokens() == 5000


def test_trigger_tokens_is_none_when_every_trigger_counts_messages() -> None:
    assert (
        SummaryPolicy.from_strings("messages:6,messages:9", "messages:2").trigger_tokens() is None
    )


# --- validation: keep must stay below the trigger ----------------------------------------


@pytest.mark.parametrize(
    ("trigger", "keep", "max_input_tokens"),
    [
        ("messages:6", "messages:7", None),
        ("messages:20,messages:3", "messages:5", None),
        ("tokens:1000", "tokens:1000", None),
        ("tokens:1000", "tokens:5000", None),
        ("fraction:0.5", "tokens:5000", 10_000),
        ("tokens:1000", "fraction:0.5", 2000),
        ("fraction:0.5", "fraction:0.5", 10_000),
        ("messages:6,tokens:100", "tokens:100", None),
    ],
)
def test_validate_rejects_keep_not_below_the_trigger_of_the_same_kind(
    trigger: str, keep: str, max_input_tokens: int | None
) -> None:
    with pytest.raises(PolicyError) as caught:
        SummaryPolicy.from_strings(trigger, keep, max_input_tokens=max_input_tokens)
    assert "CHATBOT_SUMMARY_KEEP" in str(caught.value)
    assert "keep fewer" in str(caught.value)


def test_validate_rejects_a_directly_built_policy_whose_keep_defeats_the_trigger() -> None:
    built = SummaryPolicy((Limit("messages", 4),), Limit("messages", 5))
    with pytest.raises(PolicyError, match="CHATBOT_SUMMARY_KEEP"):
        built.validate()


@pytest.mark.parametrize(
    ("trigger", "keep", "max_input_tokens"),
    [
        ("messages:6", "messages:2", None),
        ("messages:6", "messages:5", None),
        ("messages:6", "messages:6", None),
        ("tokens:4000", "tokens:1000", None),
        ("tokens:1001", "tokens:1000", None),
        ("fraction:0.8", "fraction:0.3", 10_000),
        ("messages:6,tokens:4000", "messages:2", None),
        ("fraction:0.8", "messages:4", 10_000),
    ],
)
def test_validate_accepts_keep_below_the_trigger(
    trigger: str, keep: str, max_input_tokens: int | None
) -> None:
    policy_ = SummaryPolicy.from_strings(trigger, keep, max_input_tokens=max_input_tokens)
    assert policy_.keep == parse_keep(keep)
    assert policy_.trigger == parse_trigger(trigger)


# --- trigger ----------------------------------------------------------------------------


@given(
    window=st.integers(min_value=64, max_value=200_000),
    trigger=st.integers(min_value=2, max_value=300_000),
    keep_share=st.floats(min_value=0.01, max_value=0.99),
)
def test_a_trigger_too_big_for_the_window_is_scaled_down_with_its_keep(
    window: int, trigger: int, keep_share: float
) -> None:
    keep = max(1, int(trigger * keep_share))
    policy = SummaryPolicy.from_strings(
        f"tokens:{trigger}", f"tokens:{keep}", max_input_tokens=window
    )
    fitted = fitted_to_window(policy)
    budget = policy.input_budget()
    assert budget is not None
    if trigger <= budget:
        assert fitted == policy, "a trigger that can fire is the user's, unchanged"
        return
    lowered = fitted.trigger_tokens()
    assert lowered is not None and lowered <= budget, "it fires before the window is full"
    assert lowered == max(1, int(budget * 0.75))
    kept = fitted.keep.as_tokens(window)
    assert (kept is not None and kept < lowered) or lowered == 1, "a fold keeps less than it"
    assert fitted.scaled_from == f"trigger tokens:{trigger}, keep tokens:{keep}"
    fitted.validate()


def test_message_triggers_and_unknown_windows_are_left_as_set() -> None:
    by_count = SummaryPolicy.from_strings("messages:6", "messages:2", max_input_tokens=1000)
    assert fitted_to_window(by_count) == by_count
    unknown = SummaryPolicy.from_strings("tokens:12000", "tokens:3000")
    assert fitted_to_window(unknown) == unknown
    mixed = SummaryPolicy.from_strings(
        "tokens:12000,messages:40", "messages:4", max_input_tokens=2048
    )
    assert [str(limit) for limit in fitted_to_window(mixed).trigger] == [
        "tokens:1382",
        "messages:40",
    ]
    assert str(fitted_to_window(mixed).keep) == "messages:4"


def test_the_summary_is_at_most_a_quarter_of_what_a_request_holds() -> None:
    assert summary_size(1000, None) == 1000
    assert summary_size(1000, 128_000) == 1000
    assert summary_size(1000, 1536) == 384
    assert summary_size(300, 2000) == 300


def test_message_trigger_fires_only_above_the_count() -> None:
    policy_ = SummaryPolicy.from_strings("messages:6", "messages:2")
    assert not trigger_fired(policy_, 6, 10**9)
    assert trigger_fired(policy_, 7, 0)


def test_token_trigger_fires_only_above_the_threshold() -> None:
    policy_ = SummaryPolicy.from_strings("tokens:1000", "tokens:100")
    assert not trigger_fired(policy_, 10**6, 1000)
    assert trigger_fired(policy_, 1, 1001)


def test_fraction_trigger_fires_above_its_share_of_max_input_tokens() -> None:
    policy_ = SummaryPolicy.from_strings("fraction:0.5", "messages:2", max_input_tokens=1000)
    assert not trigger_fired(policy_, 100, 500)
    assert trigger_fired(policy_, 1, 501)


@pytest.mark.parametrize(
    ("message_count", "context_tokens", "fired"),
    [
        (6, 1000, False),
        (7, 0, True),
        (1, 1001, True),
        (7, 1001, True),
        (0, 0, False),
    ],
)
def test_comma_joined_trigger_fires_when_any_limit_holds(
    message_count: int, context_tokens: int, fired: bool
) -> None:
    policy_ = SummaryPolicy.from_strings("messages:6,tokens:1000", "messages:2")
    assert trigger_fired(policy_, message_count, context_tokens) is fired


# --- the tutorial case ------------------------------------------------------------------


def test_tutorial_eight_messages_trigger_six_keep_two_folds_the_first_six() -> None:
    messages = eight_message_tutorial()
    policy_ = SummaryPolicy.from_strings("messages:6", "messages:2")
    assert trigger_fired(policy_, len(messages), COUNTER.messages(messages))
    plan = plan_summary(messages, policy_)
    assert plan.fold == (0, 1, 2, 3, 4, 5)
    assert plan.cutoff == 6
    assert plan.pinned is None
    assert plan


# --- safe cutoffs -----------------------------------------------------------------------


def test_cutoff_on_a_tool_result_moves_back_to_before_its_tool_call() -> None:
    messages = [human(), ai("looking", "a"), tool("a"), ai("found it"), human(), ai()]
    assert unsafe_cutoffs(messages) == {2}
    assert find_safe_cutoff(messages, 2) == 1
    plan = plan_summary(messages, policy("messages:4"))  # target 2 lands on the ToolMessage
    assert plan.cutoff == 1
    assert plan.fold == (0,)
    assert isinstance(messages[plan.cutoff], AIMessage)


def test_cutoff_never_separates_tool_call_from_its_interleaved_result() -> None:
    messages = [human(), ai("looking", "a"), human("still there?"), tool("a"), ai()]
    assert unsafe_cutoffs(messages) == {2, 3}
    for target in (2, 3):
        assert find_safe_cutoff(messages, target) == 1
    assert find_safe_cutoff(messages, 4) == 4


def test_cutoff_never_separates_parallel_tool_calls_from_any_of_their_results() -> None:
    messages = [
        human("weather in three cities?"),
        ai("", "a", "b", "c"),
        tool("a", "sunny"),
        tool("b", "rain"),
        tool("c", "snow"),
        ai("sunny, rain, snow"),
        human(),
        ai(),
    ]
    assert unsafe_cutoffs(messages) == {2, 3, 4}
    for target in (2, 3, 4):
        assert find_safe_cutoff(messages, target) == 1
    assert find_safe_cutoff(messages, 5) == 5
    assert plan_summary(messages, policy("messages:5")).fold == (0,)
    assert plan_summary(messages, policy("messages:3")).fold == (0, 1, 2, 3, 4)


def test_cutoff_respects_parallel_results_answered_out_of_order() -> None:
    messages = [human(), ai("", "a", "b"), tool("b"), tool("a"), ai(), human(), ai()]
    assert unsafe_cutoffs(messages) == {2, 3}
    assert find_safe_cutoff(messages, 3) == 1


def test_two_parallel_tool_groups_back_to_back_are_each_kept_whole() -> None:
    messages = [
        human(),
        ai("", "a", "b"),
        tool("a"),
        tool("b"),
        ai("", "c", "d", "e"),
        tool("c"),
        tool("e"),
        tool("d"),
        ai(),
    ]
    assert unsafe_cutoffs(messages) == {2, 3, 5, 6, 7}
    assert find_safe_cutoff(messages, 7) == 4
    assert find_safe_cutoff(messages, 3) == 1


def test_partially_answered_tool_call_is_protected_up_to_its_last_answer() -> None:
    messages = [human(), ai("", "a", "b"), tool("a"), human(), ai()]
    assert unsafe_cutoffs(messages) == {2}
    assert find_safe_cutoff(messages, 3) == 3


def test_unanswered_tool_call_does_not_block_any_cutoff() -> None:
    messages = [human(), ai("", "never-answered"), human(), ai()]
    assert unsafe_cutoffs(messages) == set()
    assert find_safe_cutoff(messages, 2) == 2


def test_orphan_tool_message_never_starts_the_kept_window() -> None:
    messages = [human(), tool("nobody-asked"), human(), ai()]
    assert unsafe_cutoffs(messages) == {1}
    assert find_safe_cutoff(messages, 1) == 0
    plan = plan_summary(messages, policy("messages:3"))  # target 1 is the orphan
    assert plan.cutoff == 0
    assert not plan


def test_run_of_orphan_tool_messages_moves_the_cutoff_before_all_of_them() -> None:
    messages = [human(), ai(), tool("x1"), tool("x2"), human(), ai()]
    assert unsafe_cutoffs(messages) == {2, 3}
    plan = plan_summary(messages, policy("messages:3"))  # target 3
    assert plan.cutoff == 1
    assert plan.fold == (0,)
    assert not isinstance(messages[plan.cutoff], ToolMessage)


def test_tool_message_answering_an_id_of_a_later_call_is_treated_as_an_orphan() -> None:
    messages = [human(), tool("a"), ai("", "a"), human(), ai()]
    assert unsafe_cutoffs(messages) == {1}
    assert find_safe_cutoff(messages, 3) == 3


def test_cutoff_never_separates_tool_call_from_a_repeated_result() -> None:
    # The same call answered twice (a retried tool), with a message in between: every answer
    # must stay on the AIMessage's side, not only the first one.
    messages = [human(), ai("", "a"), tool("a", "first try"), human(), tool("a", "retry"), ai()]
    assert separated_tool_pairs(messages, find_safe_cutoff(messages, 3)) == []
    assert find_safe_cutoff(messages, 3) == 1
    assert unsafe_cutoffs(messages) == {2, 3, 4}


def test_cutoff_zero_and_beyond_the_end_are_clamped() -> None:
    messages = [tool("orphan"), human(), ai()]
    assert find_safe_cutoff(messages, 0) == 0
    assert find_safe_cutoff(messages, -5) == 0
    assert find_safe_cutoff(messages, 99) == 3
    assert find_safe_cutoff([], 4) == 0


def test_cutoff_at_zero_gives_an_empty_falsy_plan() -> None:
    # Target 1 lands inside the only tool group; the only safe cutoff left is 0.
    messages = [ai("", "a"), tool("a"), tool("orphan"), human()]
    assert find_safe_cutoff(messages, 2) == 0
    plan = plan_summary(messages, policy("messages:3"))
    assert plan == SummaryPlan(fold=(), cutoff=0, pinned=None)
    assert not plan


def test_everything_fits_in_keep_gives_an_empty_plan() -> None:
    messages = [human(), ai(), human()]
    for keep in ("messages:3", "messages:5", "tokens:100000"):
        plan = plan_summary(messages, policy(keep))
        assert not plan
        assert plan.fold == ()
        assert plan.cutoff == 0


def test_empty_conversation_gives_an_empty_plan() -> None:
    for keep in ("messages:2", "tokens:10"):
        assert plan_summary([], policy(keep)) == SummaryPlan(fold=(), cutoff=0, pinned=None)
    assert plan_summary([], policy("messages:2", keep_first_message=True)).fold == ()


def test_last_message_bigger_than_the_keep_budget_is_kept_and_everything_before_folded() -> None:
    messages = [human("short"), ai("short"), human("x" * 4000)]
    plan = plan_summary(messages, policy("tokens:50"))
    assert plan.cutoff == 2
    assert plan.fold == (0, 1)


def test_token_keep_with_explicit_counts_keeps_the_newest_that_fit() -> None:
    messages = [human(), ai(), human(), ai(), human()]
    assert plan_summary(messages, policy("tokens:100"), [40] * 5).cutoff == 3
    assert plan_summary(messages, policy("tokens:100"), [50] * 5).cutoff == 3
    assert plan_summary(messages, policy("tokens:100"), [10, 10, 10, 10, 500]).cutoff == 4
    assert plan_summary(messages, policy("tokens:100"), [1] * 5).cutoff == 0


def test_keep_target_for_message_and_token_limits() -> None:
    messages = [human(), ai(), human(), ai()]
    counts = [30, 30, 30, 30]
    assert keep_target(messages, Limit("messages", 1), counts, None) == 3
    assert keep_target(messages, Limit("messages", 9), counts, None) == 0
    assert keep_target(messages, Limit("tokens", 60), counts, None) == 2
    assert keep_target(messages, Limit("tokens", 1), counts, None) == 3
    assert keep_target(messages, Limit("fraction", 0.5), counts, 120) == 2
    assert keep_target([], Limit("tokens", 1), [], None) == 0


def test_oversized_last_message_after_a_tool_group_keeps_the_group_whole() -> None:
    messages = [human(), ai("", "a"), tool("a", "y" * 4000)]
    plan = plan_summary(messages, policy("tokens:10"))
    assert plan.cutoff == 1
    assert plan.fold == (0,)


def test_keep_first_message_keeps_the_first_human_out_of_fold_and_window() -> None:
    messages = eight_message_tutorial()
    plan = plan_summary(messages, policy("messages:2", keep_first_message=True))
    assert plan.pinned == 0
    assert plan.fold == (1, 2, 3, 4, 5)
    assert plan.cutoff == 6
    assert kept_indices(plan, len(messages)) == [0, 6, 7]


def test_keep_first_message_pins_the_first_human_even_when_not_at_index_zero() -> None:
    messages = [SystemMessage("be brief"), ai("welcome"), human("first"), ai(), human(), ai()]
    plan = plan_summary(messages, policy("messages:2", keep_first_message=True))
    assert plan.pinned == 2 == first_human_index(messages)
    assert plan.fold == (0, 1, 3)
    assert plan.cutoff == 4


def test_keep_first_message_is_not_counted_against_the_keep_budget() -> None:
    messages = [human("first"), ai(), human(), ai(), human()]
    counts = [1000, 10, 10, 10, 10]
    plan = plan_summary(messages, policy("tokens:25", keep_first_message=True), counts)
    assert plan.pinned == 0
    assert plan.cutoff == 3
    assert plan.fold == (1, 2)


def test_keep_first_message_inside_the_kept_window_stays_there_and_is_not_folded() -> None:
    messages = [ai("welcome"), ai("still here"), ai("anyone?"), human("first"), ai()]
    plan = plan_summary(messages, policy("messages:2", keep_first_message=True))
    # The rest is [ai, ai, ai, ai]; keeping two of it starts the window before the pin.
    assert plan.pinned == 3
    assert plan.cutoff == 2
    assert plan.fold == (0, 1)
    assert kept_indices(plan, len(messages)) == [2, 3, 4]


def test_keep_first_message_right_before_the_window_is_kept_apart_from_it() -> None:
    messages = [ai("welcome"), ai("still here"), human("first"), ai()]
    plan = plan_summary(messages, policy("messages:1", keep_first_message=True))
    assert plan.pinned == 2
    assert plan.cutoff == 3
    assert plan.fold == (0, 1)
    assert kept_indices(plan, len(messages)) == [2, 3]


def test_keep_first_message_without_any_human_pins_nothing() -> None:
    messages = [ai("a"), ai("b"), ai("c")]
    plan = plan_summary(messages, policy("messages:1", keep_first_message=True))
    assert plan.pinned is None
    assert plan.fold == (0, 1)


def test_keep_first_message_with_only_the_first_message_folds_nothing() -> None:
    plan = plan_summary([human("alone")], policy("messages:1", keep_first_message=True))
    assert not plan
    assert plan.pinned == 0


def test_keep_first_message_still_never_splits_a_tool_group() -> None:
    messages = [human("first"), ai("", "a", "b"), tool("a"), tool("b"), ai(), human(), ai()]
    plan = plan_summary(messages, policy("messages:4", keep_first_message=True))
    assert plan.pinned == 0
    assert separated_tool_pairs(messages, plan.cutoff) == []
    assert plan.cutoff == 1
    assert not plan


# --- chunking ---------------------------------------------------------------------------

PART_LABEL = re.compile(r"^\[part (\d+)/(\d+)\] ")


def rejoin_parts(chunks: list[list[BaseMessage]]) -> list[tuple[type, str]]:
    """Flatten the chunks, joining ``[part i/n]`` pieces back into one (type, text) entry."""
    joined: list[tuple[type, str]] = []
    pending: list[str] = []
    for message in (m for chunk in chunks for m in chunk):
        match = PART_LABEL.match(message.text)
        if match is None:
            assert not pending, "a split message was interrupted"
            joined.append((type(message), message.text))
            continue
        number, total = int(match[1]), int(match[2])
        assert number == len(pending) + 1
        pending.append(message.text[match.end() :])
        if number == total:
            joined.append((type(message), "".join(pending)))
            pending = []
    assert not pending, "a split message is missing parts"
    return joined


def test_chunking_when_everything_fits_gives_one_chunk_of_the_same_messages() -> None:
    messages = eight_message_tutorial()
    chunks = chunk_for_summary(messages, 10_000)
    assert len(chunks) == 1
    assert all(a is b for a, b in zip(chunks[0], messages, strict=True))


def test_chunking_nothing_gives_no_chunks() -> None:
    assert chunk_for_summary([], 100) == []


def test_chunking_under_a_tight_budget_preserves_order_and_drops_nothing() -> None:
    messages = [human(f"message number {i} " * 5) for i in range(10)]
    counts = COUNTER.per_message(messages)
    budget = max(counts) * 3
    chunks = chunk_for_summary(messages, budget)
    assert len(chunks) >= 3
    flat = [m for chunk in chunks for m in chunk]
    assert len(flat) == len(messages)
    assert all(a is b for a, b in zip(flat, messages, strict=True))
    for chunk in chunks:
        assert sum(counts[messages.index(m)] for m in chunk) <= budget


def test_single_message_bigger_than_the_budget_is_split_into_parts_that_rejoin_exactly() -> None:
    original = "".join(f"sentence {i}, with words. " for i in range(400))
    messages = [human("before"), human(original), ai("after")]
    chunks = chunk_for_summary(messages, 256)
    flat = [m for chunk in chunks for m in chunk]
    parts = [m for m in flat if PART_LABEL.match(m.text)]
    assert len(parts) > 1
    assert all(isinstance(part, HumanMessage) for part in parts)
    totals = {PART_LABEL.match(part.text)[2] for part in parts}
    assert totals == {str(len(parts))}
    assert "".join(PART_LABEL.sub("", part.text) for part in parts) == original
    assert rejoin_parts(chunks) == [
        (HumanMessage, "before"),
        (HumanMessage, original),
        (AIMessage, "after"),
    ]
    assert flat[0] is messages[0]
    assert flat[-1] is messages[-1]


def test_split_parts_each_fit_the_graphs_minimum_chunk_budget() -> None:
    original = "z" * 20_000
    for message in (human(original), ai(original), tool("call-1", original)):
        chunks = chunk_for_summary([message], 256)
        assert len(chunks) > 1
        for chunk in chunks:
            assert COUNTER.raw(chunk) <= 256


@pytest.mark.parametrize("budget", [50, 100, 256, 1000])
def test_split_parts_of_a_tool_calling_ai_message_each_fit_the_budget(budget: int) -> None:
    message = ai("z" * 5000, "call_abc123XYZ")
    chunks = chunk_for_summary([message, human("y" * 3000)], budget)
    for chunk in chunks:
        assert COUNTER.raw(chunk) <= budget
    assert rejoin_parts(chunks) == [(AIMessage, "z" * 5000), (HumanMessage, "y" * 3000)]


def test_tool_calls_bigger_than_the_budget_go_alone_in_the_first_part() -> None:
    call = {"name": "write_file", "args": {"body": "q x " * 500}, "id": "c1", "type": "tool_call"}
    message = AIMessage(content="z" * 3000, tool_calls=[call])
    parts = split_message(message, 256)
    assert PART_LABEL.sub("", parts[0].text) == ""
    assert parts[0].tool_calls == [call]
    assert all(COUNTER.raw([part]) <= 256 for part in parts[1:])
    assert "".join(PART_LABEL.sub("", part.text) for part in parts) == message.text


def test_message_without_text_is_never_split_even_when_too_big() -> None:
    call = {"name": "write_file", "args": {"body": "q" * 2000}, "id": "c1", "type": "tool_call"}
    message = AIMessage(content="", tool_calls=[call])
    assert split_message(message, 50) == [message]
    assert chunk_for_summary([human("hi"), message], 50) == [[human("hi")], [message]]


def test_split_parts_end_between_words_so_no_word_is_cut_in_two() -> None:
    original = "fact 0: " + "word0 " * 300
    parts = split_message(human(original), 100)
    texts = [PART_LABEL.sub("", part.text) for part in parts]
    assert len(texts) > 1
    assert "".join(texts) == original
    assert all(text.endswith(" ") for text in texts[:-1])
    assert sum(text.count("word0") for text in texts) == 300


def test_text_without_spaces_is_still_split_within_the_budget() -> None:
    parts = split_message(human("x" * 5000), 100)
    assert len(parts) > 1
    assert all(COUNTER.raw([part]) <= 100 for part in parts)
    assert "".join(PART_LABEL.sub("", part.text) for part in parts) == "x" * 5000


def test_split_ai_message_keeps_its_tool_calls_on_the_first_part_only() -> None:
    message = ai("w" * 3000, "call-1")
    parts = split_message(message, 100)
    assert len(parts) > 1
    assert [len(part.tool_calls) for part in parts] == [1] + [0] * (len(parts) - 1)
    assert "".join(PART_LABEL.sub("", part.text) for part in parts) == message.text


def test_split_message_that_fits_returns_the_message_itself() -> None:
    message = human("short")
    assert split_message(message, 100) == [message]
    assert split_message(message, 100)[0] is message


def test_split_message_with_content_blocks_keeps_all_of_their_text() -> None:
    message = HumanMessage(
        content=[{"type": "text", "text": "a" * 900}, {"type": "text", "text": "b" * 900}]
    )
    parts = split_message(message, 50)
    assert len(parts) > 1
    assert "".join(PART_LABEL.sub("", part.text) for part in parts) == message.text


# --- properties -------------------------------------------------------------------------

TEXT = st.text(alphabet="abc xyz.,\n", max_size=300)


@st.composite
def conversations(draw: st.DrawFn) -> list[BaseMessage]:
    """Random conversations: humans, AIs (some calling 1-3 tools), answers (adjacent,
    interleaved, missing or repeated) and orphan tool results. Tool-call ids are unique."""
    messages: list[BaseMessage] = []
    unanswered: list[str] = []
    answered: list[str] = []
    next_id = 0
    for _ in range(draw(st.integers(0, 16))):
        kind = draw(
            st.sampled_from(["human", "ai", "tools", "answer", "orphan", "repeat", "system"])
        )
        if kind == "human":
            messages.append(human(draw(TEXT)))
        elif kind == "system":
            messages.append(SystemMessage(draw(TEXT)))
        elif kind == "ai":
            messages.append(ai(draw(TEXT)))
        elif kind == "tools":
            ids = [f"call-{next_id + k}" for k in range(draw(st.integers(1, 3)))]
            next_id += len(ids)
            messages.append(ai(draw(TEXT), *ids))
            answer_now = draw(st.lists(st.sampled_from(ids), unique=True))
            for call_id in answer_now:
                messages.append(tool(call_id, draw(TEXT)))
                answered.append(call_id)
            unanswered.extend(i for i in ids if i not in answer_now)
        elif kind == "answer" and unanswered:
            call_id = unanswered.pop(draw(st.integers(0, len(unanswered) - 1)))
            messages.append(tool(call_id, draw(TEXT)))
            answered.append(call_id)
        elif kind == "repeat" and answered:
            messages.append(tool(draw(st.sampled_from(answered)), draw(TEXT)))
        elif kind == "orphan":
            messages.append(tool(f"orphan-{next_id}", draw(TEXT)))
            next_id += 1
    return messages


KEEP_LIMITS = st.one_of(
    st.integers(1, 12).map(lambda n: Limit("messages", n)),
    st.integers(1, 400).map(lambda n: Limit("tokens", n)),
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=conversations(),
    keep=KEEP_LIMITS,
    keep_first_message=st.booleans(),
    data=st.data(),
)
def test_plan_partitions_messages_and_never_splits_a_tool_group(
    messages: list[BaseMessage], keep: Limit, keep_first_message: bool, data: st.DataObject
) -> None:
    policy_ = SummaryPolicy((Limit("messages", 100),), keep, keep_first_message)
    counts = data.draw(
        st.one_of(
            st.none(),
            st.lists(st.integers(0, 200), min_size=len(messages), max_size=len(messages)),
        ),
        label="token_counts",
    )
    plan = plan_summary(messages, policy_, counts)
    n = len(messages)

    # Every index is either folded or kept, in order, exactly once.
    kept = kept_indices(plan, n)
    assert list(plan.fold) == sorted(set(plan.fold))
    assert sorted(plan.fold + tuple(kept)) == list(range(n))
    assert len(plan.fold) + len(kept) == n
    assert 0 <= plan.cutoff <= n
    assert bool(plan) == bool(plan.fold)

    # The pinned message is the first human, and it is never folded.
    if keep_first_message:
        assert plan.pinned == first_human_index(messages)
    else:
        assert plan.pinned is None
    assert plan.pinned not in plan.fold

    # A cut kept window never starts with a tool result, and no tool group is cut in two.
    # (Cutoff 0 cuts nothing: a conversation that starts with a tool result keeps it.)
    if 0 < plan.cutoff < n:
        assert not isinstance(messages[plan.cutoff], ToolMessage)
    assert separated_tool_pairs(messages, plan.cutoff) == []

    # Safety only ever keeps more: never fewer than the keep limit asks for.
    rest = [i for i in range(n) if i != plan.pinned]
    kept_rest = [i for i in rest if i >= plan.cutoff]
    if keep.kind == "messages":
        assert len(kept_rest) >= min(int(keep.value), len(rest))
    elif rest:
        assert rest[-1] in kept_rest


@settings(max_examples=300, deadline=None)
@given(messages=conversations(), data=st.data())
def test_safe_cutoff_is_the_largest_safe_index_at_or_before_the_target(
    messages: list[BaseMessage], data: st.DataObject
) -> None:
    target = data.draw(st.integers(-2, len(messages) + 2), label="target")
    cutoff = find_safe_cutoff(messages, target)
    unsafe = unsafe_cutoffs(messages)
    assert 0 <= cutoff <= max(0, min(target, len(messages)))
    assert cutoff == 0 or cutoff not in unsafe
    assert all(c in unsafe for c in range(cutoff + 1, min(target, len(messages)) + 1))
    # The independent definition agrees: a safe cutoff splits no pair and starts on no tool.
    if cutoff not in unsafe:
        assert separated_tool_pairs(messages, cutoff) == []
        assert cutoff == len(messages) or not isinstance(messages[cutoff], ToolMessage)


CHUNK_TEXT = st.one_of(
    st.text(alphabet="abc xyz.,\n", max_size=200),
    st.integers(200, 6000).map(lambda n: ("lorem ipsum dolor " * (n // 18 + 1))[:n]),
)


@st.composite
def messages_to_fold(draw: st.DrawFn) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for k in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["human", "ai", "tools", "tool"]))
        text = draw(CHUNK_TEXT)
        if kind == "human":
            messages.append(human(text))
        elif kind == "ai":
            messages.append(ai(text))
        elif kind == "tools":
            messages.append(ai(text, f"call-{k}"))
        else:
            messages.append(tool(f"call-{k}", text))
    return messages


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=messages_to_fold(), budget=st.integers(1, 2000))
def test_chunks_flattened_and_rejoined_reproduce_the_input(
    messages: list[BaseMessage], budget: int
) -> None:
    chunks = chunk_for_summary(messages, budget)
    assert all(chunks), "no empty chunk"
    assert rejoin_parts(chunks) == [(type(m), m.text) for m in messages]
    if messages and COUNTER.raw(messages) <= budget:
        assert len(chunks) == 1
    if not messages:
        assert chunks == []


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=messages_to_fold(), budget=st.integers(64, 2000))
def test_every_chunk_fits_the_budget_when_each_message_overhead_does(
    messages: list[BaseMessage], budget: int
) -> None:
    # 64 tokens hold any generated message's role, label, id and tool calls with room to spare.
    for chunk in chunk_for_summary(messages, budget):
        assert COUNTER.raw(chunk) <= budget


# --- fitting the input budget -------------------------------------------------------------------


def test_a_fit_folds_more_than_keep_asks_so_the_window_fits() -> None:
    messages = [human("a"), ai("b"), human("c"), ai("d"), human("huge")]
    counts = [10, 10, 10, 10, 500]
    policy_ = policy("messages:4")
    assert plan_summary(messages, policy_, counts).fold == (0,)
    fitted = plan_summary(messages, policy_, counts, max_kept_tokens=515)
    assert fitted.fold == (0, 1, 2)
    assert sum(counts[fitted.cutoff :]) <= 515
    assert plan_summary(messages, policy_, counts, max_kept_tokens=520).fold == (0, 1)


def test_a_fit_never_folds_the_latest_message_even_when_it_alone_is_too_big() -> None:
    messages = [human("a"), ai("b"), human("huge")]
    plan = plan_summary(messages, policy("messages:3"), [10, 10, 900], max_kept_tokens=100)
    assert plan.fold == (0, 1)
    assert plan.cutoff == 2


def test_a_fit_moves_forward_past_a_tool_group_rather_than_back() -> None:
    messages = [
        human("q"),
        ai("", "call-1"),
        tool("call-1", "x" * 50),
        ai("answer"),
        human("next"),
    ]
    counts = [10, 10, 300, 10, 10]
    # Keeping 30 tokens would start the window on the ToolMessage: fold the group instead.
    plan = plan_summary(messages, policy("messages:5"), counts, max_kept_tokens=30)
    assert plan.cutoff == 3
    assert plan.fold == (0, 1, 2)


def test_a_fit_keeps_the_pinned_first_message_and_counts_it() -> None:
    messages = [human("first"), ai("b"), human("c"), ai("d"), human("e")]
    counts = [50, 50, 50, 50, 50]
    plan = plan_summary(
        messages, policy("messages:4", keep_first_message=True), counts, max_kept_tokens=120
    )
    assert plan.pinned == 0 and 0 not in plan.fold
    assert plan.fold == (1, 2, 3)


def test_safe_cutoff_after_finds_the_next_safe_index_but_never_past_the_last_message() -> None:
    messages = [human("q"), ai("", "c1"), tool("c1"), human("end")]
    assert find_safe_cutoff_after(messages, 2) == 3
    assert find_safe_cutoff_after(messages, 0) == 0
    assert find_safe_cutoff_after([human("q"), ai("", "c1"), tool("c1")], 2) is None


@pytest.mark.parametrize(
    ("counted", "limit", "requested", "max_input", "room"),
    [
        (1000, None, None, None, 500),  # nothing known: half of what was refused
        (1000, None, None, 1200, 1080),  # the configured limit, less the margin
        (1000, 800, None, 2000, 720),  # the provider's limit wins over the setting
        (1000, 800, 2000, None, 360),  # the provider counts twice what we do
    ],
)
def test_overflow_room_uses_the_providers_numbers_in_our_units(
    counted: int, limit: int | None, requested: int | None, max_input: int | None, room: int
) -> None:
    assert overflow_room(counted, limit, requested, max_input) == room


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=conversations(), keep=KEEP_LIMITS, data=st.data())
def test_a_fitted_plan_is_still_safe_and_keeps_the_latest_message(
    messages: list[BaseMessage], keep: Limit, data: st.DataObject
) -> None:
    counts = data.draw(
        st.lists(st.integers(1, 200), min_size=len(messages), max_size=len(messages))
    )
    room = data.draw(st.integers(1, 1000), label="max_kept_tokens")
    plan = plan_summary(messages, SummaryPolicy((), keep), counts, max_kept_tokens=room)
    n = len(messages)
    if n:
        assert n - 1 not in plan.fold, "the latest message is never folded"
    assert separated_tool_pairs(messages, plan.cutoff) == []
    if 0 < plan.cutoff < n:
        assert not isinstance(messages[plan.cutoff], ToolMessage)
    # The window fits, unless no safe cut before the latest message could make it fit.
    kept = sum(counts[plan.cutoff :])
    unsafe = unsafe_cutoffs(messages)
    could_fit = [c for c in range(n) if c not in unsafe and sum(counts[c:]) <= room]
    if could_fit:
        assert kept <= room
    # Fitting only ever folds more than keep alone would.
    plain = plan_summary(messages, SummaryPolicy((), keep), counts)
    assert set(plain.fold) <= set(plan.fold)


# --- splitting keeps images and files ------------------------------------------------------------


def test_split_message_keeps_images_and_files_with_its_first_part() -> None:
    image = {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"}
    pdf = {"type": "file", "base64": "JVBERi0=", "mime_type": "application/pdf"}
    message = HumanMessage(content=[image, {"type": "text", "text": "word " * 3000}, pdf])
    parts = split_message(message, 2500)  # room for both blocks (1,000 tokens each) and text
    assert len(parts) > 1
    _, first_media = text_and_media(parts[0].content)
    assert first_media == [image, pdf]
    assert all(text_and_media(part.content)[1] == [] for part in parts[1:])
    texts = (text_and_media(p.content)[0] for p in parts)
    assert "".join(PART_LABEL.sub("", text) for text in texts) == "word " * 3000
    assert all(COUNTER.raw([part]) <= 2500 for part in parts)


def test_media_bigger_than_the_budget_goes_alone_in_the_first_part() -> None:
    image = {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"}
    message = HumanMessage(content=[image, {"type": "text", "text": "word " * 600}])
    parts = split_message(message, 300)  # the image alone counts 1,000 tokens
    assert text_and_media(parts[0].content) == (f"[part 1/{len(parts)}] ", [image])
    assert "".join(PART_LABEL.sub("", text_and_media(p.content)[0]) for p in parts) == "word " * 600


def test_chinese_text_is_split_at_punctuation_within_the_budget() -> None:
    sentence = "我叫小明，住在上海。我喜欢喝绿茶，每天早上七点起床。"
    parts = split_message(human(sentence * 100), 200)
    texts = [PART_LABEL.sub("", part.text) for part in parts]
    assert "".join(texts) == sentence * 100
    assert all(text[-1] in "，。" for text in texts[:-1])
    assert all(COUNTER.raw([part]) <= 200 for part in parts)
