"""Memory over real HTTP: ChatOpenAI against the fake OpenAI server, which counts tokens with
OpenAI's own vocabulary and refuses requests over its context limit with OpenAI's error."""

from __future__ import annotations

import re
from typing import Any

import pytest

from chatbot.errors import context_overflow
from tests.fake_openai import Reply, prompt_tokens
from tests.helpers import (
    SECRET,
    SUMMARY_TEXT,
    Cli,
    chat_requests,
    echo_or_summary,
    is_summary_request,
    ok,
    summary_requests,
    worth_folding,
)

ZH_TURNS = [
    f"第{i}天：我今天在上海参加了一个关于大语言模型的会议，讨论了上下文窗口、摘要和检索增强生成。"
    f"会上有人提到，长对话的成本会随着轮数增加而增长，所以需要定期把旧消息压缩成摘要。编号{i * 7}。"
    for i in range(1, 26)
]
ZH_REPLY = "好的，我记下了。这个会议听起来很有意思，关于上下文窗口的讨论尤其重要。" * 2


def zh_server(body: dict[str, Any]) -> str:
    if is_summary_request(body):
        return "## 事实\n- 用户在上海参加了大语言模型会议，讨论了上下文窗口和摘要。"
    return ZH_REPLY


@pytest.mark.slow  # (a long conversation: a second or more)
@pytest.mark.parametrize("model", ["gpt-4o-mini", "qwen-plus"], ids=["o200k", "estimate"])
def test_a_chinese_conversation_at_fraction_0_8_never_reaches_the_servers_limit(
    cli: Cli, model: str
) -> None:
    """gpt-4o-mini is counted with its real vocabulary; qwen-plus with the estimate, then
    corrected by the usage the server reports."""
    cli.server.context_limit = 2000
    cli.server.responder = zh_server
    env = {
        "CHATBOT_MODEL": model,
        "CHATBOT_MAX_INPUT_TOKENS": "2000",
        "CHATBOT_SUMMARY_TRIGGER": "fraction:0.8",
        "CHATBOT_SUMMARY_KEEP": "fraction:0.3",
        "CHATBOT_MAX_SUMMARY_TOKENS": "300",
        "CHATBOT_LANGUAGE": "zh",
    }
    for turn in ZH_TURNS:
        ok(cli.ask(turn, **env))

    assert cli.server.refused == [], "no request passed the server's context limit"
    assert len(summary_requests(cli.server)) >= 2
    state = cli.show()
    assert state["summary"].startswith("## 事实")
    assert state["messages"][-1]["content"] == ZH_REPLY


def test_openais_context_length_error_folds_the_history_and_the_turn_succeeds(cli: Cli) -> None:
    cli.server.responder = echo_or_summary
    env = {"CHATBOT_SUMMARY_TRIGGER": "off", "CHATBOT_SUMMARY_KEEP": "messages:2"}
    for i in range(6):
        ok(cli.ask(f"report {i}: " + "the sky is clear and the wind is low " * 12, **env))
    assert summary_requests(cli.server) == []
    cli.server.context_limit = 900

    result = ok(cli.ask("and tomorrow?", **env))

    assert result.stdout.strip() == "echo: and tomorrow?"
    asked = [prompt_tokens(r.body) for r in chat_requests(cli.server)[6:]]
    assert len(asked) == 2 and asked[0] > 900 >= asked[1], "refused once, then it fitted"
    assert "the model said the context was too long: folded" in result.stderr
    assert re.search(r"context [0-9,]+ → [0-9,]+ tokens", result.stderr)
    # The summary call meets the same limit: it is re-chunked under the limit the error gave.
    summaries = [prompt_tokens(r.body) for r in summary_requests(cli.server)]
    assert summaries[-1] <= 900
    state = cli.show()
    assert state["summary"] == SUMMARY_TEXT
    assert [m["content"] for m in state["messages"]][-2:] == [
        "and tomorrow?",
        "echo: and tomorrow?",
    ]
    assert SECRET not in result.output


