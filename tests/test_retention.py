"""The retention benchmark (benchmarks/retention.py): its judge, an offline smoke run as a user
runs it, and a run against an OpenAI-compatible server whose model reads its context perfectly."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from chatbot.config.settings import load_settings
from chatbot.engine.models import extractive_summary
from tests.fake_openai import FakeOpenAI, Reply, completion, content_text, prompt_tokens
from tests.helpers import ROOT

SCRIPT = ROOT / "benchmarks" / "retention.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("retention_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_judge_wants_the_newest_value_exactly(bench: ModuleType) -> None:
    facts = {f.key: f for f in bench.FACTS["en"]}
    assert bench.judge("Your flight is jl0412.", facts["flight"])
    assert bench.judge("41000 euros", facts["budget"])
    assert not bench.judge("It was 48,500 and is now 41,000.", facts["budget"]), "stale value"
    assert not bench.judge("Tampere", facts["city"])
    assert not bench.judge("I don't know", facts["dentist"])
    zh = {f.key: f for f in bench.FACTS["zh"]}
    assert bench.judge("你住在青岛。", zh["city"])
    assert bench.judge("ＪＬ０４１２", zh["flight"]), "full-width forms count"


def test_the_script_plants_every_fact_and_correction_before_the_questions(
    bench: ModuleType,
) -> None:
    for language in ("en", "zh"):
        turns, facts = bench.script(language, 2)
        assert len(turns) == 3 * (len(facts) + sum(1 for f in facts if f.correction))
        for fact in facts:
            assert fact.statement in turns
            if fact.correction:
                assert turns.index(fact.correction) > turns.index(fact.statement)
                assert bench.normalise(fact.value) in bench.normalise(fact.correction)
            else:
                assert bench.normalise(fact.value) in bench.normalise(fact.statement)


@pytest.mark.slow
def test_offline_smoke_run_as_the_readme_says(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--report", str(report_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "pipeline, not a model" in done.stdout
    report = json.loads(report_path.read_text())
    ceiling, floor, ours, recalled, elsewhere = report["arms"]
    names = [a["arm"] for a in report["arms"]]
    assert names == [
        "full context",
        "last-N",
        "chatbot",
        "chatbot + recall",
        "chatbot, another thread",
    ]
    # Told in one thread, asked in others: the facts reach the other threads' requests.
    assert elsewhere["in_context"] >= 0.8 > floor["in_context"]
    assert elsewhere["correct"] == 0, "the offline model only echoes"
    assert report["offline"] and report["facts"] == 10 and report["corrected_facts"] == 3
    assert all(a["correct"] == 0 for a in report["arms"][:3]), "the offline model only echoes"
    # With recall, every fact is within reach, for at most 10 % more input tokens a turn.
    assert recalled["reachable"] == 1.0 > ours["reachable"] == ours["in_context"]
    assert recalled["correct"] >= 1, "the offline model quotes what it recalled"
    assert report["recall_tokens_per_turn_ratio"] <= 1.10
    assert f"{report['recall_tokens_per_turn_ratio']:.2f}× chatbot's without it" in done.stdout
    assert report["retention_accuracy"] is None
    assert ceiling["in_context"] == 1.0
    assert floor["input_tokens_per_turn_max"] <= report["last_n_budget_tokens"]
    assert ours["summary_calls"] >= 1 and ours["final_summary_tokens"] > 0
    assert ours["in_context"] > floor["in_context"], "the summary keeps what last-N drops"
    assert ours["input_tokens_per_turn_mean"] < ceiling["input_tokens_per_turn_mean"]
    expected = (ours["in_context"] - floor["in_context"]) / (
        ceiling["in_context"] - floor["in_context"]
    )
    assert report["retention_in_context"] == pytest.approx(expected, abs=0.001)
    assert f"in context {report['retention_in_context']:.2f}" in done.stdout


@pytest.mark.slow
def test_a_bad_trigger_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--trigger", "messages:4", "--report", "r.json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: the benchmark needs a token trigger: --trigger tokens:N or fraction:F"
    ]
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_against_an_openai_compatible_server(
    bench: ModuleType, openai_server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that answers exactly when the value is in its context, and, offered the
    recall tool, recalls the fact's key words when it is not: accuracy must then equal the
    in-context figure in every arm without recall, and the reachable one with it; token
    figures come from the server's usage."""
    questions = {f.question: f for f in bench.FACTS["en"]}

    def reader(body: dict[str, Any]) -> str | Reply:
        messages = body["messages"]
        last = content_text(messages[-1]["content"] or "")
        if "<conversation>" in last:
            return extractive_summary(last, 200)  # (a summary that loses the oldest facts)
        asked = next(
            (content_text(m["content"]) for m in reversed(messages) if m["role"] == "user"), ""
        )
        fact = next((f for q, f in questions.items() if q in asked), None)
        if fact is None:
            return "Noted, here is a short answer to that."
        context = " ".join(content_text(m["content"] or "") for m in messages[:-1])
        if messages[-1]["role"] == "tool":
            context += " " + last
        if bench.normalise(fact.value) in bench.normalise(context):
            return fact.value
        if "tools" in body and messages[-1]["role"] == "user":
            words = " ".join(w for w in fact.statement.split()[-3:])
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": "recall", "arguments": json.dumps({"query": words})},
            }
            return completion({"content": None, "tool_calls": [call]}, finish="tool_calls")(body)
        return "?"

    openai_server.responder = reader
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-retention")
    monkeypatch.setenv("CHATBOT_MODEL", "gpt-4o-mini")
    settings = load_settings(None, summary_trigger="tokens:800", summary_keep="tokens:300")
    report = bench.run(settings, 2)

    assert not report["offline"] and report["tokenizer"] == "o200k_base"
    ceiling, floor, ours, recalled, elsewhere = report["arms"]
    assert ceiling["accuracy"] == 1.0
    assert elsewhere["accuracy"] == elsewhere["in_context"]
    for arm in report["arms"][:3]:
        assert arm["accuracy"] == arm["in_context"], arm["arm"]
    assert recalled["accuracy"] == recalled["reachable"] > ours["accuracy"]
    assert floor["accuracy"] < ours["accuracy"]
    assert report["retention_accuracy"] == report["retention_in_context"]
    assert ours["summary_calls"] >= 1

    sent = [prompt_tokens(r.body) for r in openai_server.requests]
    total = sum(
        a["chat_input_tokens_total"] + a["summary_input_tokens_total"] for a in report["arms"]
    )
    assert total == sum(sent), "input tokens are the server's reported usage"
    assert "sk-test-retention" not in json.dumps(report)
