"""The ``chatbot`` console script (and ``python -m chatbot``): the Typer app inside what the
process needs around it. Ctrl-C is an interruption from the first import on; stdout is checked
at the end (:func:`chatbot.cli.core.exit_after`); garbage is not collected while the process
starts (:func:`chatbot.cli.core.started`), nor as it leaves."""

from __future__ import annotations

import sys
from typing import NoReturn


def main() -> None:
    """Console-script entry point. Ctrl-C at any moment says ``interrupted`` (exit code 130);
    once the command is over, a Ctrl-C while the process exits is ignored."""
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

        gc.freeze()  # (the interpreter's last collection would walk every object imported)


def _forget_caught_interruption() -> None:
    """CPython notes a KeyboardInterrupt that ends code run by ``eval`` or ``exec`` (a
    namedtuple being made during an import) and, under ``python -m``, kills itself with
    SIGINT at the end (exit code -2, not 130) however it was handled. Running a string clears
    the note."""
    eval("None")


def _ignore_ctrl_c() -> None:
    """From now on Ctrl-C is ignored. A Ctrl-C still pending is delivered as the handler
    changes; it is taken here, where it would otherwise replace the exit on its way."""
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

    # Starting allocates much and frees little: collecting is turned back on once the
    # arguments are parsed (main_options), or the REPL has loaded (chatbot.cli.chat).
    gc.disable()
    from chatbot.cli.core import exit_after, set_up_process

    set_up_process()
    from chatbot.cli.commands import app

    # (`prog_name` also under `python -m chatbot`: completion calls `chatbot`)
    exit_after(lambda: app(prog_name="chatbot"))
