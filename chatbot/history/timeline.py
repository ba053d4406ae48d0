"""A thread's checkpoints as plain data, and what can be read from them.

Pure functions over :class:`Snapshot` lists, the same for a local SQLite thread and a thread on
a LangGraph server: the summary's timeline, the history (one entry per turn, or every
checkpoint), the messages folded into the summary (for export), where the last turn started
(for /undo and /retry), tokens saved.

A local thread's snapshots are its checkpoint ids and parents, each one's metadata and state
read on first use (:mod:`chatbot.store.checkpoints`), so what a function reads is what it costs:
following ids and parents is free, metadata cheap, each state a deserialisation. The
functions read only what their answer needs (the newest N turns read those turns'
checkpoints; /undo reads back to the last turn's start; what the summary saves is in the
state's own record), and a pass over a whole lineage holds a few states at a time, never
keeping them on the snapshots.

Vocabulary:

- **lineage**: the checkpoints that led to the newest one, following parents. /undo, /retry and
  two turns at once leave other checkpoints off it, on side branches; the history still has them.
- **run**: the checkpoints one graph run wrote. It starts with an ``input`` checkpoint (a message
  was sent, or ``/compact``), a ``fork`` checkpoint (LangGraph's name for a run resumed from an
  older checkpoint: ``/retry``) or an ``update`` (``/undo``, ``/fork``, a regenerating
  ``/retry``), and goes on with ``loop`` checkpoints, each the child of the one before.
- **turn entry**: one run as people think of it: a message and its reply, a retry, an undo, a
  compaction, a fork. Its checkpoint is the run's last one: the state it left, for /show and
  /fork.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, NamedTuple, TypeGuard

from langchain_core.messages import BaseMessage, convert_to_messages

from chatbot.memory.tokens import TokenCounter
from chatbot.parts import describe

ACTION_KEY = "chatbot_action"
"""Checkpoint metadata naming what wrote an ``update`` checkpoint: fork, undo, rename."""
ORIGIN_KEY = "chatbot_origin"
"""Checkpoint metadata of a forked thread's first checkpoint: ``thread@checkpoint``."""
PRUNED_KEY = "chatbot_pruned"
"""Checkpoint metadata saying checkpoints after it were removed as a side branch (``chatbot
prune --abandoned-days``), how many: on a checkpoint whose run went on there (the reply a REPL
/retry replaced), its run did not stop at it; on an /undo, the turn it rewound is gone."""
FOLDED_KEY = "folded"
"""The graph's state key recording what the summary holds (see :func:`extend_fold_record`)."""

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
name: raw tokens}}`` (see :func:`extend_fold_record`)."""


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
    """Messages sent to a run that stopped before it took them in: an ``input`` checkpoint
    whose first step never ran (Ctrl-C just as the turn started). Saved all the same: a
    resumed run takes them in (LangGraph's ``get_state`` leaves them out of the values)."""


class Snapshot:
    """One checkpoint of a thread.

    Its id and parent are always at hand. Its metadata (with the step and the source: what
    wrote it) is given or read on first use through ``meta``, and its state (messages,
    summary, ``next``, time) is given or read on first use through ``load``: a long thread's
    history is then its ids and parents, and only the checkpoints a command looks at are read.
    :attr:`state` keeps what it read (a command that looks at a checkpoint twice reads it
    once); :meth:`peek` does not (a pass over thousands of checkpoints holds only the few it is
    comparing).
    """

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
    """Messages as objects (a server sends dicts); a checkpoint's are objects already, which
    ``convert_to_messages`` returns as they are, one call each (a pass over a long thread's
    checkpoints reads its window at every one of them)."""
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
    """What a fork's first checkpoint takes from the state it branches from: the messages,
    the summary, the record of what the summary holds (when there is one) and the thread's
    system prompt (when it has one)."""
    forked = {"messages": list(values.get("messages") or []), "summary": values.get("summary", "")}
    if isinstance(values.get(FOLDED_KEY), Mapping):
        forked[FOLDED_KEY] = dict(values[FOLDED_KEY])
    for key in (SYSTEM_PROMPT_KEY, SYSTEM_ROLE_KEY):
        if values.get(key):
            forked[key] = str(values[key])
    if isinstance(values.get("usage"), Mapping):  # a fork starts with what its messages cost
        forked["usage"] = dict(values["usage"])
    return forked


def by_id(history: Sequence[Snapshot]) -> dict[str, Snapshot]:
    """Index a history by checkpoint id."""
    return {snapshot.checkpoint_id: snapshot for snapshot in history}


def _back(index: Mapping[str, Snapshot], head: Snapshot | None) -> Iterator[Snapshot]:
    """``head`` and its ancestors, newest first, as far as the index has them."""
    current = head
    while current is not None:
        yield current
        current = index.get(current.parent_id) if current.parent_id else None


def _newest(history: Sequence[Snapshot]) -> Snapshot:
    return max(history, key=lambda s: s.checkpoint_id)


def lineage(history: Sequence[Snapshot], head: Snapshot | None = None) -> list[Snapshot]:
    """The checkpoints that led to ``head`` (default: the newest), oldest first.

    A thread's history can branch (retry, undo and time travel write new checkpoints whose
    parent is an older one); the lineage follows parents, so abandoned branches are skipped.
    Ids and parents only: no state is read.
    """
    if not history:
        return []
    return list(reversed(list(_back(by_id(history), head or _newest(history)))))


class _States:
    """The states one pass reads: each read once while it is among the last few used, and
    none kept on its snapshot, so a pass over thousands of checkpoints holds a handful."""

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._recent: OrderedDict[str, CheckpointState] = OrderedDict()

    def __call__(self, snapshot: Snapshot) -> CheckpointState:
        if snapshot.loaded:
            return snapshot.state
        key = snapshot.checkpoint_id
        state = self._recent.get(key)
        if state is None:
            state = snapshot.peek()
            self._recent[key] = state
            if len(self._recent) > self._size:
                self._recent.popitem(last=False)
        else:
            self._recent.move_to_end(key)
        return state


StateOf = Callable[[Snapshot], CheckpointState]


def _kept(snapshot: Snapshot) -> CheckpointState:
    return snapshot.state


def node_of(snapshot: Snapshot, parent: Snapshot | None, state_of: StateOf = _kept) -> str:
    """What wrote a checkpoint: ``input``, a node name, or an action such as ``undo``."""
    if snapshot.source == "input":
        return "input"
    if snapshot.source in ("update", "fork"):
        # LangGraph writes a "fork" checkpoint when a run starts from an older one (/retry).
        default = "replay" if snapshot.source == "fork" else "update"
        return str(snapshot.metadata.get(ACTION_KEY) or default)
    if parent is not None:
        pending = state_of(parent).next
        if pending:
            return pending[0]
    return snapshot.source or "?"


class HistoryRow(NamedTuple):
    """One line of /history all: one checkpoint."""

    checkpoint_id: str
    parent_id: str | None
    step: int
    node: str
    messages: int
    summary_chars: int
    created_at: datetime | None
    next: tuple[str, ...]


def history_rows(history: Sequence[Snapshot], limit: int | None = None) -> list[HistoryRow]:
    """The thread's checkpoints as history rows, side branches included, newest first: the
    newest ``limit`` (default: all). Reads the states of those checkpoints and, for a step of
    the graph, of its parent."""
    index = by_id(history)
    newest_first = sorted(history, key=lambda s: s.checkpoint_id, reverse=True)
    state_of = _States()
    rows = []
    for snapshot in newest_first[:limit]:
        parent = index.get(snapshot.parent_id) if snapshot.parent_id else None
        state = state_of(snapshot)
        rows.append(
            HistoryRow(
                checkpoint_id=snapshot.checkpoint_id,
                parent_id=snapshot.parent_id,
                step=snapshot.step,
                node=node_of(snapshot, parent, state_of),
                messages=len(state.messages),
                summary_chars=len(state.summary),
                created_at=state.created_at,
                next=state.next,
            )
        )
    return rows


TurnKind = Literal["turn", "retry", "undo", "compact", "fork", "system", "update"]
Fate = Literal["", "undone", "retried", "branch"]


class TurnEntry(NamedTuple):
    """One entry of /history: a run as people think of it (see the module's vocabulary)."""

    kind: TurnKind | str
    """``turn`` (a message and its reply), ``retry``, ``undo``, ``compact``, ``fork``,
    ``system`` (the thread's system prompt set or cleared), or another action's name."""
    checkpoint_id: str
    """The run's last checkpoint: the state it left (what /show shows, where /fork branches)."""
    first_checkpoint_id: str
    created_at: datetime | None
    """When the run started (the message was sent)."""
    text: str
    """The user's message it answers ("" for undo, compact, fork; for ``system``: the new
    system prompt, "" when cleared)."""
    messages_before: int
    messages_after: int
    folded: int
    """Messages folded into the summary during the run."""
    summary_changed: bool
    finished: bool
    """False when the run stopped before doing what it was for (interrupted, failed, killed):
    a turn or a retry before its reply was saved, a compaction before it folded. A turn whose
    reply was saved is finished even when the fold after it was cut short (:attr:`fold_left`)."""
    fate: Fate = ""
    """``undone`` (an /undo rewound it), ``retried`` (a /retry replaced its reply), ``branch``
    (a side branch, as two turns at once leave) or "" when its state is part of the current one."""
    origin: str = ""
    """For a fork: ``thread@checkpoint`` it was branched from."""
    fold_left: bool = False
    """The reply was saved, but the fold after it was cut short (Ctrl-C while folding, a
    killed process): the next turn folds first."""


class _Runs:
    """The runs of a thread, found from ids, parents and sources (metadata) alone.

    A run's checkpoints: a first one that is not a ``loop`` checkpoint (or whose parent is
    not an older checkpoint of the thread), then ``loop`` checkpoints, each the child of one
    before it. Runs are ordered by their first checkpoint; a run is named by its id.
    """

    def __init__(self, history: Sequence[Snapshot]) -> None:
        self.index = by_id(history)
        self.ordered = _oldest_first(history)
        self.position = {s.checkpoint_id: number for number, s in enumerate(self.ordered)}
        self._first: dict[str, str] = {}
        self._children: dict[str, list[Snapshot]] | None = None

    def _parent_in_run(self, snapshot: Snapshot) -> Snapshot | None:
        if snapshot.source != "loop" or not snapshot.parent_id:
            return None
        parent = self.index.get(snapshot.parent_id)
        return (
            parent if parent is not None and parent.checkpoint_id < snapshot.checkpoint_id else None
        )

    def starts_run(self, snapshot: Snapshot) -> bool:
        return self._parent_in_run(snapshot) is None

    def first_of(self, snapshot: Snapshot, floor: str = "") -> str | None:
        """The id of the first checkpoint of the run that wrote ``snapshot``; ``None`` when
        that is older than ``floor`` (found without reading further back)."""
        path: list[str] = []
        current: Snapshot | None = snapshot
        found: str | None = None
        while current is not None:
            known = self._first.get(current.checkpoint_id)
            if known is not None:
                found = known
                break
            if current.checkpoint_id < floor:
                break
            path.append(current.checkpoint_id)
            parent = self._parent_in_run(current)
            if parent is None:
                found = current.checkpoint_id
                break
            current = parent
        if found is not None:
            self._first.update(dict.fromkeys(path, found))
        return found

    def newest(self, limit: int | None) -> list[list[Snapshot]]:
        """The newest ``limit`` runs (default: all), oldest first, each oldest first. Reads
        the metadata of the checkpoints from the oldest of those runs on."""
        firsts: list[Snapshot] = []
        start = 0
        for position in range(len(self.ordered) - 1, -1, -1):
            snapshot = self.ordered[position]
            if self.starts_run(snapshot):
                firsts.append(snapshot)
                if limit is not None and len(firsts) == limit:
                    start = position
                    break
        if not firsts:
            return []
        runs: dict[str, list[Snapshot]] = {s.checkpoint_id: [] for s in reversed(firsts)}
        floor = firsts[-1].checkpoint_id
        for snapshot in self.ordered[start:]:
            first = self.first_of(snapshot, floor)
            if first in runs:
                runs[first].append(snapshot)
        return list(runs.values())

    def count(self) -> int:
        return sum(1 for snapshot in reversed(self.ordered) if self.starts_run(snapshot))

    def children(self, checkpoint_id: str) -> list[Snapshot]:
        if self._children is None:
            self._children = {}
            for snapshot in self.ordered:
                self._children.setdefault(snapshot.parent_id or "", []).append(snapshot)
        return self._children.get(checkpoint_id, [])


def _oldest_first(history: Sequence[Snapshot]) -> list[Snapshot]:
    return sorted(history, key=lambda s: s.checkpoint_id)


def turn_count(history: Sequence[Snapshot]) -> int:
    """How many entries :func:`turn_entries` has for the thread (reads every checkpoint's
    metadata, no state)."""
    return _Runs(history).count()


def _kind(first: Snapshot) -> str:
    action = str(first.metadata.get(ACTION_KEY) or "")
    if first.source == "input":
        return "compact" if action == "compact" else "turn"
    if first.source == "fork":
        return "retry"  # a run resumed from an older checkpoint: how /retry regenerates
    if first.source == "update":
        return action or "update"
    return first.source or "?"


def _regenerates(first: Snapshot, runs: _Runs, state_of: StateOf) -> bool:
    """True for a run that starts by removing the last reply to answer again: a local /retry
    says so in its metadata; a server's update carries none, so there it is told by the state
    (an update whose only change is that the last message, a reply, is gone)."""
    action = first.metadata.get(ACTION_KEY)
    if action or first.source != "update" or first.parent_id not in runs.index:
        return action == "retry"
    before, after = state_of(runs.index[str(first.parent_id)]), state_of(first)
    return (
        bool(before.messages)
        and before.messages[-1].type == "ai"
        and [m.id for m in before.messages[:-1]] == [m.id for m in after.messages]
        and (before.summary, before.system_prompt) == (after.summary, after.system_prompt)
    )


def _is_turn_start(snapshot: Snapshot) -> bool:
    """A turn's ``input`` checkpoint (a compaction's run is not a turn)."""
    return snapshot.source == "input" and snapshot.metadata.get(ACTION_KEY) != "compact"


def _undone(runs: _Runs, since: str) -> set[str]:
    """The checkpoints /undo rewound, among those an undo newer than ``since`` rewound: for
    each undo, the last turn when it ran (found as /undo found it, :func:`last_turn` on the
    checkpoints before the undo) and everything after it on the lineage of that time.
    Metadata only."""
    undone: set[str] = set()
    ordered = runs.ordered
    for position in range(len(ordered) - 1, 0, -1):
        snapshot = ordered[position]
        if snapshot.checkpoint_id < since:
            break
        if snapshot.metadata.get(ACTION_KEY) != "undo" or PRUNED_KEY in snapshot.metadata:
            continue  # (not an undo, or one whose rewound turn was removed since)
        path: list[str] = []
        for step in _back(runs.index, ordered[position - 1]):
            if step.checkpoint_id >= snapshot.checkpoint_id:
                break  # not among the checkpoints the undo saw
            path.append(step.checkpoint_id)
            if _is_turn_start(step):
                # The undo went back to before that turn (or, for a thread's first turn,
                # emptied the thread on top of it): where it did not, the turn it rewound is
                # gone (pruned) and this one is another, on the line, kept.
                went_back_to = step.parent_id or ordered[position - 1].checkpoint_id
                if snapshot.parent_id == went_back_to:
                    undone.update(path)
                break
    return undone


def _first_holder(message_id: str | None, holder: Snapshot, runs: _Runs, state_of: StateOf) -> str:
    """The first run that held a message ``holder`` holds (the id of its first checkpoint).

    Walking back while the parent still holds it finds the checkpoint that brought it in. A
    message comes from one task's writes, recorded against that checkpoint's parent; the
    checkpoints that brought it in are children of that parent (the run's own next step, or
    an update such as /undo, which applies the writes a checkpoint's finished tasks left),
    and whatever else holds it descends from one of them, in the same run or a later one.
    """
    for parent in _back(runs.index, runs.index.get(holder.parent_id or "")):
        if not any(m.id == message_id for m in state_of(parent).messages):
            firsts = [
                runs.first_of(s)
                for s in runs.children(parent.checkpoint_id)
                if s is holder or any(m.id == message_id for m in state_of(s).messages)
            ]
            return min(first for first in firsts if first is not None)
        holder = parent
    first = runs.first_of(holder)
    assert first is not None
    return first


def _retried(runs: _Runs, window: Sequence[list[Snapshot]], state_of: StateOf) -> set[str]:
    """The runs of ``window`` (the newest runs) whose reply a /retry replaced (by first
    checkpoint). A /retry replaces only older runs' replies: it is in the window too."""
    awaiting: dict[str, list[str]] = {}  # a checkpoint where a message awaited its reply
    for run in window:
        first = run[0]
        if first.source == "input" and len(run) > 1 and _kind(first) == "turn":
            awaiting.setdefault(run[1].checkpoint_id, []).append(first.checkpoint_id)
        elif first.source == "fork" and first.parent_id:
            awaiting.setdefault(first.parent_id, []).append(first.checkpoint_id)
    retried: set[str] = set()
    for run in window:
        first = run[0]
        if first.source == "fork" and first.parent_id:
            # Resumed where earlier runs answered the same message: their replies are replaced.
            earlier = awaiting.get(first.parent_id, [])
            retried.update(other for other in earlier if other < first.checkpoint_id)
        elif first.parent_id in runs.index and _regenerates(first, runs, state_of):
            # Regenerated from the state then: the reply it removed was written by a run.
            parent = runs.index[str(first.parent_id)]
            kept = {m.id for m in state_of(first).messages}
            for message in state_of(parent).messages:
                if message.type == "ai" and message.id not in kept:
                    retried.add(_first_holder(message.id, parent, runs, state_of))
    return retried


def turn_entries(history: Sequence[Snapshot], limit: int | None = None) -> list[TurnEntry]:
    """The thread's history one entry per run, side branches included, newest first: the
    newest ``limit`` entries (default: all).

    An entry whose state is no longer part of the thread's says why (:attr:`TurnEntry.fate`):
    nothing a thread ever held is hidden. Only the checkpoints of the entries returned (and
    the one before each) are read, plus, for a /retry that regenerated, the checkpoints back
    to where the reply it replaced came in; which runs were undone, retried or left on a side
    branch is worked out from ids, parents and the metadata of the checkpoints from the
    oldest entry on.
    """
    if not history or limit == 0:
        return []
    runs = _Runs(history)
    window = runs.newest(limit)
    if not window:
        return []
    current = {s.checkpoint_id for s in _back(runs.index, runs.ordered[-1])}
    state_of = _States()
    undone = _undone(runs, window[0][0].checkpoint_id)
    retried = _retried(runs, window, state_of)
    entries = []
    for run in window:  # (oldest first: a checkpoint is read right after its parent)
        first, last = run[0], run[-1]
        kind = _kind(first)
        # The thread as it was when the run started (an undo's or a retry's parent is an
        # older checkpoint: the state it goes back to).
        position = runs.position[first.checkpoint_id]
        before = state_of(runs.ordered[position - 1]) if position else None
        states = [state_of(snapshot) for snapshot in run]
        if kind == "update" and _regenerates(first, runs, state_of):
            kind = "retry"  # (a server's /retry: see _regenerates)
        folded = 0  # the graph folds in its own steps, inside the run
        for (_, previous), (snapshot, state) in itertools.pairwise(zip(run, states, strict=True)):
            if _folds(snapshot, previous, state):
                kept = {m.id for m in state.messages}
                folded += sum(1 for m in previous.messages if m.id not in kept)
        known = {m.id for m in states[0].messages} if first.source != "input" else set()
        known |= {m.id for m in before.messages} if before is not None else set()
        said = [
            m
            for s in states
            for m in (*s.messages, *s.pending)
            if m.type == "human" and m.id not in known
        ]
        if not said and kind == "retry":
            said = [m for m in states[-1].messages if m.type == "human"][-1:]
        text = describe(said[0].content) if said else ""
        prompt_before = before.system_prompt if before is not None else ""
        if kind == "update" and states[-1].system_prompt != prompt_before:
            kind = "system"  # (a server's update carries no action name: told by the state)
        if kind == "system":
            text = states[-1].system_prompt
        fold_left = kind != "compact" and _fold_left(states[-1])
        fate: Fate = ""
        if last.checkpoint_id in undone:
            fate = "undone"
        elif first.checkpoint_id in retried:
            fate = "retried"
        elif last.checkpoint_id not in current:
            fate = "branch"
        entries.append(
            TurnEntry(
                kind=kind,
                checkpoint_id=last.checkpoint_id,
                first_checkpoint_id=first.checkpoint_id,
                created_at=states[0].created_at,
                text=text,
                messages_before=len(before.messages) if before is not None else 0,
                messages_after=len(states[-1].messages),
                folded=folded,
                summary_changed=states[-1].summary
                != (before.summary if before is not None else ""),
                finished=not states[-1].next or fold_left or PRUNED_KEY in last.metadata,
                fate=fate,
                origin=str(first.metadata.get(ORIGIN_KEY) or "") if kind == "fork" else "",
                fold_left=fold_left,
            )
        )
    entries.reverse()  # (newest first)
    return entries


def _folds(snapshot: Snapshot, previous: CheckpointState, state: CheckpointState) -> bool:
    """True for a step that changed the summary: the summary's text changed, or the fold node
    took messages out (a summary that came back word for word as it was is a fold all the
    same)."""
    if state.summary != previous.summary:
        return True
    if snapshot.source != "loop" or FOLD_NODE not in previous.next:
        return False
    kept = {m.id for m in state.messages}
    return any(m.id not in kept for m in previous.messages)


def _fold_left(state: CheckpointState) -> bool:
    """True for a run that stopped with its reply saved and only the fold after it to run."""
    return state.next == (FOLD_NODE,) and bool(state.messages) and state.messages[-1].type == "ai"


class SummaryChange(NamedTuple):
    """A checkpoint where the summary changed: one entry of /summary history."""

    checkpoint_id: str
    step: int
    created_at: datetime | None
    folded: int
    folded_tokens: int
    summary: str


def summary_story(
    history: Sequence[Snapshot], counter: TokenCounter | None = None
) -> tuple[list[SummaryChange], list[BaseMessage]]:
    """:func:`summary_timeline` and :func:`folded_messages` in one pass over the lineage
    (what an export needs), each state read once and two held at a time."""
    counter = counter or TokenCounter()
    chain = lineage(history)
    if not chain:
        return [], []
    state_of = _States(size=2)
    live = {m.id for m in state_of(chain[-1]).messages}
    changes = []
    gone: dict[str, BaseMessage] = {}  # in the order they first appeared
    previous: CheckpointState | None = None
    for snapshot in chain:
        state = state_of(snapshot)
        for message in state.messages:
            if message.id and message.id not in live:
                gone.setdefault(message.id, message)
        if previous is not None and _folds(snapshot, previous, state):
            kept = {m.id for m in state.messages}
            left = [m for m in previous.messages if m.id not in kept]
            changes.append(
                SummaryChange(
                    checkpoint_id=snapshot.checkpoint_id,
                    step=snapshot.step,
                    created_at=state.created_at,
                    folded=len(left),
                    folded_tokens=sum(counter.per_message(left)) if left else 0,
                    summary=state.summary,
                )
            )
        previous = state
    return changes, list(gone.values())


def summary_timeline(
    history: Sequence[Snapshot], counter: TokenCounter | None = None
) -> list[SummaryChange]:
    """Every checkpoint in the lineage where the summary changed, oldest first.

    ``folded`` counts the messages that left ``messages`` in that step (folded into the summary).
    """
    return summary_story(history, counter)[0]


def folded_messages(history: Sequence[Snapshot]) -> list[BaseMessage]:
    """Messages of the lineage that are no longer live: the ones folded into the summary (and
    a reply /retry replaced, or what an /undo of the first turn cleared).

    In the order they first appeared; each once.
    """
    return summary_story(history)[1]


# --- what the summary saves -------------------------------------------------------------------


def _valid_record(record: FoldRecord | None) -> TypeGuard[FoldRecord]:
    return (
        isinstance(record, Mapping)
        and isinstance(record.get("messages"), int)
        and isinstance(record.get("tokens"), Mapping)
    )


def extend_fold_record(
    previous: FoldRecord | None,
    summary_before: str,
    folded: Sequence[BaseMessage],
    counters: Mapping[str, TokenCounter],
) -> dict[str, Any] | None:
    """The record a fold leaves in the state (:data:`FOLDED_KEY`): the messages it folded
    added to what the summary held before, with their raw tokens by each tokenizer the record
    counts with.

    A first summary (``summary_before`` empty) starts a record counted with ``counters``
    (tokenizer name -> counter). A summary extended keeps its record's tokenizers (those
    ``counters`` lacks are dropped). A summary made before records existed gets none
    (``None``): what it holds is known only from the checkpoints.
    """
    if not summary_before:
        base: FoldRecord = {"messages": 0, "tokens": dict.fromkeys(counters, 0)}
    elif previous is not None and _valid_record(previous):
        base = previous
    else:
        return None
    tokens = {
        name: int(total) + counters[name].raw(folded)
        for name, total in base["tokens"].items()
        if name in counters
    }
    return {"messages": int(base["messages"]) + len(folded), "tokens": tokens}


def summary_folds(history: Sequence[Snapshot], head: Snapshot | None = None) -> list[BaseMessage]:
    """The messages the summary at ``head`` (default: the newest checkpoint) holds, read from
    the checkpoints: those its lineage's folds took out of ``messages`` since the summary was
    last empty (an /undo of the first turn empties it). Each once, in the order they were
    folded. A fold is the fold node's step, or an update (/undo) that applied a finished fold's
    writes (the summary changed). What this counts is what :func:`extend_fold_record` records,
    except in a fork: its record carries what was folded in the thread it came from; this sees
    its own thread only.
    """
    chain = lineage(history, head)
    state_of = _States(size=2)
    folded: dict[str, BaseMessage] = {}
    previous: CheckpointState | None = None
    for snapshot in chain:
        state = state_of(snapshot)
        if not state.summary:
            folded.clear()
        elif (
            previous is not None
            and FOLD_NODE in previous.next
            and (snapshot.source == "loop" or state.summary != previous.summary)
        ):
            kept = {m.id for m in state.messages}
            for message in previous.messages:
                if message.id and message.id not in kept:
                    folded.setdefault(message.id, message)
        previous = state
    return list(folded.values())


class Savings(NamedTuple):
    """What the summary saves on every call."""

    tokens: int
    """The folded messages' tokens (usage-scaled as the live messages are) minus the
    summary's."""
    messages: int
    """How many messages the summary holds."""


def summary_savings(
    head: Snapshot | None,
    history: Callable[[], Sequence[Snapshot]],
    counter: TokenCounter | None = None,
    *,
    use_record: bool = True,
) -> Savings:
    """Tokens the summary at ``head`` saves on every call, and how many messages it holds.

    From the state's record of its folds (:func:`extend_fold_record`) when it has one counted
    with ``counter``'s tokenizer: nothing else is read. Otherwise (a thread summarized before
    records existed, or counted with another tokenizer) from the lineage's checkpoints
    (:func:`summary_folds`; ``history`` is called only then).
    """
    counter = counter or TokenCounter()
    if head is None or not head.summary:
        return Savings(0, 0)
    record = head.fold_record if use_record else None
    raw = record["tokens"].get(counter.name) if _valid_record(record) else None
    if isinstance(raw, int) and record is not None:
        count = int(record["messages"])
    else:
        folded = summary_folds(history(), head)
        raw, count = counter.raw(folded), len(folded)
    if not count:
        return Savings(0, 0)
    tokens = math.ceil(raw * counter.scale(head.messages))
    return Savings(max(0, tokens - counter.text(head.summary)), count)


class TurnPoints(NamedTuple):
    """Where the latest turn of a lineage started."""

    before: Snapshot | None
    """The state before the user's message arrived (what /undo restores); ``None`` for the
    thread's first turn, which has no earlier checkpoint to restore."""
    after_input: Snapshot | None
    """The state with the user's message added, before the reply (where /retry resumes)."""
    compacted: bool = False
    """A compaction ran after this turn: regenerating from ``after_input`` would undo it."""
    input: Snapshot | None = None
    """The turn's ``input`` checkpoint, where its run starts."""


def last_turn(history: Sequence[Snapshot], head: Snapshot | None = None) -> TurnPoints | None:
    """Find the latest turn's start by walking back from ``head`` to its ``input`` checkpoint.

    An undo checkpoint's parent is the state it restored, so walking on from it reaches the
    turn before: repeated /undo keeps rewinding. A compaction's run is not a turn. The
    thread's first turn counts too (it can be retried, not undone). ``None`` when there is
    no turn at all. Reads one state: the checkpoint after the input (is the run over there?).
    """
    if not history:
        return None
    index = by_id(history)
    path: list[Snapshot] = []  # from head back to the input checkpoint
    for snapshot in _back(index, head or _newest(history)):
        if _is_turn_start(snapshot):
            after = path[-1] if path else None
            if after is not None and not after.next:
                after = None  # the input checkpoint is the run's last: nothing to resume from
            before = index.get(snapshot.parent_id) if snapshot.parent_id else None
            compacted = any(s.metadata.get(ACTION_KEY) == "compact" for s in [snapshot, *path])
            return TurnPoints(before=before, after_input=after, compacted=compacted, input=snapshot)
        path.append(snapshot)
    return None


def find_checkpoint(history: Sequence[Snapshot], fragment: str) -> Snapshot:
    """The checkpoint whose id equals, starts with or ends with ``fragment`` (unique).

    Raises ``LookupError`` with a one-line explanation otherwise.
    """
    wanted = fragment.strip().lower()
    if not wanted:
        raise LookupError("give a checkpoint id (the thread's history lists them)")
    exact = [s for s in history if s.checkpoint_id.lower() == wanted]
    if exact:
        return exact[0]
    matches = [
        s
        for s in history
        if s.checkpoint_id.lower().startswith(wanted) or s.checkpoint_id.lower().endswith(wanted)
    ]
    from chatbot.threadids import quoted

    if not matches:
        raise LookupError(
            f"no checkpoint {quoted(fragment)} in this thread (its history lists them)"
        )
    if len(matches) > 1:
        raise LookupError(
            f"{quoted(fragment)} matches {len(matches)} checkpoints: give more of the id"
        )
    return matches[0]


def short_id(checkpoint_id: str) -> str:
    """The part of a checkpoint id people type: its last 8 characters (unique in practice)."""
    return checkpoint_id[-8:]


def compact_refusal(snapshot: Snapshot | None) -> str | None:
    """Why a thread cannot be compacted now (one line), or None when it can."""
    pending = snapshot is not None and bool(snapshot.state.pending)
    if snapshot is None or not (snapshot.messages or pending):
        return "nothing to compact: this thread has no messages yet"
    if pending or snapshot.messages[-1].type != "ai":  # (a fold cut short after the reply is fine)
        return "the last turn has no reply yet: retry it first (/retry in the REPL), then compact"
    return None
