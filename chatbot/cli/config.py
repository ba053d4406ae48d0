"""``chatbot config`` (every setting and where it comes from; ``path``; ``init``) and
``chatbot models`` (what the endpoint serves)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from chatbot.cli.app import (
    JsonOption,
    app_state,
    command,
    command_group,
    err,
    escape,
    fail,
    guarded,
    out,
    print_json,
)

if TYPE_CHECKING:
    from chatbot.config.settings import Settings
    from chatbot.config.userfile import SettingRow
    from chatbot.engine.modellist import ModelInfo
    from chatbot.engine.windows import Window

# --- the user's config ----------------------------------------------------------------------

config_app = command_group(
    "config",
    "Show every setting, its value and where it comes from: option, environment, "
    "./.env, the user's config.env, default. 'init' creates config.env.",
    "Settings",
    invoke_without_command=True,
)


def _where(row: SettingRow) -> str:
    if row.source in ("env file", "config file"):
        return str(Path(row.where).absolute())
    if row.source in ("environment", "option"):
        return f"{row.source} {row.where}"
    return row.source


def _json_where(row: SettingRow) -> str:
    return str(Path(row.where).absolute()) if row.source.endswith(" file") else row.where


@config_app.callback()
@guarded
def config(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Show every setting, its value and where it comes from (the API key is redacted)."""
    if ctx.invoked_subcommand is not None:
        return
    from chatbot.config.sources import user_config_file
    from chatbot.config.userfile import describe_settings, unknown_names

    state = app_state(ctx)
    overrides = {"db": state.db or "", "model": state.model or "", "url": state.url or ""}
    rows, error = describe_settings(state.env_file, overrides)
    unknown = unknown_names(state.env_file)
    notes = [item.line() for item in unknown]
    if error is None and not state.remote:
        settings = state.settings
        if not settings.has_credentials and settings.model != "offline":
            notes.append(
                f"no OPENAI_API_KEY or OPENAI_BASE_URL is set: the offline model answers, "
                f"not {settings.model}"
            )
    config_file = user_config_file()
    env_file = Path(state.env_file).absolute()
    if as_json:
        print_json(
            {
                "config_file": str(config_file),
                "config_file_exists": config_file.is_file(),
                "env_file": str(env_file),
                "settings": [row.record() | {"where": _json_where(row)} for row in rows],
                "notes": notes,
                "error": str(error) if error else None,
            }
        )
    else:
        from rich.table import Table

        exists = "" if config_file.is_file() else " (not created: 'chatbot config init')"
        if config_file.is_dir():
            exists = " (is a folder, not a file: not read)"
        out.print(f"config file: {escape(str(config_file))}{exists}", markup=True)
        found = "" if env_file.is_file() else " (none)"
        out.print(f"env file:    {escape(str(env_file))}{found}")
        table = Table(box=None, pad_edge=False)
        table.add_column("setting", style="bold", no_wrap=True)
        table.add_column("value", overflow="fold")
        table.add_column("from", style="dim", overflow="fold")
        for row in rows:
            table.add_row(escape(row.name), escape(row.value), escape(_where(row)))
        from chatbot.terminal.listings import Listing

        out.print(Listing(table))  # (piped: a setting a line)
        for note in notes:
            err.print(f"note: {note}", markup=False, highlight=False)
    if error is not None:
        fail(str(error), 2)


@command("path", group=config_app)
def config_path() -> None:
    """Print the user's config file path (it may not exist yet: 'chatbot config init')."""
    from chatbot.config.sources import user_config_file

    out.print(str(user_config_file()), markup=False, highlight=False)


@command("init", group=config_app)
def config_init() -> None:
    """Create the user's config.env (folder 0700, file 0600), every setting commented out."""
    from chatbot.config.userfile import ConfigExists, create_config

    try:
        path = create_config()
    except ConfigExists as error:
        fail(str(error), 1)
    err.print(f"created {escape(str(path))}: uncomment and edit the settings you want")
    out.print(str(path), markup=False, highlight=False)


