"""Shared fixtures. Every test runs with a clean configuration: no CHATBOT_* or OPENAI_*
variable from the machine, no ./.env, and a data directory under tmp_path."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import Cli, DevServer, closed_port

# pytest rewrites the asserts of every test module it imports (5 s of each xdist worker's start
# here) and keeps what it made in tests/__pycache__, but not where PYTHONDONTWRITEBYTECODE is
# set (CI machines, containers): then every worker of every run rewrote them all again. The
# test processes write bytecode whatever that variable says (the chatbot processes they start
# keep it).
sys.dont_write_bytecode = False


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (pyproject.toml): one xdist worker per CPU core this process may use;
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # (xdist's own hook reads it)
    if hasattr(os, "sched_getaffinity"):  # (Linux: the cores this process may run on)
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile chatbot's modules once, before any test (in the main process, not in each
    xdist worker): most tests start ``chatbot`` processes, and where PYTHONDONTWRITEBYTECODE
    is set (CI machines, containers) Python never writes the bytecode of the project's own
    modules, so every process compiled them again at start, about 0.3 s each. (uv compiles
    the dependencies at install.)"""
    if hasattr(session.config, "workerinput"):
        return
    import compileall

    compileall.compile_dir(Path(__file__).resolve().parent.parent / "chatbot", quiet=1)


LONGEST = (
    "tests/test_leases.py::test_four_processes_taking_turns_on_one_thread_lose_nothing",
    "tests/test_store_faults.py::test_the_campaign_counts_every_round",
    "tests/test_benchmarks.py::test_startup_benchmark_prints_every_row",
    "tests/test_bench_stores.py::test_concurrency_benchmark_prints_every_row",
    "tests/test_turn_faults.py::test_a_process_ended_mid_turn_gives_the_thread_back",
    "tests/test_turn_faults.py::test_ctrl_c_at_any_moment_of_start_up_says_interrupted",
    "tests/test_faults.py::test_kill_during_the_summary_keeps_the_reply_and_no_false_note",
    "tests/test_store_faults.py::test_eight_processes_starting_together",
    "tests/test_turn_faults.py::test_on_postgresql_a_disk_that_fills_while_the_model_answers",
    "tests/test_turn_faults.py::test_a_turn_waiting_for_another_window_never_says",
    "tests/test_turn_faults.py::test_a_lease_left_by_a_killed_process_on_this_machine",
    "tests/test_http_memory.py::test_a_chinese_conversation_at_fraction_0_8",
    "tests/test_startup.py::test_reading_commands_never_make_a_model_or_the_graph",
    "tests/test_faults.py::test_kill_during_the_chat_call_keeps_the_message_and_says_so",
    "tests/test_faults.py::test_concurrent_asks_on_one_database_all_land",
    "tests/test_lazy_history.py::test_any_mix_of_operations_reads_the_same_lazily",
)
"""Tests that take 15 s or more on a busy machine (``--durations``), started first."""


@pytest.hookimpl(tryfirst=True)  # (before ``-m`` deselects by marker)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test of the ``langgraph dev`` server (:func:`dev_server`) is marked ``slow``, as the
    marker says. Then the longest tests first (:data:`LONGEST`), then the rest of those marked
    ``slow``, then the others, each in the order collected: xdist (``--dist load``, one test at
    a time, pyproject.toml) hands tests out in this order as workers free up, so no long test
    starts when the others are almost done."""
    for item in items:
        if "dev_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)

    def rank(item: pytest.Item) -> int:
        if item.nodeid.startswith(LONGEST):
            return 0
        return 1 if item.get_closest_marker("slow") else 2

    items.sort(key=rank)


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAI]:
    """A fake OpenAI-compatible server on 127.0.0.1: ``.base_url``, ``.requests``,
    ``.script(...)`` for queued replies and ``.responder`` for a callable."""
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="session", autouse=True)
def ctrl_c_delivered() -> Iterator[None]:
    """Ctrl-C reaches this test process and the chatbot processes it starts, as in a terminal.

    A shell starts a command run in the background (``pytest &``, a CI step that does) with
    SIGINT ignored, and a program keeps that for its children: Python then never raises
    KeyboardInterrupt, and every chatbot a pseudo-terminal test starts ignores the Ctrl-C the
    test presses. The tests are of a terminal, where Ctrl-C interrupts."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture(scope="session", autouse=True)
