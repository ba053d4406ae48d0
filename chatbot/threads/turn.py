"""A turn on a local thread: the lease taken, the graph streamed as events, the thread's
listing row and search rows written, the lease given back (:class:`Turn`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol

from langchain_core.runnables import RunnableConfig

from chatbot.threads.events import TurnStream

if TYPE_CHECKING:
    from chatbot.history.snapshots import Snapshot
    from chatbot.memory.state import ChatGraph
    from chatbot.store.leases import Lease
    from chatbot.threads.attachments import Content
    from chatbot.threads.events import Event


class TurnHost(Protocol):
    """What a turn needs of the backend it runs on
    (:class:`~chatbot.threads.backend.LocalBackend`), so that this module imports none of it."""

    ended: dict[str, Snapshot]

    @property
    def graph(self) -> ChatGraph: ...
    def current(self, thread_id: str) -> Snapshot | None: ...
    def before_turn(self, thread_id: str) -> Snapshot | None: ...
    def lease(self, thread_id: str) -> Lease: ...
    def record(
        self,
        thread_id: str,
        title_hint: Content = "",
        origin: tuple[str, str] | None = None,
        state: Snapshot | None = None,
    ) -> None: ...


class Turn(TurnStream):
    """One run of the graph on a local thread, as events.

    - :meth:`begin`, once the thread's lease is held (a busy thread is waited for, with a
      :class:`Waiting` event): ``prepare``, then the thread's state, which gives the run's
      config (the spend so far), and a message saved by a run that stopped early, sent first;
    - :meth:`_events`: the graph streamed as events; its last checkpoint is :attr:`after`;
    - :meth:`end`, however the run ends: the thread's listing and search rows, the lease back.
    """

    def __init__(
        self,
        backend: TurnHost,
        thread_id: str,
        payload: Any,
        config: RunnableConfig,
        context: dict[str, Any] | None,
        title_hint: Content = "",
        prepare: Callable[[], None] | None = None,
        message_id: str | None = None,
    ) -> None:
        super().__init__(
            self._events, message_id=message_id, current=lambda: backend.current(thread_id)
        )
        self.backend, self.thread_id = backend, thread_id
        self.payload, self.config, self.context = payload, config, context
        self.title_hint, self.prepare = title_hint, prepare

    def begin(self) -> tuple[RunnableConfig, list[Event]]:
        """Under the lease: the run's config, and what to say before it runs."""
        from chatbot.memory.pricing import SPENT_KEY, spent
        from chatbot.threads.events import Unanswered

        if self.prepare is not None:
            self.prepare()
        now = self.backend.before_turn(self.thread_id)
        self.started_from = now.checkpoint_id if now is not None else None
        if now is not None and (now.messages or now.summary or now.state.pending):
            # (the title is the state's first message: its first turn may have been killed)
            self.title_hint = ""
        if now is not None and now.state.pending and self.message_id is not None:
            # A message saved by a run that stopped before taking it in: new input would
            # replace it (LangGraph's __start__ holds one input), so it goes in first.
            self.payload["messages"] = [*now.state.pending, *self.payload.get("messages", [])]
        unanswered = self.message_id is not None and now is not None and now.awaiting_reply
        said: list[Event] = [Unanswered(self.thread_id)] if unanswered else []
        record = spent(now)  # the floor of the run's usage record (chatbot.memory.pricing)
        if record is None:
            return self.config, said
        configurable = {**self.config.get("configurable", {}), SPENT_KEY: record}
        return {**self.config, "configurable": configurable}, said

    async def _events(self) -> AsyncIterator[Event]:
        from chatbot.engine.graph import DURABILITY
        from chatbot.threads.events import (
            STREAM_MODES,
            Waiting,
            events_from_stream,
            snapshot_of_checkpoint,
        )

        lease = self.backend.lease(self.thread_id)
        if not lease.try_acquire():
            yield Waiting(self.thread_id)
            await lease.aacquire()
        stream: Any = None
        failing = True
        try:
            config, said = self.begin()
            for event in said:
                yield event
            context: Any = self.context or None  # (LangGraph makes the Context of the dict)
            stream = self.backend.graph.astream(
                self.payload,
                config,
                context=context,
                stream_mode=[*STREAM_MODES, "checkpoints"],
                durability=DURABILITY,
            )
            last: Any = None
            async for mode, part in stream:
                if mode == "checkpoints":
                    last = part
                    continue
                for event in events_from_stream([(mode, part)]):
                    yield event
            self.after = None if last is None else snapshot_of_checkpoint(last)
            if self.after is not None:
                self.backend.ended[self.thread_id] = self.after
            failing = False
        finally:
            try:
                if stream is not None:
                    await stream.aclose()
            finally:
                self.end(lease, failing)

    def end(self, lease: Lease, failing: bool) -> None:
        """The thread's row, then the lease back; a row not written is the error only when
        the turn itself did not fail."""
        try:
            self.backend.record(self.thread_id, self.title_hint, state=self.after)
        except Exception:
            if not failing:
                raise
        finally:
            lease.release()
