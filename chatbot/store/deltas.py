"""The state of a checkpoint that does not store all of it.

The graph's ``messages`` and ``summary`` are LangGraph ``DeltaChannel``s
(:mod:`chatbot.memory.state`): a checkpoint stores them only every so often (a snapshot), and
the checkpoints between hold the writes that changed them. LangGraph rebuilds them when it
loads a checkpoint to run; chatbot's own readers (``history``, ``show``, export, /undo, the
search index) read checkpoints without the graph, and rebuild them here the same way: the
nearest stored value, then the writes since, through the channel's reducer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, CheckpointTuple
from langgraph.checkpoint.serde.types import _DeltaSnapshot


def delta_channels() -> Mapping[str, DeltaChannel[Any]]:
    """The state's keys that are delta channels, and their channels (as the graph makes them)."""
    from chatbot.memory.channels import DELTA_CHANNELS

    return DELTA_CHANNELS


def missing(checkpoint: Checkpoint) -> list[str]:
    """The delta channels a checkpoint has written but does not store."""
    values = checkpoint["channel_values"]
    versions = checkpoint["channel_versions"]
    return [key for key in delta_channels() if key in versions and key not in values]


def unwrapped(value: Any) -> Any:
    """A stored value as the state holds it (a snapshot is stored wrapped)."""
    return value.value if isinstance(value, _DeltaSnapshot) else value


def complete(saver: BaseCheckpointSaver[Any], saved: CheckpointTuple) -> CheckpointTuple:
    """``saved`` with every state key's value in its ``channel_values``, as LangGraph's
    ``get_state`` would read them (the checkpoint itself is not changed)."""
    checkpoint = saved.checkpoint
    values = checkpoint["channel_values"]
    wanted = missing(checkpoint)
    snapshots = [key for key, value in values.items() if isinstance(value, _DeltaSnapshot)]
    if not wanted and not snapshots:
        return saved
    filled = {key: unwrapped(value) for key, value in values.items()}
    replayed = getattr(saver, "replayed", None)
    if wanted and replayed is not None:  # (chatbot's SQLite saver: kept as it reads)
        filled.update(replayed(saved.config, {key: delta_channels()[key] for key in wanted}))
    elif wanted:
        histories = saver.get_delta_channel_history(config=saved.config, channels=wanted)
        specs = delta_channels()
        for key in wanted:
            history = histories.get(key, {"writes": []})
            spec = specs[key]
            channel = spec.from_checkpoint(
                history["seed"] if "seed" in history else spec.ValueType()
            )
            channel.replay_writes(history["writes"])
            filled[key] = channel.get()
    return saved._replace(checkpoint={**checkpoint, "channel_values": filled})


def stored_and_written(saved: CheckpointTuple, made_by: Any) -> list[Any]:
    """The messages a checkpoint stores (if it stores them) and those the writes that made it
    (its parent's pending writes) added: together, every message first seen there."""
    stored = saved.checkpoint["channel_values"].get("messages") or ()
    found = list(unwrapped(stored))
    for _, channel, value in made_by:
        if channel == "messages":
            found.extend(value if isinstance(value, list) else [value])
    return [m for m in found if getattr(m, "type", "remove") != "remove"]
