"""Ctrl-C while checkpoints are decoded comes out as the KeyboardInterrupt it is.

LangGraph decodes checkpoints with ormsgpack, which turns any exception raised in its extension
hook (where most of the decoding runs), a KeyboardInterrupt too, into ``ValueError('ext_hook
failed')``: Ctrl-C while a long history was read came out as that error (exit code 1, 13 of 20
tries), not as "interrupted". :func:`decoding` notes a Ctrl-C pressed during a decode and
raises KeyboardInterrupt in place of the error it left.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_pressed = False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _pressed
    _pressed = True
    signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt, as Python's own does


@contextmanager
def decoding() -> Iterator[None]:
    """Decode under this: an error that follows a Ctrl-C is raised as KeyboardInterrupt.

    Only in the main thread, and only where Python's own handler is in place (a turn's event
    loop, which turns Ctrl-C into cancelling, keeps its own)."""
    global _pressed
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    _pressed = False
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    except Exception as error:
        if _pressed:
            raise KeyboardInterrupt from error
        raise
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
