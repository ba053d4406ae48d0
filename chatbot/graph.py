"""The summarizing chat graph: wiring only; decisions live in ``policy``, texts in ``prompts``.

START -> conversation -> should_continue -> summarize_conversation -> END
                                      \\-> END
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, RemoveMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_stream_writer
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from chatbot import policy, prompts
from chatbot.errors import ModelCallFailed, describe_error, remember_secret
from chatbot.models import SUMMARY_TAG, is_offline, make_model, max_input_tokens
from chatbot.settings import Settings, SettingsError
from chatbot.state import Context, State

log = logging.getLogger("chatbot.graph")

DEFAULT_SUMMARY_INPUT_TOKENS = 16_000
"""The summary call's input budget when neither settings nor the model's profile tell one."""

_MIN_CHUNK_TOKENS = 256


class SummaryFailed(RuntimeError):
    """The summary model raised, timed out or returned nothing; the state was left untouched."""


@dataclass(frozen=True)
class RunSettings:
    """The settings in force for one run: ``.env`` defaults with the run's context applied."""

    chat_model: BaseChatModel
    summary_model: BaseChatModel
    policy: policy.SummaryPolicy
    system_prompt: str
    language: prompts.Language
    create_prompt: str | None
    extend_prompt: str | None
    max_summary_tokens: int
    summary_input_tokens: int


class _ModelCache:
    """Models named in a run's context, made once per name and kept for the graph's life."""

    def __init__(self, settings: Settings, chat: BaseChatModel, summary: BaseChatModel) -> None:
        self._settings = settings
        self.default_chat = chat
        self.default_summary = summary
        self._made: dict[tuple[str, str], BaseChatModel] = {}

    def get(self, name: str, role: Literal["chat", "summary"]) -> BaseChatModel:
        if not name:
            return self.default_chat if role == "chat" else self.default_summary
        if not is_offline(name) and not self._settings.has_credentials:
            raise SettingsError(
                f"model {name!r} needs OPENAI_API_KEY or OPENAI_BASE_URL; only 'offline' "
                "works without them"
            )
        key = (name, role)
        if key not in self._made:
            self._made[key] = make_model(name, self._settings, role=role)
        return self._made[key]


def _context_value(context: Any, name: str) -> str:
    if context is None:
        return ""
    value = context.get(name, "") if isinstance(context, dict) else getattr(context, name, "")
    return str(value or "").strip()


def resolve_run(settings: Settings, models: _ModelCache, context: Any) -> RunSettings:
    """Apply a run's context to the defaults; a bad value raises one clear ``SettingsError``."""
    chat = models.get(_context_value(context, "chat_model"), "chat")
    summary_name = _context_value(context, "summary_model")
    if not summary_name and _context_value(context, "chat_model") and not settings.summary_model:
        summary_name = _context_value(context, "chat_model")  # the summary follows the chat model
    summary = models.get(summary_name, "summary")
    language = _context_value(context, "language") or settings.language
    if language not in prompts.PROMPTS:
        raise SettingsError(f"language={language!r} is not valid: use en or zh")
    try:
        run_policy = policy.SummaryPolicy.from_strings(
            _context_value(context, "summary_trigger") or settings.summary_trigger,
            _context_value(context, "summary_keep") or settings.summary_keep,
            keep_first_message=settings.keep_first_message,
            max_input_tokens=settings.max_input_tokens or max_input_tokens(chat),
        )
    except policy.PolicyError as error:
        raise SettingsError(str(error)) from None
    return RunSettings(
        chat_model=chat,
        summary_model=summary,
        policy=run_policy,
        system_prompt=_context_value(context, "system_prompt") or settings.system_prompt,
        language=language,  # type: ignore[arg-type]
        create_prompt=settings.summary_create_prompt,
        extend_prompt=settings.summary_extend_prompt,
        max_summary_tokens=settings.max_summary_tokens,
        summary_input_tokens=(
            settings.summary_input_tokens
            or max_input_tokens(summary)
            or settings.max_input_tokens
            or DEFAULT_SUMMARY_INPUT_TOKENS
        ),
    )


def context_tokens(state: State, run: RunSettings) -> int:
    """Tokens the chat model would be sent now: system prompt, summary and messages."""
    sent = prompts.conversation_input(
        state["messages"], state.get("summary", ""), run.system_prompt, run.language
    )
    return policy.count_tokens(sent)


