"""Running a turn: one asyncio event loop for the session, each turn a task that Ctrl-C cancels.

Cancelling the task cancels the graph's ``astream`` and with it the model's HTTP request, whose
connection closes at once: the provider stops generating, nothing arrives late to be saved,
and no thread is left running. The user's message was checkpointed before the model was
called, so the thread stays usable and ``/retry`` regenerates the reply.

SIGTERM and SIGHUP (a closed terminal) cancel the turn the same way, so that it gives its
thread's lease back, then end the process (:mod:`chatbot.interrupts`).

The REPL and ``chatbot ask`` both run turns here; what they show is a :class:`Display`. After
each turn the call log's lines are written (:func:`chatbot.engine.calllog.settle`), and what could
not be written is told once, in the outcome's ``warnings``.

The graph runs only awaited. Blocking callers (scripts, tests, benchmarks) run it on the same
loop with :func:`blocking` (a coroutine, such as ``graph.ainvoke(...)``) or
:func:`blocking_iter` (an async iterator, such as a turn's events): each thread has its own
loop, the main thread's being the session's.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import AsyncIterable, AsyncIterator, Coroutine, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from chatbot import interrupts

if TYPE_CHECKING:
    from chatbot.threads.events import Event

TICK_SECONDS = 1 / 12
"""How often a display is asked to redraw (spinners, the reply so far)."""


class Display(Protocol):
    """What a turn looks like while it runs (the runner calls it from the event loop)."""

    def show(self, event: Event) -> None:
        """An event arrived: remember it (cheaply; drawing happens in :meth:`tick`)."""

    def tick(self) -> None:
        """Time to redraw."""


@dataclass(frozen=True)
class TurnOutcome:
    """How a turn ended: normally, stopped with Ctrl-C, or with an error."""

    interrupted: bool = False
    error: Exception | None = None
    warnings: tuple[str, ...] = ()
    """Problems beside the turn, each told once (call-log lines that could not be written)."""


_sessions = threading.local()
T = TypeVar("T")


def session_runner() -> TurnRunner:
    """This thread's turn runner (the main thread's: the session's): one event loop for the
    whole session, because the model clients keep pooled connections that belong to the loop
    they were opened in. Closed at exit."""
    runner: TurnRunner | None = getattr(_sessions, "runner", None)
    if runner is None:
        runner = _sessions.runner = TurnRunner()
        interrupts.at_exit(runner.close)
    return runner


def blocking(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` (``graph.ainvoke(...)``, say) to its end on this thread's session loop.
    Ctrl-C cancels it (closing a model's HTTP request) and raises ``KeyboardInterrupt``."""
    return session_runner().call(work)


def blocking_iter(items: AsyncIterator[T]) -> Iterator[T]:
    """The items of an async iterator, each awaited on this thread's session loop (a turn's
    events, ``graph.astream(...)``'s parts); closed however the iteration ends."""
    runner = session_runner()

    async def step() -> T:
        return await items.__anext__()

    try:
        while True:
            try:
                item = runner.call(step())
            except StopAsyncIteration:
                return
            yield item
    finally:
        aclose = getattr(items, "aclose", None)
        if aclose is not None:

            async def close() -> None:
                await aclose()

            runner.call(close())