WORDINGS = {
    "openai": (
        400,
        "This model's maximum context length is 4096 tokens. However, your "
        "messages resulted in 5000 tokens. Please reduce the length of the messages.",
    ),
    "vllm": (
        400,
        "This model's maximum context length is 4096 tokens. However, you requested "
        "5120 tokens (5000 in the messages, 120 in the completion). Please reduce the "
        "length of the messages or completion.",
    ),
    "vllm-scheduler": (400, "Input prompt (5000 tokens) is too long and exceeds limit of 4096"),
    "ollama": (400, "the input length exceeds the context length"),
    "deepseek": (
        400,
        "This model's maximum context length is 65536 tokens. However, you "
        "requested 70000 tokens (70000 in the messages, 0 in the completion). Please "
        "reduce the length of the messages or completion.",
    ),
    "dashscope": (
        400,
        "<400> InternalError.Algo.InvalidParameter: Range of input length should be [1, 30720]",
    ),
    "llama.cpp": (400, "the request exceeds the available context size, try increasing it"),
    "lm-studio": (400, "Input length 6491 exceeds context length 4096"),
    "payload-too-large": (413, "Request Entity Too Large"),
}


@pytest.mark.parametrize("provider", list(WORDINGS))
def test_every_providers_context_length_wording_is_recovered_from(cli: Cli, provider: str) -> None:
    status, message = WORDINGS[provider]
    env = {"CHATBOT_SUMMARY_TRIGGER": "off", "CHATBOT_SUMMARY_KEEP": "messages:1"}
    cli.server.responder = echo_or_summary
    for i in range(3):
        ok(cli.ask(f"note {i} " * 30, **env))
    cli.server.script(Reply(status=status, error_message=message))

    result = ok(cli.ask("next", **env))

    assert result.stdout.strip() == "echo: next"
    assert "context was too long" in result.stderr
    assert cli.show()["summary"] == SUMMARY_TEXT


def test_a_bad_request_that_is_not_about_length_is_not_folded(cli: Cli) -> None:
    cli.server.responder = echo_or_summary
    ok(cli.ask("hello"))
    cli.server.script(Reply(status=400, error_message="Invalid value for 'temperature'"))

    result = cli.ask("again")

    assert result.exit_code == 1
    assert "Invalid value for 'temperature'" in result.stderr
    assert summary_requests(cli.server) == []


@pytest.mark.parametrize(
    ("message", "limit", "requested"),
    [
        (WORDINGS["openai"][1], 4096, 5000),
        (WORDINGS["vllm"][1], 4096, 5000),
        (WORDINGS["vllm-scheduler"][1], 4096, 5000),
        (WORDINGS["deepseek"][1], 65536, 70000),
        (WORDINGS["dashscope"][1], 30720, None),
        (WORDINGS["lm-studio"][1], 4096, 6491),
        ("prompt is too long: 210000 tokens > 200000 maximum", 200000, 210000),
        (
            "The input token count (582632) exceeds the maximum number of tokens allowed (131072).",
            131072,
            582632,
        ),
        (WORDINGS["ollama"][1], None, None),
    ],
)
def test_the_providers_numbers_are_read_from_its_error(
    message: str, limit: int | None, requested: int | None
) -> None:
    found = context_overflow(RuntimeError(message))
    assert found is not None
    assert (found.limit, found.requested) == (limit, requested)


def test_rate_limits_and_other_errors_are_not_overflows() -> None:
    class RateLimited(Exception):
        status_code = 429

    tpm = "Request too large for gpt-4o: Limit 30000, Requested 35000 tokens per min (TPM)."
    assert context_overflow(RateLimited(tpm)) is None
    assert context_overflow(RuntimeError("Invalid API key")) is None


