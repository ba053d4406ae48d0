"""What the settings are made of, without pydantic: where the user's files are, the checks of a
database path and of a server's URL, and passwords kept out of what is shown.
"""

from __future__ import annotations

import os
from pathlib import Path


class SettingsError(ValueError):
    """A setting that cannot be used; the message is one line meant for the user."""


def data_dir() -> Path:
    """chatbot's own data folder (e.g. ``~/.local/share/chatbot``; ``$XDG_DATA_HOME`` moves
    it), made when first used: the default database and the REPL's input history."""
    from platformdirs import user_data_path

    return user_data_path("chatbot", appauthor=False)


def default_db_path() -> Path:
    """``chatbot.sqlite`` in the user's data folder (:func:`data_dir`)."""
    return data_dir() / "chatbot.sqlite"


def missing_db_folder(path: str) -> Path | None:
    """The folder a new SQLite file at ``path`` is missing, outside chatbot's data folder
    (``--db /nonexistent/dir/x.sqlite`` is more often a typo than folders meant); None when
    there is nothing to make, chatbot makes it, or a file stands in the way."""
    folder = Path(os.path.abspath(os.path.expanduser(path))).parent
    if folder.is_relative_to(os.path.abspath(data_dir())):
        return None
    try:
        there = next(place for place in [folder, *folder.parents] if place.exists())
        return folder if there != folder and there.is_dir() else None
    except OSError:  # (a folder that cannot be looked into: making the file says so)
        return None


def config_dir() -> Path:
    """The user's chatbot config folder (e.g. ``~/.config/chatbot``; ``$XDG_CONFIG_HOME`` moves
    it): ``config.env`` (settings read after the environment and ``./.env``) and ``roles/``."""
    from platformdirs import user_config_path

    return user_config_path("chatbot", appauthor=False)


CONFIG_FILE_NAME = "config.env"


def user_config_file() -> Path:
    """The user's settings file, read after the environment and ``./.env``:
    ``~/.config/chatbot/config.env`` (see :func:`config_dir`)."""
    return config_dir() / CONFIG_FILE_NAME


class _UserConfigFile:
    """The default ``config_file``: the user's (:func:`user_config_file`), found when read."""

    def __repr__(self) -> str:
        return "USER_CONFIG"


USER_CONFIG = _UserConfigFile()
ConfigFile = str | Path | _UserConfigFile | None
"""A settings file read last: a path, :data:`USER_CONFIG` (the user's), or ``None`` (none)."""


def resolve_config_file(config_file: ConfigFile) -> Path | None:
    """The config file's path (``None``: no config file is read)."""
    if isinstance(config_file, _UserConfigFile):
        return user_config_file()
    return None if config_file is None else Path(config_file)


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


_SECRET_PARAMETERS = ("password", "sslpassword")
"""Query parameters that hold a password (libpq reads ``?password=``, and ``sslpassword`` for
a client key)."""


OPENAI_ENDPOINT = "https://api.openai.com/v1"


def endpoint_of(base_url: str | None) -> str:
    """The endpoint a base URL setting means (unset: OpenAI's)."""
    return (base_url or "").strip().rstrip("/") or OPENAI_ENDPOINT  # …/v1/ is …/v1


def without_password(url: str) -> str:
    """A URL as people may see it (errors, ``chatbot config``): its password as ``***``, in
    ``user:password@`` and in ``?password=`` alike."""
    import re
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # too broken to parse: hide whatever sits between // and @
        url = re.sub(r"(//[^/@]*?:)[^/]*@", r"\1***@", url)
        return re.sub(rf"(?i)\b({'|'.join(_SECRET_PARAMETERS)})=[^&#]*", r"\1=***", url)
    hidden = parts
    if password is not None:
        host = parts.netloc.rsplit("@", 1)[-1]
        hidden = hidden._replace(netloc=f"{parts.username or ''}:***@{host}")
    if parts.query:
        names = "|".join(_SECRET_PARAMETERS)
        hidden = hidden._replace(
            query=re.sub(rf"(?i)(^|&)({names})=[^&]*", r"\1\2=***", parts.query)
        )
    return url if hidden == parts else urlunsplit(hidden)  # (as written when nothing is hidden)


