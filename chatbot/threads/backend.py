"""Where threads live: the operations the CLI and the REPL need. ``LocalBackend`` drives the graph
in this process over a local store; ``RemoteBackend`` (:mod:`chatbot.threads.remote`) drives it on
a LangGraph server. Both report checkpoints as snapshots and turns as events.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeAlias

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage

from chatbot.history.snapshots import (
    ACTION_KEY,
    ORIGIN_KEY,
    SYSTEM_ACTION,
    SYSTEM_PROMPT_KEY,
    SYSTEM_ROLE_KEY,
    Snapshot,
    fork_values,
)
from chatbot.store.base import LEASE_SECONDS, SqlStore, thread_config
from chatbot.threads.events import TurnStream
from chatbot.threads.operations import BackendError, ThreadOperations
from chatbot.threads.reading import LocalReader
from chatbot.threads.turn import Turn

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # (turns import leases, pricing and session when they run: reading never does)
    from collections.abc import Sequence

    from langchain_core.messages import BaseMessage

    from chatbot.engine.runsettings import RunSettings
    from chatbot.memory.state import ChatGraph
    from chatbot.store.leases import Lease
    from chatbot.threads.attachments import Content
    from chatbot.threads.remote import RemoteBackend


Backend: TypeAlias = "LocalBackend | RemoteBackend"
"""The thread operations the CLI and REPL use, local or on a LangGraph server."""


class LocalBackend(LocalReader, ThreadOperations):
    """Threads in a local store, driven by a graph in this process. Reading is
    :class:`~chatbot.threads.reading.LocalReader`'s and needs no graph, so the graph can be
    given as a function that builds it at the first run or state update."""

    def __init__(
        self,
        graph: ChatGraph | None,
        store: SqlStore,
        build: Callable[[], ChatGraph] | None = None,
    ) -> None:
        """``graph``, or ``build`` to make it at the first run (reading never does)."""
        super().__init__(store)
        self.lease_seconds = LEASE_SECONDS
        self._graph = graph
        self._build = build
        self.ended: dict[str, Snapshot] = {}  # (each thread's last turn's end: before_turn)

    @property
    def graph(self) -> ChatGraph:
        """The graph, built now if it was given as a function."""
        if self._graph is None:
            assert self._build is not None
            self._graph = self._build()
        return self._graph

    # --- turns -------------------------------------------------------------------------

    def lease(self, thread_id: str) -> Lease:
        """The thread's lease (:mod:`chatbot.store.leases`), for a turn or a change of its state."""
        from chatbot.store.leases import Lease

        return Lease(self.store, thread_id, self.lease_seconds)

    def send(
        self, thread_id: str, content: Content, context: dict[str, Any] | None = None
    ) -> TurnStream:
        """Run one turn: stream the reply, then report a summary if one was made."""
        import uuid

        message = HumanMessage(content=content, id=str(uuid.uuid4()))
        payload = {"messages": [message]}
        return Turn(
            self, thread_id, payload, thread_config(thread_id), context, content, None, message.id
        )

    def resume(
        self, thread_id: str, checkpoint_id: str | None, context: dict[str, Any] | None = None
    ) -> TurnStream:
        """Run the graph on from a checkpoint (default: the thread's latest); a new branch."""
        return Turn(self, thread_id, None, thread_config(thread_id, checkpoint_id), context)

    def compact(
        self, thread_id: str, focus: str = "", context: dict[str, Any] | None = None
    ) -> TurnStream:
        """Fold the older messages into the summary now (a run with no message). With nothing
        to fold nothing runs: a run would leave a checkpoint that changes nothing."""
        run_context = {**(context or {}), "compact": True, "compact_focus": focus}
        unchanged = self._nothing_to_compact(thread_id, run_context)
        if unchanged is not None:
            return unchanged
        config = thread_config(thread_id, metadata={ACTION_KEY: "compact"})
        return Turn(self, thread_id, {"messages": []}, config, run_context)

    def _nothing_to_compact(self, thread_id: str, context: dict[str, Any]) -> TurnStream | None:
        """The events of a compaction the graph's own rule says has nothing to fold, else None."""
        from chatbot.engine import folding
        from chatbot.threads.events import just

        now = self.current(thread_id)
        if now is None or now.awaiting_reply:
            return None
        run = self.run_settings(context, now.state.system_prompt)
        if run is None:
            return None
        state = {"messages": now.state.messages, "summary": now.state.summary}
        refusal = folding.nothing_to_fold(state, run, "compact")
        return None if refusal is None else just(refusal)

    def regenerate(self, thread_id: str, context: dict[str, Any] | None = None) -> TurnStream:
        """Answer the last message again from the state as it is now (summary included).

        The last reply is removed in a new checkpoint, so history keeps it.
        """

        def last_reply() -> AIMessage:
            current = self.current(thread_id)
            messages = current.messages if current else ()
            if not messages or not isinstance(messages[-1], AIMessage):
                raise BackendError("nothing to regenerate: the last message has no reply")
            return messages[-1]

        last_reply()  # said now, before any turn starts

        def remove_it() -> None:  # under the lease: the reply is still the last one
            self.graph.update_state(
                thread_config(thread_id, metadata={ACTION_KEY: "retry"}),
                {"messages": [RemoveMessage(id=str(last_reply().id))]},
                as_node="summarize_conversation",
            )

        return Turn(self, thread_id, None, thread_config(thread_id), context, prepare=remove_it)

    def record(
        self,
        thread_id: str,
        title_hint: Content = "",
        origin: tuple[str, str] | None = None,
        state: Snapshot | None = None,
    ) -> None:
        """The thread's listing row and its new messages indexed, in one transaction, from
        ``state`` (default: its latest checkpoint)."""
        from chatbot.store.search import index_statements
        from chatbot.threads.events import thread_title

        state = state or self.current(thread_id)
        if state is None:
            return
        self.store.record_turn(
            thread_id,
            title=thread_title(state.messages, title_hint),
            message_count=len(state.messages),
            has_summary=bool(state.summary),
            origin=origin,
            indexed=index_statements(self.store, thread_id),
        )

    def list_unlisted(self) -> int:
        """Give the listing a row for each thread that has checkpoints and none (an adopted
        LangGraph database's threads). Returns how many were listed."""
        unlisted = [info.thread_id for info in self.store.list_threads() if info.title == ""]
        listed = 0
        for thread_id in unlisted:
            if self.store.thread_row(thread_id) is None:
                self.record(thread_id)
                listed += 1
        return listed

    def before_turn(self, thread_id: str) -> Snapshot | None:
        """The thread's latest checkpoint: the state the last turn here ended with while it
        still is the latest, else read."""
        ended = self.ended.get(thread_id)
        if ended is not None and self.store.latest_checkpoint_id(thread_id) == ended.checkpoint_id:
            return ended
        return self.current(thread_id)

    # --- settings ----------------------------------------------------------------------

    def run_settings(
        self, context: dict[str, Any] | None, thread_prompt: str = ""
    ) -> RunSettings | None:
        """What a run with this context uses in a thread whose own system prompt is
        ``thread_prompt``, by the graph's own resolver (a bad value: ``SettingsError``)."""
        from chatbot.engine.graph import run_resolver

        return run_resolver(self.graph)(context, thread_prompt)  # (the graph is built for this)

    def leave(self, thread_id: str, context: dict[str, Any] | None = None) -> int:
        """The thread is being left: one that never folded is read for facts about the user
        (:func:`chatbot.engine.remembering.note_on_leaving`). How many memories it added."""
        from chatbot.engine.remembering import note_on_leaving
        from chatbot.threads.runner import blocking

        state = self.current(thread_id)
        if state is None:
            return 0
        run = self.run_settings(context, state.system_prompt)
        assert run is not None
        store = self.graph.store  # (the graph's own: a graph without one has no memories)
        return blocking(note_on_leaving(run, store, thread_id, state.messages, state.summary))

    def _memories_carried(self, run: RunSettings, thread_id: str, messages: list[Any]) -> str:
        """The memories block the next request would carry, read as the graph reads it."""
        from chatbot.engine.remembering import Mind, block_of
        from chatbot.threads.memorybook import MemoryBook

        store = self.graph.store
        if not run.memory or store is None:
            return ""
        try:  # (read with the store's own calls: a view may be drawn while a turn's loop runs)
            book = MemoryBook(store)
            if not book.thread_on(thread_id):
                return ""
            return block_of(Mind(store, thread_id, book.all()), messages, run)
        except Exception as error:  # (a request would carry none: the view counts none)
            log.warning("the user's memories could not be read: %s", error)
            return ""

    # --- changing ----------------------------------------------------------------------

    def fork(self, thread_id: str, checkpoint_id: str | None, new_id: str) -> None:
        """Start ``new_id`` with the state of a checkpoint of ``thread_id`` (default: latest)."""
        with self.lease(new_id):
            if self.thread_exists(new_id):
                raise BackendError(f"thread {new_id!r} already exists: pick another name")
            source = self.graph.get_state(thread_config(thread_id, checkpoint_id))
            if not source.values:
                raise BackendError(f"thread {thread_id!r} has no state to fork")
            origin = f"{thread_id}@{source.config['configurable']['checkpoint_id']}"
            self.graph.update_state(
                thread_config(new_id, metadata={ACTION_KEY: "fork", ORIGIN_KEY: origin}),
                fork_values(source.values),
                as_node="summarize_conversation",
            )
            info = self.store.thread_info(thread_id)
            self.record(
                new_id,
                title_hint=info.title if info else "",
                origin=(thread_id, source.config["configurable"]["checkpoint_id"]),
            )

    def import_thread(
        self,
        new_id: str,
        messages: Sequence[BaseMessage],
        *,
        folded: Sequence[BaseMessage] = (),
        summary: str = "",
        unanswered: Sequence[BaseMessage] = (),
        system_prompt: str = "",
        system_role: str = "",
    ) -> None:
        """Start ``new_id`` as the thread an export describes: ``messages`` live, ``folded``
        folded into ``summary``, ``unanswered`` last, and its own system prompt and role.

        Two checkpoints marked ``import``: every message; then, if anything was folded, the
        folded ones removed and the summary set, as a fold leaves them, so that the history
        (export, search) still holds them. Whole or not at all; an existing ``new_id`` is a
        :class:`BackendError`."""
        from chatbot.history.snapshots import FOLDED_KEY

        everything = [*folded, *messages, *unanswered]
        first = next((m for m in everything if isinstance(m, HumanMessage)), None)
        values: dict[str, Any] = {"messages": everything}
        if system_prompt:
            values[SYSTEM_PROMPT_KEY] = system_prompt
        if system_role:
            values[SYSTEM_ROLE_KEY] = system_role
        fold: dict[str, Any] | None = None
        if folded or summary:
            fold = {"messages": [RemoveMessage(id=str(m.id)) for m in folded], "summary": summary}
            record = self._imported_fold_record(summary, folded, system_prompt)
            if record is not None:
                fold[FOLDED_KEY] = record
        metadata = {ACTION_KEY: "import"}
        with self.lease(new_id):
            if self.thread_exists(new_id):
                raise BackendError(f"thread {new_id!r} already exists: pick another name")
            try:
                for update in (values, fold):
                    if update is not None:
                        self.graph.update_state(
                            thread_config(new_id, metadata=metadata),
                            update,
                            as_node="summarize_conversation",
                        )
                self.record(new_id, title_hint=first.content if first else "")
            except BaseException:
                with contextlib.suppress(Exception):  # (what failed may fail this too)
                    self.store.delete_thread(new_id)
                raise

    def _imported_fold_record(
        self, summary: str, folded: Sequence[BaseMessage], system_prompt: str
    ) -> dict[str, Any] | None:
        """The ``folded`` record of an imported summary, as a fold of ``folded`` counts it."""
        if not summary or not folded:
            return None
        from chatbot.engine.folding import fold_record

        run = self.run_settings(None, system_prompt)
        return fold_record({}, folded, run.counter) if run is not None else None

    def restore(self, thread_id: str, checkpoint_id: str | None, action: str) -> None:
        """Make an older checkpoint's state current again, as a new checkpoint (undo);
        ``None``: the empty state before the first turn. Waits for a turn elsewhere."""
        with self.lease(thread_id):
            from chatbot.memory.pricing import spent_metadata

            now = self.current(thread_id)
            metadata = {ACTION_KEY: action, **spent_metadata(now)}  # spent stays spent (pricing)
            kept = (now.system_prompt, now.system_role) if now is not None else ("", "")
            if checkpoint_id is None:
                from langgraph.graph.message import REMOVE_ALL_MESSAGES

                self.graph.update_state(
                    thread_config(thread_id, metadata=metadata),
                    {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)], "summary": ""},
                    as_node="summarize_conversation",
                )
            else:
                self.graph.update_state(
                    thread_config(thread_id, checkpoint_id, metadata=metadata),
                    None,
                    as_node="__end__",
                )
                # The system prompt is the thread's setting, not part of a turn: one set after the
                # restored state stays (written again, as its own /system checkpoint).
                self._set_system_prompt(thread_id, *kept)
            self.record(thread_id)

    # --- the thread's system prompt ------------------------------------------------------

    def set_system_prompt(self, thread_id: str, prompt: str, role: str = "") -> bool:
        """Store the thread's own system prompt (``""``: none) and its role as a checkpoint
        of its own; the thread is made if new. False when it already was this prompt."""
        with self.lease(thread_id):
            return self._set_system_prompt(thread_id, prompt, role)

    def _set_system_prompt(self, thread_id: str, prompt: str, role: str) -> bool:
        current = self.current(thread_id)
        if current is not None and (current.system_prompt, current.system_role) == (prompt, role):
            return False
        if current is None and not prompt:
            return False
        from chatbot.memory.pricing import spent_metadata

        metadata = {ACTION_KEY: SYSTEM_ACTION, **spent_metadata(current)}  # (after an /undo too)
        values: dict[str, Any] = {SYSTEM_PROMPT_KEY: prompt, SYSTEM_ROLE_KEY: role}
        if current is not None and current.state.pending:
            # A message its run never took in: the new checkpoint would leave it behind (it
            # waits in LangGraph's __start__ channel); it joins the messages, still unanswered.
            values["messages"] = list(current.state.pending)
        self.graph.update_state(
            thread_config(thread_id, metadata=metadata), values, as_node="summarize_conversation"
        )
        self.record(thread_id)
        return True

    def rename(self, thread_id: str, new_id: str) -> None:
        """Give a thread another id, keeping every checkpoint; refused while a turn runs on it
        elsewhere (its next checkpoint would land under the old id)."""
        if not self.thread_exists(thread_id):
            raise BackendError(f"no thread {thread_id!r}")
        taken = BackendError(f"thread {new_id!r} already exists: pick another name")
        if self.thread_exists(new_id):
            raise taken
        with self._unless_busy(thread_id, "renamed"), self._unless_busy(new_id, ""):
            if self.thread_exists(new_id):  # (made since: its first turn had just ended)
                raise taken
            self.store.rename_thread(thread_id, new_id)
        self.memory_book().move_thread(thread_id, new_id)

    def delete(self, thread_id: str) -> bool:
        """Delete a thread; False if there was none. Refused while a turn runs on it elsewhere."""
        with self._unless_busy(thread_id, "deleted"):
            return self.store.delete_thread(thread_id)

    @contextlib.contextmanager
    def _unless_busy(self, thread_id: str, done: str) -> Iterator[None]:
        """Hold the thread's lease; a :class:`BackendError` at once if a turn holds it."""
        lease = self.lease(thread_id)
        if not lease.try_acquire():
            if not done:  # (a new name another window is starting a thread under)
                raise BackendError(
                    f"thread {thread_id!r} is being started in another window or process: "
                    "pick another name"
                )
            raise BackendError(
                f"thread {thread_id!r} is taking a turn in another window or process: it can "
                f"be {done} once that turn has ended"
            )
        try:
            yield
        finally:
            lease.release()

    def answering_elsewhere(self, thread_id: str) -> bool:
        """True while another process takes a turn on the thread (it holds the lease)."""
        from chatbot.store.leases import HOLDER, gone

        holder = self.store.lease_holder(thread_id, unexpired=True)
        return holder is not None and holder != HOLDER and not gone(holder)
