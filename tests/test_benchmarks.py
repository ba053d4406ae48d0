"""The start-up, search, turns, turn-parts and sanitize benchmarks run end to end at tiny
sizes (their figures are not held to values)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def test_startup_benchmark_prints_every_row(tmp_path: Path) -> None:
    report = tmp_path / "startup.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "startup.py"),
            *("--runs", "1", "--warmup", "0", "--threads", "3", "--turns", "2"),
            *("--long-turns", "3", "--limit", "2"),
            *("--data", str(tmp_path / "data"), "--json", str(report)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    failures = [line for line in result.stdout.splitlines() if line.startswith("failed")]
    assert result.returncode == 0, (result.stderr, failures)
    launches = [".venv/bin/chatbot", *(["uv run"] if shutil.which("uv") else [])]
    expected = [
        *(
            f"REPL {how}: {what}"
            for how in launches
            for what in ("launch → prompt", "Ctrl-D → exited", "session CPU, peak memory")
        ),
        "threads --json (3 threads × 2 turns)",
        "threads --json (3 threads × 2 turns)",  # against a bare Typer app, for reference
        "threads",  # the tables, against a bare Typer + Rich program
        "history T",
        "show T",
        "history T --limit 2",
        "history T --limit 2",
        "show T",
        "show T --json",
        "search WORD --json",
        "export T -f json",
        *(
            f"{what}: {figure}"
            for what in ("history T --limit 1", "REPL /undo", "REPL /retry", "REPL /tokens")
            for figure in ("time beyond start-up", "peak memory")
        ),
    ]
    document = json.loads(report.read_text())
    measures = [row["measure"] for row in document["rows"]]
    assert [m.split(" (")[0] for m in measures] == [e.split(" (")[0] for e in expected]
    for measure in measures:
        assert f"| {measure} " in result.stdout
    assert not [note for note in document["notes"] if "differs" in note], document["notes"]


def test_search_benchmark_prints_every_row(tmp_path: Path) -> None:
    report = tmp_path / "search.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "search.py"),
            *("--threads", "3", "--turns", "2", "--runs", "1"),
            *("--data", str(tmp_path / "data"), "--json", str(report)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(report.read_text())
    assert document["messages"] == 12, "3 threads × 2 turns × 2 messages, each indexed once"
    measures = [row["measure"] for row in document["rows"]]
    assert [m.split(" (")[0].split(":")[0] for m in measures] == [
        *["query"] * 11,
        "catch_up",
        "chatbot search garden --json, beyond threads --json of a 1-thread database",
        "chatbot search garden --json, beyond --version",
        "indexing",
    ]
    for measure in measures:
        assert f"| {measure} |" in result.stdout
    for row in document["rows"]:
        assert row["ratio"] == row["seconds"] / row["reference_seconds"]
    caught_up = next(row for row in document["rows"] if row["measure"].startswith("catch_up"))
    assert "4 rows (of its 4) from its 6 checkpoints" in caught_up["note"], caught_up["note"]


def test_turns_benchmark_runs_both_graphs_side_by_side(tmp_path: Path) -> None:
    report = tmp_path / "turns.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "turns.py"),
            *("--turns", "12", "--windows", "4-6,10-12"),
            *("--json", str(report)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(report.read_text())
    measures = [row["measure"] for row in document["rows"]]
    assert measures == [
        "CPU per turn, graph path, turns 4-6",
        "CPU per turn, graph path, turns 10-12",
        "CPU per turn, CLI path, turns 4-6",
        "CPU per turn, CLI path, turns 10-12",
        "tokens over 12 turns, summary calls included (graph path's messages)",
        "tokens over 12 turns, summary calls included (CLI path's messages)",
    ]
    for measure in measures:
        assert f"| {measure} |" in result.stdout
    for path in ("graph", "CLI"):
        for side in ("chatbot", "tutorial"):
            # the tutorial's trigger and keep on both sides: a summary at turns 4, 7 and 10
            assert document["tokens"][path][side]["calls"] == {"chat": 12, "summary": 3}


def test_turn_parts_benchmark_swaps_one_part_at_a_time(tmp_path: Path) -> None:
    report = tmp_path / "parts.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "turn_parts.py"),
            *("--turns", "12", "--skip", "2", "--runs", "1", "--json", str(report)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(report.read_text())["rows"]
    parts = ["state", "conversation node", "summarize node", "routers", "whole graph"]
    assert [row["part"] for row in rows] == parts
    for row in rows:
        assert f"| {row['part']} |" in result.stdout
        # both graphs of a pair answer every turn and summarize at turns 4, 7 and 10
        assert row["calls"]["without"] == row["calls"]["with"] == {"chat": 12, "summary": 3}
        assert row["with_us"] > 0 and row["without_us"] > 0


def test_sanitize_benchmark_prints_a_row_per_input() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "sanitize.py"), "--scale", "0.002"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| ") and "ms |" in line]
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows] == [
        "prose with colours, links and Chinese",
        "an OSC string that never ends",
        "CSI introducers that never end",
        "lone escapes",
        "carriage returns",
    ]
    assert "worst growth: " in result.stdout
