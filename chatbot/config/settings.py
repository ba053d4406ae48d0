"""Every setting, typed and validated in one place (:mod:`chatbot.config.reader` reads them).

``Settings`` is the only object that knows about environment variables. Problems surface as
:class:`SettingsError`: one line naming the variable, what is wrong and the valid forms.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationInfo, field_validator

from chatbot.config.reader import PlaceSettings, Sources
from chatbot.config.sources import (
    KEY_NAMES,
    USER_CONFIG,
    ConfigFile,
    SettingsError,
    check_http_url,
    default_db_path,
    url_passwords,
)
from chatbot.errors import remember_key_place

if TYPE_CHECKING:  # (the summary policy is imported when a setting of it is checked)
    from chatbot.memory.policy import SummaryPolicy

__all__ = ["OFFLINE_MODEL", "Settings", "SettingsError", "default_db_path", "load_settings"]

OFFLINE_MODEL = "offline"
CHECK_THE_KEY = "check the key"
"""How a refused API key's message ends; :func:`load_settings` adds where the key was found."""


class Settings(PlaceSettings):
    """The application's configuration. See ``.env.example`` for every variable; the
    database and the server are :class:`~chatbot.config.reader.PlaceSettings`' fields."""

    model: str = Field("gpt-4o-mini", description="Chat model name, or 'offline'.")
    summary_model: str | None = Field(
        None, description="Summary model; defaults to the chat model."
    )
    temperature: float | None = Field(0.7, ge=0, le=2, description="Chat model temperature.")
    timeout: float = Field(
        60.0, gt=0, le=86_400, allow_inf_nan=False, description="Seconds before a call gives up."
    )
    max_retries: int = Field(
        2, ge=0, le=10, description="Retries on rate limits and transient errors (0-10)."
    )
    system_prompt: str = Field("", description="System prompt sent before every conversation.")

    summary_trigger: str = Field("tokens:12000", description="When to summarize.")
    summary_keep: str = Field("tokens:3000", description="What stays verbatim after a summary.")
    keep_first_message: bool = Field(False, description="Never fold the first user message.")
    max_input_tokens: int | None = Field(None, gt=0, description="Chat model's context size.")
    reply_tokens: int | None = Field(
        None,
        gt=0,
        le=1_000_000,
        description="Room kept for the reply in a server's window, sent as max_tokens.",
    )
    summary_input_tokens: int | None = Field(
        None, gt=0, description="Input budget of one summary call; bigger inputs are chunked."
    )
    max_summary_tokens: int = Field(1000, gt=0, description="Above this the summary is condensed.")
    language: Literal["en", "zh"] = Field("en", description="Language of the built-in prompts.")
    recall: Literal["auto", "off"] = Field(
        "auto", description="auto: the model may recall folded messages once there is a summary."
    )
    memory: Literal["on", "off"] = Field(
        "on", description="on: what the user says of themselves is remembered across threads."
    )
    memory_tokens: int = Field(
        400, gt=0, le=100_000, description="Most tokens the user's memories take in a request."
    )
    tokenizer: Literal["auto", "o200k_base", "cl100k_base", "estimate"] = Field(
        "auto", description="How tokens are counted: the model family's tokenizer, or one named."
    )
    summary_create_prompt: str | None = Field(None, description="Replaces the create prompt.")
    summary_extend_prompt: str | None = Field(None, description="Replaces the extend prompt.")

    log: str | None = Field(
        None, description="Append one JSON line per model call to this file (the call log)."
    )

    openai_api_key: SecretStr | None = Field(None, validation_alias=AliasChoices(*KEY_NAMES))
    openai_base_url: str | None = Field(
        None, validation_alias=AliasChoices("OPENAI_BASE_URL", "CHATBOT_OPENAI_BASE_URL")
    )

    @field_validator(
        "summary_model",
        "openai_base_url",
        "max_input_tokens",
        "reply_tokens",
        "summary_input_tokens",
        "openai_api_key",
        "log",
        "summary_create_prompt",  # (a blank prompt is the built-in one: a summary asked for
        "summary_extend_prompt",  # with no words would come back as anything)
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("model", "summary_model")
    @classmethod
    def _model_name(cls, value: str | None) -> str | None:
        """A name as a server's list shows it: no spaces, no control character."""
        if value is not None and (not value.strip() or any(c.isspace() for c in value)):
            raise ValueError("give a model name without spaces, or 'offline'")
        unseen = next((c for c in value or "" if not c.isprintable()), None)
        if unseen is not None:
            raise ValueError(
                f"it holds a control character (U+{ord(unseen):04X}): give a model name "
                "without it, or 'offline'"
            )
        return value

    @field_validator("openai_api_key", mode="before")
    @classmethod
    def _key_is_one_printable_word(cls, value: Any) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if not isinstance(value, str):
            return value
        value = value.strip()  # a pasted key often brings a line break along
        if any(c.isspace() for c in value):
            raise ValueError(f"it contains a space or a line break: {CHECK_THE_KEY}")
        if not value.isascii() or not value.isprintable():
            raise ValueError(
                "it contains characters no API key has (non-ASCII or control characters): "
                + CHECK_THE_KEY
            )
        return value or None

    @field_validator("openai_base_url")
    @classmethod
    def _api_url(cls, value: str | None) -> str | None:
        return check_http_url(value and value.strip(), "http://localhost:11434/v1")

    @field_validator("summary_trigger", "summary_keep")
    @classmethod
    def _valid_policy_part(cls, value: str, info: ValidationInfo) -> str:
        from chatbot.memory.policy import PolicyError, parse_keep, parse_trigger

        parse = parse_trigger if info.field_name == "summary_trigger" else parse_keep
        try:
            parse(value)
        except PolicyError as error:  # (its message names the variable)
            raise SettingsError(str(error)) from None
        return value

    @field_validator("summary_extend_prompt")
    @classmethod
    def _extend_has_placeholder(cls, value: str | None) -> str | None:
        if value is not None and "{summary}" not in value:
            raise ValueError("it must contain {summary}, where the summary so far goes")
        return value

    @property
    def summary_model_name(self) -> str:
        """The summary model's name (the chat model unless set)."""
        return self.summary_model or self.model

    def secrets(self) -> list[str]:
        """What is never shown: the API key, and a password in any of the URLs."""
        found = [self.openai_api_key.get_secret_value()] if self.openai_api_key else []
        for url in (self.openai_base_url, self.url, self.db):
            found += url_passwords(url) if url else []
        return found

    @property
    def has_credentials(self) -> bool:
        """True when a real model can be reached: an API key or an OpenAI-compatible URL."""
        key = self.openai_api_key.get_secret_value() if self.openai_api_key else ""
        return bool(key.strip() or self.openai_base_url)

    def policy(
        self, max_input_tokens: int | None, *, trigger: str = "", keep: str = ""
    ) -> SummaryPolicy:
        """The validated summarization policy for a model whose requests may hold
        ``max_input_tokens``; a run's own ``trigger`` and ``keep`` replace the settings'."""
        from chatbot.memory.policy import PolicyError, SummaryPolicy

        try:
            return SummaryPolicy.from_strings(
                trigger or self.summary_trigger,
                keep or self.summary_keep,
                keep_first_message=self.keep_first_message,
                max_input_tokens=max_input_tokens or self.max_input_tokens,
            )
        except PolicyError as error:
            raise SettingsError(str(error)) from None


def load_settings(
    env_file: str | Path | None = ".env", config_file: ConfigFile = USER_CONFIG, **overrides: Any
) -> Settings:
    """Read the settings (see :class:`~chatbot.config.reader.Sources`); a
    :class:`SettingsError` with one line on the first problem."""
    return settings_from(Sources(Settings, env_file, config_file, overrides))


def settings_from(sources: Sources[Settings]) -> Settings:
    """The settings ``sources`` hold; a bad key is refused saying where it was found, and a
    good one's place is remembered for the line of a key the server refuses."""
    found = sources.origin("openai_api_key")
    try:
        settings = sources.read()
    except SettingsError as error:
        if str(error).endswith(CHECK_THE_KEY) and found and found.source != "option":
            raise SettingsError(f"{error} in {found.place}") from None
        raise
    remember_key_place(found.named if found and found.source != "option" else "")
    return settings
