"""The user's memories in the graph: read from LangGraph's store for each request, written
when a fold notes facts, when the user asks (``remember that …``), and when a thread that
never folded is left (:mod:`chatbot.memory.facts` has the rules).

The store is the one LangGraph hands the graph (the database's locally, the server's under
``langgraph dev``). Without a store, or with memory off, nothing is read or written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.config import get_config
from langgraph.runtime import get_runtime
from langgraph.store.base import BaseStore, Item

from chatbot.logs import logger
from chatbot.memory import facts, finish, prompts

if TYPE_CHECKING:  # (the commands reach the store through here: no models imported)
    from chatbot.engine.runsettings import RunSettings

log = logger("memory")

NAMESPACE = ("memories", "local")
"""Where the user's memories are kept in the store, one item per memory (its id the key)."""
THREADS = ("memory_threads", "local")
"""Each thread's memory record, keyed by thread id: ``memory`` (``off``: the thread neither
reads nor writes memories) and ``noted`` (the last message read for facts)."""
MOST = 1_000
"""The most memories read at once."""
RECENT = 4
"""The latest messages a request's memories are chosen by."""


def now() -> str:
    """The time a memory is noted: ISO 8601, UTC."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def memories_of(items: Sequence[Item]) -> list[facts.Memory]:
    """The memories the items of :data:`NAMESPACE` hold, oldest first."""
    found = [facts.Memory.from_value(item.key, item.value) for item in items]
    return sorted(found, key=lambda memory: (memory.created_at, memory.id))


def record_of(item: Item | None) -> dict[str, Any]:
    """A thread's memory record from its item of :data:`THREADS` (empty: none)."""
    return dict(item.value) if item is not None else {}


async def read_all(store: BaseStore) -> list[facts.Memory]:
    """Every memory in the store, superseded ones too, oldest first."""
    return memories_of(await store.asearch(NAMESPACE, limit=MOST))


async def thread_record(store: BaseStore, thread_id: str) -> dict[str, Any]:
    """A thread's memory record (empty for a thread never told anything)."""
    return record_of(await store.aget(THREADS, thread_id) if thread_id else None)


async def update_thread(store: BaseStore, thread_id: str, **values: Any) -> None:
    """Change a thread's memory record (a value None removes that entry)."""
    record = {**await thread_record(store, thread_id), **values}
    record = {key: value for key, value in record.items() if value is not None}
    if record:
        await store.aput(THREADS, thread_id, record)
    else:
        await store.adelete(THREADS, thread_id)


async def write(store: BaseStore, changes: facts.Changes) -> None:
    """Put what noting facts changed: the superseded memories marked, the new ones."""
    for memory in changes.puts:
        await store.aput(NAMESPACE, memory.id, memory.value())


@dataclass
class Mind:
    """What a run knows of the user's memories (``store`` None: none this run)."""

    store: BaseStore | None
    thread_id: str
    memories: list[facts.Memory] = field(default_factory=list)

    @property
    def on(self) -> bool:
        return self.store is not None

    async def note(
        self,
        noted: Sequence[facts.Noted],
        sources: Sequence[BaseMessage],
        origin: facts.Origin,
    ) -> facts.Changes:
        """Store ``noted`` facts as memories from ``sources`` (the messages they were read
        from: each fact's message is the user's message sharing most of its words)."""
        if self.store is None or not noted:
            return facts.Changes([], [])
        said = [(str(m.id or ""), m.text) for m in sources if isinstance(m, HumanMessage)]
        changes = facts.note(
            self.memories,
            noted,
            thread_id=self.thread_id,
            message_id=lambda text: facts.source_of(text, said),
            now=now(),
            origin=origin,
        )
        await write(self.store, changes)
        replaced = {memory.id: memory for memory in changes.superseded}
        self.memories = [replaced.get(m.id, m) for m in self.memories] + changes.added
        if changes.added:
            log.info("noted %d memories (%s)", len(changes.added), origin)
        return changes


def _context() -> tuple[BaseStore | None, str]:
    """The run's store and thread id (None and '' outside a run or without a store)."""
    try:
        store = get_runtime().store
        thread_id = str((get_config().get("configurable") or {}).get("thread_id") or "")
    except (RuntimeError, KeyError):
        return None, ""
    return store, thread_id


