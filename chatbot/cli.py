"""The ``chatbot`` command: Typer app. The only module that reads the environment and prints."""

from __future__ import annotations

import functools
import json
import logging
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.markup import escape
from rich.panel import Panel

from chatbot import __version__
from chatbot.settings import Settings, SettingsError, load_settings
from chatbot.store import Store, StoreError

app = typer.Typer(
    name="chatbot",
    help="A terminal chatbot whose memory never overflows: older turns fold into a running "
    "summary, every turn is checkpointed in SQLite under a thread id.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


class CliError(Exception):
    """An error to show as one line and exit with ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class AppState:
    """What the global options set up; the heavy parts (models, graph, DB) are made on demand."""

    env_file: str | None = ".env"
    db: str | None = None
    model: str | None = None
    _settings: Settings | None = None
    _store: Store | None = None
    _graph: Any = None
    notice: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            overrides: dict[str, Any] = {}
            if self.db:
                overrides["db"] = self.db
            if self.model:
                overrides["model"] = self.model
            self._settings = load_settings(self.env_file, **overrides)
            if self._settings.openai_api_key:
                _SECRETS.add(self._settings.openai_api_key.get_secret_value())
        return self._settings

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.settings.db)
        return self._store

    @property
    def graph(self) -> Any:
        if self._graph is None:
            from chatbot.graph import build_graph
            from chatbot.models import max_input_tokens, resolve_models

            models = resolve_models(self.settings)
            self.settings.policy(max_input_tokens(models.chat))  # fail early on a bad policy
            self.notice = models.notice
            self._graph = build_graph(models.chat, models.summary, self.settings, self.store.saver)
        return self._graph

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


_SECRETS: set[str] = set()
"""Secrets seen in the settings of this process, removed from anything printed."""


def redact(text: str) -> str:
    """Remove the API key, and anything shaped like one, from text meant for the user."""
    for secret in _SECRETS:
        if secret.strip():
            text = text.replace(secret, "[redacted]")
    return re.sub(r"\bsk-[A-Za-z0-9*_\-]{4,}", "sk-[redacted]", text)


def fail(message: str, code: int = 1) -> NoReturn:
    """Stop with one clear line on stderr."""
    raise CliError(message, code)


def guarded(command: Callable[..., None]) -> Callable[..., None]:
    """Turn every error a command meets into one line on stderr and a non-zero exit code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            command(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except CliError as error:
            _error_line(str(error))
            raise typer.Exit(error.code) from None
        except (SettingsError, StoreError) as error:
            _error_line(str(error))
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err.print("[dim]interrupted[/]")
            raise typer.Exit(130) from None
        except Exception as error:  # a model or network error: one line, never a traceback
            logging.getLogger("chatbot").debug("command failed", exc_info=True)
            _error_line(describe_error(error))
            raise typer.Exit(1) from None

    return wrapper


def _error_line(message: str) -> None:
    err.print(f"[red]error:[/] {escape(redact(message))}")


def _state(ctx: typer.Context) -> AppState:
    state = ctx.find_root().obj
    assert isinstance(state, AppState)
    return state


def _version(value: bool) -> None:
    if value:
        out.print(f"chatbot {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    db: Annotated[
        str | None, typer.Option("--db", help="SQLite file for threads (default: CHATBOT_DB).")
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Chat model (default: CHATBOT_MODEL).")
    ] = None,
    env_file: Annotated[
        str | None, typer.Option("--env-file", help="Read settings from this file, not ./.env.")
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Chat with an LLM in the terminal; threads live in SQLite."""
    ctx.obj = AppState(env_file=env_file or ".env", db=db, model=model)
    ctx.call_on_close(ctx.obj.close)


def _show_notice(state: AppState) -> None:
    if state.notice:
        err.print(f"[yellow]note:[/] {state.notice}")


def _read_text(text: str | None) -> str:
    if text is None or text == "-":
        if sys.stdin.isatty():
            fail("no message: give TEXT, or pipe it in with '-'", 2)
        text = sys.stdin.read()
    if not text.strip():
        fail("the message is empty: give some text to send", 2)
    return text


@app.command()
@guarded
def ask(
    ctx: typer.Context,
    text: Annotated[str | None, typer.Argument(help="The message; '-' reads stdin.")] = None,
    thread: Annotated[
        str, typer.Option("--thread", "-t", help="Thread id to continue or create.")
    ] = "default",
    db: Annotated[str | None, typer.Option("--db", help="SQLite file for threads.")] = None,
) -> None:
    """Send one message to a thread and print the reply."""
    from chatbot.session import ChatSession, Reply, Summarized, SummaryFailed, Token

    state = _state(ctx)
    if db:
        state.db = db
    message = _read_text(text)
    graph = state.graph
    _show_notice(state)
    session = ChatSession(graph, state.store, thread)
    streamed = False
    interactive = out.is_terminal
    for event in session.send(message):
        if isinstance(event, Token) and interactive:
            out.print(event.text, end="", markup=False)
            streamed = True
        elif isinstance(event, Reply) and not streamed:
            out.print(event.message.text, markup=False)
        elif isinstance(event, Summarized):
            err.print(f"[dim]{describe_summary(event)}[/]")
        elif isinstance(event, SummaryFailed):
            err.print(
                f"[yellow]summary failed, nothing was removed (will retry next turn):[/] "
                f"{redact(event.error)}"
            )
    if streamed:
        out.print()


def describe_summary(event: Any) -> str:
    """The one dim line shown when a summary is made."""
    calls = f" in {event.calls} steps" if event.calls > 1 else ""
    return (
        f"summarized {event.messages} messages ({event.tokens_in:,} tokens) into "
        f"{event.tokens_out:,} tokens{calls}"
    )


def message_record(message: Any) -> dict[str, Any]:
    """A message as JSON: its type, text and id."""
    return {"type": message.type, "content": message.content, "id": message.id}


@app.command()
@guarded
def show(
    ctx: typer.Context,
    thread_id: Annotated[str, typer.Argument(metavar="THREAD", help="Thread id.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    db: Annotated[str | None, typer.Option("--db", help="SQLite file for threads.")] = None,
) -> None:
    """Show a thread: its summary and its live messages."""
    from chatbot.store import read_state

    state = _state(ctx)
    if db:
        state.db = db
    if not state.store.thread_exists(thread_id):
        fail(f"no thread {thread_id!r} in {state.settings.db}")
    values = read_state(state.graph, thread_id).values
    summary = values.get("summary", "")
    messages = values.get("messages", [])
    if as_json:
        document = {
            "thread_id": thread_id,
            "summary": summary,
            "messages": [message_record(m) for m in messages],
        }
        out.print_json(json.dumps(document, ensure_ascii=False))
        return
    if summary:
        out.print(Panel(Markdown(summary), title="summary", border_style="dim"))
    for message in messages:
        out.print(f"[bold]{message.type}[/]")
        out.print(Markdown(message.text) if message.text else "[dim](no text)[/]")


def main() -> None:
    """Console-script entry point."""
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    app()


def describe_error(error: BaseException) -> str:
    """One line for an unexpected error, with secrets removed."""
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}"
