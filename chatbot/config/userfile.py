"""The user-level config: ``config.env`` in the user's config folder (so that an installed
``chatbot`` works the same from any folder), and where each setting comes from.

:func:`describe_settings` tells every setting's value (secrets redacted) and source;
:func:`create_config` writes a commented ``config.env`` only its owner can read;
:func:`readable_key_warning` notices one that others can read.
"""

from __future__ import annotations

import functools
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from chatbot.config.sources import KEY_NAMES, SettingsError, user_config_file

if TYPE_CHECKING:
    from chatbot.config.settings import Settings

REDACTED = "[redacted]"
_URL_FIELDS = ("db", "url", "openai_base_url")
_DESCRIPTIONS = {
    "openai_api_key": "API key of the OpenAI-compatible server (secret: keep this file 0600).",
    "openai_base_url": "OpenAI-compatible server, e.g. http://localhost:11434/v1 (Ollama).",
}


class SettingRow(NamedTuple):
    """One setting as ``chatbot config`` shows it."""

    name: str
    """The variable, e.g. ``CHATBOT_MODEL`` or ``OPENAI_API_KEY``."""
    value: str
    """The effective value, redacted where secret; ``""`` when unset."""
    source: str
    """``option``, ``environment``, ``env file``, ``config file`` or ``default``."""
    where: str = ""
    """The option, the variable as set, or the file's path; empty for a default."""

    def record(self) -> dict[str, str]:
        return {"name": self.name, "value": self.value, "source": self.source, "where": self.where}


def variable_names(field: str) -> tuple[str, ...]:
    """The variables a settings field is read from, the first being its documented name."""
    if field.startswith("openai_"):
        return (field.upper(), f"CHATBOT_{field.upper()}")
    return (f"CHATBOT_{field.upper()}",)


def shown_value(field: str, value: Any) -> str:
    """A setting's value for people: the API key redacted, a URL without its password."""
    if value is None:
        return "none" if field == "pg_prepare_threshold" else ""
    if hasattr(value, "get_secret_value"):
        value = value.get_secret_value()
    text = str(value)
    if field == "openai_api_key":
        return REDACTED if text.strip() else ""
    if field in _URL_FIELDS:
        from chatbot.config.sources import without_password

        text = without_password(text)
    from chatbot.errors import redact

    return redact(text)


def describe_settings(
    env_file: str | Path | None, overrides: dict[str, str]
) -> tuple[list[SettingRow], SettingsError | None]:
    """Every setting, its effective value and where it comes from; and the settings' error,
    if they do not load (the rows then show the values as written)."""
    from chatbot.config.reader import Sources
    from chatbot.config.settings import Settings, settings_from

    overrides = {name: value for name, value in overrides.items() if value}
    sources = Sources(Settings, env_file, options=overrides)
    settings: Settings | None = None
    error: SettingsError | None = None
    try:
        settings = settings_from(sources)
    except SettingsError as problem:
        error = problem
    defaults = Settings.model_fields
    rows = []
    for field in defaults:
        found = sources.origin(field)
        if settings is not None:
            value = shown_value(field, getattr(settings, field))
        elif found is not None:
            value = shown_value(field, found.value)
        else:
            value = shown_value(field, defaults[field].get_default(call_default_factory=True))
        source, where = (found.source, found.where) if found else ("default", "")
        rows.append(SettingRow(variable_names(field)[0], value, source, where))
    return rows, error


class UnknownName(NamedTuple):
    """A ``CHATBOT_*`` name in a settings file that is no setting (a typo, an old name)."""

    name: str
    where: str
    """The file's path."""
    suggestion: str | None
    """The setting it is closest to, if any is close."""

    def line(self) -> str:
        hint = f" (did you mean {self.suggestion}?)" if self.suggestion else ""
        return f"{self.name} in {self.where} is not a setting, so it is not read{hint}"


@functools.cache
def setting_names() -> frozenset[str]:
    """Every variable a setting is read from (``CHATBOT_MODEL``, ``OPENAI_API_KEY``, ...)."""
    from chatbot.config.settings import Settings

    return frozenset(name for field in Settings.model_fields for name in variable_names(field))


