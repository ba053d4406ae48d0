"""The slash commands that look beyond the thread: /search (messages in every thread) and
/models (the models the endpoint serves)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatbot.plural import counted
from chatbot.terminal import listings
from chatbot.terminal.registry import CommandError, command, no_argument

if TYPE_CHECKING:
    from chatbot.terminal.repl import Repl


@command(
    "search",
    "/search TEXT",
    "find messages in every thread, folded ones too, newest first",
    remote=False,
)
def _search(repl: Repl, arg: str) -> None:
    from chatbot.store.search import SearchError

    if not arg:
        raise CommandError('give the text to find: /search TEXT (all words; "a phrase")')
    limit = 20
    try:
        with listings.indexing_bar(repl.console) as progress:
            hits = repl.backend.search(arg, limit=limit + 1, progress=progress)
    except SearchError as error:
        raise CommandError(str(error)) from None
    if not hits:
        shown = arg if len(arg) <= 80 else arg[:79] + "…"  # (not a pasted page back)
        repl.say(f"nothing found for {shown!r}", "dim")
        return
    repl.print(listings.hits_view(hits[:limit]))
    more = ""
    if len(hits) > limit:
        more = f"the newest {limit} shown (chatbot search --limit N for more); "
    repl.say(f"{more}/thread THREAD, then /show CHECKPOINT or /fork CHECKPOINT, opens one", "dim")


@command("models", "/models", "list the models the endpoint serves (Tab after /model completes)")
def _models(repl: Repl, arg: str) -> None:
    no_argument("models", arg)
    if repl.remote:
        raise CommandError(
            f"/models lists this machine's endpoint, but on a server /model picks from the "
            f"server's own ({repl.backend.local_only_note})"
        )
    repl.ready()  # the settings: the endpoint, its key and timeout
    assert repl.settings is not None
    from chatbot.engine.modellist import list_models

    listing = list_models(repl.settings)  # cached: /model's Tab completion uses it
    for model in listing:
        current = "  (current)" if model.id == repl.model_name else ""
        repl.say(f"{model.id}{current}")
    repl.say(f"{counted(len(listing), 'model')} · /model NAME switches (Tab completes)", "dim")
