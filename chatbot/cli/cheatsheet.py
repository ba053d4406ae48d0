"""The README's cheat sheet: one line per command, made from the tables that drive the help.

    python -m chatbot.cli.cheatsheet

Slash commands come from :data:`chatbot.terminal.commands.COMMANDS`, in ``/help``'s order;
shell commands from the Typer app, in the order of :data:`chatbot.cli.app.HELP_PANELS`.
"""

from __future__ import annotations

from typing import Any

from chatbot.cli.app import headline


def _row(usage: str, help: str) -> str:
    usage, help = (text.replace("|", "\\|") for text in (usage, help))  # (a cell's bar)
    return f"| `{usage}` | {help} |"


def slash_lines() -> list[str]:
    """One Markdown table row per slash command: usage, then its ``/help`` line."""
    from chatbot.terminal.commands import COMMANDS

    return [_row(item.usage, item.help) for item in COMMANDS.values()]


def _usage(path: str, command: Any) -> str:
    words = [path]
    for param in command.params:
        if param.param_type_name == "argument":
            name = (param.metavar or param.name).upper()
            words.append(name if param.required else f"[{name}]")
    return " ".join(words)


def shell_lines() -> list[str]:
    """One Markdown table row per ``chatbot`` command (and subcommand): its arguments, and
    the headline of its short help."""
    import typer.main

    from chatbot.cli.commands import app

    group = typer.main.get_command(app)
    ctx = group.make_context("chatbot", [], resilient_parsing=True)
    rows = []

    def walk(parent: Any, path: str) -> None:
        for name in parent.list_commands(ctx):
            command = parent.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            subcommands = getattr(command, "list_commands", None)
            if subcommands is None or command.invoke_without_command:
                help = headline(command.get_short_help_str(limit=300))
                rows.append(_row(_usage(f"{path} {name}", command), help))
            if subcommands is not None:
                walk(command, f"{path} {name}")

    walk(group, "chatbot")
    return rows


def cheat_sheet() -> str:
    """The table as the README has it: the slash commands, then the shell commands."""
    head = ["| command | what it does |", "|---|---|"]
    return "\n".join([*head, *slash_lines(), *shell_lines()]) + "\n"


if __name__ == "__main__":
    print(cheat_sheet(), end="")
