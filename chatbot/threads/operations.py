"""Thread operations written once over a backend's primitives, so that the local and the remote
backend do them alike: undo, retry, and what the chat model would be sent (/context).

:meth:`ThreadOperations.retry` carries on an unfinished run, answers from the state now when
going back would undo a compaction or a system prompt set since, else resumes from the
checkpoint where the message had arrived.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from chatbot.errors import FriendlyError
from chatbot.history.lineage import last_turn
from chatbot.history.snapshots import Snapshot

if TYPE_CHECKING:
    from chatbot.engine.runsettings import RunSettings
    from chatbot.memory.sent import Sent
    from chatbot.memory.tokens import TokenCounter
    from chatbot.threads.events import TurnStream


class BackendError(FriendlyError, RuntimeError):
    """An operation that cannot be done; the message is one line for the user."""


class Undone(NamedTuple):
    """What :meth:`ThreadOperations.undo` did."""

    restored: Snapshot | None
    """The state the thread is back at; ``None``: the empty thread (the first turn undone)."""
    undone_checkpoint_id: str
    """The state the undo left behind: its turn's last checkpoint, still in the history."""


@dataclass(frozen=True)
class ContextWindow:
    """What the chat model would be sent for a thread now, part by part, against the limits."""

    sent: Sent
    """What the next run sends, part by part (:mod:`chatbot.memory.sent`)."""
    message_count: int
    counted_with: str
    """The tokenizer's name."""
    window: int | None = None
    """The model's input size (``None``: not known)."""
    trigger: str = ""
    """The trigger as settings write it (``tokens:12000``, ``off``; ``""``: not known here)."""
    trigger_tokens: int | None = None
    """The trigger's lowest token threshold (``None``: it counts messages, or is off)."""
    trigger_messages: int | None = None
    """The trigger's lowest message count (``None``: it counts tokens, or is off)."""
    keep: str = ""
    """What a fold keeps verbatim, as settings write it (``messages:2``)."""
    fold_messages: int | None = None
    """How many messages the next fold takes into the summary (``None``: not known here)."""
    fold_tokens: int = 0
    estimated: bool = False
    """On a server, whose own settings decide: the figures are this side's estimate."""
    window_from: str = ""
    """Where the model's window is known from, and since when."""
    server_window: int | None = None
    """The server's window, when the request and the reply share it."""
    reply_room: int | None = None
    """Tokens kept for the reply (sent as ``max_tokens``; ``None``: nothing is)."""
    reply_from: str = ""
    """Where that room comes from (the setting, a quarter of the window)."""
    scaled_from: str = ""
    """The trigger and keep as set, when they were scaled down to fit the window."""

    @property
    def total(self) -> int:
        return self.sent.total


