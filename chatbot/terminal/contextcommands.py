"""The slash commands about what the model is sent, and which model: /context, /tokens,
/compact, /model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from chatbot.config.settings import SettingsError
from chatbot.engine.models import MissingCredentials
from chatbot.history.summary import compact_refusal, summary_savings
from chatbot.memory.policy import TRIGGER_OFF, SummaryPolicy
from chatbot.memory.pricing import cost_rows, snapshot_cost
from chatbot.plural import counted
from chatbot.sanitize import sanitize
from chatbot.terminal import render
from chatbot.terminal.registry import CommandError, command, no_argument

if TYPE_CHECKING:
    from chatbot.terminal.repl import Repl


@command(
    "context",
    "/context",
    "what fills the context window; the trigger, free space, the next fold",
)
def _context(repl: Repl, arg: str) -> None:
    no_argument("context", arg)
    snapshot = repl.backend.current(repl.thread_id)
    repl.measure(snapshot)  # (the status line agrees with it)
    tokenizer = repl.settings.tokenizer if repl.settings else "auto"
    window = repl.backend.context_window(
        snapshot, repl.context, tokenizer, thread_id=repl.thread_id
    )
    repl.console.print(render.context_view(window, repl.thread_id))


@command("tokens", "/tokens", "context size now, the trigger, tokens saved by summaries, cost")
def _tokens(repl: Repl, arg: str) -> None:
    no_argument("tokens", arg)
    snapshot = repl.backend.current(repl.thread_id)
    tokens = repl.measure(snapshot)
    counter = repl.counter()
    tokenizer = repl.settings.tokenizer if repl.settings else "auto"
    sent = repl.backend.context_window(
        snapshot, repl.context, tokenizer, thread_id=repl.thread_id
    ).sent  # (as /context)
    # (from the summary's own record; the history only for a thread summarized before those)
    held = summary_savings(snapshot, lambda: repl.backend.history(repl.thread_id), counter)
    saved = max(0, held.folded - sent.summary_cost) if held.messages else 0
    run = repl.run_settings()  # what the graph resolves for this session's next run
    run_policy = run.policy if run else None
    trigger = describe_trigger(run_policy) if run_policy else "set by the server's settings"
    keep = "set by the server's settings"
    if run_policy is not None:
        first = ", and the first user message" if run_policy.keep_first_message else ""
        keep = f"{run_policy.keep}{first}"
    threshold = run_policy.trigger_tokens() if run_policy else None
    scale = counter.scale(snapshot.messages) if snapshot else 1.0
    counted_with = f"{counter.name} tokenizer"
    if scale != 1.0:
        counted_with += f", x{scale:.2f} from the provider's reported usage"
    in_messages = counted(len(snapshot.messages) if snapshot else 0, "message")
    rows = [("context now", f"{tokens:,} tokens in {in_messages}")]
    if run_policy is not None and run_policy.max_input_tokens:
        rows.append(("model input", f"{run_policy.max_input_tokens:,} tokens at most"))
    if run_policy is not None and not run_policy.automatic:
        trigger = "off (only /compact and a full context fold)"
    rows += [
        ("trigger", trigger + (f" ({threshold:,} tokens)" if threshold else "")),
        ("keep", keep),
        ("summary", f"{sent.summary:,} tokens"),
        ("saved", f"{saved:,} tokens per call ({held.messages} messages folded)"),
    ]
    # (the cost, from the state's usage record)
    rows += [(name, escape(value)) for name, value in cost_rows(snapshot_cost(snapshot))]
    rows.append(("counted with", counted_with))
    repl.console.print(render.name_table(rows))


@command(
    "compact",
    "/compact [FOCUS]",
    "fold older messages into the summary now; FOCUS: what the summary should keep",
    writes=True,
)
def _compact(repl: Repl, arg: str) -> None:
    refusal = compact_refusal(repl.backend.current(repl.thread_id))
    if refusal:
        raise CommandError(refusal)
    repl.stream(
        repl.backend.compact(repl.thread_id, arg, repl.context),
        waiting_for="folding older messages into the summary…",
    )


def describe_trigger(run_policy: SummaryPolicy) -> str:
    """The trigger as it is written in settings: ``tokens:12000,messages:40`` or ``off``."""
    return ",".join(str(limit) for limit in run_policy.trigger) or TRIGGER_OFF


def check_model(repl: Repl, name: str) -> None:
    """Refuse a model a run could not use here, by the graph's own resolver."""
    if any(character.isspace() for character in name):  # (a paste's line break too)
        raise CommandError(f"{name!r} is not a model name")
    try:
        repl.backend.run_settings({**repl.context, "chat_model": name})
    except MissingCredentials as error:
        raise CommandError(str(error)) from None
    except SettingsError as error:
        raise CommandError(f"cannot use {name!r}: {error}") from None
    _warn_unlisted(repl, name)


def _warn_unlisted(repl: Repl, name: str) -> None:
    """Say when the endpoint's cached model list lacks ``name``, with the closest names; the
    model is used all the same (a list can be partial)."""
    repl.ready()  # (loaded already: the run's settings were asked for)
    if repl.remote or repl.settings is None:
        return
    from chatbot.config.sources import endpoint_of, without_password
    from chatbot.engine.modellist import unlisted

    endpoint = endpoint_of(repl.settings.openai_base_url)
    closest = unlisted(name, endpoint)
    if closest is None:
        return
    meant = f"; did you mean {' or '.join(closest)}?" if closest else ""
    repl.print(
        f"[yellow]warning:[/] {escape(sanitize(name))} is not in the model list of "
        f"{escape(without_password(endpoint))} (/models): used anyway, as a list may be "
        f"partial{escape(meant)}"
    )


@command("model", "/model [NAME]", "show or switch the chat model until you leave")
def _model(repl: Repl, arg: str) -> None:
    if not arg:
        repl.ready()  # the model's name is known once the models are loaded
        shown = repl.model_name or "the server's (its CHATBOT_MODEL)"
        repl.say(f"chat model: {shown}")
        return
    check_model(repl, arg)
    repl.context["chat_model"] = arg
    repl.model_name = arg
    repl.measure(repl.backend.current(repl.thread_id))  # counted as the new model counts
    where = " (on the server)" if repl.remote else ""
    repl.say(f"chat model is now {arg} for this session{where}")
