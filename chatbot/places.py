"""Where threads live, read fast: the database file or the server, without the full settings.

Commands that only read threads (``threads``, ``history``, ``show``, ``export``, ``delete``)
and the REPL's first prompt need two settings, ``CHATBOT_DB`` and ``CHATBOT_URL``. Reading
them here takes the standard library and python-dotenv (the parser pydantic-settings uses
for ``.env``), not pydantic, which costs a fifth of a second to import. The rules are the
settings' own (a test holds the two to the same answers): an option beats the environment,
which beats the ``.env`` file, which beats the default; names are not case-sensitive; blank
means unset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


class SettingsError(ValueError):
    """A setting that cannot be used; the message is one line meant for the user."""


def default_db_path() -> Path:
    """``chatbot.sqlite`` in the user's data directory (e.g. ``~/.local/share/chatbot``)."""
    from platformdirs import user_data_path

    return user_data_path("chatbot", appauthor=False) / "chatbot.sqlite"


def config_dir() -> Path:
    """The user's chatbot config folder (e.g. ``~/.config/chatbot``; ``$XDG_CONFIG_HOME`` moves
    it): ``config.env`` (settings read after the environment and ``./.env``) and ``roles/``."""
    from platformdirs import user_config_path

    return user_config_path("chatbot", appauthor=False)


def check_http_url(value: str | None, example: str) -> str | None:
    """An http(s) address with a host and a valid port, or a ValueError showing the form."""
    if value is None:
        return value
    from urllib.parse import urlsplit

    problem = f"use an http:// or https:// address, e.g. {example}"
    try:
        parts = urlsplit(value)
        _ = parts.port  # raises on a bad port
    except ValueError:
        raise ValueError(problem) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(problem)
    return value


def check_env_file(env_file: str | Path | None) -> None:
    """An env file named with --env-file must be a file (``.env`` may be missing)."""
    if env_file is None or env_file == ".env":
        return
    path = Path(env_file)
    if path.is_dir():
        raise SettingsError(f"env file {str(env_file)!r} is a folder: give a file")
    if not path.is_file():
        raise SettingsError(f"env file {str(env_file)!r} does not exist: check --env-file")


def prepare_threshold(value: str | None) -> int | None:
    """``CHATBOT_PG_PREPARE_THRESHOLD``: a number, or ``none`` (no prepared statements)."""
    text = (value or "5").strip().lower()
    if text in ("none", "off"):
        return None
    try:
        number = int(text)
    except ValueError:
        number = -1
    if number < 0:
        raise ValueError("give a number of executions (5 by default), or 'none' behind pgbouncer")
    return number


@dataclass(frozen=True)
class Places:
    """The database file and the server, as the settings would resolve them."""

    db: str
    url: str | None
    pg_prepare_threshold: int | None = 5


def _from_env_file(env_file: str | Path | None) -> dict[str, str]:
    if env_file is None or not Path(env_file).is_file():
        return {}
    from dotenv import dotenv_values

    try:
        values = dotenv_values(env_file, encoding="utf-8")
    except UnicodeDecodeError:
        raise SettingsError(
            f"env file {str(env_file)!r} is not UTF-8 text: save it as UTF-8"
        ) from None
    return {key.lower(): value for key, value in values.items() if value is not None}


def read_places(
    env_file: str | Path | None = ".env", db: str | None = None, url: str | None = None
) -> Places:
    """``CHATBOT_DB`` and ``CHATBOT_URL`` (or the given overrides), as the settings read them."""
    check_env_file(env_file)
    environment = {key.lower(): value for key, value in os.environ.items()}
    from_file: dict[str, str] | None = None

    def setting(name: str, override: str | None) -> str | None:
        nonlocal from_file
        if override is not None:
            return override
        key = f"chatbot_{name}"
        if key in environment:
            return environment[key]
        if from_file is None:
            from_file = _from_env_file(env_file)
        return from_file.get(key)

    chosen_db = setting("db", db)
    if chosen_db is None or not chosen_db.strip():
        chosen_db = str(default_db_path())
    chosen_url = setting("url", url)
    if chosen_url is not None and not chosen_url.strip():
        chosen_url = None
    try:
        check_http_url(chosen_url, "http://127.0.0.1:2024")
    except ValueError as error:
        raise SettingsError(f"CHATBOT_URL={chosen_url!r} is not valid: {error}") from None
    threshold = setting("pg_prepare_threshold", None)
    try:
        prepare = prepare_threshold(threshold)
    except ValueError as error:
        raise SettingsError(
            f"CHATBOT_PG_PREPARE_THRESHOLD={threshold!r} is not valid: {error}"
        ) from None
    return Places(db=chosen_db, url=chosen_url, pg_prepare_threshold=prepare)