def user_folders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The user's data, config and cache folders of this test process (each xdist worker has
    its own): between tests, or after one, nothing is written to the real home folder.

    And a CA bundle of one certificate (``SSL_CERT_FILE``, which httpx reads, and so do the
    chatbot processes the tests start): every model client chatbot makes (a sync and an async
    one per model) loads the bundle into an SSL context, 50 ms each for the system's 140
    certificates, 0.2 s per turn run in-process. No test talks TLS: every model server here
    is on http://127.0.0.1."""
    folders = tmp_path_factory.mktemp("user")
    with pytest.MonkeyPatch.context() as patch:
        for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
            patch.setenv(name, str(folders / name.lower()))
        patch.setenv("SSL_CERT_FILE", str(_one_certificate(folders / "ca.pem")))
        patch.delenv("SSL_CERT_DIR", raising=False)
        yield


def _one_certificate(path: Path) -> Path:
    """``path``, holding the first certificate of certifi's CA bundle."""
    import certifi

    bundle = Path(certifi.where()).read_text(encoding="ascii")
    end = "-----END CERTIFICATE-----"
    start = bundle.index("-----BEGIN CERTIFICATE-----")
    path.write_text(bundle[start : bundle.index(end) + len(end)] + "\n", encoding="ascii")
    return path


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No setting leaks in from the machine running the tests."""
    for name in list(os.environ):
        if name.upper().startswith(("CHATBOT_", "OPENAI_", "LANGSMITH_", "LANGCHAIN_")):
            monkeypatch.delenv(name, raising=False)
        elif name.lower() in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
            monkeypatch.delenv(name, raising=False)  # the fake server is on 127.0.0.1
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no user config.env
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no cached model list
    monkeypatch.chdir(tmp_path)
    yield
    # The REPL lists the endpoint's models on a daemon thread and caches them in the user's
    # cache folder: it ends before this test's folders are given back.
    for thread in threading.enumerate():
        if thread.name == "chatbot-models":
            thread.join(timeout=60)
            assert not thread.is_alive(), "the model listing of the REPL never ended"


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections for the whole test (see
    :func:`tests.helpers.closed_port`)."""
    with closed_port() as port:
        yield port


@pytest.fixture
def cli(openai_server: FakeOpenAI, tmp_path: Path) -> Cli:
    """The ``chatbot`` CLI, in-process, against the fake server with one temp database (in a
    folder that exists: chatbot makes no folder for a database outside its own)."""
    (tmp_path / "data").mkdir(exist_ok=True)
    return Cli(openai_server, tmp_path / "data" / "chatbot.sqlite")


@pytest.fixture(scope="session")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """One real ``langgraph dev`` for the whole run (offline model, ``messages:4`` /
    ``messages:2``), started when an integration test first asks for it."""
    running = DevServer(tmp_path_factory.mktemp("langgraph-dev"))
    try:
        yield running
    finally:
        running.stop()


POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
"""The test machines' PostgreSQL 15 (trust auth). ``.ci/run`` starts it and sets
``CHATBOT_TEST_POSTGRES=required``, so that in CI a missing server fails instead of skipping."""


def _postgres_or_skip() -> None:
    import psycopg

    try:
        psycopg.connect(POSTGRES_ADMIN_URL, connect_timeout=3).close()
    except psycopg.OperationalError as error:
        reason = " ".join(str(error).split())[:120]
        if os.environ.get("CHATBOT_TEST_POSTGRES") == "required":
            pytest.fail(f"PostgreSQL is required here and does not answer: {reason}")
        pytest.skip(
            "no PostgreSQL on 127.0.0.1:5432 (start it: pg_ctlcluster "
            "--skip-systemctl-redirect $(ls /etc/postgresql) main start)"
        )


@pytest.fixture
def postgres_url(spare_databases: SpareDatabases) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test: made for it, or one an earlier test of
    this process had, emptied to be as a new one is (:class:`SpareDatabases`)."""
    _postgres_or_skip()
    name = spare_databases.take()
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        spare_databases.give_back(name)


@pytest.fixture(scope="session")
def spare_databases() -> Iterator[SpareDatabases]:
    """The databases this test process's tests had, emptied; dropped at its end."""
    spare = SpareDatabases()
    try:
        yield spare
    finally:
        spare.drop_all()