# --- the endpoint's models -------------------------------------------------------------------


@command(panel="Settings")
def models(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List the models the endpoint serves: GET /v1/models of OPENAI_BASE_URL, or OpenAI's."""
    from chatbot.config.sources import endpoint_of, without_password
    from chatbot.engine.modellist import list_models

    state = app_state(ctx)
    listing = list_models(state.settings)
    if state.remote:
        err.print(
            f"[yellow]note:[/] these are this machine's endpoint's; the server at "
            f"{escape(state.where)} runs models from its own"
        )
    settings = state.settings
    # without a key or a server the offline model answers, whatever CHATBOT_MODEL says
    current = settings.model if settings.has_credentials else "offline"
    listed_as = next((m.id for m in listing if same_model(m.id, current)), current)
    windows = _windows(settings, listing, current, listed_as)
    if as_json:
        print_json(
            [
                model.record()
                | {"current": model.id == listed_as}
                | ({"window": _window_record(windows[model.id])} if model.id in windows else {})
                for model in listing
            ]
        )
        return
    if not listing:
        endpoint = without_password(endpoint_of(state.settings.openai_base_url))
        err.print(f"{escape(endpoint)} lists no models: name one yourself (CHATBOT_MODEL)")
        return
    from rich.console import Group

    from chatbot.terminal.listings import Listing
    from chatbot.terminal.render import plain

    lines = []
    for model in listing:
        mark = ""
        if model.id == listed_as:
            mark = "  (CHATBOT_MODEL)" if current == settings.model else "  (no key or server set)"
        if model.id in windows:
            known = windows[model.id]
            age = known.age()
            mark += f"  window {known.tokens:,} tokens, from {known.origin()}"
            mark += f", {age}" if age else ""
        lines.append(plain(f"{model.id}{mark}"))
    out.print(Listing(Group(*lines)))  # (a name is never broken: the mark wraps, if anything)
    window = windows.get(listed_as)
    note = window.note() if window else ""
    if window and settings.max_input_tokens and window.source != "settings":
        note = (
            f"CHATBOT_MAX_INPUT_TOKENS={settings.max_input_tokens} is more than the server's "
            f"{window.tokens:,}-token window lets a request hold: the server's window is used"
        )
    if note:
        err.print(f"[yellow]note:[/] {escape(note)}")


def same_model(listed: str, configured: str) -> bool:
    """True when a listed name is the configured model: the same name, or Ollama's name for
    it with the ``:latest`` tag the setting may leave out."""
    return listed == configured or (":" not in configured and listed == f"{configured}:latest")


def _windows(
    settings: Settings, listing: list[ModelInfo], current: str, listed_as: str
) -> dict[str, Window]:
    """The windows known of the listed models, by their listed names: the current model's
    asked of the server anew, the others' as learned before."""
    from chatbot.config.sources import endpoint_of
    from chatbot.engine.models import is_offline, make_model, max_input_tokens
    from chatbot.engine.servers import learn_from_server
    from chatbot.engine.windows import BOOK, window_of

    if is_offline(current):
        return {}
    endpoint = endpoint_of(settings.openai_base_url)
    found: dict[str, Window] = {}
    entries = [model.listed for model in listing]
    for name in (model.id for model in listing):
        if name == listed_as:
            learn_from_server(settings, current, force=True, listing=entries)
            profile = max_input_tokens(make_model(current, settings, role="chat"))
            window = window_of(
                current, endpoint, profile, settings.max_input_tokens, settings.reply_tokens
            )
        else:
            window = BOOK.lookup(endpoint, name) if settings.openai_base_url else None
        if window is not None:
            found[name] = window
    return found


def _window_record(window: Window) -> dict[str, object]:
    return {
        "tokens": window.tokens,
        "source": window.source,
        "from": window.origin(),
        "learned_at": window.learned_at or None,
    }
