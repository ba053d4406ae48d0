"""Settings: one typed object, every variable documented, .env.example usable as it is; the
rules every read follows, the full settings' and the database's and server's read alone."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from chatbot.config.reader import read_places
from chatbot.config.settings import Settings, SettingsError, default_db_path, load_settings
from chatbot.config.sources import user_config_file
from chatbot.threads.runner import blocking
from tests.helpers import ROOT


def example_variables() -> dict[str, str]:
    text = (ROOT / ".env.example").read_text()
    return dict(re.findall(r"^([A-Z_]+)=(.*)$", text, flags=re.M))


def variable_name(field: str) -> str:
    return field.upper() if field.startswith("openai_") else f"CHATBOT_{field.upper()}"


def test_every_setting_is_documented_in_env_example() -> None:
    documented = set(example_variables())
    expected = {variable_name(name) for name in Settings.model_fields}
    assert expected == documented


def test_env_example_copied_to_dot_env_gives_the_defaults(tmp_path: Path) -> None:
    shutil.copy(ROOT / ".env.example", tmp_path / ".env")
    from_example = load_settings(tmp_path / ".env")
    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    assert from_example.model_dump() == defaults.model_dump()
    assert from_example.db == str(default_db_path())
    assert not from_example.has_credentials


def test_env_example_shows_the_real_defaults() -> None:
    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    for name, shown in example_variables().items():
        field = (
            name.removeprefix("CHATBOT_").lower() if name.startswith("CHATBOT_") else name.lower()
        )
        value = getattr(defaults, field)
        if isinstance(value, float):
            assert value == float(shown), name
        elif shown:
            assert str(value).lower() == shown.lower(), name
        else:
            assert value in (None, "", str(default_db_path())), name


def test_environment_overrides_dot_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("CHATBOT_MODEL=from-file\nCHATBOT_LANGUAGE=zh\n")
    monkeypatch.setenv("CHATBOT_MODEL", "from-env")
    settings = load_settings()
    assert settings.model == "from-env" and settings.language == "zh"


def test_api_key_is_secret_in_repr_and_dump(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret-value")
    settings = load_settings(None)
    assert "sk-very-secret-value" not in repr(settings)
    assert "sk-very-secret-value" not in str(settings.model_dump())
    assert settings.has_credentials


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("CHATBOT_TIMEOUT", "0", "CHATBOT_TIMEOUT='0' is not valid"),
        ("CHATBOT_MAX_RETRIES", "-1", "CHATBOT_MAX_RETRIES='-1' is not valid"),
        ("CHATBOT_MAX_RETRIES", "11", "less than or equal to 10"),
        ("CHATBOT_MAX_RETRIES", "99999999999999999999", "less than or equal to 10"),
        ("CHATBOT_KEEP_FIRST_MESSAGE", "maybe", "CHATBOT_KEEP_FIRST_MESSAGE='maybe' is not valid"),
        ("CHATBOT_URL", "localhost:2024", "use an http:// or https:// address"),
        ("CHATBOT_SUMMARY_TRIGGER", "tokens:0", "CHATBOT_SUMMARY_TRIGGER='tokens:0' is not valid"),
        ("CHATBOT_SUMMARY_EXTEND_PROMPT", "no placeholder", "must contain {summary}"),
    ],
)
def test_invalid_values_are_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings(None)
    message = str(caught.value)
    assert expected in message and "\n" not in message


def test_fraction_needs_a_context_size() -> None:
    settings = Settings(_env_file=None, summary_trigger="fraction:0.8")  # type: ignore[call-arg]
    with pytest.raises(SettingsError, match="CHATBOT_MAX_INPUT_TOKENS"):
        settings.policy(None)
    assert settings.policy(10_000).trigger_tokens() == 8000


@pytest.mark.parametrize(
    ("name", "value"),
    [("CHATBOT_MODEL", ""), ("CHATBOT_MODEL", "two words"), ("CHATBOT_SUMMARY_MODEL", "a b")],
)
def test_model_names_must_be_names(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match="give a model name without spaces"):
        load_settings(None)


@pytest.mark.parametrize(
    ("name", "value", "code"),
    [
        ("CHATBOT_MODEL", "gpt\x7f4o", "U+007F"),
        ("CHATBOT_MODEL", "gpt-4o\x1b[2J", "U+001B"),
        ("CHATBOT_SUMMARY_MODEL", "\u200bgpt-4o", "U+200B"),
    ],
)
def test_a_model_name_holding_a_control_character_is_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, code: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings(None)
    message = str(caught.value)
    assert message.startswith(f"{name}=") and f"control character ({code})" in message
    assert value not in message  # (shown escaped: a terminal never acts on it)


def test_a_blank_summary_prompt_is_the_built_in_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from chatbot.memory.prompts import summary_request

    monkeypatch.setenv("CHATBOT_SUMMARY_CREATE_PROMPT", " \t\n ")
    monkeypatch.setenv("CHATBOT_SUMMARY_EXTEND_PROMPT", "   ")
    settings = load_settings(None)
    assert (settings.summary_create_prompt, settings.summary_extend_prompt) == (None, None)
    request = summary_request([], "", language="en", create_prompt=settings.summary_create_prompt)
    assert request[-1].text.endswith("Create a summary of the conversation above:")


@pytest.mark.parametrize("url", ["http://", "http://[::1", "ftp://host", "localhost:2024"])
def test_server_url_must_be_a_usable_http_address(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("CHATBOT_URL", url)
    with pytest.raises(SettingsError, match="use an http:// or https:// address"):
        load_settings(None)


def test_env_file_that_is_not_utf8_or_is_a_folder_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.env"
    bad.write_bytes(b"\xffCHATBOT_MODEL=x\n")
    with pytest.raises(SettingsError, match="is not UTF-8 text"):
        load_settings(bad)
    with pytest.raises(SettingsError, match="is a folder"):
        load_settings(tmp_path)


def test_one_credentials_rule_for_the_factory_the_fallback_and_a_runs_model() -> None:
    from chatbot.engine.graph import build_graph
    from chatbot.engine.models import MissingCredentials, make_model, resolve_models

    bare = Settings(_env_file=None, model="gpt-4o")  # type: ignore[call-arg]
    with pytest.raises(MissingCredentials) as made:
        make_model("gpt-4o", bare, role="chat")
    assert str(made.value).startswith("model 'gpt-4o' needs OPENAI_API_KEY or OPENAI_BASE_URL")
    fallback = resolve_models(bare)
    assert (fallback.chat_name, fallback.summary_name) == ("offline", "offline")
    assert "No OPENAI_API_KEY or OPENAI_BASE_URL is set" in fallback.notice
    graph = build_graph(fallback.chat, fallback.summary, bare)
    with pytest.raises(MissingCredentials) as asked:
        blocking(graph.ainvoke({"messages": [("user", "hi")]}, context={"chat_model": "gpt-4o"}))
    assert str(asked.value) == str(made.value)
    keyed = Settings(_env_file=None, openai_base_url="http://127.0.0.1:9/v1")  # type: ignore[call-arg]
    assert make_model("gpt-4o", keyed, role="chat") is not None
    assert resolve_models(keyed).chat_name == keyed.model == "gpt-4o-mini"


# --- the rules of every read: the full settings, and the places the REPL's start reads alone ---


def _places(env_file: str | Path | None = ".env", **options: Any) -> Any:
    return read_places(env_file, **options)


READERS = pytest.mark.parametrize("read", [load_settings, _places], ids=["settings", "places"])


def _files(dot_env: str = "", config: str = "") -> None:
    Path(".env").write_text(dot_env, encoding="utf-8")  # (each test runs in its own folder)
    path = user_config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config, encoding="utf-8")


@READERS
@pytest.mark.parametrize(
    ("option", "environment", "dot_env", "config", "expected"),
    [
        ("/o.sqlite", "/e.sqlite", "/d.sqlite", "/c.sqlite", "/o.sqlite"),
        (None, "/e.sqlite", "/d.sqlite", "/c.sqlite", "/e.sqlite"),
        (None, None, "/d.sqlite", "/c.sqlite", "/d.sqlite"),
        (None, None, None, "/c.sqlite", "/c.sqlite"),
        (None, None, None, None, "default"),
    ],
)
def test_an_option_beats_the_environment_beats_dot_env_beats_the_config_file_beats_the_default(
    read: Callable[..., Any],
    option: str | None,
    environment: str | None,
    dot_env: str | None,
    config: str | None,
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if environment:
        monkeypatch.setenv("CHATBOT_DB", environment)
    _files(
        f"CHATBOT_DB={dot_env}\nCHATBOT_URL=http://dotenv:1\n" if dot_env else "",
        f"CHATBOT_DB={config}\nCHATBOT_URL=http://config:1\n" if config else "",
    )
    read_ = read(**({"db": option} if option else {}))
    assert read_.db == (str(default_db_path()) if expected == "default" else expected)
    assert read_.url == ("http://dotenv:1" if dot_env else "http://config:1" if config else None)
    assert read(config_file=None).db == (environment or dot_env or str(default_db_path()))


@READERS
def test_env_file_replaces_dot_env(read: Callable[..., Any], tmp_path: Path) -> None:
    _files("CHATBOT_DB=/dotenv.sqlite\n", "CHATBOT_DB=/config.sqlite\n")
    other = tmp_path / "other.env"
    other.write_text("CHATBOT_URL=http://other:1\n")
    read_ = read(other)
    assert (read_.db, read_.url) == ("/config.sqlite", "http://other:1")
    assert read(None).db == "/config.sqlite"


@READERS
def test_names_are_not_case_sensitive(
    read: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _files("Chatbot_Url=http://dotenv:1\n", "chatbot_pg_prepare_threshold=none\n")
    monkeypatch.setenv("chatbot_db", "/lower.sqlite")
    read_ = read()
    assert (read_.db, read_.url, read_.pg_prepare_threshold) == (
        "/lower.sqlite",
        "http://dotenv:1",
        None,
    )


@READERS
def test_blank_is_unset_where_it_is_found(
    read: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blank value is the setting's default, whatever a source below it says."""
    _files(
        "CHATBOT_DB=\nCHATBOT_PG_PREPARE_THRESHOLD=  \n",
        "CHATBOT_URL=http://config:1\nCHATBOT_DB=/c.sqlite\nCHATBOT_PG_PREPARE_THRESHOLD=0\n",
    )
    monkeypatch.setenv("CHATBOT_URL", " ")
    read_ = read()
    assert (read_.db, read_.url, read_.pg_prepare_threshold) == (str(default_db_path()), None, 5)


