"""The recall tool's side of the graph (:mod:`chatbot.memory.recall` says what recall is):
when a call offers the tool, the model with the tool bound, a model that refuses tools, the
``recall`` node that answers the calls, and the searcher a server's graph uses
(:func:`history_search`: a LangGraph server keeps no search index, so it reads the thread's
checkpoints)."""

from __future__ import annotations

import re
import time
from collections.abc import Collection
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph._internal._constants import CONFIG_KEY_CHECKPOINT_MAP, CONFIG_KEY_CHECKPOINTER
from langgraph.config import get_config, get_stream_writer

from chatbot.engine import stream
from chatbot.engine.runsettings import RunSettings
from chatbot.errors import describe_error
from chatbot.logs import logger
from chatbot.memory import recall, recall_search
from chatbot.memory.channels import added_messages
from chatbot.memory.state import RunState
from chatbot.memory.tokens import model_name
from chatbot.parts import readable_text

log = logger("recall")

_NO_TOOLS: set[str] = set()
"""Models (by name) that refused the recall tool in this process: not offered it again."""
_BOUND: dict[int, tuple[BaseChatModel, Any]] = {}
"""Each model with the recall tool bound, by the model's id (the model is kept with it, so
the id stays its own; chat models are not hashable)."""


def offers_recall(state: RunState, run: RunSettings) -> bool:
    """True when this call offers the recall tool: recall is on for the run (and this graph
    can search), the thread has a summary, the turn has rounds left, the model takes tools,
    and the provider has not just refused the request as too long (its retry carries no
    more than it must)."""
    return (
        run.recall
        and not state.get("context_overflow")
        and bool(state.get("summary"))
        and recall.rounds_this_turn(state["messages"]) < recall.MAX_ROUNDS
        and model_name(run.chat_model) not in _NO_TOOLS
    )


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
    _NO_TOOLS.add(name)
    reason = describe_error(error) if isinstance(error, BaseException) else str(error)
    log.warning("recall is off for %s: it refused tools (%s)", name, reason)
    return stream.RecallOff(model=name, error=reason)


def answered(sent: list[BaseMessage]) -> list[BaseMessage]:
    """The request with an answer for every tool call (a round cut short by a crash or
    Ctrl-C left calls without results, which providers refuse): the request itself when
    none is missing."""
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


def recall_messages(state: RunState, searcher: recall_search.Searcher | None) -> dict[str, Any]:
    """Run the recall calls of the latest reply: one ToolMessage each, with the folded
    messages found (never one still in the window, never a tool's answer)."""
    messages = state["messages"]
    last = messages[-1]
    if not isinstance(last, AIMessage):
        return {}
    writer = get_stream_writer()
    configurable = get_config().get("configurable") or {}
    thread_id = str(configurable.get("thread_id") or "")
    at = (configurable.get(CONFIG_KEY_CHECKPOINT_MAP) or {}).get("")  # (this run's checkpoint)
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
                hits = searcher(thread_id, query, recall.MAX_HITS * 3, window, at)
            except Exception as error:  # (the search failing is the tool's answer, not the turn's)
                log.warning("recall failed: %s", error)
                content = f"recall failed: {describe_error(error)}"
            else:
                found = recall.distinct(hits, window)
                content = recall.answer(query, found, searched=bool(state.get("summary")))
                writer(stream.as_payload(stream.Recalling(query=query, found=len(found))))
        answers.append(
            ToolMessage(content=content, tool_call_id=call.get("id") or "", name=recall.TOOL_NAME)
        )
    return {"messages": answers}


_ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}
_TERM = re.compile(r'"([^"]*)"?|(\S+)')


def history_search(
    thread_id: str, query: str, limit: int, skip: Collection[str], at: str | None = None
) -> list[recall_search.Recalled]:
    """A searcher for a graph without chatbot's store (a LangGraph server, Studio): the
    messages of this thread's checkpoints, read through the run's own checkpointer, holding
    every word of the query (else at least half of them), newest first. Reads the whole
    history: fine for a server's threads, which chatbot's index serves locally."""
    configurable = get_config().get("configurable") or {}
    saver = configurable.get(CONFIG_KEY_CHECKPOINTER)
    if saver is None:
        return []
    terms = [(quoted or word).casefold() for quoted, word in _TERM.findall(query)]
    terms = [term for term in terms if term.strip()]
    if not terms:
        return []
    first_seen: dict[str, recall_search.Recalled] = {}
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    if at:  # (a run's checkpoints are written in the background, in order: once this
        # run's is there, so is its whole line)
        deadline = time.monotonic() + 0.5
        where = {"configurable": {**config["configurable"], "checkpoint_id": at}}
        while saver.get_tuple(where) is None and time.monotonic() < deadline:
            time.sleep(0.01)
    listed = list(saver.list(config))
    parents = {
        str(saved.config["configurable"].get("checkpoint_id")): str(
            (saved.parent_config or {}).get("configurable", {}).get("checkpoint_id") or ""
        )
        for saved in listed
    }
    line: set[str] = set()
    step = at if at in parents else None
    while step:  # (this run's line of history: not an undone turn's or another fork's)
        line.add(step)
        step = parents.get(step) or None
    pending = {
        str(saved.config["configurable"].get("checkpoint_id")): saved.pending_writes or ()
        for saved in listed
    }
    for saved in listed:  # (newest first: a message's oldest checkpoint wins)
        checkpoint_id = str(saved.config["configurable"].get("checkpoint_id") or "")
        if line and checkpoint_id not in line:
            continue
        when = str(saved.checkpoint.get("ts") or "")[:16]
        # (a checkpoint stores its messages only now and then: the writes that made it, its
        # parent's, hold the ones it added)
        stored = saved.checkpoint.get("channel_values", {}).get("messages")
        made_by = pending.get(parents[checkpoint_id], ())
        written = [value for _, channel, value in made_by if channel == "messages"]
        for message in added_messages(stored, written):
            text = readable_text(getattr(message, "content", ""))
            if message.id and text.strip() and str(message.id) not in skip:
                role = _ROLES.get(str(message.type), str(message.type))
                first_seen[str(message.id)] = recall_search.Recalled(
                    role, text, checkpoint_id, when, str(message.id)
                )
    scored = []
    for hit in first_seen.values():
        folded = hit.text.casefold()
        scored.append((sum(term in folded for term in terms), hit))
    return recall_search.best_matches(scored, len(terms))[:limit]