class ThreadOperations:
    """Undo, retry and the context's size over the primitives every backend has."""

    if TYPE_CHECKING:  # (each backend's own)
        Context = dict[str, Any] | None

        def current(self, thread_id: str) -> Snapshot | None: ...
        def history(self, thread_id: str) -> list[Snapshot]: ...
        def restore(self, thread_id: str, checkpoint_id: str | None, action: str) -> None: ...
        def resume(
            self, thread_id: str, checkpoint_id: str | None, context: Context = None
        ) -> TurnStream: ...
        def regenerate(self, thread_id: str, context: Context = None) -> TurnStream: ...
        def run_settings(self, context: Context, thread_prompt: str = "") -> RunSettings | None: ...

    def _memories_carried(self, run: RunSettings, thread_id: str, messages: list[Any]) -> str:
        """The memories block the next request of ``thread_id`` would carry; here the run's."""
        return run.memories

    def _sent(
        self,
        snapshot: Snapshot | None,
        context: dict[str, Any] | None,
        tokenizer: str,
        thread_id: str = "",
    ) -> tuple[RunSettings | None, TokenCounter, Sent]:
        """The settings a run with ``context`` has here (None on a server, or when the context
        does not resolve), their counter, and what the run would send for ``snapshot``: the
        graph's own count, else an estimate with the thread's system prompt and ``tokenizer``."""
        from chatbot.config.sources import SettingsError
        from chatbot.memory.sent import sent_tokens
        from chatbot.memory.tokens import counter_for

        messages = list(snapshot.messages) if snapshot else []
        summary = snapshot.summary if snapshot else ""
        own_prompt = snapshot.system_prompt if snapshot else ""
        try:
            run = self.run_settings(context, own_prompt)
        except SettingsError:
            run = None
        if run is not None:
            from chatbot.engine import folding

            memories = self._memories_carried(run, thread_id, messages)
            run = dataclasses.replace(run, memories=memories)
            return run, run.counter, folding.request_tokens(messages, summary, run)
        counter = counter_for("", tokenizer)
        return None, counter, sent_tokens(counter, messages, summary, own_prompt)

    def context_tokens(
        self,
        snapshot: Snapshot,
        context: dict[str, Any] | None = None,
        tokenizer: str = "auto",
        *,
        thread_id: str = "",
    ) -> int:
        """Tokens the chat model would be sent for ``snapshot`` by a run with ``context``,
        counted as the graph counts them (on a server: an estimate)."""
        return self._sent(snapshot, context, tokenizer, thread_id)[2].total

    def context_window(
        self,
        snapshot: Snapshot | None,
        context: dict[str, Any] | None = None,
        tokenizer: str = "auto",
        *,
        thread_id: str = "",
    ) -> ContextWindow:
        """What :meth:`context_tokens` counts, part by part, with the run's limits and what
        its next fold would take (the graph's own plan). On a server: an estimate."""
        run, counter, sent = self._sent(snapshot, context, tokenizer, thread_id)
        messages = list(snapshot.messages) if snapshot else []
        summary = snapshot.summary if snapshot else ""
        measured = ContextWindow(
            sent=sent,
            message_count=len(messages),
            counted_with=counter.name,
            estimated=run is None,
        )
        if run is None:
            return measured
        from chatbot.engine import folding, windows
        from chatbot.memory.policy import TRIGGER_OFF

        plan = folding.plan_fold({"messages": messages, "summary": summary}, run, "compact")
        limits = run.policy.trigger
        known = run.window
        age = known.age() if known else ""
        return dataclasses.replace(
            measured,
            window=run.policy.max_input_tokens,
            window_from=f"{known.origin()}{', ' + age if age else ''}" if known else "",
            server_window=known.tokens if known and known.shared else None,
            reply_room=run.reply_tokens,
            reply_from=windows.reply_origin(
                known, run.settings.reply_tokens if run.settings else None, run.reply_tokens
            ),
            scaled_from=run.policy.scaled_from,
            trigger=",".join(str(limit) for limit in limits) or TRIGGER_OFF,
            trigger_tokens=run.policy.trigger_tokens(),
            trigger_messages=min(
                (int(limit.value) for limit in limits if limit.kind == "messages"), default=None
            ),
            keep=str(run.policy.keep),
            fold_messages=len(plan.fold),
            fold_tokens=counter.part([messages[i] for i in plan.fold], messages),
        )

    def undo(self, thread_id: str) -> Undone:
        """Rewind the thread's last turn; :class:`BackendError` when there is none."""
        history = self.history(thread_id)
        current = self.current(thread_id)
        turn = last_turn(history)
        if turn is None or current is None or not (current.messages or current.summary):
            raise BackendError("nothing to undo in this thread")
        before = turn.before
        self.restore(thread_id, None if before is None else before.checkpoint_id, "undo")
        return Undone(before, current.checkpoint_id)

    def retry(self, thread_id: str, context: dict[str, Any] | None = None) -> TurnStream:
        """The last reply asked for again (see the module); else :class:`BackendError`."""
        current = self.current(thread_id)
        if current is not None and current.unfinished:
            # An interrupted or failed run (a reply, or the fold after one): carry on with
            # exactly what was left to do.
            return self.resume(thread_id, None, context)
        turn = last_turn(self.history(thread_id))
        if turn is None or turn.after_input is None or current is None or not current.messages:
            raise BackendError("nothing to retry in this thread")
        if turn.compacted or turn.after_input.system_prompt != current.system_prompt:
            # Time travel would undo the compaction, or the system prompt set since the message
            # arrived: answer from the state now.
            return self.regenerate(thread_id, context)
        return self.resume(thread_id, turn.after_input.checkpoint_id, context)
