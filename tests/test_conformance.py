"""The savers chatbot writes threads through pass LangGraph's checkpointer conformance suite
(``langgraph-checkpoint-conformance``), on SQLite and PostgreSQL, as chatbot makes them: each
on a fresh database, with the zstd serializer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate

from chatbot.store.postgres import open_store


def test_the_savers_pass_langgraphs_conformance_suite(any_db: str, tmp_path: Path) -> None:
    made = iter(range(1_000))

    @checkpointer_test(name=f"chatbot on {any_db.split(':')[0]}")
    async def saver() -> AsyncGenerator[BaseCheckpointSaver[str], None]:
        if any_db.startswith("postgresql"):  # (the fixture's database, emptied for each suite)
            store = open_store(any_db)
            store.write(*((f"DELETE FROM {table}", ()) for table in store.checkpoint_tables))
        else:
            store = open_store(str(tmp_path / f"conformance-{next(made)}.sqlite"))
        try:
            yield store.saver
        finally:
            store.close()

    report = asyncio.run(validate(saver))
    failed = {
        name: result.failures
        for name, result in report.results.items()
        if result.detected and result.passed is not True
    }
    assert report.passed_all_base(), failed
    assert not failed, failed
