"""The summarizing chat graph: wiring only; decisions live in ``folding`` (whether and what to
fold), ``overflow`` (a request too long for the model) and ``policy``.

The tutorial's shape, with a guard in front and a way back to ``conversation``::

    START -> fold_first -> conversation -> should_continue -> summarize_conversation
                      \\-> summarize_conversation -> after_summary -> conversation | END
                                 conversation -> should_continue -> recall -> conversation

- ``fold_first``: fold before the call when the request would not fit, the trigger already
  held (a resumed thread, a failed summary) or the run asks to compact; else answer.
- ``should_continue``: the tutorial's trigger, one fold a turn; after a refusal as too long,
  fold and ask again once (also when the memories block tips the request past the budget).
- ``after_summary``: a message still waiting for its reply goes (back) to ``conversation``.
- ``recall``: the folded messages the reply asked for go back to ``conversation``.

Nodes are async functions of the state and the run's
:class:`~chatbot.engine.runsettings.RunSettings`, so the graph runs under ``ainvoke``/``astream``
only. Routers are plain functions that read the run's context with ``get_runtime()`` and work
without one: the synchronous ``update_state`` (undo, forks, import, Studio) runs them.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, NotRequired, TypedDict, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, RemoveMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_config, get_stream_writer
from langgraph.graph import END, START, StateGraph, add_messages
from langgraph.runtime import Runtime, get_runtime
from langgraph.store.base import BaseStore
from langgraph.types import Durability

from chatbot.config.settings import Settings
from chatbot.engine import folding, overflow, recalling, remembering, stream
from chatbot.engine.runsettings import RunResolver, RunSettings
from chatbot.errors import (
    ModelCallFailed,
    context_overflow,
    describe_error,
    empty_answer,
    remember_secret,
)
from chatbot.logs import logger
from chatbot.memory import finish, pricing, prompts, recall
from chatbot.memory.recall_search import AsyncSearcher, Searcher
from chatbot.memory.state import ChatGraph, ChatInput, Context, RunState, State
from chatbot.memory.tokens import USAGE_KEY, model_name

log = logger("graph")

DONE: Literal["__end__"] = "__end__"
"""LangGraph's ``END``, typed for the routing functions' ``Literal`` return types."""
assert DONE == END

DURABILITY: Durability = "sync"
"""Pass ``durability=DURABILITY`` to ``ainvoke``/``astream`` of a graph with a checkpointer:
each step is saved before the next starts, so the user's message is stored before the model is
called. LangGraph has no public way to make it a compiled graph's default."""

_RESOLVERS: weakref.WeakKeyDictionary[ChatGraph, RunResolver] = weakref.WeakKeyDictionary()


def run_resolver(graph: ChatGraph) -> RunResolver:
    """The resolver a graph made by :func:`build_graph` applies to each run's context."""
    return _RESOLVERS[graph]


def _paid(
    state: State, role: pricing.Role, model: BaseChatModel, replies: list[AIMessage]
) -> dict[str, Any]:
    """The state update adding the answered calls' usage to the thread's record, never below
    the run's floor (:mod:`chatbot.memory.pricing`)."""
    if not replies:
        return {}
    floor = pricing.run_floor(get_config())
    asked = model_name(model)
    record = pricing.with_calls(
        (state.get(pricing.USAGE_KEY), floor),
        role,
        [(pricing.reply_model(reply, asked), reply) for reply in replies],
        earlier_turns=pricing.has_turns(state["messages"], state.get("summary", "")),
    )
    return {pricing.USAGE_KEY: record}


