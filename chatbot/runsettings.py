"""The settings in force for one run: the ``.env`` defaults with the run's context applied.

The graph resolves them at every node; a bad value in a run's context is one clear
``SettingsError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel

from chatbot import policy, prompts
from chatbot.models import is_offline, make_model, max_input_tokens
from chatbot.settings import Settings, SettingsError
from chatbot.tokens import TokenCounter, counter_for, model_name

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
    language: prompts.Language
    create_prompt: str | None
    extend_prompt: str | None
    max_summary_tokens: int
    summary_input_tokens: int
    compact: bool = False
    compact_focus: str = ""


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
        if not is_offline(name) and not self._settings.has_credentials:
            raise SettingsError(
                f"model {name!r} needs OPENAI_API_KEY or OPENAI_BASE_URL; only 'offline' "
                "works without them"
            )
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


def resolve_run(settings: Settings, models: ModelCache, context: Any) -> RunSettings:
    """Apply a run's context to the defaults; a bad value raises one clear ``SettingsError``."""
    chat = models.get(context_value(context, "chat_model"), "chat")
    summary_name = context_value(context, "summary_model")
    if not summary_name and context_value(context, "chat_model") and not settings.summary_model:
        summary_name = context_value(context, "chat_model")  # the summary follows the chat model
    summary = models.get(summary_name, "summary")
    language = context_value(context, "language") or settings.language
    if language not in prompts.PROMPTS:
        raise SettingsError(f"language={language!r} is not valid: use en or zh")
    try:
        run_policy = policy.SummaryPolicy.from_strings(
            context_value(context, "summary_trigger") or settings.summary_trigger,
            context_value(context, "summary_keep") or settings.summary_keep,
            keep_first_message=settings.keep_first_message,
            max_input_tokens=settings.max_input_tokens or max_input_tokens(chat),
        )
    except policy.PolicyError as error:
        raise SettingsError(str(error)) from None
    return RunSettings(
        chat_model=chat,
        summary_model=summary,
        policy=run_policy,
        counter=counter_for_model(chat, settings),
        summary_counter=counter_for_model(summary, settings),
        system_prompt=context_value(context, "system_prompt") or settings.system_prompt,
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
        compact=context_flag(context, "compact"),
        compact_focus=context_value(context, "compact_focus"),
    )
