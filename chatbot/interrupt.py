"""Stopping a turn with Ctrl-C: at once for the user, cleanly for the thread.

LangGraph runs a node in a worker thread, and Ctrl-C only interrupts the main thread, which
would then wait for the node (and its model call) to finish — and the finished reply would be
saved although the user stopped it. Here a turn's events are relayed from a worker thread, so
the main thread gets Ctrl-C at once, and a callback makes the turn's model calls fail at their
next token (or at their end), so nothing arrives after Ctrl-C: the turn stays unfinished and
``/retry`` regenerates it.
"""

from __future__ import annotations

import contextlib
import contextvars
import queue
import signal
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tracers.context import register_configure_hook

from chatbot.session import Event


class ReplyStopped(Exception):
    """Ends a model call that is still streaming after the user pressed Ctrl-C."""


class StopOnInterrupt(BaseCallbackHandler):
    """Makes the model calls of a turn give up at their next token once ``stop`` is set.

    LangGraph runs a node in a worker thread while the main thread relays its stream, and
    Ctrl-C only interrupts the main thread, which then waits for the node to finish: without
    this the whole reply would still be generated (and saved) after Ctrl-C. With it the
    model call fails at once, the turn stays unfinished and ``/retry`` regenerates it.
    """

    raise_error = True

    def __init__(self) -> None:
        self.stop = threading.Event()

    def _check(self) -> None:
        if self.stop.is_set():
            raise ReplyStopped("the reply was stopped with Ctrl-C")

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        self._check()

    def on_llm_start(self, *args: Any, **kwargs: Any) -> None:
        self._check()

    def on_llm_new_token(self, *args: Any, **kwargs: Any) -> None:
        self._check()

    def on_llm_end(self, *args: Any, **kwargs: Any) -> None:
        self._check()  # a reply that arrives whole after Ctrl-C is not saved either


_turn_stopper: ContextVar[StopOnInterrupt | None] = ContextVar("chatbot_turn_stopper", default=None)
register_configure_hook(_turn_stopper, inheritable=True)  # every model call of the turn sees it


class Relay:
    """Runs a turn's events in a worker thread and hands them to the caller's thread.

    The caller (the REPL, on the main thread) waits with a short timeout, so Ctrl-C reaches it
    at once even while the model has not sent its first token; the stopped turn then ends in
    the background, at its next token, and :meth:`finish` waits for that before the next turn.
    """

    _DONE = object()

    def __init__(
        self, events: Iterator[Event], context: contextvars.Context, stopper: StopOnInterrupt
    ) -> None:
        self._events = events
        self._stopper = stopper
        self._queue: queue.Queue[Any] = queue.Queue()
        self.stopped = threading.Event()
        self._ended = threading.Event()  # not Thread.is_alive(): a Ctrl-C in join() fools it
        self._thread = threading.Thread(
            target=context.run, args=(self._pump,), name="chatbot-turn", daemon=True
        )
        self._thread.start()

    def _pump(self) -> None:
        try:
            for event in self._events:
                self._queue.put(event)
                if self.stopped.is_set():
                    break
        except BaseException as error:  # handed to the caller's thread
            self._queue.put(error)
        finally:
            close = getattr(self._events, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()
            self._queue.put(self._DONE)
            self._ended.set()

    def __iter__(self) -> Iterator[Event]:
        while True:
            try:
                item = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is self._DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def stop(self) -> None:
        """Ask the turn to end; its model calls give up at their next callback."""
        self._stopper.stop.set()
        self.stopped.set()

    @property
    def running(self) -> bool:
        """True until the turn's events have ended (its model call may still be waiting)."""
        return not self._ended.is_set()

    def finish(self, timeout: float | None = None) -> bool:
        """Wait for the turn to end; True if it has. Another Ctrl-C stops the wait (False)."""
        try:
            return self._ended.wait(timeout)
        except KeyboardInterrupt:
            return self._ended.is_set()


def _stop_on_sigint(stopper: StopOnInterrupt) -> Any:
    """While a turn streams, Ctrl-C also tells the turn's model calls to stop.

    Returns the handler to put back, or ``None`` when nothing was installed (not the main
    thread, or SIGINT is not Python's default handler).
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        return None

    def interrupt(signum: int, frame: Any) -> None:
        stopper.stop.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    return previous


@contextlib.contextmanager
def interruptible(events: Iterator[Event]) -> Iterator[Relay]:
    """Run a turn's events in a worker thread that Ctrl-C can stop; iterate the yielded relay.

    On ``KeyboardInterrupt`` call ``relay.stop()``; the turn ends at its next model callback.
    """
    stopper = StopOnInterrupt()
    token = _turn_stopper.set(stopper)
    relay = Relay(events, contextvars.copy_context(), stopper)  # the worker sees the stopper
    _turn_stopper.reset(token)
    previous_handler = _stop_on_sigint(stopper)
    try:
        yield relay
    finally:
        if previous_handler is not None:
            signal.signal(signal.SIGINT, previous_handler)
