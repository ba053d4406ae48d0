"""The settings in force for one run: the ``.env`` defaults with the run's context applied.

:func:`resolve_run` is the one rule. The graph resolves every node's settings with its
:class:`RunResolver`; the terminal asks the same resolver what a run with its context would use
(the status line, ``/tokens``, ``/model``, ``/retry``), so the two cannot disagree. A bad value
in a run's context is one clear ``SettingsError``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel

from chatbot.config.roles import effective_prompt
from chatbot.config.settings import Settings, SettingsError
from chatbot.config.sources import endpoint_of
from chatbot.engine import windows
from chatbot.engine.models import make_model, max_input_tokens, reply_limit
from chatbot.memory import policy, prompts
from chatbot.memory.tokens import TokenCounter, counter_for, model_name

DEFAULT_SUMMARY_INPUT_TOKENS = 16_000
"""The summary call's input budget when neither settings nor the model's profile tell one."""


@dataclass(frozen=True)
class RunSettings:
    """The settings in force for one run."""

    chat_model: BaseChatModel
    summary_model: BaseChatModel
    policy: policy.SummaryPolicy
    counter: TokenCounter
    """Counts what the chat model is sent: trigger, keep, input guard, status line."""
    summary_counter: TokenCounter
    """Counts what the summary model is sent: the chunker."""
    system_prompt: str
    """The effective system prompt (:func:`chatbot.config.roles.effective_prompt`)."""
    language: prompts.Language
    create_prompt: str | None
    extend_prompt: str | None
    max_summary_tokens: int
    summary_input_tokens: int
    compact: bool = False
    compact_focus: str = ""
    recall: bool = False
    """The chat model may be offered the recall tool (once the thread has a summary)."""
    window: windows.Window | None = None
    """The chat model's context window, and where it is known from (None: unknown)."""
    reply_tokens: int | None = None
    """Room kept for the reply, sent as ``max_tokens`` (None: nothing is sent)."""
    chat_call: Mapping[str, Any] = field(default_factory=dict)
    """What every chat call is bound with (``max_tokens``)."""
    summary_call: Mapping[str, Any] = field(default_factory=dict)
    """What every summary call is bound with (``max_tokens``)."""
    max_retries: int = 0
    """``CHATBOT_MAX_RETRIES``: :func:`chatbot.engine.folding.ask`."""
    endpoint: str = ""
    """The model server's endpoint (what learned windows are kept by)."""
    settings: Settings | None = None
    """The settings the run was resolved from (to ask the server again about its window)."""
    memory: bool = False
    """The user's memories are given and noted (``CHATBOT_MEMORY``, the run's ``memory``)."""
    memory_tokens: int = 0
    """The most tokens the memories block may take in a request."""
    memories: str = ""
    """The memories block this run's requests carry (set once read from the store)."""


class ModelCache:
    """Models named in a run's context, made once per name and kept for the graph's life."""

    def __init__(self, settings: Settings, chat: BaseChatModel, summary: BaseChatModel) -> None:
        self._settings = settings
        self.default_chat = chat
        self.default_summary = summary
        self._made: dict[tuple[str, str], BaseChatModel] = {}

    def get(self, name: str, role: Literal["chat", "summary"]) -> BaseChatModel:
        if not name:
            return self.default_chat if role == "chat" else self.default_summary
        key = (name, role)
        if key not in self._made:
            self._made[key] = make_model(name, self._settings, role=role)
        return self._made[key]


def context_value(context: Any, name: str) -> str:
    """A text field of a run's context (a ``Context``, a dict or None), stripped; '' if unset."""
    if context is None:
        return ""
    value = context.get(name, "") if isinstance(context, dict) else getattr(context, name, "")
    return str(value or "").strip()


def context_flag(context: Any, name: str) -> bool:
    """A yes/no field of a run's context (``true``/``1``/``yes`` as text count too)."""
    if context is None:
        return False
    value = context.get(name) if isinstance(context, dict) else getattr(context, name, None)
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


def counter_for_model(model: BaseChatModel, settings: Settings) -> TokenCounter:
    """The token counter for a chat model object (its family's tokenizer, or the setting's)."""
    return counter_for(model_name(model), settings.tokenizer)


