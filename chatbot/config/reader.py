"""The one settings reader: pydantic-settings' sources in chatbot's order, for every settings
class, and where each value was found.

:class:`Sources` holds the sources, highest priority first: the options, the environment, the
env file (``./.env`` or ``--env-file``), the user's ``config.env``; the defaults come last.
The settings are made from those very objects, and :meth:`Sources.origin` asks them where a
value came from, so that ``chatbot config`` agrees with what was read.

:class:`PlaceSettings` is where threads live: the REPL's start and the reading commands read
it alone, without the rest of :class:`~chatbot.config.settings.Settings`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    EnvSettingsSource,
    InitSettingsSource,
    SettingsConfigDict,
)

from chatbot.config.sources import (
    BLANK_DB,
    USER_CONFIG,
    ConfigFile,
    SettingsError,
    check_db,
    check_env_file,
    check_http_url,
    default_db_path,
    expanded_path,
    prepare_threshold,
    resolve_config_file,
    without_password,
)

S = TypeVar("S", bound=BaseSettings)


class PlaceSettings(BaseSettings):
    """Where threads live: the database file or URL, or a LangGraph server (the base of every
    chatbot settings class)."""

    model_config = SettingsConfigDict(
        env_prefix="CHATBOT_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        validate_default=True,
    )

    db: str = Field(default_factory=lambda: str(default_db_path()), description="SQLite file.")
    url: str | None = Field(None, description="A LangGraph server to use instead of SQLite.")
    pg_prepare_threshold: int | None = Field(
        5, ge=0, description="PostgreSQL: prepared-statement threshold; 'none' behind pgbouncer."
    )

    @field_validator("db", mode="before")
    @classmethod
    def _blank_db_is_default(cls, value: Any) -> Any:
        if isinstance(value, str):
            return check_db(value) if value.strip() else str(default_db_path())
        return value

    @field_validator("url", mode="before")
    @classmethod
    def _blank_url_is_unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return check_http_url(value, "http://127.0.0.1:2024")

    @field_validator("pg_prepare_threshold", mode="before")
    @classmethod
    def _prepare_threshold(cls, value: Any) -> Any:
        return prepare_threshold(value) if isinstance(value, str) else value


class SettingsFile(DotEnvSettingsSource):
    """A settings file, read as pydantic-settings reads ``.env``; a database path in it is
    expanded as a shell would, and a file that cannot be read is a :class:`SettingsError`."""

    def __init__(
        self, settings_cls: type[BaseSettings], path: str | Path | None, what: str = "env file"
    ) -> None:
        try:
            super().__init__(settings_cls, env_file=path)
        except UnicodeDecodeError:
            raise SettingsError(
                f"{what} {str(path)!r} is not UTF-8 text: save it as UTF-8"
            ) from None
        except OSError as error:
            problem = (
                "is not readable by you (permission denied): let yourself read it "
                f"(chmod u+r {path}), or move it away"
                if isinstance(error, PermissionError)
                else f"cannot be read ({error.strerror or type(error).__name__}): fix it, or "
                "move it away"
            )
            raise SettingsError(f"{what} {str(path)!r} {problem}") from None

    def __call__(self) -> dict[str, Any]:
        values = super().__call__()
        if isinstance(values.get("db"), str):
            values["db"] = expanded_path(values["db"])
        return values


class Origin(NamedTuple):
    """A setting's text as found, and where."""

    value: str
    source: str
    """``option``, ``environment``, ``env file`` or ``config file``."""
    where: str
    """The option, the variable's name, or the file's path."""
    name: str = ""
    """The variable's name as found (``OPENAI_API_KEY``, ``CHATBOT_DB``); for an option, the
    option."""

    @property
    def place(self) -> str:
        """Where, for a message: ``the environment variable OPENAI_API_KEY``, ``.env``, the
        config file's path, or the option."""
        if self.source == "environment":
            return f"the environment variable {self.where}"
        return self.where

    @property
    def named(self) -> str:
        """Where, naming the variable in a file too: ``OPENAI_API_KEY in .env``, ``the
        environment variable OPENAI_API_KEY``, or the option."""
        if self.source in ("environment", "option"):
            return self.place
        return f"{self.name} in {self.where}"