def unknown_names(env_file: str | Path | None) -> list[UnknownName]:
    """The ``CHATBOT_*`` names in the settings files that no setting reads: pydantic-settings
    passes them by, so a misspelt setting would silently keep its default."""
    import difflib

    from chatbot.config.reader import Sources
    from chatbot.config.settings import Settings

    known = setting_names()
    known_suffixes = {name[8:] for name in known if name.startswith("CHATBOT_")}
    found: list[UnknownName] = []
    for reader in Sources(Settings, env_file).files():
        for key, value in reader.read.env_vars.items():
            name = key.upper()
            if value is not None and name.startswith("CHATBOT_") and name not in known:
                close = difflib.get_close_matches(name[8:], sorted(known_suffixes), n=1)
                suggestion = f"CHATBOT_{close[0]}" if close else None
                found.append(UnknownName(name, reader.where, suggestion))
    return found


def config_template() -> str:
    """A ``config.env`` with every setting commented out at its default, one line of help each."""
    from chatbot.config.settings import Settings

    lines = [
        "# chatbot's user settings, read after the environment and ./.env (those win).",
        "# Uncomment a line to set it. 'chatbot config' shows what is in effect and why.",
        "",
    ]
    for field, info in Settings.model_fields.items():
        default = info.get_default(call_default_factory=False)
        if info.default_factory is not None or default is None:
            default = ""
        elif isinstance(default, bool):
            default = str(default).lower()
        lines.append(f"# {_DESCRIPTIONS.get(field) or info.description or ''}".rstrip())
        lines.append(f"# {variable_names(field)[0]}={default}")
        lines.append("")
    return "\n".join(lines)


class ConfigExists(Exception):
    """``config init`` found a config file already there (it is never overwritten)."""


def create_config() -> Path:
    """Create the config folder (0700) and a commented ``config.env`` (0600) in it; refuse
    (:class:`ConfigExists`) if the file exists."""
    from chatbot.files import write_new_private

    path = user_config_file()
    try:
        write_new_private(path, config_template())
    except FileExistsError:
        if path.is_dir():
            raise SettingsError(
                f"{path} is a folder: remove it, then run 'chatbot config init'"
            ) from None
        raise ConfigExists(f"{path} already exists: edit it (it was left as it is)") from None
    except OSError as error:
        raise SettingsError(f"cannot create {path}: {error.strerror or error}") from None
    return path


def readable_key_warning() -> str:
    """One line when the config file holds an API key and others may read it; else ``""``
    (only a stat when the file is private, so every command can ask)."""
    path = user_config_file()
    try:
        mode = path.stat().st_mode
    except OSError:
        return ""
    if not stat.S_ISREG(mode) or not mode & (stat.S_IRWXG | stat.S_IRWXO):
        return ""
    from dotenv import dotenv_values

    _quiet_dotenv()
    try:
        values = dotenv_values(path, encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
    keys = {name.upper() for name, value in values.items() if value and value.strip()}
    if not keys.intersection(KEY_NAMES):
        return ""
    return f"{path} holds an API key and others can read it: chmod 600 {path}"


_NAME = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)(?=[\s:=]|$)")
_SHOWN_LINES = 5


def _quiet_dotenv() -> None:
    """python-dotenv logs each line it cannot read; chatbot says it once, in one line."""
    import logging

    logging.getLogger("dotenv.main").disabled = True


def unreadable_lines_warnings(env_file: str | Path | None) -> list[str]:
    """One line for each settings file holding lines python-dotenv cannot read (and skips):
    the lines and the setting each seems to be about, never a value (it may be a key)."""
    warnings = []
    for path in (env_file, user_config_file()):
        if path is None or not Path(path).is_file():
            continue
        from dotenv.parser import parse_stream

        _quiet_dotenv()
        try:
            with open(path, encoding="utf-8") as stream:
                bad = [binding.original for binding in parse_stream(stream) if binding.error]
        except (OSError, UnicodeDecodeError):
            continue  # (said by the settings when they read it)
        if not bad:
            continue
        numbers = ", ".join(str(original.line) for original in bad[:_SHOWN_LINES])
        if len(bad) > _SHOWN_LINES:
            numbers += f" and {len(bad) - _SHOWN_LINES:,} more"
        # Only a setting's own name is shown: the start of a bad line may be a key (a value
        # wrapped onto the next line, a key pasted alone), and names are looked up only here.
        names = [
            found.group(1).upper()
            for original in bad
            if (found := _NAME.match(original.string.strip()))
            and found.group(1).upper() in setting_names()
        ]
        about = f" ({', '.join(dict.fromkeys(names))})" if names else ""
        lines = f"line {numbers} is" if len(bad) == 1 else f"lines {numbers} are"
        warnings.append(
            f"{path}: {lines} not NAME=value and skipped{about}: write NAME=value, "
            "quoting a value with spaces or # in it"
        )
    return warnings
