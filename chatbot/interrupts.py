"""How the command line takes Ctrl-C, SIGTERM and SIGHUP: whatever it is doing, it stops with
one word, never a traceback, and gives back what it holds (a thread's lease).

- **Ctrl-C** raises KeyboardInterrupt, as Python's own handler does, and is *noted*
  (:func:`pressed`): libraries turn a KeyboardInterrupt raised inside them into errors of their
  own (pydantic-core's ``SchemaError`` while a model class is built at start-up, Python's
  ``RuntimeError`` from ``__set_name__``, ormsgpack's ``ValueError('ext_hook failed')`` while a
  checkpoint is decoded), and an error that follows a noted Ctrl-C is reported as the
  interruption it is (exit code 130). While a turn runs, asyncio's own handler cancels the
  turn's task instead (:func:`during_turn`).
  A KeyboardInterrupt that C code drops (it can only print it as "Exception ignored") is
  delivered again, where Python code can raise it.
- **SIGTERM** and **SIGHUP** (a closed terminal) raise :class:`Terminated`, a ``SystemExit``
  with code 128 + the signal's number, so every ``finally`` and ``with`` block runs; while a
  turn runs they cancel it first, as Ctrl-C does. A signal set to be ignored (``nohup``) stays
  ignored.

:func:`install` sets this up for the process (the entry point calls it first). A signal before
that (while Python itself starts and imports the entry point, a few hundredths of a second)
ends the process as it ends any Python program.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sys import UnraisableHookArgs

_pressed = False
_ENDING = ("SIGTERM", "SIGHUP")


class Terminated(SystemExit):
    """The process was asked to end by a signal (SIGTERM, SIGHUP): exit code 128 + its number."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _pressed
    _pressed = True
    signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt, as Python's own does


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


def _unraisable(
    previous: Callable[[UnraisableHookArgs], object], unraisable: UnraisableHookArgs
) -> None:
    """A KeyboardInterrupt that C code could not raise (it calls back into Python, where the
    handler ran, and drops what it raised: "Exception ignored in: 'cls_name'") is delivered
    again, where Python can raise it; anything else goes to the hook before."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
        return
    previous(unraisable)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _ending_signals() -> list[signal.Signals]:
    return [getattr(signal, name) for name in _ENDING if hasattr(signal, name)]


def install() -> None:
    """The command line's handlers (see the module): Ctrl-C noted, SIGTERM and SIGHUP ending
    the process through :class:`Terminated`. Only those at Python's defaults are replaced."""
    if not _in_main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
        sys.unraisablehook = functools.partial(_unraisable, sys.unraisablehook)
    for ending in _ending_signals():
        if signal.getsignal(ending) is signal.SIG_DFL:
            signal.signal(ending, _terminate)


def pressed() -> bool:
    """True when Ctrl-C was pressed under :func:`install`'s handler (or :func:`decoding`)
    and not :func:`forgotten <forget>` since."""
    return _pressed


def forget() -> None:
    """What Ctrl-C interrupted is over and the program goes on (the REPL reads its next
    line): an error from now on is not the interruption's."""
    global _pressed
    _pressed = False


@contextmanager
def during_turn(stop: Callable[[int], None]) -> Iterator[None]:
    """While a turn runs on an event loop: Python's own Ctrl-C handler, which asyncio replaces
    with one that cancels the turn's task, and ``stop(signum)`` for SIGTERM and SIGHUP where
    :func:`install` set them up (it cancels the turn, then the process ends). The handlers
    before are back afterwards."""
    if not _in_main_thread():
        yield
        return
    saved: dict[int, object] = {}
    if signal.getsignal(signal.SIGINT) is _on_sigint:
        saved[signal.SIGINT] = _on_sigint
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for ending in _ending_signals():
        if signal.getsignal(ending) is _terminate:
            saved[ending] = _terminate
            signal.signal(ending, lambda signum, frame: stop(signum))
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]


@contextmanager
def decoding() -> Iterator[None]:
    """Decode under this: an error that follows a Ctrl-C is raised as KeyboardInterrupt.

    Only in the main thread, and only where Python's own handler, or :func:`install`'s, is in
    place (a turn's event loop, which turns Ctrl-C into cancelling, keeps its own)."""
    global _pressed
    before = signal.getsignal(signal.SIGINT)
    if not _in_main_thread() or (
        before is not signal.default_int_handler and before is not _on_sigint
    ):
        yield
        return
    _pressed = False
    if before is not _on_sigint:  # (already in place: no need to set it, costly, and back)
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    except Exception as error:
        if _pressed:
            raise KeyboardInterrupt from error
        raise
    finally:
        if before is not _on_sigint:
            signal.signal(signal.SIGINT, before)


_AT_EXIT: list[Callable[[], object]] = []
"""chatbot's own exit handlers, newest last (:func:`at_exit`)."""


def at_exit(handler: Callable[..., object], *args: object) -> None:
    """Run ``handler(*args)`` when the process ends: at Python's normal exit (``atexit``), or
    when the REPL leaves without the interpreter's teardown (:func:`run_exit_handlers`)."""
    call = functools.partial(handler, *args)
    atexit.register(call)
    _AT_EXIT.append(call)


def run_exit_handlers() -> None:
    """Do what leaving needs before ``os._exit``: chatbot's exit handlers, newest first (the
    turns' event loop closed, the call log settled), LangChain's tracers flushed if any ran,
    and logging shut down."""
    while _AT_EXIT:
        call = _AT_EXIT.pop()
        atexit.unregister(call)
        with contextlib.suppress(Exception):  # (leaving goes on whatever one handler does)
            call()
    # (a module still being imported by the loading thread has no tracers that ran yet)
    wait = getattr(
        sys.modules.get("langchain_core.tracers.langchain"), "wait_for_all_tracers", None
    )
    if wait is not None:
        wait()
    if "logging" in sys.modules:
        import logging

        logging.shutdown()
