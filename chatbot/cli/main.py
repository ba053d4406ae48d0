"""The commonest invocations, run without importing Typer: the entry point.

Importing Typer and building its parameters (Typer 0.29 makes a pydantic ``TypeAdapter`` for
every option that is not a flag, which imports pydantic) costs a tenth of a second or more, as
much as the REPL takes to show its prompt and several times what ``threads --json`` needs. So
:func:`main` reads the command line itself when it is one of these, in their plain forms::

    chatbot [--db X] [--url X] [--model X] [--env-file X] [--thread X | --new]
    chatbot [GLOBAL] chat [--thread X] [--new] [--db X] [--url X]
    chatbot [GLOBAL] threads [--json] [--db X] [--url X]
    chatbot [GLOBAL] show THREAD [--checkpoint X] [--json] [--db X] [--url X]
    chatbot [GLOBAL] history THREAD [--limit N] [--all] [--json] [--db X] [--url X]
    chatbot [GLOBAL] search TEXT [--thread X] [--limit N] [--json] [--db X] [--url X]

(long options as ``--name VALUE`` or ``--name=VALUE``; ``-t``, ``-m``, ``-c`` and ``-n`` as
``-t VALUE``; ``-a`` alone) and runs the same code the Typer commands run
(:func:`chatbot.cli.chat.run_chat`; :func:`chatbot.cli.read.run_threads`, ``run_history``,
``run_show``, ``run_search``). Anything else (help, completion, another command, another spelling,
a usage error) goes to the Typer app, which is the reference: a test holds every form above to the
Typer app's output.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, NamedTuple, NoReturn

_GLOBAL_VALUES = {
    "--db": "db",
    "--url": "url",
    "--model": "model",
    "-m": "model",
    "--env-file": "env_file",
    "--thread": "thread",
    "-t": "thread",
}
_GLOBAL_FLAGS = {"--new": "new"}
_COMMANDS: dict[str, tuple[dict[str, str], dict[str, str], int]] = {
    # command: (options with a value, flags, positional arguments)
    "chat": (
        {"--thread": "thread", "-t": "thread", "--db": "db", "--url": "url"},
        {"--new": "new"},
        0,
    ),
    "threads": ({"--db": "db", "--url": "url"}, {"--json": "as_json"}, 0),
    "show": (
        {"--checkpoint": "checkpoint", "-c": "checkpoint", "--db": "db", "--url": "url"},
        {"--json": "as_json"},
        1,
    ),
    "history": (
        {"--limit": "limit", "-n": "limit", "--db": "db", "--url": "url"},
        {"--all": "every", "-a": "every", "--json": "as_json"},
        1,
    ),
    "search": (
        {"--thread": "thread", "-t": "thread", "--limit": "limit", "-n": "limit"}
        | {"--db": "db", "--url": "url"},
        {"--json": "as_json"},
        1,
    ),
}


class Invocation(NamedTuple):
    """A command line this module runs: the global options, the command and its own."""

    options: dict[str, Any]
    command: str | None
    arguments: list[str]
    command_options: dict[str, Any]


def _take(
    args: list[str], values: dict[str, str], flags: dict[str, str], into: dict[str, Any]
) -> bool:
    """Read one option from the front of ``args`` into ``into``; False if it is not one."""
    word = args[0]
    name, has_value, value = word.partition("=")
    if name in flags and not has_value:
        into[flags[name]] = True
        del args[0]
        return True
    if name not in values or (has_value and not name.startswith("--")):
        return False
    if not has_value:
        if len(args) < 2 or args[1].startswith("-"):
            return False  # (Typer's business: a missing value, or one that looks like an option)
        value = args[1]
    if not value.strip():
        return False  # (Typer's business too: a blank value, which it refuses)
    if not has_value:
        del args[0]
    del args[0]
    into[values[name]] = value
    return True


def parse(argv: Sequence[str]) -> Invocation | None:
    """The invocation ``argv`` (the arguments after ``chatbot``) asks for, or None when the
    Typer app must read it."""
    args = list(argv)
    options: dict[str, Any] = {}
    while args and args[0].startswith("-"):
        if not _take(args, _GLOBAL_VALUES, _GLOBAL_FLAGS, options):
            return None
    if not args:
        return Invocation(options, None, [], {})
    command = args.pop(0)
    if command not in _COMMANDS or options.keys() & {"thread", "new"}:
        return None
    values, flags, positional = _COMMANDS[command]
    arguments: list[str] = []
    own: dict[str, Any] = {}
    while args:
        if args[0].startswith("-"):
            if not _take(args, values, flags, own):
                return None
        elif len(arguments) < positional:
            arguments.append(args.pop(0))
        else:
            return None
    if len(arguments) < positional:
        return None
    limit = own.get("limit", "50")
    if not (limit.isascii() and limit.isdigit() and len(limit) <= 18 and int(limit) >= 1):
        return None  # (Typer's business: a limit that is no number of at least 1, or huge)
    return Invocation(options, command, arguments, own)


def run(invocation: Invocation) -> int:
    """Run ``invocation`` as the Typer app would; its exit code."""
    from chatbot.cli.core import AppState, configure_logging, exit_code, leading_note, valid_text
    from chatbot.store.base import is_postgres_url

    options, own = invocation.options, invocation.command_options
    state = AppState(
        env_file=options.get("env_file") or ".env",
        db=options.get("db"),
        model=options.get("model"),
        url=options.get("url"),
    )
    state.narrow(own.get("db"), own.get("url"))
    try:
        leading_note(state)
        if invocation.command == "threads":
            if state.remote or is_postgres_url(state.places.db):
                configure_logging()  # (the client libraries log; sqlite3 and the store never do)
            from chatbot.cli.read import run_threads

            run_threads(state, bool(own.get("as_json")))
            return 0
        if invocation.command == "history":
            thread_id = valid_text(invocation.arguments[0])
            from chatbot.cli.read import run_history

            every, as_json = bool(own.get("every")), bool(own.get("as_json"))
            run_history(state, thread_id, int(own.get("limit", 50)), every, as_json)
            return 0
        if invocation.command == "show":
            thread_id = valid_text(invocation.arguments[0])
            from chatbot.cli.read import run_show

            run_show(state, thread_id, own.get("checkpoint"), bool(own.get("as_json")))
            return 0
        if invocation.command == "search":
            from chatbot.cli.read import run_search

            thread = own.get("thread")
            limit, as_json = int(own.get("limit", 20)), bool(own.get("as_json"))
            run_search(state, invocation.arguments[0], thread, limit, as_json)
            return 0
        thread = own.get("thread", options.get("thread"))
        from chatbot.cli.chat import run_chat

        return run_chat(
            state,
            None if thread is None else valid_text(thread),
            bool(own.get("new", options.get("new", False))),
        )
    except BaseException as error:
        code = exit_code(error)
        if code is None:
            raise
        return code
    finally:
        state.close()


def main() -> None:
    """Console-script entry point: the commonest invocations here, the rest in the Typer app
    (:func:`chatbot.cli.commands.main`). Ctrl-C at any moment says ``interrupted`` (exit code 130),
    and once the command is over, a Ctrl-C while the process exits is ignored."""
    try:
        from chatbot import interrupts

        interrupts.install()  # first: Ctrl-C while the rest is imported is an interruption too
        _main()
    except KeyboardInterrupt:  # (at start-up, or again before the first was said)
        _leave_interrupted()
    finally:
        _ignore_ctrl_c()
        _forget_caught_interruption()
        import gc

        # Leaving: nothing needs collecting now, and the interpreter's last collection would
        # walk every object the imports made (a fifth of `ask`'s CPU, a quarter of `threads`'s).
        gc.freeze()


def _forget_caught_interruption() -> None:
    """CPython notes a KeyboardInterrupt that ends code run from a string by ``eval`` or
    ``exec`` (a namedtuple or a dataclass being made while a module is imported) and never
    clears the note, however the program handles the interruption: under ``python -m
    chatbot`` the interpreter then kills itself with SIGINT as it finishes (exit code -2, as
    if nothing had caught it, instead of 130). Running a string clears the note (CPython's
    ``run_eval_code_obj`` starts by clearing it), and this one is the last to run."""
    eval("None")


def _ignore_ctrl_c() -> None:
    """From now on Ctrl-C is ignored. Python runs a Ctrl-C that is still pending as the
    handler changes (one that C code dropped and :mod:`chatbot.interrupts` delivered again)
    first: its KeyboardInterrupt would replace the exit on its way (exit code -2, not 130 or
    0), so it is taken here, where what it interrupts is already over."""
    while True:
        try:
            import signal

            signal.signal(signal.SIGINT, signal.SIG_IGN)
            return
        except KeyboardInterrupt:
            continue


def _leave_interrupted() -> NoReturn:
    _ignore_ctrl_c()
    import contextlib

    clicore = sys.modules.get("chatbot.cli.core")  # (it may be half imported, or not at all)
    said = getattr(clicore, "interruption_said", None)
    if not (callable(said) and said()):
        with contextlib.suppress(Exception):
            sys.stderr.write("interrupted\n")
    sys.exit(130)


def _main() -> None:
    import gc
    import os

    # Starting allocates much and frees little: collecting garbage meanwhile only costs time.
    # The REPL collects again once its loading has ended (cli_chat), the Typer app's commands
    # once their arguments are parsed. The reading commands here never do: they are one short
    # process whose cyclic garbage is a few hundred objects (about 900 after reading a history
    # of 6,050 checkpoints; the same peak memory either way), and each collection walks every
    # object their imports made: `show` took a tenth longer with it.
    gc.disable()
    invocation = None if "_CHATBOT_COMPLETE" in os.environ else parse(sys.argv[1:])
    if invocation is None:
        from chatbot.cli.commands import main as typer_main

        typer_main()
        return
    from chatbot.cli.core import exit_after, set_up_process

    # (`threads` on a SQLite file never logs: it sets logging up only for a server, in run)
    set_up_process(logging_too=invocation.command != "threads")
    exit_after(lambda: run(invocation))  # (stdout flushed and checked, as after the Typer app)
