"""A thread's checkpoints as plain data: :class:`Snapshot` and the state it holds, the same
for a local thread and a LangGraph server's; the keys below name what chatbot writes into a
checkpoint's metadata and state.

A local thread's snapshots are its checkpoint ids and parents, each one's metadata and state
read on first use: following ids and parents is free, metadata cheap, each state a
deserialisation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from langchain_core.messages import BaseMessage, convert_to_messages

ACTION_KEY = "chatbot_action"
"""Checkpoint metadata naming what wrote an ``update`` checkpoint: fork, undo, rename."""
ORIGIN_KEY = "chatbot_origin"
"""Checkpoint metadata of a forked thread's first checkpoint: ``thread@checkpoint``."""
PRUNED_KEY = "chatbot_pruned"
"""Checkpoint metadata saying how many checkpoints after it were pruned as a side branch
(``chatbot prune --abandoned-days``)."""
FOLDED_KEY = "folded"
"""The graph's state key recording what the summary holds (see
:func:`~chatbot.history.summary.extend_fold_record`)."""

SYSTEM_PROMPT_KEY = "system_prompt"
"""The graph's state key holding the thread's own system prompt (``/system``)."""
SYSTEM_ROLE_KEY = "system_role"
"""The graph's state key naming the role the thread's system prompt came from (``/role``)."""
SYSTEM_ACTION = "system"
"""The :data:`ACTION_KEY` of a checkpoint that set the thread's system prompt."""

FOLD_NODE = "summarize_conversation"
"""The graph's node that folds messages into the summary."""

FoldRecord = Mapping[str, Any]
"""What a summary holds, counted as it was folded: ``{"messages": N, "tokens": {tokenizer
name: raw tokens}}`` (see :func:`~chatbot.history.summary.extend_fold_record`)."""


class CheckpointState(NamedTuple):
    """What a checkpoint holds: its messages, its summary, what was left to run, when."""

    messages: tuple[BaseMessage, ...] = ()
    summary: str = ""
    next: tuple[str, ...] = ()
    created_at: datetime | None = None
    fold_record: FoldRecord | None = None
    """What the summary holds (the state's ``folded``), or ``None`` when the state has none."""
    system_prompt: str = ""
    """The thread's own system prompt (empty: none; see :mod:`chatbot.config.roles`)."""
    system_role: str = ""
    """The role the thread's system prompt came from (empty when typed or none)."""
    usage: Mapping[str, Any] | None = None
    """The running record of what the thread's model calls used (:mod:`chatbot.memory.pricing`)."""
    pending: tuple[BaseMessage, ...] = ()
    """Messages sent to a run that stopped before its first step took them in (Ctrl-C just as
    the turn started); a resumed run takes them in."""


