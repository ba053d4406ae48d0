"""Shell completion's suggestions (``chatbot --install-completion``): thread ids and model names.

Typer completes the subcommands and options itself; these callbacks add the values. They run
on every Tab, so they read fast (the listing's SQL, never a model or the graph), and any
problem means no suggestions, never a traceback in the middle of a command line.
"""

from __future__ import annotations

import typer


def _option(ctx: typer.Context, name: str) -> str | None:
    """An option's value as typed so far, the command's own first, then its parents'."""
    current: typer.Context | None = ctx
    while current is not None:
        value = current.params.get(name)
        if isinstance(value, str) and value:
            return value
        current = current.parent  # type: ignore[assignment]
    return None


def thread_ids(ctx: typer.Context, incomplete: str) -> list[str]:
    """Thread ids starting with ``incomplete``, newest activity first (``[]`` on any problem)."""
    try:
        return [name for name in _thread_ids(ctx) if name.startswith(incomplete)]
    except Exception:
        _log_failure("completing thread ids failed")
        return []


def _thread_ids(ctx: typer.Context) -> list[str]:
    from chatbot.config.reader import read_places

    places = read_places(
        _option(ctx, "env_file") or ".env", db=_option(ctx, "db"), url=_option(ctx, "url")
    )
    if places.url:
        return _server_thread_ids(places.url)
    from pathlib import Path

    from chatbot.store.base import is_postgres_url

    if not is_postgres_url(places.db) and not Path(places.db).expanduser().is_file():
        return []  # completing never creates the database
    from chatbot.store.postgres import open_store

    store = open_store(
        places.db, places.pg_prepare_threshold, connect_timeout=DATABASE_TIMEOUT, read_only=True
    )
    try:
        return [t.thread_id for t in store.list_threads()]
    finally:
        store.close()


DATABASE_TIMEOUT = 2  # seconds for a Tab's PostgreSQL connection (psycopg reads 1 as 2)
REMOTE_TIMEOUT = 1.0  # seconds a LangGraph server gets to answer a Tab


def _server_thread_ids(url: str) -> list[str]:
    """The names of a LangGraph server's threads, newest first; one short request without
    retries (the SDK's retry for minutes)."""
    import os

    import httpx

    headers = {}
    for prefix in ("LANGGRAPH", "LANGSMITH", "LANGCHAIN"):  # as langgraph-sdk reads its key
        if key := os.environ.get(f"{prefix}_API_KEY", "").strip().strip("\"'"):
            headers["x-api-key"] = key
            break
    answer = httpx.post(
        f"{url.rstrip('/')}/threads/search",
        json={"limit": 100, "sort_by": "updated_at", "sort_order": "desc"},
        headers=headers,
        timeout=REMOTE_TIMEOUT,
    )
    answer.raise_for_status()
    names = []
    for thread in answer.json():
        metadata = thread.get("metadata") or {}
        names.append(str(metadata.get("chatbot_name") or thread["thread_id"]))  # remote.NAME_KEY
    return names


def model_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """Model names starting with ``incomplete``: the configured model, the endpoint's last
    listing (``chatbot models`` or the REPL cached it) and ``offline``."""
    try:
        from chatbot.config.reader import Sources
        from chatbot.config.settings import Settings
        from chatbot.config.sources import endpoint_of
        from chatbot.engine.modellist import completion_names

        sources = Sources(Settings, _option(ctx, "env_file") or ".env")
        base_url = sources.origin("openai_base_url")
        configured = sources.origin("model")
        names = completion_names(
            endpoint_of(base_url.value if base_url else None),
            configured.value if configured else "",
        )
        return [name for name in names if name.startswith(incomplete)]
    except Exception:
        _log_failure("completing model names failed")
        return []


def _log_failure(what: str) -> None:
    """Note a failure to complete, for the debug log (:mod:`logging` is imported only then)."""
    from chatbot.logs import logger

    logger("completion").debug(what, exc_info=True)