@READERS
@pytest.mark.parametrize(
    ("environment", "options"),
    [({"CHATBOT_DB": "  "}, {}), ({"chatbot_db": ""}, {}), ({}, {"db": ""})],
)
def test_a_blank_db_option_or_variable_is_refused_in_one_line(
    read: Callable[..., Any],
    environment: dict[str, str],
    options: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _files("CHATBOT_DB=/dotenv.sqlite\n")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        read(**options)
    blank = options.get("db", next(iter(environment.values()), ""))
    assert str(caught.value) == (
        f"CHATBOT_DB={blank!r} is not valid: it is blank: give a SQLite file's path or a "
        "postgresql:// URL, or leave it out for the default database"
    )
    assert read(db="/given.sqlite").db == "/given.sqlite", "an option over a blank variable"


@READERS
@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("CHATBOT_URL=ftp://ada:hunter2pw@example.com", "CHATBOT_URL='ftp://ada:***@example.com'"),
        ("CHATBOT_DB=mysql://ada:hunter2pw@h/db", "CHATBOT_DB='mysql://ada:***@h/db'"),
        ("CHATBOT_DB=a\u0007b", "CHATBOT_DB='a\\x07b' is not valid: it holds a control"),
        ("CHATBOT_PG_PREPARE_THRESHOLD=-1", "CHATBOT_PG_PREPARE_THRESHOLD='-1' is not valid: give"),
    ],
)
def test_a_bad_place_is_one_line_without_its_password(
    read: Callable[..., Any], line: str, shown: str
) -> None:
    _files(config=line + "\n")
    with pytest.raises(SettingsError) as caught:
        read()
    message = str(caught.value)
    assert message.startswith(shown) and "\n" not in message
    assert "hunter2pw" not in message


