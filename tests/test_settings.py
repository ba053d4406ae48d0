"""Settings: one typed object, every variable documented, .env.example usable as it is."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from chatbot.config.settings import Settings, SettingsError, default_db_path, load_settings
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