def url_passwords(url: str) -> list[str]:
    """The passwords a URL holds (as written and decoded), to keep out of every output."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    try:
        parts = urlsplit(url)
        found = [parts.password] if parts.password else []
    except ValueError:
        return []
    found += [
        value
        for name, value in parse_qsl(parts.query, keep_blank_values=False)
        if name.lower() in _SECRET_PARAMETERS
    ]
    return [form for secret in found for form in dict.fromkeys((secret, unquote(secret)))]


def check_env_file(env_file: str | Path | None) -> None:
    """An env file named with --env-file must be a file, or ``/dev/null`` for none (``.env``
    may be missing); one line saying what it is otherwise."""
    if env_file is None or env_file == ".env":
        return
    import stat

    try:
        mode = Path(env_file).stat().st_mode
    except OSError as error:
        problem = (
            "does not exist: check --env-file"
            if isinstance(error, FileNotFoundError | NotADirectoryError)
            else f"cannot be read: {error.strerror or error}"
        )
        raise SettingsError(f"env file {str(env_file)!r} {problem}") from None
    if stat.S_ISREG(mode) or os.path.realpath(env_file) == os.devnull:  # (/dev/null: none)
        return
    if stat.S_ISDIR(mode):
        what = "a folder"
    elif stat.S_ISFIFO(mode):
        what = "a pipe, not a file (settings are read from it more than once)"
    else:
        what = "a socket, not a file" if stat.S_ISSOCK(mode) else "a device, not a file"
    raise SettingsError(f"env file {str(env_file)!r} is {what}: give a file")


BLANK_DB = (
    "it is blank: give a SQLite file's path or a postgresql:// URL, or leave it out for the "
    "default database"
)


def check_db(value: str) -> str:
    """``CHATBOT_DB`` as chatbot can use it: a SQLite file's path or a ``postgresql://`` URL.
    Another address (``mysql://h/db``, ``sqlite:///x``, ``file:x?mode=ro``), a blank value or
    a control character is a ValueError saying what to give: taken as a path, it would
    quietly become folders or a file no one meant."""
    import re
    import unicodedata

    text = value.strip()
    if not text:
        raise ValueError(BLANK_DB)
    control = next((c for c in value if unicodedata.category(c) == "Cc"), None)
    if control is not None:
        raise ValueError(
            f"it holds a control character (U+{ord(control):04X}): give the path or URL without it"
        )
    if text.lower().startswith(("postgresql://", "postgres://")):
        return check_postgres_database(value)
    sqlite_address = re.match(r"(?i)(sqlite:///?|file:(?://)?)([^?#]*)", text)
    if sqlite_address:
        kind = "a URL" if sqlite_address[1].lower().startswith("sqlite") else "a file: URI"
        path = sqlite_address[2] or "chat.sqlite"
        raise ValueError(f"give the SQLite file's path itself ({path!r}), not {kind}")
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", text)
    if scheme:
        raise ValueError(
            f"chatbot keeps threads in a SQLite file or in PostgreSQL, not in {scheme[1]}://: "
            "give a file's path or a postgresql:// URL"
        )
    return check_db_path(value)


def check_db_path(value: str) -> str:
    """A database path no file can be at (a symbolic-link loop, a name too long) as a
    ValueError in words; a path that does not exist yet is fine."""
    import errno

    if value == ":memory:":
        return value
    try:
        os.stat(os.path.expanduser(value))
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ValueError(
                "its symbolic links lead round in a loop, to no file: point the link at a "
                "file, or give another path"
            ) from None
        if error.errno == errno.ENAMETOOLONG:
            raise ValueError(
                "the path (or a name in it) is longer than the system allows: give a shorter one"
            ) from None
    except ValueError:  # (a NUL character: refused above as a control character)
        pass
    return value


NO_DATABASE_NAMED = (
    "it names no database, and PostgreSQL would then use its default one (the user's name, or "
    "postgres): add the database's name, postgresql://user@host:5432/DBNAME"
)


def check_postgres_database(url: str) -> str:
    """A ``postgresql://`` URL that names its database (its path, ``?dbname=``, ``?service=``,
    ``PGDATABASE`` or ``PGSERVICE``); else a ValueError: chatbot's tables would land in
    libpq's default database, which nobody chose. A broken URL is left to libpq."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return url
    named = {key.lower() for key, value in parse_qsl(parts.query) if value.strip()}
    if unquote(parts.path).strip("/ ") or named & {"dbname", "service"}:
        return url
    if any(os.environ.get(name, "").strip() for name in ("PGDATABASE", "PGSERVICE")):
        return url
    raise ValueError(NO_DATABASE_NAMED)


def expanded_path(value: str) -> str:
    """A settings file's ``CHATBOT_DB=$HOME/chat.sqlite`` as a shell would read it
    (python-dotenv expands only ``${HOME}``); not a URL, whose password may hold a "$"."""
    if "$" not in value or value.strip().lower().startswith(("postgresql://", "postgres://")):
        return value
    return os.path.expandvars(value)


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


KEY_NAMES = ("OPENAI_API_KEY", "CHATBOT_OPENAI_API_KEY")
"""The variables the API key is read from, in the order the settings try them."""