def summarize(folded: Sequence[BaseMessage], summary: str, run: RunSettings) -> tuple[str, int]:
    """Fold messages into the summary with the summary model, chunk by chunk.

    Returns the new summary and the number of summary calls. Each chunk extends the running
    summary, so an input bigger than the model's budget is folded whole, never truncated.
    Raises :class:`SummaryFailed` if any call fails or returns no text.
    """
    instructions = prompts.summary_request([], "", language=run.language)
    overhead = policy.count_tokens(instructions) + 200
    summary_room = max(policy.count_tokens_of_text(summary), run.max_summary_tokens)
    budget = run.summary_input_tokens - overhead - summary_room - run.max_summary_tokens
    chunks = policy.chunk_for_summary(folded, max(budget, _MIN_CHUNK_TOKENS))
    model = run.summary_model.with_config(tags=[TAG_NOSTREAM, SUMMARY_TAG], run_name="summarize")
    for chunk in chunks:
        request = prompts.summary_request(
            chunk,
            summary,
            language=run.language,
            max_summary_tokens=run.max_summary_tokens,
            summary_tokens=policy.count_tokens_of_text(summary),
            create_prompt=run.create_prompt,
            extend_prompt=run.extend_prompt,
        )
        try:
            response = model.invoke(request)
        except Exception as error:  # any provider error: the state must stay as it was
            raise SummaryFailed(describe_error(error)) from error
        text = response.text.strip()
        if not text:
            raise SummaryFailed("the summary model returned an empty summary")
        summary = text
    return summary, len(chunks)


def build_graph(
    chat_model: BaseChatModel,
    summary_model: BaseChatModel | None = None,
    settings: Settings | None = None,
    checkpointer: BaseCheckpointSaver | None = None,
) -> CompiledStateGraph:
    """Build and compile the summarizing chat graph.

    ``summary_model`` defaults to ``chat_model``; ``settings`` to defaults read from the
    environment; without a ``checkpointer`` the graph keeps no memory between runs (which is
    what ``langgraph dev`` wants: it brings its own).
    """
    settings = settings or Settings()
    if settings.openai_api_key:  # provider errors are logged and streamed: never with the key
        remember_secret(settings.openai_api_key.get_secret_value())
    models = _ModelCache(settings, chat_model, summary_model or chat_model)

    def run_settings(runtime: Runtime[Context]) -> RunSettings:
        return resolve_run(settings, models, runtime.context)

    def conversation(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """Answer the latest message, seeing the summary as a SystemMessage before the messages."""
        run = run_settings(runtime)
        sent = prompts.conversation_input(
            state["messages"], state.get("summary", ""), run.system_prompt, run.language
        )
        try:
            response = run.chat_model.invoke(sent)
        except Exception as error:
            # LangGraph stores a failed task's error in the checkpoint database, and provider
            # errors can quote the API key: store (and raise) only the redacted text.
            raise ModelCallFailed(describe_error(error)) from None
        return {"messages": [response]}

    def should_continue(
        state: State, runtime: Runtime[Context]
    ) -> Literal["summarize_conversation", "__end__"]:
        """Summarize when a trigger holds and there is something safe to fold."""
        run = run_settings(runtime)
        messages = state["messages"]
        if not policy.trigger_fired(run.policy, len(messages), context_tokens(state, run)):
            return END
        if not policy.plan_summary(messages, run.policy):
            return END
        return "summarize_conversation"

    def summarize_conversation(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
        """Fold the older messages into ``summary`` and remove exactly those messages.

        On any failure the state is left exactly as it was; the failure is logged and sent to
        ``stream_mode="custom"`` listeners, and the next turn tries again.
        """
        run = run_settings(runtime)
        messages = state["messages"]
        counts = policy.tokens_per_message(messages)
        plan = policy.plan_summary(messages, run.policy, counts)
        folded = [messages[i] for i in plan.fold]
        if not folded:
            return {}
        previous = state.get("summary", "")
        writer = get_stream_writer()
        try:
            summary, calls = summarize(folded, previous, run)
        except SummaryFailed as error:
            log.warning("summary failed, nothing was removed: %s", error)
            writer({"event": "summary_failed", "error": str(error)})
            return {}
        writer(
            {
                "event": "summarized",
                "messages": len(folded),
                "tokens_in": sum(counts[i] for i in plan.fold),
                "tokens_out": policy.count_tokens_of_text(summary),
                "calls": calls,
                "extended": bool(previous),
            }
        )
        return {
            "summary": summary,
            "messages": [RemoveMessage(id=message.id) for message in folded],
        }

    builder = StateGraph(State, context_schema=Context)
    builder.add_node("conversation", conversation)
    builder.add_node("summarize_conversation", summarize_conversation)
    builder.add_edge(START, "conversation")
    builder.add_conditional_edges("conversation", should_continue, ["summarize_conversation", END])
    builder.add_edge("summarize_conversation", END)
    return builder.compile(checkpointer=checkpointer, name="chatbot")
