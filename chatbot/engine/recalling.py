"""The recall tool's side of the graph (:mod:`chatbot.memory.recall` says what recall is): when
a call offers it, the model with it bound, the ``recall`` node, and the searcher of a server's
graph (:func:`history_search`: a server keeps no search index)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Collection
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.config import get_config, get_stream_writer
from langgraph.runtime import get_runtime

from chatbot.engine import stream
from chatbot.engine.runsettings import RunSettings
from chatbot.errors import describe_error
from chatbot.logs import logger
from chatbot.memory import recall, recall_search
from chatbot.memory.state import RunState
from chatbot.memory.tokens import model_name
from chatbot.parts import readable_text

log = logger("recall")

_NO_TOOLS: set[tuple[str, str]] = set()
"""Models that refused the recall tool in this process, by endpoint and name: not offered it
again (the same name on another server may take tools)."""
_BOUND: dict[int, tuple[BaseChatModel, Any]] = {}
"""Each model with the recall tool bound, by the model's id (the model is kept with it, so
the id stays its own; chat models are not hashable)."""


def offers_recall(state: RunState, run: RunSettings) -> bool:
    """True when this call offers the recall tool: recall on, a summary, rounds left, a model
    that takes tools, and no refusal of the request as too long pending."""
    return (
        run.recall
        and not state.get("context_overflow")
        and bool(state.get("summary"))
        and recall.rounds_this_turn(state["messages"]) < recall.MAX_ROUNDS
        and _tools_key(run.chat_model) not in _NO_TOOLS
    )


def _tools_key(model: BaseChatModel) -> tuple[str, str]:
    """A model as :data:`_NO_TOOLS` knows it: its endpoint (an OpenAI model's base URL) and name."""
    return str(getattr(model, "openai_api_base", None) or ""), model_name(model)


def with_tools(model: BaseChatModel) -> Any:
    """The model with the recall tool bound (made once per model); None if it takes none."""
    made = _BOUND.get(id(model))
    if made is None or made[0] is not model:
        try:
            made = (model, model.bind_tools([recall.TOOL_SPEC]))
        except NotImplementedError:
            return None
        _BOUND[id(model)] = made
    return made[1]


def refused(model: BaseChatModel, error: Any) -> stream.RecallOff:
    name = model_name(model)
    _NO_TOOLS.add(_tools_key(model))
    reason = describe_error(error) if isinstance(error, BaseException) else str(error)
    log.warning("recall is off for %s: it refused tools (%s)", name, reason)
    return stream.RecallOff(model=name, error=reason)


def answered(sent: list[BaseMessage]) -> list[BaseMessage]:
    """The request with an answer for every tool call (a round cut short by Ctrl-C leaves calls
    without results, which providers refuse)."""
    if not any(isinstance(m, AIMessage) and m.tool_calls for m in sent):
        return sent
    answered = {m.tool_call_id for m in sent if isinstance(m, ToolMessage)}
    fixed: list[BaseMessage] = []
    for message in sent:
        fixed.append(message)
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                if call.get("id") and call["id"] not in answered:
                    fixed.append(
                        ToolMessage(
                            content="(no result: the turn was stopped before it came)",
                            tool_call_id=call["id"],
                            name=call.get("name") or "",
                        )
                    )
    return fixed


async def recall_messages(
    state: RunState, searcher: recall_search.Searcher | recall_search.AsyncSearcher | None
) -> dict[str, Any]:
    """Answer the recall calls of the latest reply: one ToolMessage each, with the folded
    messages found (never one still in the window). ``searcher``: the store's (called) or a
    server's (awaited)."""
    messages = state["messages"]
    last = messages[-1]
    if not isinstance(last, AIMessage):
        return {}
    writer = get_stream_writer()
    configurable = get_config().get("configurable") or {}
    thread_id = str(configurable.get("thread_id") or "")
    at = _checkpoint_id()
    window = {str(m.id) for m in messages if m.id}
    answers: list[BaseMessage] = []
    for call in last.tool_calls:
        query = recall.query_of(call)
        if call.get("name") != recall.TOOL_NAME:
            content = f"There is no tool named {call.get('name')!r}; the one tool is recall."
        elif searcher is None:
            content = "recall is not available here (this server keeps no search index)."
        elif not query:
            content = recall.answer("", [])
        else:
            try:
                found = searcher(thread_id, query, recall.MAX_HITS * 3, window, at)
                hits = await found if inspect.isawaitable(found) else found
            except Exception as error:  # (the search failing is the tool's answer, not the turn's)
                log.warning("recall failed: %s", error)
                content = f"recall failed: {describe_error(error)}"
            else:
                kept = recall.distinct(hits, window)
                content = recall.answer(query, kept, searched=bool(state.get("summary")))
                writer(stream.as_payload(stream.Recalling(query=query, found=len(kept))))
        answers.append(
            ToolMessage(content=content, tool_call_id=call.get("id") or "", name=recall.TOOL_NAME)
        )
    return {"messages": answers}


def _checkpoint_id() -> str | None:
    """The checkpoint the running step started from; None outside a run."""
    try:
        runtime = get_runtime()
    except (RuntimeError, KeyError):
        return None
    info = runtime.execution_info if runtime is not None else None
    return info.checkpoint_id if info is not None else None


_PAGE = 100
"""Checkpoints asked for at a time."""
_WAIT = 0.5
"""How long a search waits for this run's checkpoint to be saved, in seconds."""


async def history_search(
    thread_id: str,
    query: str,
    limit: int,
    skip: Collection[str],
    at: str | None = None,
    *,
    client: Any = None,
) -> list[recall_search.Recalled]:
    """A searcher for a graph without chatbot's store (a LangGraph server, Studio): what the
    store's search would find in this thread's history, newest first, read through
    langgraph-sdk's ``get_client()`` (in process, on the server it runs in) or ``client``."""
    try:
        terms = recall_search.parse_query(query)
    except recall_search.SearchError:
        return []
    if client is not None:
        states = await _history(client, thread_id, at)
    else:
        from langgraph_sdk import get_client  # (only a server's graph reads this way)

        async with get_client(api_key=None) as own:
            states = await _history(own, thread_id, at)
    parents = {
        _checkpoint_of(state.get("checkpoint")): _checkpoint_of(state.get("parent_checkpoint"))
        for state in states
    }
    line: set[str] = set()
    step = at if at in parents else None
    while step:  # (this run's line of history: not an undone turn's or another fork's)
        line.add(step)
        step = parents.get(step) or None
    first_seen: dict[str, recall_search.Recalled] = {}
    for state in states:  # (newest first: a message's oldest checkpoint wins)
        checkpoint_id = _checkpoint_of(state.get("checkpoint"))
        if line and checkpoint_id not in line:
            continue
        when = str(state.get("created_at") or "")[:16]
        values = state.get("values")
        stored = values.get("messages") if isinstance(values, dict) else None
        for message in stored or ():
            text = readable_text(_field(message, "content") or "")
            message_id = str(_field(message, "id") or "")
            if message_id and text.strip() and message_id not in skip:
                role = recall_search.role_of(str(_field(message, "type") or ""))
                first_seen[message_id] = recall_search.Recalled(
                    role, text, checkpoint_id, when, message_id
                )
    return recall_search.recalled(first_seen.values(), terms, limit)


async def _history(client: Any, thread_id: str, at: str | None) -> list[dict[str, Any]]:
    """Every state of the thread, newest first, once checkpoint ``at`` is saved (or 0.5 s)."""
    if at:  # (a run's checkpoints are saved in the background, in order: once this run's
        # is there, so is its whole line)
        deadline = time.monotonic() + _WAIT
        where = {"checkpoint_id": at}
        while not await client.threads.get_history(thread_id, limit=1, checkpoint=where):
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.01)
    states: list[dict[str, Any]] = []
    before: str | None = None
    while True:
        page = list(await client.threads.get_history(thread_id, limit=_PAGE, before=before))
        states.extend(page)
        if len(page) < _PAGE:
            return states
        before = _checkpoint_of(page[-1].get("checkpoint")) or None
        if before is None:
            return states


def _checkpoint_of(checkpoint: Any) -> str:
    return str((checkpoint or {}).get("checkpoint_id") or "")


def _field(message: Any, name: str) -> Any:
    """A message's field, as the API sends it (a dict) or as LangChain holds it."""
    return message.get(name) if isinstance(message, dict) else getattr(message, name, None)
