"""The fold events the graph streams: typed records, a plain dict on the wire (what a LangGraph
server, Studio and the SDK pass on), read back as the same record."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from chatbot.engine.stream import (
    Folding,
    NothingToFold,
    Retrying,
    Summarized,
    SummaryFailed,
    as_payload,
    from_payload,
)

reasons = st.sampled_from(["trigger", "fit", "overflow", "compact"])
counts = st.integers(min_value=0, max_value=10**7)
records = st.one_of(
    st.builds(Folding, messages=counts, reason=reasons),
    st.builds(
        Summarized,
        messages=counts,
        tokens_in=counts,
        tokens_out=counts,
        calls=st.integers(min_value=1, max_value=50),
        extended=st.booleans(),
        reason=reasons,
        context_before=counts,
        context_after=counts,
    ),
    st.builds(NothingToFold, context=counts, reason=reasons),
    st.builds(SummaryFailed, error=st.text(min_size=1), reason=reasons),
    st.integers(min_value=1, max_value=10).flatmap(
        lambda retries: st.builds(
            Retrying,
            seconds=st.floats(min_value=0, max_value=120),
            reason=st.sampled_from(
                ["rate_limited", "server_failed", "status", "timeout", "connection"]
            ),
            status=st.sampled_from([0, 408, 409, 429, 500, 503]),
            retry=st.integers(min_value=1, max_value=retries),
            retries=st.just(retries),
            call=st.sampled_from(["reply", "summary"]),
        )
    ),
)


@given(records)
def test_every_fold_event_crosses_the_wire_as_json_and_reads_back_as_itself(record: object) -> None:
    payload = as_payload(record)  # type: ignore[arg-type]
    wire = json.loads(json.dumps(payload))  # (a server sends it as JSON)
    assert wire["event"] in (
        "folding",
        "summarized",
        "nothing_to_fold",
        "summary_failed",
        "retrying",
    )
    assert from_payload(wire) == record


def test_a_payload_from_an_older_graph_takes_the_defaults_and_other_data_is_not_an_event() -> None:
    older = {"event": "summarized", "messages": 4, "tokens_in": 300, "tokens_out": 40}
    assert from_payload(older) == Summarized(messages=4, tokens_in=300, tokens_out=40)
    assert from_payload({"event": "summary_failed", "error": "boom"}) == SummaryFailed("boom")
    assert from_payload({"event": "something else"}) is None
    assert from_payload(["not", "a", "dict"]) is None