class Reader(NamedTuple):
    """One source of a read: what it is (``environment``, ``env file``...), the file it
    reads (``""`` for none) and pydantic-settings' source object."""

    source: str
    where: str
    read: EnvSettingsSource


class Sources(Generic[S]):
    """The sources one read of ``settings_cls`` uses, each file read once (``None``: none)."""

    def __init__(
        self,
        settings_cls: type[S],
        env_file: str | Path | None = ".env",
        config_file: ConfigFile = USER_CONFIG,
        options: dict[str, Any] | None = None,
    ) -> None:
        check_env_file(env_file)
        config = resolve_config_file(config_file)
        self.settings_cls = settings_cls
        self.options = dict(options or {})
        self.init = InitSettingsSource(settings_cls, init_kwargs=self.options)
        self.readers = (
            Reader("environment", "", EnvSettingsSource(settings_cls)),
            Reader("env file", str(env_file), SettingsFile(settings_cls, env_file)),
            Reader("config file", str(config), SettingsFile(settings_cls, config, "config file")),
        )

    def files(self) -> list[Reader]:
        """The settings files' readers (their ``read.env_vars``: every name in the file)."""
        return [reader for reader in self.readers if reader.source != "environment"]

    def origin(self, field: str) -> Origin | None:
        """Where ``field``'s value comes from: the first source that has it (among a field's
        names, ``OPENAI_API_KEY`` before ``CHATBOT_OPENAI_API_KEY``, the first it has); None
        for the default."""
        if field in self.options:
            option = "--" + field.replace("_", "-")
            return Origin(str(self.options[field]), "option", option, option)
        info = self.settings_cls.model_fields[field]
        for source, where, read in self.readers:
            value, key, _ = read.get_field_value(info, field)
            if value is not None:
                name = (read.env_prefix + key if key == field else key).upper()
                return Origin(value, source, name if source == "environment" else where, name)
        return None

    def read(self) -> S:
        """The settings, or a :class:`SettingsError` with one line for the first problem. A
        blank ``--db`` or ``CHATBOT_DB`` variable is one (``--db "$UNSET"`` must not quietly
        become the default database); blank in a settings file is unset."""
        found = self.origin("db") if "db" in self.settings_cls.model_fields else None
        if found and found.source in ("option", "environment") and not found.value.strip():
            raise SettingsError(f"CHATBOT_DB={found.value!r} is not valid: {BLANK_DB}")
        sources = (self.init, *(reader.read for reader in self.readers))
        try:
            return self.settings_cls(_build_sources=(sources, self.options))
        except ValidationError as error:
            raise SettingsError(describe_validation_error(error)) from None


def read_places(
    env_file: str | Path | None = ".env",
    db: str | None = None,
    url: str | None = None,
    config_file: ConfigFile = USER_CONFIG,
) -> PlaceSettings:
    """Where threads live (or the given ``db`` and ``url``), read as every setting is."""
    options = {name: value for name, value in (("db", db), ("url", url)) if value is not None}
    return Sources(PlaceSettings, env_file, config_file, options).read()


def describe_validation_error(error: ValidationError) -> str:
    """One line for the first problem: the variable, the offending value, what is expected."""
    first = error.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else "setting"
    name = field.upper() if field.upper().startswith("OPENAI_") else f"CHATBOT_{field.upper()}"
    message = first["msg"].removeprefix("Value error, ")
    if isinstance(first.get("ctx", {}).get("error"), SettingsError):
        return str(first["ctx"]["error"])
    value = first.get("input")
    if isinstance(value, str) and field in ("url", "db"):
        value = without_password(value)
    shown = "" if name.startswith("OPENAI_") or isinstance(value, dict) else f"={value!r}"
    return f"{name}{shown} is not valid: {message}"