class Snapshot:
    """One checkpoint of a thread: its id and parent always at hand, its metadata (``meta``)
    and its state (``load``) given or read on first use. :attr:`state` keeps what it read;
    :meth:`peek` does not (a pass over thousands of checkpoints holds only a few)."""

    __slots__ = (
        "_load",
        "_meta",
        "_metadata",
        "_source",
        "_state",
        "_step",
        "checkpoint_id",
        "parent_id",
    )

    def __init__(
        self,
        checkpoint_id: str,
        parent_id: str | None,
        step: int = -1,
        source: str = "",
        messages: Sequence[BaseMessage] = (),
        summary: str = "",
        next: Sequence[str] = (),
        created_at: datetime | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        state: CheckpointState | None = None,
        load: Callable[[], CheckpointState] | None = None,
        meta: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        """The state is ``state``, else the fields given, else (with ``load``) read on use.
        The metadata, step and source are as given, or (with ``meta``) read on use."""
        self.checkpoint_id = checkpoint_id
        self.parent_id = parent_id
        self._meta = meta
        self._metadata: dict[str, Any] | None = None
        self._step: int | None = None
        self._source: str | None = None
        if meta is None:
            self._metadata = metadata if metadata is not None else {}
            self._step, self._source = step, source
        self._load = load
        if state is None and load is None:
            state = CheckpointState(tuple(messages), summary, tuple(next), created_at)
        self._state: CheckpointState | None = state

    @property
    def metadata(self) -> dict[str, Any]:
        """The checkpoint's metadata (``source``, ``step``, :data:`ACTION_KEY`, ...)."""
        if self._metadata is None:
            assert self._meta is not None
            self._metadata = self._meta()
        return self._metadata

    @property
    def step(self) -> int:
        if self._step is None:
            self._step = int(self.metadata.get("step", -1))
        return self._step

    @property
    def source(self) -> str:
        """What wrote it: ``input``, ``loop`` (a step of a run), ``update``, ``fork``."""
        if self._source is None:
            self._source = str(self.metadata.get("source", ""))
        return self._source

    @property
    def state(self) -> CheckpointState:
        """The checkpoint's state, read now (and kept) if it was not yet."""
        if self._state is None:
            self._state = self.peek()
        return self._state

    def peek(self) -> CheckpointState:
        """The checkpoint's state, read now without keeping it if it was not read yet."""
        if self._state is not None:
            return self._state
        assert self._load is not None
        return self._load()

    @property
    def loaded(self) -> bool:
        """True once the state is held (given, or kept by :attr:`state`)."""
        return self._state is not None

    @property
    def messages(self) -> tuple[BaseMessage, ...]:
        return self.state.messages

    @property
    def summary(self) -> str:
        return self.state.summary

    @property
    def next(self) -> tuple[str, ...]:
        """The nodes left to run: empty when the run that wrote it finished here."""
        return self.state.next

    @property
    def created_at(self) -> datetime | None:
        return self.state.created_at

    @property
    def fold_record(self) -> FoldRecord | None:
        return self.state.fold_record

    @property
    def system_prompt(self) -> str:
        return self.state.system_prompt

    @property
    def system_role(self) -> str:
        return self.state.system_role

    @property
    def unfinished(self) -> bool:
        """True when a run stopped before finishing (interrupted, failed, killed)."""
        return bool(self.next)

    @property
    def awaiting_reply(self) -> bool:
        """True when a run stopped before the last message got its reply (not, say, while
        folding after a saved reply), or before it took its message in."""
        if not self.unfinished:
            return False
        if self.state.pending:
            return True
        return bool(self.messages) and self.messages[-1].type != "ai"

    def _key(self) -> tuple[Any, ...]:
        return (self.checkpoint_id, self.parent_id, self.step, self.source, self.metadata)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return self._key() == other._key() and self.state == other.state

    def __hash__(self) -> int:
        return hash(self.checkpoint_id)

    def __repr__(self) -> str:
        return f"Snapshot({self.checkpoint_id!r}, step={self.step}, source={self.source!r})"


def parse_time(value: str | datetime | None) -> datetime | None:
    """A checkpoint's time as LangGraph (ISO text) or its server's API reports it."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return value


def state_from_values(
    values: dict[str, Any] | None,
    next_nodes: Sequence[str] = (),
    created_at: str | datetime | None = None,
) -> CheckpointState:
    """A checkpoint's state from its channel values (messages may be dicts, as a server
    sends them)."""
    values = values or {}
    raw_messages = values.get("messages") or []
    record = values.get(FOLDED_KEY)
    start = values.get(START_CHANNEL) if START_CHANNEL in next_nodes else None
    return CheckpointState(
        messages=_as_messages(raw_messages),
        summary=str(values.get("summary") or ""),
        next=tuple(next_nodes),
        created_at=parse_time(created_at),
        fold_record=record if isinstance(record, Mapping) else None,
        system_prompt=str(values.get(SYSTEM_PROMPT_KEY) or ""),
        system_role=str(values.get(SYSTEM_ROLE_KEY) or ""),
        usage=values["usage"] if isinstance(values.get("usage"), Mapping) else None,
        pending=_sent(start) if start is not None else (),
    )


START_CHANNEL = "__start__"
"""LangGraph's channel holding a run's input until its first step takes it in."""


def _sent(start: Any) -> tuple[BaseMessage, ...]:
    """The messages of a run's input waiting in its ``__start__`` channel (none for input
    that is not a message list, such as a ``Command``)."""
    raw = start.get("messages") if isinstance(start, Mapping) else None
    if not raw:
        return ()
    try:
        return _as_messages(raw if isinstance(raw, list | tuple) else [raw])
    except (ValueError, TypeError, NotImplementedError):  # (not messages: nothing to show)
        return ()


def _as_messages(raw: Sequence[Any]) -> tuple[BaseMessage, ...]:
    """Messages as objects (a server sends dicts); a checkpoint's are already, and are kept
    without a call per message."""
    if all(map(_is_message, raw)):
        return tuple(raw)
    return tuple(convert_to_messages(raw))


_is_message = BaseMessage.__instancecheck__


def snapshot_from_parts(
    *,
    checkpoint_id: str,
    parent_id: str | None,
    metadata: dict[str, Any] | None,
    values: dict[str, Any] | None,
    next_nodes: Sequence[str] = (),
    created_at: str | datetime | None = None,
) -> Snapshot:
    """Build a snapshot from what LangGraph (or its server's API) reports for a checkpoint."""
    metadata = dict(metadata or {})
    return Snapshot(
        checkpoint_id=checkpoint_id,
        parent_id=parent_id,
        step=int(metadata.get("step", -1)),
        source=str(metadata.get("source", "")),
        metadata=metadata,
        state=state_from_values(values, next_nodes, created_at),
    )


def fork_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """What a fork's first checkpoint takes from the state it branches from."""
    forked = {"messages": list(values.get("messages") or []), "summary": values.get("summary", "")}
    if isinstance(values.get(FOLDED_KEY), Mapping):
        forked[FOLDED_KEY] = dict(values[FOLDED_KEY])
    for key in (SYSTEM_PROMPT_KEY, SYSTEM_ROLE_KEY):
        if values.get(key):
            forked[key] = str(values[key])
    if isinstance(values.get("usage"), Mapping):  # a fork starts with what its messages cost
        forked["usage"] = dict(values["usage"])
    return forked
