"""Running a turn: one asyncio event loop for the session, each turn a task that Ctrl-C cancels.

Cancelling the task cancels the graph's ``astream`` and the model's HTTP request at once; the
message was checkpointed before, so ``/retry`` regenerates the reply. SIGTERM and SIGHUP cancel
the turn the same way (so that its lease is given back), then end the process.

The graph runs only awaited: blocking callers use :func:`blocking` or :func:`blocking_iter`, on
this thread's loop (the main thread's is the session's).
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
    """Problems beside the turn, each told once."""


_sessions = threading.local()
T = TypeVar("T")


def session_runner() -> TurnRunner:
    """This thread's turn runner: one event loop for the whole session, as the model clients'
    pooled connections belong to the loop they were opened in. Closed at exit."""
    runner: TurnRunner | None = getattr(_sessions, "runner", None)
    if runner is None:
        runner = _sessions.runner = TurnRunner()
        interrupts.at_exit(runner.close)
    return runner


def blocking(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to its end on this thread's session loop (Ctrl-C: ``KeyboardInterrupt``)."""
    return session_runner().call(work)


def blocking_iter(items: AsyncIterator[T]) -> Iterator[T]:
    """The items of an async iterator, each awaited on this thread's session loop."""
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
    """Runs turns on one event loop kept for the whole session."""

    def __init__(self) -> None:
        self._runner: asyncio.Runner | None = None
        self._task: asyncio.Task[None] | None = None

    def loop(self) -> asyncio.Runner:
        """The session's event loop (made at first use)."""
        if self._runner is None:
            self._runner = asyncio.Runner()
        return self._runner

    def call(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on the session's loop; a ``KeyboardInterrupt`` leaves nothing pending."""
        try:
            return self._on_loop(work)
        except KeyboardInterrupt:
            self._unwind()
            raise

    def _on_loop(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` as the loop's main task; on the main thread a first Ctrl-C cancels it
        and raises ``KeyboardInterrupt`` once it has unwound (:class:`_CtrlC`)."""
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
            self._on_loop(self._consume(turn, display))
        except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C (_on_loop); SIGTERM, SIGHUP
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
            await asyncio.sleep(TICK_SECONDS)

    def _unwind(self) -> None:
        """Cancel what a KeyboardInterrupt inside the loop left pending, and let it unwind."""
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
    """The Ctrl-C handler while the loop runs a main task: the first Ctrl-C cancels the task,
    a second raises ``KeyboardInterrupt``, as asyncio.Runner's does. Not that one: its repr
    formats the task's coroutine, and ``signal.getsignal`` is asked often while decoding."""

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
    """The call log's lines written, and what could not be, said once (if it was opened)."""
    calllog = sys.modules.get("chatbot.engine.calllog")
    return calllog.settle() if calllog is not None else []