@READERS
def test_a_files_database_path_is_expanded_as_a_shell_would_and_a_variables_is_not(
    read: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    _files(config="export CHATBOT_DB='$HOME/quoted x.sqlite'  # a comment\n")
    assert read().db == f"{tmp_path}/quoted x.sqlite"
    monkeypatch.setenv("CHATBOT_DB", "$HOME/x.sqlite")
    assert read().db == "$HOME/x.sqlite"
    assert read(db="$HOME/y.sqlite").db == "$HOME/y.sqlite"


@READERS
def test_a_settings_file_that_is_not_utf8_is_named_in_one_line(read: Callable[..., Any]) -> None:
    _files()
    user_config_file().write_bytes(b"CHATBOT_DB=\xff\n")
    with pytest.raises(SettingsError) as caught:
        read()
    assert str(caught.value) == (
        f"config file {str(user_config_file())!r} is not UTF-8 text: save it as UTF-8"
    )


@contextmanager
def as_another_user() -> Iterator[None]:
    """Run as a user who owns nothing here: root reads a file whatever its mode says."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(65534)  # nobody
    try:
        yield
    finally:
        os.seteuid(0)


@READERS
def test_a_settings_file_that_cannot_be_read_is_named_in_one_line(
    read: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="chatbot-unreadable-"))  # (a folder anyone may enter)
    try:
        home.chmod(0o755)
        monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
        monkeypatch.chdir(home)
        _files(config="CHATBOT_DB=/c.sqlite\n")
        path = user_config_file()
        path.parent.chmod(0o755)
        read()  # (every module a read imports is imported before the user changes)
        path.chmod(0)
        with as_another_user(), pytest.raises(SettingsError) as caught:
            read()
    finally:
        shutil.rmtree(home)
    assert str(caught.value) == (
        f"config file {str(path)!r} is not readable by you (permission denied): let yourself "
        f"read it (chmod u+r {path}), or move it away"
    )
