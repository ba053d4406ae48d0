"""The retention benchmark's cross-thread arm: the facts are told in one thread, asked in others.

The script's turns run in one thread of chatbot's real graph, compiled with a LangGraph store
(``InMemoryStore``): each fold's summary call notes the facts about the user in it, and the
thread is read once more for facts when it is left, as the REPL does. Then each question is
asked in a thread of its own, which starts from nothing but the user's memories. "In context"
says whether the newest value was in what that thread's first request carried.

Offline, the summary model is a stand-in that notes every folded user message as a fact
(:class:`NotingOfflineModel`): the figures then measure the pipeline (noted, stored, chosen
within the memories' budget, sent), not a model's judgment of what is worth remembering.
"""

from __future__ import annotations

import dataclasses
import html
import re
import time
import uuid
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from chatbot.config.settings import Settings
from chatbot.engine.graph import DURABILITY, build_graph, run_resolver
from chatbot.engine.models import extractive_summary
from chatbot.engine.remembering import note_on_leaving
from chatbot.memory.facts import CLOSE, OPEN
from chatbot.threads.runner import blocking

ARM = "chatbot, another thread"
_USER = re.compile(r"<user>(.*?)</user>", re.DOTALL)


class NotingOfflineModel(BaseChatModel):
    """Offline summaries (:func:`~chatbot.engine.models.extractive_summary`) that, when the
    request asks for the user's facts, note every user message folded as one."""

    @property
    def _llm_type(self) -> str:
        return "noting-offline"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        request = messages[-1].text if messages else ""
        text = extractive_summary(request) or "- (nothing yet)"
        if OPEN in " ".join(m.text for m in messages):
            said = [" ".join(html.unescape(raw).split()) for raw in _USER.findall(request)]
            text += "\n\n" + OPEN + "\n" + "".join(f"- {fact}\n" for fact in said) + CLOSE
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


def run_cross_thread(
    chat: BaseChatModel,
    summary: BaseChatModel,
    turns: list[str],
    questions: list[str],
    settings: Settings,
    callbacks: list[Any],
    offline: bool,
) -> tuple[list[str], float]:
    """Tell ``turns`` in one thread, leave it, ask each of ``questions`` in a new thread;
    returns the answers and the seconds taken. Every call goes through ``callbacks``."""
    started = time.perf_counter()
    summary = NotingOfflineModel() if offline else summary
    store = InMemoryStore()
    graph = build_graph(chat, summary, settings, InMemorySaver(), store=store)
    told = {"thread_id": f"told-{uuid.uuid4().hex[:8]}"}
    config: dict[str, Any] = {"configurable": told, "callbacks": callbacks}
    for text in turns:
        blocking(graph.ainvoke({"messages": [HumanMessage(text)]}, config, durability=DURABILITY))
    state = graph.get_state({"configurable": told}).values
    run = run_resolver(graph)(None)
    noted_by = summary.with_config(callbacks=callbacks)  # (its call is measured too)
    run = dataclasses.replace(run, summary_model=noted_by)  # type: ignore[arg-type]
    blocking(
        note_on_leaving(run, store, told["thread_id"], state["messages"], state.get("summary", ""))
    )
    answers = []
    for question in questions:
        asked = {"configurable": {"thread_id": f"asked-{uuid.uuid4().hex[:8]}"}}
        out = blocking(
            graph.ainvoke(
                {"messages": [HumanMessage(question)]},
                {**asked, "callbacks": callbacks},
                durability=DURABILITY,
            )
        )
        answers.append(str(out["messages"][-1].text))
    return answers, time.perf_counter() - started