async def conversation(state: RunState, run: RunSettings) -> dict[str, Any]:
    """Answer the latest message, seeing the summary as a SystemMessage before the messages,
    offered the recall tool when there is a summary (a reply calling it goes to ``recall`` and
    back here); a model that refuses tools is asked once more without them."""
    messages, summary = state["messages"], state.get("summary", "")
    run, _ = await remembering.recalled(messages, run, requests=True)
    if run.memories and not state.get("fold_tried") and _memories_tip_over(state, run):
        return {"memories": run.memories}  # (should_continue folds, then this node answers)
    offer = recalling.offers_recall(state, run)
    sent, raw = _request(messages, summary, run, offer)
    overflow.check_message_fits(messages, summary, run, raw)
    model: Any = recalling.with_tools(run.chat_model) if offer else run.chat_model
    if model is None:  # (the model cannot take tools at all)
        get_stream_writer()(stream.as_payload(recalling.refused(run.chat_model, "")))
        offer, model = False, run.chat_model
        sent, raw = _request(messages, summary, run, False)
    model = model.bind(**run.chat_call) if run.chat_call else model  # (max_tokens)
    empty: BaseException | None = None
    response: AIMessage
    while True:
        try:
            response = await folding.ask(model, recalling.answered(sent), retries=run.max_retries)
            break
        except Exception as error:
            if offer and recall.refuses_tools(error):
                get_stream_writer()(stream.as_payload(recalling.refused(run.chat_model, error)))
                offer = False
                model = run.chat_model.bind(**run.chat_call) if run.chat_call else run.chat_model
                sent, raw = _request(messages, summary, run, False)
                continue
            pending = folding.pending_reply(messages)
            counted = run.counter.scaled(raw, sent)
            refusal = context_overflow(error)
            if refusal is not None and pending:
                overflow.learn(run, run.chat_model, refusal, counted)
            elif empty_answer(error) and pending and empty is None:
                refusal = overflow.possible_overflow(run, counted)
                if refusal is None:  # asked again without streaming: servers then say why
                    empty, model = error, model.bind(stream=False)
                    continue
            elif empty is not None and empty_answer(error):
                raise overflow.empty_answer_failed(state, empty, error) from None
            if refusal is None or not pending:
                # LangGraph stores a failed task's error in the checkpoint database, and
                # provider errors can quote the API key: store (and raise) only the redacted text.
                raise ModelCallFailed(describe_error(error)) from None
            return overflow.refusal_update(state, refusal, counted, run.reply_tokens)
    if not (offer and recall.wants_tools(response)):  # (a recall round is kept as it is)
        if response.tool_calls and finish.usable_text(response):  # (a tool not offered:
            # the text is the reply)
            response = response.model_copy(update={"tool_calls": [], "invalid_tool_calls": []})
        ending = finish.finish_of(response)
        # A fragment, or a reply with nothing to read, is not an answer: the turn fails and
        # the message waits for /retry.
        if ending == "empty":
            raise ModelCallFailed(f"{finish.without_text(response)}; it was not saved")
        if ending in ("cut", "filtered") or (
            ending == "length" and not finish.usable_text(response)
        ):
            raise ModelCallFailed(f"{finish.incomplete(ending)}; it was not saved")
        if ending == "length":
            response = finish.with_length_note(response)
    set_aside = overflow.after_reply(run, response, sent, raw)
    response.response_metadata[USAGE_KEY] = run.counter.record(sent, raw, set_aside)
    update: dict[str, Any] = {"messages": [response], "memories": run.memories}
    update.update(_paid(state, "chat", run.chat_model, [response]))
    if state.get("context_overflow"):
        update["context_overflow"] = {}
    return update


def _request(
    messages: list[AnyMessage], summary: str, run: RunSettings, offer: bool
) -> tuple[list[BaseMessage], int]:
    """What the chat call sends, and its raw count with the tool's definition."""
    sent = prompts.conversation_input(
        messages, summary, run.system_prompt, run.language, offer, run.memories
    )
    return sent, folding.request_tokens(messages, summary, run, offer).raw


def _memories_tip_over(state: RunState, run: RunSettings) -> bool:
    """True when the request would fit the model's input budget without the memories block
    but not with it, and a fold would help: ``fold_first`` decides before the block is read."""
    return folding.fold_reason(state, run, compact=False) == "fit" and folding.worth_folding(
        state, run, "fit"
    )


async def summarize_conversation(state: RunState, run: RunSettings) -> dict[str, Any]:
    """Fold the older messages into ``summary`` and remove exactly those. A failed summary
    leaves the state as it was and is tried again next turn; after an overflow it ends the run."""
    update = await _fold(state, run)
    return {**update, "fold_tried": True}