def test_compact_from_the_shell_that_would_not_make_the_context_smaller_folds_nothing(
    cli: Cli,
) -> None:
    """A first summary brings its message and the recall tool to every call: folding one short
    exchange would add more than it takes away, so it is not made, and that is no failure."""
    cli.server.responder = echo_or_summary
    env = {"CHATBOT_SUMMARY_TRIGGER": "off", "CHATBOT_SUMMARY_KEEP": "messages:2"}
    for text in ("hi", "thanks"):
        ok(cli.ask(text, **env))
    before = cli.show()
    history = ok(cli.invoke("history", "t1", "--json", "--db", str(cli.db))).stdout

    result = ok(cli.invoke("compact", "t1", "--db", str(cli.db), **env))

    assert result.stdout.strip() == (
        "nothing to fold: folding 2 messages would not make the context smaller"
    )
    assert summary_requests(cli.server) == [], "no summary was asked for"
    assert cli.show()["messages"] == before["messages"] and not cli.show()["summary"]
    assert ok(cli.invoke("history", "t1", "--json", "--db", str(cli.db))).stdout == history


def test_compact_from_the_shell_folds_now_with_a_focus_and_prints_before_and_after(
    cli: Cli,
) -> None:
    cli.server.responder = echo_or_summary
    env = {"CHATBOT_SUMMARY_TRIGGER": "off", "CHATBOT_SUMMARY_KEEP": "messages:2"}
    for i in range(4):
        ok(cli.ask(f"file{i}.py holds the {i}th helper", **env))

    result = ok(
        cli.invoke("compact", "t1", "--focus", "keep every file name", "--db", str(cli.db), **env)
    )

    line = result.stdout.strip()
    assert re.fullmatch(
        r"compacted: folded 6 messages \([0-9,]+ tokens\) into [0-9,]+ tokens; "
        r"context ([0-9,]+) → ([0-9,]+) tokens",
        line,
    ), line
    before, after = (int(n.replace(",", "")) for n in re.findall(r"([0-9,]+) → ([0-9,]+)", line)[0])
    assert after < before
    (request,) = summary_requests(cli.server)
    assert "pay special attention to: keep every file name" in request.last_user_text
    assert "file0.py" in request.last_user_text
    state = cli.show()
    assert state["summary"] == SUMMARY_TEXT
    assert [m["content"] for m in state["messages"]] == [
        "file3.py holds the 3th helper",
        "echo: file3.py holds the 3th helper",
    ]

    history = ok(cli.invoke("history", "t1", "--json", "--db", str(cli.db))).stdout
    for _ in range(2):
        again = ok(cli.invoke("compact", "t1", "--db", str(cli.db), **env))
        assert again.stdout.startswith(
            "nothing to fold: the kept window holds the whole conversation"
        )
    assert len(summary_requests(cli.server)) == 1
    after = ok(cli.invoke("history", "t1", "--json", "--db", str(cli.db))).stdout
    assert after == history, "a compaction that folds nothing leaves no row in the history"


def test_compact_refuses_a_missing_thread_and_a_turn_without_a_reply(cli: Cli) -> None:
    cli.server.script(Reply(status=500, error_message="boom"))
    failed = cli.ask("hello")
    assert failed.exit_code == 1
    missing = cli.invoke("compact", "nope", "--db", str(cli.db))
    assert missing.exit_code == 1 and "no thread 'nope'" in missing.stderr

    refused = cli.invoke("compact", "t1", "--db", str(cli.db))
    assert refused.exit_code == 1
    assert "the last turn has no reply yet" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_a_failed_compaction_exits_nonzero_and_changes_nothing(cli: Cli) -> None:
    broken = {"on": False}

    def responder(body: dict[str, Any]) -> str | Reply:
        if is_summary_request(body) and broken["on"]:
            return Reply(status=500, error_message="summary backend down")
        return echo_or_summary(body)

    cli.server.responder = responder
    env = {"CHATBOT_SUMMARY_TRIGGER": "off", "CHATBOT_SUMMARY_KEEP": "messages:1"}
    for i in range(3):
        ok(cli.ask(worth_folding(f"turn {i}"), **env))
    before = cli.show()
    broken["on"] = True

    result = cli.invoke("compact", "t1", "--db", str(cli.db), **env)

    assert result.exit_code == 1
    assert "the summary failed, nothing was folded" in result.stderr
    assert "summary backend down" in result.stderr
    assert cli.show() == before
