"""What is shown and what is stored (docs/reliability.md, "What is shown and stored"; issue 20,
items 7 and 9).

- A password in ``OPENAI_BASE_URL`` is written nowhere: not in the cached model list, the call
  log, the exports or the database.
- Bidi controls and zero-width characters never reach the terminal or the Markdown export,
  as escape codes never do; the stored text and the JSON keep them.

The only fakes are at the edge: the fake OpenAI server for the CLI, a scripted chat model for
the REPL.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import psycopg

from chatbot.modellist import cache_path, completion_names, endpoint_of
from tests.fake_openai import FakeOpenAI
from tests.helpers import Cli, echo_or_summary, ok, summarizing

# --- a password in the model server's URL ------------------------------------------------------

PASSWORD = "PW-hunter2/x"
"""With a ``/``: written ``%2F`` in a URL, so both forms are looked for."""


def with_password(base_url: str) -> str:
    return base_url.replace("http://", f"http://ada:{quote(PASSWORD, safe='')}@")


def files_holding(folder: Path, *secrets: str) -> list[Path]:
    """Every file under ``folder`` that holds one of ``secrets`` (as UTF-8 bytes)."""
    needles = [secret.encode() for secret in secrets]
    return [
        path
        for path in sorted(folder.rglob("*"))
        if path.is_file() and any(needle in path.read_bytes() for needle in needles)
    ]


def test_a_password_in_the_model_servers_url_is_written_nowhere(
    cli: Cli, openai_server: FakeOpenAI, tmp_path: Path
) -> None:
    openai_server.responder = echo_or_summary
    url = with_password(openai_server.base_url)
    cli.env.update(OPENAI_BASE_URL=url, CHATBOT_LOG=str(tmp_path / "calls.jsonl"), **summarizing())
    for text in ("one", "two", "three"):  # a summary too
        ok(cli.ask(text))
    ok(cli.invoke("models"))  # caches the listing for completion
    db = ("--db", str(cli.db))
    ok(cli.invoke("export", "t1", "-o", str(tmp_path / "t1.md"), *db))
    ok(cli.invoke("export", "t1", "-o", str(tmp_path / "t1.json"), *db))

    assert (tmp_path / "calls.jsonl").stat().st_size > 0
    cached = json.loads(cache_path().read_text())
    assert cached["endpoint"] == openai_server.base_url.replace("http://", "http://ada:***@")
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {cache_path(), cli.db, tmp_path / "t1.md", tmp_path / "t1.json"} <= set(written)
    assert files_holding(tmp_path, PASSWORD, quote(PASSWORD, safe="")) == []
    # and completion still finds the listing under the URL as the user set it
    assert "fake-summary-model" in completion_names(endpoint_of(url))


def test_a_model_list_cached_with_a_password_by_an_older_version_is_removed(
    openai_server: FakeOpenAI,
) -> None:
    url = with_password(openai_server.base_url)
    path = cache_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"endpoint": url, "models": ["old-model"]}))
    assert completion_names(url, "mine") == ["mine", "offline"]
    assert not path.exists()


def test_a_password_in_a_postgresql_url_is_not_in_the_database(
    cli: Cli, openai_server: FakeOpenAI, postgres_url: str
) -> None:
    """Checkpoint metadata copies string settings from a run's config: none holds the URL."""
    openai_server.responder = echo_or_summary
    secret = quote(PASSWORD, safe="")
    with_secret = postgres_url.replace("postgres@", f"postgres:{secret}@")  # trust: ignored
    cli.env.update(CHATBOT_DB=with_secret, **summarizing())
    for text in ("one", "two", "three"):
        ok(cli.invoke("ask", text, "--thread", "t1"))
    with psycopg.connect(postgres_url) as connection:
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            )
        ]
        assert "checkpoints" in tables
        for table in tables:
            rows = connection.execute(f"SELECT * FROM {table}").fetchall()  # type: ignore[call-overload]
            assert "hunter2" not in repr(rows), table
