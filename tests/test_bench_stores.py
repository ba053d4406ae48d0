"""The stores and concurrency benchmarks run end to end at tiny sizes; their figures are not
checked."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_ADMIN_URL

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def bench_url() -> Iterator[str | None]:
    """The URL of a PostgreSQL role of this test's own that may create databases (``None``
    without a server). The benchmark's scratch databases are that role's: the check that they
    are dropped sees no other run's (another xdist worker's or checkout's on this server)."""
    import psycopg

    role = f"chatbot_bench_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(POSTGRES_ADMIN_URL, connect_timeout=3, autocommit=True)
    except psycopg.OperationalError:
        yield None
        return
    with admin:
        admin.execute(f"CREATE ROLE {role} LOGIN CREATEDB")  # type: ignore[arg-type]
        try:
            yield f"postgresql://{role}@127.0.0.1:5432/postgres"
        finally:
            for name in _scratch_databases(role):  # (a failed run's, after the test said so)
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # type: ignore[arg-type]
            admin.execute(f"DROP ROLE {role}")  # type: ignore[arg-type]


def _scratch_databases(role: str) -> set[str]:
    """The databases ``role`` owns on the test server."""
    import psycopg

    with psycopg.connect(POSTGRES_ADMIN_URL, connect_timeout=3, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT d.datname FROM pg_database AS d JOIN pg_roles AS r ON r.oid = d.datdba "
            "WHERE r.rolname = %s",
            (role,),
        ).fetchall()
    return {str(row[0]) for row in rows}


def test_concurrency_benchmark_prints_every_row(tmp_path: Path, bench_url: str | None) -> None:
    report = tmp_path / "concurrency.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "concurrency.py"),
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
            *("--pg-url", bench_url or POSTGRES_ADMIN_URL, "--dir", str(tmp_path / "dbs")),
            *("--json", str(report)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    kinds = ["SQLite"] if bench_url is None else ["SQLite", "PostgreSQL"]
    if bench_url is None:
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
    if bench_url is not None:
        role = bench_url.removeprefix("postgresql://").split("@")[0]
        assert not _scratch_databases(role), "scratch databases are dropped"


def test_stores_benchmark_prints_bytes_by_part_against_the_tutorial(
    tmp_path: Path, bench_url: str | None
) -> None:
    report = tmp_path / "stores.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "stores.py"),
            *("--turns", "3", "--at", "1,3", "--json", str(report)),
            *("--pg-url", bench_url or POSTGRES_ADMIN_URL),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    arms = ["SQLite, chatbot", "SQLite, tutorial"]
    if bench_url is not None:
        arms += ["PostgreSQL, chatbot", "PostgreSQL, tutorial"]
    document = json.loads(report.read_text())
    assert [arm["label"] for arm in document["arms"]] == arms
    for arm in document["arms"]:
        assert [m["turns"] for m in arm["marks"]] == [1, 3]
        assert arm["marks"][-1]["times_text"] > 0
        assert arm["chat_calls"] == 3, "one reply a turn on every side"
    header = next(line for line in result.stdout.splitlines() if line.startswith("| measure"))
    assert header == "| measure | " + " | ".join(arms) + " |"
    for measure in (
        "bytes a turn, turns 1–1",
        "bytes a turn, turns 1–3",
        "… of it checkpoints, a turn",
        "… of it pending writes, a turn",
        "… of it search index, a turn",
        "… of it other, a turn",
        "text a turn added",
        "summary calls",
        "CPU a turn (mean)",
    ):
        assert f"| {measure} |" in result.stdout, measure
    assert "SQLite: chatbot takes " in result.stdout
    if bench_url is not None:
        assert "PostgreSQL: chatbot takes " in result.stdout
        role = bench_url.removeprefix("postgresql://").split("@")[0]
        assert not _scratch_databases(role), "scratch databases are dropped"