class TurnRunner:
    """Runs turns on one event loop kept for the whole session (the model clients' pooled
    connections belong to it). Close it when the session ends."""

    def __init__(self, tick_seconds: float = TICK_SECONDS) -> None:
        self.tick_seconds = tick_seconds
        self._runner: asyncio.Runner | None = None
        self._task: asyncio.Task[None] | None = None

    def loop(self) -> asyncio.Runner:
        """The session's event loop (made at first use)."""
        if self._runner is None:
            self._runner = asyncio.Runner()
        return self._runner

    def call(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` to its end on the session's loop. A ``KeyboardInterrupt`` (Ctrl-C, or
        raised inside a task) leaves nothing pending on the loop behind it."""
        try:
            return self._on_loop(work)
        except KeyboardInterrupt:
            self._unwind()
            raise

    def _on_loop(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` as the loop's main task; where Python's own Ctrl-C handler is in place
        (the main thread), a first Ctrl-C cancels the task and raises ``KeyboardInterrupt``
        once it has unwound (:class:`_CtrlC`, as asyncio.Runner's own handler does)."""
        runner = self.loop()
        if threading.current_thread() is not threading.main_thread() or (
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        ):
            return runner.run(work)
        handler = _CtrlC()

        async def main() -> T:
            handler.task = asyncio.current_task()
            if handler.pressed:  # (Ctrl-C as the task started)
                work.close()
                raise asyncio.CancelledError
            return await work

        try:
            signal.signal(signal.SIGINT, handler)
            return runner.run(main())
        except asyncio.CancelledError:
            if handler.pressed:
                raise KeyboardInterrupt from None
            raise
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def run(self, turn: AsyncIterable[Event], display: Display) -> TurnOutcome:
        """Run a turn to its end. Ctrl-C cancels it: the outcome says ``interrupted``. SIGTERM
        or SIGHUP cancel it too, then raise :class:`~chatbot.interrupts.Terminated`."""
        self.loop()
        ended: list[int] = []
        with interrupts.during_turn(lambda signum: self._stop(signum, ended)):
            outcome = self._run(turn, display, ended)
        if ended:
            raise interrupts.Terminated(ended[0])
        return TurnOutcome(outcome.interrupted, outcome.error, tuple(_call_log_news()))

    def _run(self, turn: AsyncIterable[Event], display: Display, ended: list[int]) -> TurnOutcome:
        assert self._runner is not None
        try:
            # The first Ctrl-C cancels this task, then raises KeyboardInterrupt once the task
            # has unwound (closing the HTTP request): see _on_loop.
            self._on_loop(self._consume(turn, display))
        except KeyboardInterrupt:
            self._unwind()
            return TurnOutcome(interrupted=True)
        except asyncio.CancelledError:
            # By SIGTERM or SIGHUP (see run).
            self._unwind()
            return TurnOutcome(interrupted=True)
        except Exception as error:  # a model, network or server error: the caller says it
            return TurnOutcome(error=error)
        return TurnOutcome()

    def _stop(self, signum: int, ended: list[int]) -> None:
        """SIGTERM or SIGHUP during a turn: cancel it, as asyncio does for Ctrl-C."""
        ended.append(signum)
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            task.get_loop().call_soon_threadsafe(lambda: None)  # (wake the loop)

    async def _consume(self, turn: AsyncIterable[Event], display: Display) -> None:
        self._task = asyncio.current_task()
        ticker = asyncio.create_task(self._tick(display))
        events = turn.__aiter__()
        try:
            async for event in events:
                display.show(event)
        finally:
            self._task = None
            ticker.cancel()
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
            display.tick()

    async def _tick(self, display: Display) -> None:
        while True:
            display.tick()
            await asyncio.sleep(self.tick_seconds)

    def _unwind(self) -> None:
        """Cancel what a KeyboardInterrupt raised inside the loop (not by the SIGINT handler,
        which cancels cleanly) left pending, and let it finish unwinding."""
        assert self._runner is not None
        loop = self._runner.get_loop()
        pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            with contextlib.suppress(BaseException):
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))

    def close(self) -> None:
        """End the session's event loop."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None


class _CtrlC:
    """The Ctrl-C handler while the loop runs a main task: the first Ctrl-C cancels the task
    (and wakes the loop), a second raises ``KeyboardInterrupt`` at once: asyncio.Runner's
    own rule. Not asyncio.Runner's own handler, whose repr holds the task's, which formats
    the task's coroutine: ``signal.getsignal`` formats the handler's repr each time it is
    asked (the checkpoint decoder asks at each value, :func:`chatbot.interrupts.decoding`)."""

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.pressed = 0

    def __call__(self, signum: int, frame: Any) -> None:
        self.pressed += 1
        task = self.task
        if self.pressed > 1:
            raise KeyboardInterrupt
        if task is not None and not task.done():  # (else the task cancels itself as it starts)
            task.cancel()
            task.get_loop().call_soon_threadsafe(lambda: None)

    def __repr__(self) -> str:
        return "<the turn's Ctrl-C handler>"


def _call_log_news() -> list[str]:
    """The call log's lines written, and what could not be, said once (nothing to do when no
    call log was ever opened: the module is not even imported then)."""
    calllog = sys.modules.get("chatbot.engine.calllog")
    return calllog.settle() if calllog is not None else []
