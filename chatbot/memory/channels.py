"""How the state's ``messages`` and ``summary`` change: their reducers, and the channels that
store them (LangGraph's ``DeltaChannel``: :func:`delta_channel`).

A checkpoint stores the message window and the summary only every so often (a snapshot); the
ones between store the writes, replayed onto the nearest snapshot through these reducers. A
replay must give the same state every time, so a message without an id gets one made from
where it lands and what it says.

Kept apart from :mod:`chatbot.memory.state` so that reading commands rebuild a checkpoint's
state with the same channels (:func:`delta_channels`) without LangGraph's graph imports
(``add_messages`` is imported by the first merge that needs it).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, cast

from langchain_core.messages import (
    BaseMessage,
    BaseMessageChunk,
    HumanMessage,
    convert_to_messages,
    message_chunk_to_message,
)

KINDS = {str: "text (a string; '' for none)", dict: "an object (a dict)"}

MESSAGES_SNAPSHOT_EVERY = 60
"""Updates of ``messages`` between two checkpoints that store the whole window."""

_NAMESPACE = uuid.UUID("5f0c2d3e-8b9a-4f51-9a7e-2c61b0d4e8a1")


def described(value: Any) -> str:
    return "None" if value is None else f"{type(value).__name__} {value!r:.40}"


def _given_ids(left: Sequence[BaseMessage], right: Sequence[BaseMessage]) -> None:
    """Give each message without an id one made from what it follows and what it says
    (``add_messages`` gives a random one), so a replayed state has the same ids every time."""
    after = left[-1].id if left else ""
    for number, message in enumerate(right):
        if not message.id:
            name = f"{after}:{number}:{message.type}:{message.content!r}"
            message.id = str(uuid.uuid5(_NAMESPACE, name))


def _messages(values: Sequence[Any]) -> list[Any]:
    """Messages as the state keeps them: objects, not dicts (a server's state) or chunks; a
    list that holds only such objects already is copied as it is."""
    if all(
        issubclass(kind, BaseMessage) and not issubclass(kind, BaseMessageChunk)
        for kind in set(map(type, values))
    ):
        return list(values)
    return [message_chunk_to_message(m) for m in convert_to_messages(values)]


def merge_messages(left: list[Any], right: list[Any]) -> list[BaseMessage]:
    """LangGraph's ``add_messages``, each new message without an id given one first."""
    from langgraph.graph.message import add_messages

    kept, new = _messages(left), _messages(right)
    _given_ids(kept, new)
    return cast("list[BaseMessage]", add_messages(kept, new))


def checked_messages(left: list[Any], right: Any) -> list[BaseMessage]:
    """:func:`merge_messages`, refusing what is not messages in one line; a bare string is one
    new human message, as ``add_messages`` takes it."""
    if isinstance(right, list) and all(isinstance(m, BaseMessage) for m in right):
        return merge_messages(left, right)  # (what the nodes write: nothing to check)
    if isinstance(right, str):
        right = HumanMessage(right)
    if not isinstance(right, list | tuple | dict | BaseMessage):
        from langgraph.errors import InvalidUpdateError

        raise InvalidUpdateError(
            f"the state's 'messages' must be a list of messages, not {described(right)}: "
            "nothing was changed; update it with a list, e.g. [{'type': 'human', 'content': "
            "'hi'}] (a message with a kept one's id replaces it)"
        )
    try:
        messages = convert_to_messages(right if isinstance(right, list) else [right])
    except (NotImplementedError, ValueError) as error:
        from langgraph.errors import InvalidUpdateError

        reason = str(error).splitlines()[0]  # (langchain-core's: "Unsupported message type: …")
        raise InvalidUpdateError(
            f"the state's 'messages' must be a list of messages: {reason}; nothing was "
            "changed; give each as a message, or a dict like {'type': 'human', 'content': 'hi'}"
        ) from None
    return merge_messages(left, list(messages))


def replay_messages(left: Sequence[Any], writes: Sequence[Any]) -> list[Any]:
    """The ``messages`` reducer over a batch of writes, oldest first, each merged as
    :func:`checked_messages` merges one; a write of new messages only is just appended."""
    merged = _messages(left)
    ids = {message.id for message in merged}
    for write in writes:
        if _all_new(write, ids):
            merged.extend(write)
            ids.update(m.id for m in write)
            continue
        merged = list(checked_messages(merged, write))
        ids = {message.id for message in merged}
    return merged


def _all_new(write: Any, ids: set[Any]) -> bool:
    """True if a write is a list of messages with ids, none of them kept already or removing."""
    if not isinstance(write, list):
        return False
    fresh: set[str] = set()
    for m in write:
        if not isinstance(m, BaseMessage) or isinstance(m, BaseMessageChunk) or not m.id:
            return False
        if m.type == "remove" or m.id in ids or m.id in fresh:
            return False
        fresh.add(m.id)
    return True


def replay_summary(left: str, writes: Sequence[Any]) -> str:
    """The ``summary`` reducer over a batch of writes: the last one, each checked to be text."""
    for value in writes:
        if not isinstance(value, str):
            from langgraph.errors import InvalidUpdateError

            raise InvalidUpdateError(
                f"the state's 'summary' must be {KINDS[str]}, not {described(value)}: "
                "nothing was changed; update it with one"
            )
    return writes[-1] if writes else left


REDUCERS: dict[str, tuple[Any, type]] = {
    "messages": (replay_messages, list),
    "summary": (replay_summary, str),
}
"""The state's delta channels by key: their reducer and the type of their value
(:func:`delta_channel` makes the channels from it)."""

SNAPSHOT_EVERY = {"messages": MESSAGES_SNAPSHOT_EVERY, "summary": 2}
"""Updates of each delta channel between two checkpoints that store it."""


def delta_channel(key: str) -> Any:
    """The LangGraph ``DeltaChannel`` of the state's ``key`` (``messages`` or ``summary``)."""
    from langgraph.channels.delta import DeltaChannel

    reducer, typ = REDUCERS[key]
    return DeltaChannel(reducer, typ, snapshot_frequency=SNAPSHOT_EVERY[key])


def delta_channels() -> dict[str, Any]:
    """The state's delta channels by key, for a reader rebuilding a checkpoint's values."""
    global _CHANNELS
    if _CHANNELS is None:
        _CHANNELS = {key: delta_channel(key) for key in REDUCERS}
    return _CHANNELS


_CHANNELS: dict[str, Any] | None = None