def resolve_run(
    settings: Settings, models: ModelCache, context: Any, thread_prompt: str = ""
) -> RunSettings:
    """Apply a run's context to the defaults; a bad value raises one clear ``SettingsError``.
    ``thread_prompt``: the thread's own system prompt (the state's ``system_prompt``)."""
    chat_name = context_value(context, "chat_model")
    # A reply model answers this run only: the summary model stays what the chat model makes it.
    chat = models.get(context_value(context, "reply_model") or chat_name, "chat")
    summary_name = context_value(context, "summary_model")
    if not summary_name and chat_name and not settings.summary_model:
        summary_name = chat_name  # the summary follows the chat model
    summary = models.get(summary_name, "summary")
    language = context_value(context, "language") or settings.language
    if language not in prompts.PROMPTS:
        raise SettingsError(f"language={language!r} is not valid: use en or zh")
    endpoint = endpoint_of(settings.openai_base_url)
    window = windows.window_of(
        model_name(chat),
        endpoint,
        max_input_tokens(chat),
        settings.max_input_tokens,
        settings.reply_tokens,
    )
    limit, reply = _room(window, settings)
    run_policy = policy.fitted_to_window(
        settings.policy(
            limit,
            trigger=context_value(context, "summary_trigger"),
            keep=context_value(context, "summary_keep"),
        )
    )
    max_summary = policy.summary_size(settings.max_summary_tokens, limit)
    summary_window = windows.window_of(
        model_name(summary), endpoint, max_input_tokens(summary), None
    )
    summary_reply: int | None = None
    summary_input = settings.summary_input_tokens
    if summary_window is not None and summary_window.shared:
        # The summary's reply shares the window: the request leaves room for the longest
        # summary kept, which the call may not pass.
        max_summary = policy.summary_size(max_summary, summary_window.tokens)
        summary_reply = max_summary * policy.SUMMARY_SLACK
        summary_input = summary_input or max(1, summary_window.tokens - max_summary)
    elif summary_window is not None:
        summary_input = summary_input or summary_window.tokens
    return RunSettings(
        chat_model=chat,
        summary_model=summary,
        policy=run_policy,
        counter=counter_for_model(chat, settings),
        summary_counter=counter_for_model(summary, settings),
        system_prompt=effective_prompt(
            context_value(context, "system_prompt"), thread_prompt, default=settings.system_prompt
        ).text,
        language=language,  # type: ignore[arg-type]
        create_prompt=settings.summary_create_prompt,
        extend_prompt=settings.summary_extend_prompt,
        max_summary_tokens=max_summary,
        summary_input_tokens=(
            summary_input or settings.max_input_tokens or DEFAULT_SUMMARY_INPUT_TOKENS
        ),
        compact=context_flag(context, "compact"),
        compact_focus=context_value(context, "compact_focus"),
        recall=_choice(context, "recall", settings.recall, ("auto", "off")),
        window=window,
        reply_tokens=reply,
        chat_call=reply_limit(reply, settings),
        summary_call=reply_limit(summary_reply, settings),
        max_retries=settings.max_retries,
        endpoint=endpoint,
        settings=settings,
        memory=_choice(context, "memory", settings.memory, ("on", "off")),
        memory_tokens=memory_budget(settings.memory_tokens, limit),
    )


MEMORY_SHARE = 8
"""The memories take at most one part in this many of what a request may hold."""


def memory_budget(setting: int, limit: int | None) -> int:
    """The memories block's budget: ``CHATBOT_MEMORY_TOKENS``, within a small window's share."""
    return setting if limit is None else max(1, min(setting, limit // MEMORY_SHARE))


def _choice(context: Any, name: str, default: str, choices: tuple[str, str]) -> bool:
    """A two-way field of the run's context (else ``default``): True for its first choice."""
    value = context_value(context, name).lower() or default
    if value not in choices:
        raise SettingsError(f"{name}={value!r} is not valid: use {choices[0]} or {choices[1]}")
    return value == choices[0]


def _room(window: windows.Window | None, settings: Settings) -> tuple[int | None, int | None]:
    """What a request may hold in ``window``, and the reply's room sent as ``max_tokens``
    (``CHATBOT_REPLY_TOKENS``, or :func:`windows.reply_room` of a shared window)."""
    setting = settings.reply_tokens
    if window is None:
        return None, setting
    if not window.shared:
        return window.tokens, setting
    reply = windows.reply_room(window, setting)
    return window.tokens - reply, reply


CONTEXT_FIELDS = (
    "chat_model",
    "reply_model",
    "summary_model",
    "summary_trigger",
    "summary_keep",
    "system_prompt",
    "compact",
    "compact_focus",
    "language",
    "recall",
    "memory",
)
"""The fields of a run's context that :func:`resolve_run` reads."""


def _context_key(context: Any) -> tuple[Any, ...] | None:
    """What :func:`resolve_run` reads of a context, as a hashable key (None if unhashable)."""
    if context is None:
        values: tuple[Any, ...] = (None,) * len(CONTEXT_FIELDS)
    elif isinstance(context, dict):
        values = tuple(context.get(name) for name in CONTEXT_FIELDS)
    else:
        values = tuple(getattr(context, name, None) for name in CONTEXT_FIELDS)
    try:
        hash(values)
    except TypeError:
        return None
    return values


class RunResolver:
    """:func:`resolve_run` bound to a graph's settings and default models. Every router and node
    asks, so answers are kept by the context's values (a context is made anew for each run)
    and the thread's prompt, for the last :data:`REMEMBERED` of them."""

    REMEMBERED = 64

    def __init__(
        self,
        settings: Settings,
        chat: BaseChatModel,
        summary: BaseChatModel,
        *,
        recall: bool = False,
    ) -> None:
        self.settings = settings
        self.models = ModelCache(settings, chat, summary)
        self.recall = recall
        """The graph can search for the recall tool: without that, no run offers it."""
        self._resolved = functools.lru_cache(maxsize=self.REMEMBERED)(self._resolve)

    def __call__(self, context: Any, thread_prompt: str = "") -> RunSettings:
        key = _context_key(context)
        if key is None:
            return self._resolve_context(context, thread_prompt)
        return self._resolved(key, thread_prompt, windows.BOOK.version)

    def _resolve(self, key: tuple[Any, ...], thread_prompt: str, _learned: int) -> RunSettings:
        return self._resolve_context(dict(zip(CONTEXT_FIELDS, key, strict=True)), thread_prompt)

    def _resolve_context(self, context: Any, thread_prompt: str) -> RunSettings:
        run = resolve_run(self.settings, self.models, context, thread_prompt)
        return run if self.recall or not run.recall else replace(run, recall=False)