async def mind_of(run: RunSettings, store: BaseStore | None, thread_id: str) -> Mind:
    """Every memory in ``store``; no store when memory is off for the run or the thread."""
    if not run.memory or store is None:
        return Mind(None, thread_id)
    if (await thread_record(store, thread_id)).get("memory") == "off":
        return Mind(None, thread_id)
    return Mind(store, thread_id, await read_all(store))


def block_of(mind: Mind, messages: Sequence[BaseMessage], run: RunSettings) -> str:
    """The memories block a request carries ('' for none), chosen by its latest messages."""
    if not mind.on:
        return ""
    query = "\n".join(message.text for message in messages[-RECENT:])
    chosen = facts.choose(mind.memories, query, run.memory_tokens, run.counter.text)
    return facts.render(chosen, run.language)


async def recalled(
    messages: Sequence[BaseMessage], run: RunSettings, *, requests: bool = False
) -> tuple[RunSettings, Mind]:
    """The run with the memories its requests carry, and what it knows of them (unchanged
    without memories). With ``requests``, a ``remember that …`` in the latest message is
    stored first. A store that fails is logged, and the run goes on without memories."""
    store, thread_id = _context()
    try:
        mind = await mind_of(run, store, thread_id)
        if requests and mind.on:
            await _asked_to_remember(mind, messages)
    except Exception as error:  # (memories are an aid: a turn never fails for them)
        log.warning("the user's memories could not be read: %s", error)
        return run, Mind(None, thread_id)
    if not mind.on:
        return run, mind
    return dataclasses.replace(run, memories=block_of(mind, messages, run)), mind


async def _asked_to_remember(mind: Mind, messages: Sequence[BaseMessage]) -> None:
    """Store what the latest message asks to be remembered (``remember that …``)."""
    if messages and isinstance(messages[-1], HumanMessage):
        fact = facts.remember_request(messages[-1].text)
        if fact is not None:
            await mind.note([facts.Noted(fact)], messages[-1:], "request")


async def noted_in_fold(
    mind: Mind, noted: Sequence[facts.Noted], folded: Sequence[BaseMessage]
) -> None:
    """Store the facts a fold noted; a store that fails is logged (the summary is kept)."""
    try:
        await mind.note(noted, folded, "fold")
    except Exception as error:
        log.warning("the facts noted in the summary could not be stored: %s", error)


def leaving_request(
    messages: Sequence[BaseMessage], known: Sequence[facts.Memory], language: prompts.Language
) -> list[BaseMessage]:
    """The one call that reads a thread being left for facts: the messages since the last such
    call, as the summary call's transcript, asking for the ``<memories>`` section alone."""
    ask = facts.facts_request(known, language, alone=True)
    body = f"<conversation>\n{prompts.transcript(messages)}\n</conversation>\n\n{ask}"
    return [SystemMessage(content=facts.LEAVING[language]), HumanMessage(content=body)]


def unread(messages: Sequence[BaseMessage], noted: str) -> list[BaseMessage]:
    """The messages after ``noted`` (the last one read for facts); all when it is not there."""
    ids = [str(message.id or "") for message in messages]
    if noted and noted in ids:
        return list(messages[ids.index(noted) + 1 :])
    return list(messages)


async def note_on_leaving(
    run: RunSettings,
    store: BaseStore | None,
    thread_id: str,
    messages: Sequence[BaseMessage],
    summary: str,
) -> int:
    """When a thread that never folded is left: one summary-model call for the facts in what
    it said since the last such call; returns how many memories it added. A failed call is
    logged and changes nothing."""
    from chatbot.engine.folding import ask, summary_runnable

    if not run.memory or store is None or summary or not thread_id:
        return 0
    record = await thread_record(store, thread_id)
    if record.get("memory") == "off":
        return 0
    new = unread(messages, str(record.get("noted") or ""))
    if not any(isinstance(message, HumanMessage) for message in new):
        return 0
    mind = Mind(store, thread_id, await read_all(store))
    model = summary_runnable(run, "remember")
    try:
        reply = await ask(model, leaving_request(new, mind.memories, run.language))
    except Exception as error:  # (a thread left must never fail for it)
        from chatbot.errors import describe_error

        log.warning("reading the thread for memories failed: %s", describe_error(error))
        return 0
    _, noted = facts.split_facts(finish.usable_text(reply))
    changes = await mind.note(noted, new, "leave")
    await update_thread(store, thread_id, noted=str(new[-1].id or ""))
    return len(changes.added)
