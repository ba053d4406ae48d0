"""The slash commands of a thread's system prompt: /system (typed) and /role (a saved one)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatbot.terminal import render
from chatbot.terminal.registry import CommandError, command

if TYPE_CHECKING:
    from chatbot.config.roles import PromptChoice
    from chatbot.history.snapshots import Snapshot
    from chatbot.terminal.repl import Repl


def _effective_prompt(repl: Repl) -> tuple[Snapshot | None, PromptChoice]:
    """The thread's snapshot and the system prompt its next run sends (with its source)."""
    from chatbot.config.roles import effective_prompt

    snapshot = repl.backend.current(repl.thread_id)
    default = "" if repl.remote or repl.settings is None else repl.settings.system_prompt
    choice = effective_prompt(
        str(repl.context.get("system_prompt") or ""),
        snapshot.system_prompt if snapshot else "",
        snapshot.system_role if snapshot else "",
        default,
    )
    return snapshot, choice


def _set_prompt(repl: Repl, prompt: str, role: str = "") -> bool:
    """Set the thread's system prompt (empty: remove it) if it fits; True when it changed."""
    if prompt:
        from chatbot.threads.attachments import check_system_prompt

        repl.ready()  # (the model's name and input size are known once loaded)
        check_system_prompt(prompt, repl.run_settings(prompt), repl.model_name)
    changed = repl.backend.set_system_prompt(repl.thread_id, prompt, role)
    repl.measure(repl.backend.current(repl.thread_id))
    return changed


@command(
    "system",
    "/system [TEXT|clear]",
    "show or set this thread's system prompt; clear: remove it",
    writes=True,
)
def _system(repl: Repl, arg: str) -> None:
    if not arg:
        repl.ready(reading=True)
        _, choice = _effective_prompt(repl)
        if not choice.text:
            server = " (the server's CHATBOT_SYSTEM_PROMPT applies, if it sets one)"
            repl.say(
                f"no system prompt{server if repl.remote else ''}: /system TEXT sets one for "
                "this thread, /role NAME uses a saved one",
                "dim",
            )
            return
        repl.say(f"system prompt, from {choice.source}:", "dim")
        repl.print(render.plain(choice.text))
        return
    if arg.lower() == "clear":
        if not _set_prompt(repl, ""):
            repl.say("this thread has no system prompt of its own", "dim")
            return
        _, choice = _effective_prompt(repl)
        after = f"; {choice.source} applies" if choice.text else ""
        repl.say(f"removed the system prompt of thread {repl.thread_id}{after}")
        return
    if not _set_prompt(repl, arg):
        repl.say("unchanged: this thread already has that system prompt", "dim")
        return
    repl.say(f"system prompt set for thread {repl.thread_id} (/system clear removes it)")


@command("role", "/role [NAME]", "use a saved prompt (a role) as this thread's system prompt")
def _role(repl: Repl, arg: str) -> None:
    from chatbot.config.roles import RoleError, how_to_add, list_roles, load_role, roles_dir

    if not arg:
        roles = list_roles()
        if not roles:
            repl.say(f"no roles yet: {how_to_add()}, then /role NAME", "dim")
            return
        rows = [
            (render.plain(role.name), render.plain(render.preview(role.first_line)))
            for role in roles
        ]
        repl.console.print(render.name_table(rows))
        repl.say(f"roles live in {roles_dir()}: /role NAME uses one", "dim")
        return
    try:
        role = load_role(arg)
    except RoleError as error:
        raise CommandError(str(error)) from None
    if not _set_prompt(repl, role.prompt, role.name):
        repl.say(f"unchanged: this thread already uses role {role.name}", "dim")
        return
    repl.say(f"system prompt set from role {role.name} for thread {repl.thread_id}")
