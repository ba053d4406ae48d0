"""Thread operations written once over a backend's primitives, so that the local and the remote
backend do them alike and the REPL's commands only parse, call and render.

- :meth:`ThreadOperations.undo`: rewind the last turn (the state before its message comes
  back; the undone state stays in the history, marked undone).
- :meth:`ThreadOperations.retry`: ask for the last reply again: carry on an unfinished run,
  answer from the state now when going back would undo a compaction or a system prompt set
  since, else resume from the checkpoint where the message had arrived.
- :meth:`ThreadOperations.context_tokens`: what the chat model would be sent for a state now,
  counted as the graph counts it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from chatbot.errors import FriendlyError
from chatbot.history.timeline import Snapshot, last_turn

if TYPE_CHECKING:
    from chatbot.engine.runsettings import RunSettings
    from chatbot.threads.events import TurnStream


class BackendError(FriendlyError, RuntimeError):
    """An operation that cannot be done; the message is one line for the user."""


class Undone(NamedTuple):
    """What :meth:`ThreadOperations.undo` did."""

    restored: Snapshot | None
    """The state the thread is back at; ``None``: the empty thread (the first turn undone)."""
    undone_checkpoint_id: str
    """The state the undo left behind: its turn's last checkpoint, still in the history."""


class ThreadOperations:
    """Undo and retry over the primitives every backend has (``current``, ``history``,
    ``restore``, ``resume``, ``regenerate``)."""

    def current(self, thread_id: str) -> Snapshot | None:
        raise NotImplementedError

    def history(self, thread_id: str) -> list[Snapshot]:
        raise NotImplementedError

    def restore(self, thread_id: str, checkpoint_id: str | None, action: str) -> None:
        raise NotImplementedError

    def resume(
        self, thread_id: str, checkpoint_id: str | None, context: dict[str, Any] | None = None
    ) -> TurnStream:
        raise NotImplementedError

    def regenerate(self, thread_id: str, context: dict[str, Any] | None = None) -> TurnStream:
        raise NotImplementedError

    def run_settings(
        self, context: dict[str, Any] | None, thread_prompt: str = ""
    ) -> RunSettings | None:
        raise NotImplementedError

    def context_tokens(
        self, snapshot: Snapshot, context: dict[str, Any] | None = None, tokenizer: str = "auto"
    ) -> int:
        """Tokens the chat model would be sent for ``snapshot`` by a run with ``context``: its
        system prompt, summary and messages, counted as the graph counts them. On a server,
        which resolves runs with its own settings (or when the context does not resolve): an
        estimate with the thread's own system prompt and ``tokenizer``."""
        from chatbot.config.sources import SettingsError
        from chatbot.memory import prompts
        from chatbot.memory.tokens import counter_for

        try:
            run = self.run_settings(context, snapshot.system_prompt)
        except SettingsError:
            run = None
        sent = prompts.conversation_input(
            list(snapshot.messages),
            snapshot.summary,
            run.system_prompt if run else snapshot.system_prompt,
            run.language if run else "en",
        )
        return (run.counter if run else counter_for("", tokenizer)).messages(sent)

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
        """The last reply asked for again (see the module); :class:`BackendError` when the
        thread has no reply to ask for."""
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
