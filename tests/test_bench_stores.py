"""The stores benchmark runs end to end at tiny sizes; its figures are not checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_ADMIN_URL

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent


def _scratch_databases() -> set[str] | None:
    """The benchmark's scratch databases on the test server, or ``None`` without a server."""
    import psycopg

    try:
        with psycopg.connect(POSTGRES_ADMIN_URL, connect_timeout=3, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'chatbot_bench_%'"
            ).fetchall()
    except psycopg.OperationalError:
        return None
    return {str(row[0]) for row in rows}


def test_stores_benchmark_prints_every_row(tmp_path: Path) -> None:
    before = _scratch_databases()
    report = tmp_path / "stores.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "stores.py"),
            *(
                "--turns",
                "4",
                "--window",
                "2",
                "--workers",
                "2",
                "--per-worker",
                "2",
                "--rounds",
                "1",
            ),
            *("--pg-url", POSTGRES_ADMIN_URL, "--dir", str(tmp_path / "dbs")),
            *("--json", str(report)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    kinds = ["SQLite"] if before is None else ["SQLite", "PostgreSQL"]
    if before is None:
        assert "PostgreSQL: not measured" in result.stdout
    document = json.loads(report.read_text())
    assert [s["database"] for s in document["serial"]] == kinds
    for serial in document["serial"]:
        assert serial["turns"] == 4
        assert len(serial["ms_per_turn"]) == 4
        assert [w["turns"] for w in serial["windows"]] == [[1, 2], [3, 4]]
        assert serial["whole"]["text_bytes"] > 0
    runs = [(c["database"], c["threads"], c["round"]) for c in document["concurrent"]]
    assert runs == [(kind, threads, 1) for kind in kinds for threads in ("own", "one")]
    for run in document["concurrent"]:
        assert run["turns_done"] + run["errors"] == 4
        assert not run["workers_failed"]
        if run["threads"] == "one":
            assert run["messages_sent"] == 4
            assert run["messages_in_any_checkpoint"] == 4
            assert 1 <= run["messages_in_lineage"] <= 4
    header = next(line for line in result.stdout.splitlines() if line.startswith("| measure"))
    assert all(kind in header for kind in kinds)
    for measure in (
        "4 turns, one thread: ms per turn, median",
        "ms per turn, p95",
        "bytes per turn, turns 1–2",
        "bytes per turn, turns 3–4",
        "bytes per turn, all 4 turns",
        "text a turn added",
        "2 processes × 2 turns, own threads: turns/s",
        "2 processes × 2 turns, one thread: turns/s",
        "one thread / own threads",
        "one thread: user messages in its lineage",
        "ms per turn meanwhile",
        "one thread: in any of its checkpoints",
        "one thread: branches of its history",
        'errors (of them "database is locked")',
        "lease requests",
    ):
        assert f"| {measure}" in result.stdout, measure
    assert list(tmp_path.joinpath("dbs").glob("*.sqlite")), "--dir keeps the SQLite files"
    if before is not None:
        assert _scratch_databases() == before, "scratch databases are dropped"