async def _fold(state: RunState, run: RunSettings) -> dict[str, Any]:
    writer = get_stream_writer()
    messages, summary = state["messages"], state.get("summary", "")
    run, mind = await remembering.recalled(messages, run)
    reason = folding.fold_reason(state, run, compact=run.compact)
    if reason is None:
        return {}
    if reason == "overflow":  # (the retry is sent without the recall tool: counted so)
        run = dataclasses.replace(run, recall=False)
        if folding.fits_now(state, run):
            return {}  # (the reply's room did not fit: asked again with the room it said)
    elif (refusal := folding.nothing_to_fold(state, run, reason)) is not None:
        writer(stream.as_payload(refusal))  # (nothing safe to fold, or it would not shrink)
        return {}
    before = folding.context_tokens(messages, summary, run)
    plan = folding.plan_fold(state, run, reason)
    if reason == "overflow":  # (it cannot help: the turn ends saying so)
        overflow.check_fold_can_help(state, run, plan)
    replies: list[AIMessage] = []

    def progress(part: int, parts: int) -> None:  # (a long fold says how far it is)
        folding_now = stream.Folding(len(plan.fold), reason, part=part, parts=parts)
        writer(stream.as_payload(folding_now))

    async def paid(model: Any, request: list[Any]) -> AIMessage:  # (every answered call counts)
        reply = await folding.ask(model, request, retries=run.max_retries, call="summary")
        replies.append(reply)
        return reply

    try:
        known = mind.memories if mind.on else None
        done = await folding.fold(state, run, plan, progress, paid, known)
    except folding.SummaryError as error:
        if reason == "overflow":
            raise overflow.fold_failed(error) from None
        log.warning("summary failed, nothing was removed: %s", error)
        writer(stream.as_payload(stream.SummaryFailed(error=str(error), reason=reason)))
        return _paid(state, "summary", run.summary_model, replies)  # the calls were made
    after = folding.request_tokens(plan.kept(messages), done.summary, run)
    if reason == "overflow":
        overflow.check_shrunk(state, run, after.total)
    summarized = stream.Summarized(
        messages=len(done.folded),
        tokens_in=done.folded_tokens,
        tokens_out=after.summary,
        calls=done.calls,
        extended=bool(summary),
        reason=reason,
        context_before=before,
        context_after=after.total,
    )
    writer(stream.as_payload(summarized))
    await remembering.noted_in_fold(mind, done.noted, done.folded)
    update: dict[str, Any] = {
        "summary": done.summary,
        "messages": [RemoveMessage(id=str(message.id)) for message in done.folded],
        "memories": run.memories,
    }
    record = folding.fold_record(state, done.folded, run.counter)
    if record is not None:
        update["folded"] = record
    update.update(_paid(state, "summary", run.summary_model, replies))
    return update


def fold_first(
    state: RunState, run: RunSettings
) -> Literal["summarize_conversation", "conversation", "__end__"]:
    """From START: fold before answering when the request would not fit, when the trigger
    already held before the new message, or when the run asks to; otherwise answer."""
    if folding.fold_before_answer(state, run):
        return "summarize_conversation"  # (it explains when there is nothing to fold)
    return "conversation" if folding.pending_reply(state["messages"]) else DONE


def should_continue(
    state: RunState, run: RunSettings
) -> Literal["summarize_conversation", "recall", "__end__"]:
    """The tutorial's edge: summarize when the trigger holds and there is something to fold,
    unless this run tried a fold already; after an overflow, fold and try again. A reply that
    calls the recall tool goes to ``recall`` first (a round is never folded halfway)."""
    messages = state["messages"]
    if messages and recall.wants_tools(messages[-1]):
        return "recall"
    reason = folding.fold_reason(state, run, compact=False)
    if reason == "overflow":
        return "summarize_conversation"
    if state.get("fold_tried"):  # one fold a turn: a failed one waits for the next turn
        return DONE
    if reason is not None and folding.worth_folding(state, run, reason):
        return "summarize_conversation"
    return DONE


def after_summary(state: RunState) -> Literal["conversation", "__end__"]:
    """A message still waiting for its reply is answered now."""
    return "conversation" if folding.pending_reply(state["messages"]) else DONE


# --- wiring ------------------------------------------------------------------------------


Route = TypeVar("Route", bound=str)


def _run_context() -> Any:
    """The run's context from ``get_runtime()``; None outside a run and under ``update_state``."""
    try:
        runtime = get_runtime()
    except (RuntimeError, KeyError):  # (no runnable config; a config without ``configurable``)
        return None
    return None if runtime is None else runtime.context


def _settings(resolver: RunResolver, state: RunState) -> RunSettings:
    run = resolver(_run_context(), state.get("system_prompt", ""))
    memories = state.get("memories")  # (read by a node of this run: counted as it sends them)
    return dataclasses.replace(run, memories=memories) if memories else run