class SpareDatabases:
    """PostgreSQL databases for tests, each made once and emptied between them: making one and
    dropping it took a second or more of each test (a ``DROP DATABASE`` makes the server write
    a checkpoint). A database is given to a test only while it reads as a new one does (the
    same schemas, owners and rights, extensions, settings and no object of its own): emptied
    to that, or else dropped and replaced."""

    _SYSTEM = "(n.nspname LIKE 'pg\\_%' OR n.nspname = 'information_schema')"
    LOOKS = f"""
        SELECT
            (SELECT array_agg(n.nspname || ' ' || pg_get_userbyid(n.nspowner) || ' '
                              || coalesce(n.nspacl::text, '') || ' '
                              || coalesce(obj_description(n.oid, 'pg_namespace'), '')
                              ORDER BY n.nspname)
             FROM pg_namespace AS n WHERE NOT {_SYSTEM}),
            (SELECT array_agg(e.extname || ' ' || e.extversion ORDER BY e.extname)
             FROM pg_extension AS e),
            (SELECT count(*) FROM pg_class AS c
             JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE NOT {_SYSTEM}),
            (SELECT count(*) FROM pg_proc AS p
             JOIN pg_namespace AS n ON n.oid = p.pronamespace WHERE NOT {_SYSTEM}),
            (SELECT count(*) FROM pg_type AS t
             JOIN pg_namespace AS n ON n.oid = t.typnamespace WHERE NOT {_SYSTEM}),
            (SELECT count(*) FROM pg_db_role_setting AS s
             JOIN pg_database AS d ON d.oid = s.setdatabase WHERE d.datname = current_database()),
            (SELECT pg_get_userbyid(d.datdba) || ' ' || coalesce(d.datacl::text, '') || ' '
                    || d.dattablespace || ' ' || d.datconnlimit || ' ' || d.datallowconn
             FROM pg_database AS d WHERE d.datname = current_database()),
            (SELECT count(*) FROM pg_largeobject_metadata),
            (SELECT count(*) FROM pg_event_trigger),
            (SELECT count(*) FROM pg_publication),
            (SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database())
    """
    """What tells a database apart from a new one: compared with what a new one reads."""

    def __init__(self) -> None:
        self.spare: list[str] = []
        self.made: list[str] = []
        self.new_looks: Any = None

    def take(self) -> str:
        while self.spare:
            name = self.spare.pop()
            if self._looks(name) == self.new_looks:
                return name
            self._drop(name)
        return self._make()

    def give_back(self, name: str) -> None:
        """Empty the database and keep it for the next test; drop it if it cannot be made to
        read as a new one (or it is gone)."""
        import psycopg

        try:
            _as_admin(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE datname = '{name}' AND pid <> pg_backend_pid()"
            )
            with psycopg.connect(_url(name), autocommit=True) as conn:
                schemas = conn.execute(
                    f"SELECT n.nspname FROM pg_namespace AS n WHERE NOT {self._SYSTEM}"
                ).fetchall()
                for (schema,) in schemas:
                    conn.execute(f'DROP SCHEMA "{schema}" CASCADE')  # type: ignore[arg-type]
                conn.execute(
                    "CREATE SCHEMA public AUTHORIZATION pg_database_owner;"
                    "GRANT USAGE ON SCHEMA public TO PUBLIC;"
                    "COMMENT ON SCHEMA public IS 'standard public schema'"
                )
            emptied = self._looks(name) == self.new_looks
        except psycopg.Error:
            emptied = False
        if emptied:
            self.spare.append(name)
        else:
            self._drop(name)

    def drop_all(self) -> None:
        for name in self.made:
            _as_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def _make(self) -> str:
        import uuid

        name = f"chatbot_test_{uuid.uuid4().hex[:12]}"
        _as_admin(f"CREATE DATABASE {name}")
        self.made.append(name)
        if self.new_looks is None:
            self.new_looks = self._looks(name)
        return name

    def _drop(self, name: str) -> None:
        _as_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        self.made.remove(name)

    def _looks(self, name: str) -> Any:
        import psycopg

        try:
            with psycopg.connect(_url(name), autocommit=True) as conn:
                return conn.execute(self.LOOKS).fetchone()  # type: ignore[arg-type]
        except psycopg.Error:
            return None


def _url(name: str) -> str:
    return f"postgresql://postgres@127.0.0.1:5432/{name}"


def _as_admin(statement: str, timeout: float = 120.0) -> None:
    """Run ``CREATE`` or ``DROP DATABASE`` on the test server. Both make the server write a
    checkpoint, which fails while another test keeps a tablespace's disk full (the PostgreSQL
    disk-full tests): then it is run again once that test has given the space back."""
    import time

    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
                admin.execute(statement)  # type: ignore[arg-type]
            return
        except psycopg.errors.InternalError as error:
            if "checkpoint request failed" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)  # (the other test's disk fills and frees in seconds)


@pytest.fixture(params=["sqlite", "postgres"])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database of each kind: a SQLite file, then a PostgreSQL database (store-level
    tests run against both)."""
    if request.param == "sqlite":
        return str(tmp_path / "db.sqlite")
    url: str = request.getfixturevalue("postgres_url")
    return url


def pytest_collection_finish(session: pytest.Session) -> None:
    """Once the test modules (and chatbot, LangGraph, LangChain with them) are imported, their
    objects live as long as the process: frozen out of garbage collection, as the ``chatbot``
    entry point does with its own, each later collection walks only what tests made."""
    import gc

    gc.collect()
    gc.freeze()
