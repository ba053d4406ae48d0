"""The ``chatbot`` console script (and ``python -m chatbot``): the Typer app
(:mod:`chatbot.cli.commands`), inside what the process needs around it. Ctrl-C is an
interruption from the first import on; stdout is put behind :mod:`chatbot.cli.stdout` and
flushed and checked at the end (:func:`chatbot.cli.core.exit_after`); garbage is not collected
while the process starts (see :func:`chatbot.cli.core.started`), nor as it leaves."""

from __future__ import annotations

import sys
from typing import NoReturn


def main() -> None:
    """Console-script entry point: the Typer app (:mod:`chatbot.cli.commands`). Ctrl-C at any
    moment says ``interrupted`` (exit code 130), and once the command is over, a Ctrl-C while
    the process exits is ignored."""
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
        # walk every object the imports made.
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

    # Starting allocates much and frees little: collecting garbage meanwhile only costs time.
    # The REPL collects again once its loading has ended (chatbot.cli.chat), the other
    # commands once their arguments are parsed (chatbot.cli.commands.main_options).
    gc.disable()
    from chatbot.cli.core import exit_after, set_up_process

    set_up_process()
    from chatbot.cli.commands import app

    # (`prog_name` also under `python -m chatbot`: completion calls `chatbot`)
    exit_after(lambda: app(prog_name="chatbot"))