def _router(
    decide: Callable[[RunState, RunSettings], Route], resolver: RunResolver
) -> Callable[[RunState], Route]:
    """``decide`` as a plain routing function named as it is: the run's settings come from the
    run's context where there is a runtime, else the defaults (a router asking for ``Runtime``
    as a parameter would fail under the synchronous ``update_state``)."""

    def route(state: RunState) -> Route:
        return decide(state, _settings(resolver, state))

    route.__name__ = route.__qualname__ = decide.__name__
    route.__doc__ = decide.__doc__
    return route


Logic = Callable[[RunState, RunSettings], Awaitable[dict[str, Any]]]


def _node(logic: Logic, resolver: RunResolver) -> Callable[..., Awaitable[dict[str, Any]]]:
    """``logic`` as an async node bound to ``resolver``, given the run's ``Runtime``. Async, so
    cancelling the task closes the model call's HTTP request (a sync node runs in a thread)."""

    async def node(state: RunState, runtime: Runtime[Context]) -> dict[str, Any]:
        return await logic(state, resolver(runtime.context, state.get("system_prompt", "")))

    node.__name__ = node.__qualname__ = logic.__name__
    node.__doc__ = logic.__doc__
    return node


def build_graph(
    chat_model: BaseChatModel,
    summary_model: BaseChatModel | None = None,
    settings: Settings | None = None,
    checkpointer: BaseCheckpointSaver | None = None,
    recall_search: Searcher | AsyncSearcher | None = None,
    store: BaseStore | None = None,
) -> ChatGraph:
    """Build and compile the summarizing chat graph. Without a ``checkpointer`` no memory is kept
    between runs (``langgraph dev`` brings its own); without ``recall_search`` the recall tool is
    never offered; ``store`` keeps the user's memories (else a LangGraph server's store)."""
    settings = settings or Settings()
    for secret in settings.secrets():  # provider errors are logged and streamed: never these
        remember_secret(secret)
    resolver = RunResolver(
        settings, chat_model, summary_model or chat_model, recall=recall_search is not None
    )

    builder = StateGraph(
        RunState, context_schema=Context, input_schema=ChatInput, output_schema=State
    )
    builder.add_node("conversation", _node(conversation, resolver))
    builder.add_node("summarize_conversation", _node(summarize_conversation, resolver))

    async def run_recall(state: RunState) -> dict[str, Any]:
        return await recalling.recall_messages(state, recall_search)

    builder.add_node("recall", run_recall)
    builder.add_edge("recall", "conversation")
    builder.add_conditional_edges(
        START, _router(fold_first, resolver), ["summarize_conversation", "conversation", END]
    )
    builder.add_conditional_edges(
        "conversation",
        _router(should_continue, resolver),
        ["summarize_conversation", "recall", END],
    )
    builder.add_conditional_edges("summarize_conversation", after_summary, ["conversation", END])
    graph = builder.compile(checkpointer=checkpointer, store=store, name="chatbot")
    _RESOLVERS[graph] = resolver
    return graph


class Leaving(TypedDict):
    """What :func:`build_leaving_graph` reads: a thread being left, by its id where the store
    keeps its memory record, with its messages and summary."""

    thread_id: str
    messages: Annotated[list[AnyMessage], add_messages]
    summary: NotRequired[str]


class Left(TypedDict):
    """What :func:`build_leaving_graph` answers: how many memories the thread added."""

    added: int


class _LeavingState(Leaving, total=False):
    added: int


def build_leaving_graph(graph: ChatGraph, store: BaseStore | None = None) -> Any:
    """A one-node graph that reads a thread being left for facts about the user
    (:func:`chatbot.engine.remembering.note_on_leaving`) with ``graph``'s settings and models,
    into ``store`` or a LangGraph server's: a server serves it beside the chat graph."""
    resolver = run_resolver(graph)

    async def remember(state: _LeavingState, runtime: Runtime[Context]) -> Left:
        run = resolver(runtime.context, "")
        added = await remembering.note_on_leaving(
            run, runtime.store, state["thread_id"], state["messages"], state.get("summary", "")
        )
        return {"added": added}

    builder = StateGraph(
        _LeavingState, context_schema=Context, input_schema=Leaving, output_schema=Left
    )
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    return builder.compile(store=store, name="remember")
