"""``chatbot db migrate``: old checkpoints rewritten in the compact layout, on SQLite and on
PostgreSQL.

A chatbot before the compact layout stored the whole message window and the summary in every
checkpoint. Now a checkpoint stores them only every so often (a snapshot) and is otherwise
rebuilt from its parent and the writes that made it (:mod:`chatbot.store.deltas`). An old
checkpoint is rewritten without them only where that rebuilding gives back exactly what it
stores (checked, value by value, before anything is written), and a snapshot is kept every
:data:`chatbot.memory.channels.MESSAGES_SNAPSHOT_EVERY` updates, as new turns keep them; its
metadata gets the counts LangGraph keeps (``counters_since_delta_snapshot``), so the next turn
goes on counting from there. A thread's checkpoints go parents first, a batch a transaction,
each replaced only if it is still the one read: a run cut short leaves every checkpoint either
as it was or compact, and the next run goes on.

PostgreSQL stores each version of a value once (``checkpoint_blobs``, named by every checkpoint
holding that version; a string such as the summary inline in the checkpoint): there a version
no longer stored is one its checkpoints rebuild, so a blob is deleted only where every
checkpoint naming it rebuilds it exactly, and an inline value is removed from the checkpoints
that rebuild it. The checkpoints' metadata gets the counts, as on SQLite.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from langgraph.checkpoint.base import writes_sort_key

from chatbot.store import compression, deltas

if TYPE_CHECKING:
    from chatbot.store.postgres import PgStore
    from chatbot.store.sqlite import SqlStore, Store

_UPDATE = (
    "UPDATE checkpoints SET type = ?, checkpoint = ?, metadata = ? WHERE thread_id = ? "
    "AND checkpoint_ns = '' AND checkpoint_id = ? AND checkpoint = ?"
)


class Compacted(NamedTuple):
    checkpoints: int
    """Checkpoints rewritten (or, in a dry run, that would be)."""
    before: int
    after: int


def checkpoints_to_read(store: SqlStore) -> int:
    ((count,),) = store._query("SELECT COUNT(*) FROM checkpoints WHERE checkpoint_ns = ''")
    return int(count)


def compact(
    store: SqlStore,
    *,
    dry_run: bool = False,
    progress: Callable[[int], object] | None = None,
    batch: int = 200,
) -> Compacted:
    """Rewrite every thread's old whole checkpoints in the compact layout (module doc)."""
    from chatbot.store.sqlite import Store

    each = _compact_thread if isinstance(store, Store) else _compact_pg_thread
    threads = [
        row[0]
        for row in store._query(
            "SELECT DISTINCT thread_id FROM checkpoints WHERE checkpoint_ns = '' ORDER BY 1"
        )
    ]
    total = Compacted(0, 0, 0)
    for thread_id in threads:
        done = each(store, thread_id, dry_run, progress, batch)  # type: ignore[arg-type]
        total = Compacted(*(a + b for a, b in zip(total, done, strict=True)))
    return total


def _compact_thread(
    store: Store,
    thread_id: str,
    dry_run: bool,
    progress: Callable[[int], object] | None,
    batch: int,
) -> Compacted:
    serde = store.saver.serde
    specs = deltas.delta_channels()
    rows = store._query(
        "SELECT checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata FROM checkpoints "
        "WHERE thread_id = ? AND checkpoint_ns = '' ORDER BY checkpoint_id",
        (thread_id,),
    )
    written = _writes_of(store, thread_id, list(specs), "writes", "value")
    by_id = {row[0]: row for row in rows}
    children: dict[str | None, list[str]] = defaultdict(list)
    for checkpoint_id, parent, *_ in rows:
        children[parent if parent in by_id else None].append(checkpoint_id)
    values: dict[str, dict[str, Any]] = {}
    counts: dict[str, dict[str, tuple[int, int]]] = {}
    versions: dict[str, dict[str, Any]] = {}
    updates: list[tuple[str, tuple[Any, ...]]] = []
    done, before, after, read = 0, 0, 0, 0
    waiting = list(reversed(children[None]))
    while waiting:  # (parents first)
        checkpoint_id = waiting.pop()
        waiting.extend(reversed(children.get(checkpoint_id, [])))
        _, parent, kind, data, metadata = by_id[checkpoint_id]
        checkpoint = serde.loads_typed((kind, bytes(data)))
        meta = json.loads(bytes(metadata)) if metadata else {}
        stored_values = checkpoint["channel_values"]
        channel_versions = checkpoint["channel_versions"]
        versions[checkpoint_id] = channel_versions
        counters: dict[str, Any] = dict(meta.get("counters_since_delta_snapshot") or {})
        kept, count, dropped = {}, {}, []
        for channel, spec in specs.items():
            if channel not in channel_versions:
                continue
            stored = stored_values.get(channel, _MISSING)
            known = values.get(parent or "", {}).get(channel, _MISSING) if parent else _MISSING
            if known is not _MISSING:
                expected = _replayed(spec, known, written.get((str(parent), channel), []), serde)
            else:
                expected = _MISSING
            if stored is _MISSING:  # (already compact: rebuilt from its parent)
                kept[channel] = expected
                count[channel] = tuple(counters.get(channel, (1, 1)))
                continue
            kept[channel] = deltas.unwrapped(stored)
            updates_since, steps_since = counts.get(str(parent), {}).get(channel, (0, 0))
            moved = channel_versions.get(channel) != versions.get(str(parent), {}).get(channel)
            updates_since, steps_since = updates_since + int(moved), steps_since + 1
            if (
                expected is not _MISSING
                and type(stored) is type(expected)
                and stored == expected
                and updates_since < spec.snapshot_frequency
            ):
                dropped.append(channel)
                count[channel] = (updates_since, steps_since)
                counters[channel] = [updates_since, steps_since]
            else:
                count[channel] = (0, 0)
                counters.pop(channel, None)
        values[checkpoint_id] = kept
        counts[checkpoint_id] = count
        read += 1
        if dropped:
            compact_checkpoint = {
                **checkpoint,
                "channel_values": {k: v for k, v in stored_values.items() if k not in dropped},
            }
            new_kind, new_data = serde.dumps_typed(compact_checkpoint)
            new_meta = json.dumps({**meta, "counters_since_delta_snapshot": counters}).encode()
            done += 1
            # (as the compressing step of ``db migrate`` leaves it: a dry run, which did not
            # compress it, says what the run would save, not that twice)
            before += len(compression.compress(kind, bytes(data))[1]) + len(metadata or b"")
            after += len(new_data) + len(new_meta)
            updates.append(
                (_UPDATE, (new_kind, new_data, new_meta, thread_id, checkpoint_id, data))
            )
        if len(updates) >= batch or not waiting:
            if updates and not dry_run:
                store._write(*updates)
            updates = []
            if progress is not None:
                progress(read)
            read = 0
    if progress is not None and read:
        progress(read)
    return Compacted(done, before, after)


_MISSING = object()


def _writes_of(
    store: SqlStore, thread_id: str, channels: list[str], table: str, column: str
) -> dict[tuple[str, str], list[tuple[Any, tuple[str, bytes]]]]:
    """A thread's pending writes to ``channels``, serialized, by (checkpoint, channel), each
    with the key LangGraph applies them in: LangGraph's ``table`` and its value ``column``."""
    marks = ", ".join("?" * len(channels))
    written: dict[tuple[str, str], list[tuple[Any, tuple[str, bytes]]]] = defaultdict(list)
    for checkpoint_id, channel, task_id, idx, kind, value, path in store._query(
        f"SELECT checkpoint_id, channel, task_id, idx, type, {column}, task_path FROM {table} "
        f"WHERE thread_id = ? AND checkpoint_ns = '' AND channel IN ({marks})",
        (thread_id, *channels),
    ):
        written[(checkpoint_id, channel)].append(
            (writes_sort_key(path or "", task_id, idx), (kind, bytes(value)))
        )
    return written


def _compact_pg_thread(
    store: PgStore,
    thread_id: str,
    dry_run: bool,
    progress: Callable[[int], object] | None,
    batch: int,
) -> Compacted:
    serde = store.saver.serde
    specs = deltas.delta_channels()
    names = list(specs)
    rows = store._query(
        "SELECT checkpoint_id, parent_checkpoint_id, checkpoint -> 'channel_versions', "
        "checkpoint -> 'channel_values', metadata FROM checkpoints "
        "WHERE thread_id = ? AND checkpoint_ns = '' ORDER BY checkpoint_id",
        (thread_id,),
    )
    marks = ", ".join("?" * len(names))
    blobs = {
        (channel, version): (kind, bytes(blob))
        for channel, version, kind, blob in store._query(
            "SELECT channel, version, type, blob FROM checkpoint_blobs WHERE thread_id = ? "
            f"AND checkpoint_ns = '' AND channel IN ({marks}) AND blob IS NOT NULL",
            (thread_id, *names),
        )
    }
    written = _writes_of(store, thread_id, names, "checkpoint_writes", "blob")
    by_id = {row[0]: row for row in rows}
    values: dict[str, dict[str, Any]] = {}
    counts: dict[str, dict[str, tuple[int, int]]] = {}
    namers: dict[tuple[str, str], list[bool]] = defaultdict(list)  # (may the blob go, each)
    plans: list[tuple[str, list[str], list[str], dict[str, Any], dict[str, Any]]] = []
    for checkpoint_id, parent, channel_versions, inline, metadata in rows:  # (parents first)
        channel_versions, inline = channel_versions or {}, inline or {}
        meta = dict(metadata or {})
        counters: dict[str, Any] = dict(meta.get("counters_since_delta_snapshot") or {})
        parent_row = by_id.get(parent or "")
        kept, count, dropped, from_inline = {}, {}, [], []
        for channel, spec in specs.items():
            version = channel_versions.get(channel)
            if version is None:
                continue
            snapshot, inlined = False, False  # (today's snapshot: kept as it is)
            if (channel, version) in blobs:  # (a blob wins: today's leave a `true` inline)
                raw = serde.loads_typed(blobs[(channel, version)])
                snapshot = deltas.unwrapped(raw) is not raw
                stored = deltas.unwrapped(raw)
            elif channel in inline:
                stored, inlined = inline[channel], True
            else:
                stored = _MISSING
            known = values.get(str(parent), {}).get(channel, _MISSING) if parent_row else _MISSING
            if known is not _MISSING:
                expected = _replayed(spec, known, written.get((str(parent), channel), []), serde)
            else:
                expected = _MISSING
            if stored is _MISSING:  # (already compact: rebuilt from its parent)
                kept[channel] = expected
                count[channel] = tuple(counters.get(channel, (1, 1)))
                continue
            kept[channel] = stored
            updates_since, steps_since = counts.get(str(parent), {}).get(channel, (0, 0))
            moved = parent_row is None or version != (parent_row[2] or {}).get(channel)
            updates_since, steps_since = updates_since + int(moved), steps_since + 1
            rebuilt = (
                not snapshot
                and expected is not _MISSING
                and type(stored) is type(expected)
                and stored == expected
                and updates_since < spec.snapshot_frequency
            )
            if (channel, version) in blobs:
                namers[(channel, version)].append(rebuilt)
            if rebuilt:
                dropped.append(channel)
                if inlined:
                    from_inline.append(channel)
                count[channel] = (updates_since, steps_since)
                counters[channel] = [updates_since, steps_since]
            else:
                count[channel] = (0, 0)
                counters.pop(channel, None)
        values[checkpoint_id] = kept
        counts[checkpoint_id] = count
        if dropped:
            meta["counters_since_delta_snapshot"] = counters
            plans.append((checkpoint_id, dropped, from_inline, inline, meta))
    gone = {key for key, may in namers.items() if all(may)}  # (a blob: every namer rebuilds it)
    done, before, after, read = 0, 0, 0, 0
    updates: list[tuple[str, tuple[Any, ...]]] = []
    deleted: set[tuple[str, str]] = set()
    for checkpoint_id, dropped, removed, inline, meta in plans:
        versions = by_id[checkpoint_id][2] or {}
        if not removed and not any((c, versions[c]) in gone for c in dropped):
            continue  # (its values stay stored: it is a snapshot, as it was)
        blobs_out = [(c, versions[c]) for c in dropped if c not in removed]
        blobs_out = [key for key in blobs_out if key in gone and key not in deleted]
        deleted.update(blobs_out)
        done += 1
        before += sum(len(json.dumps(inline[c])) for c in removed)
        # (as the compressing step of ``db migrate`` leaves them: see _compact_thread)
        before += sum(len(compression.compress(*blobs[key])[1]) for key in blobs_out)
        new_meta = json.dumps(meta)
        after += len(new_meta) - len(json.dumps(by_id[checkpoint_id][4] or {}))
        stripped = "checkpoint" + " #- ARRAY['channel_values', ?::text]" * len(removed)
        updates.append(
            (
                f"UPDATE checkpoints SET metadata = ?::jsonb, checkpoint = {stripped} "
                "WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id = ?",
                (new_meta, *removed, thread_id, checkpoint_id),
            )
        )
        updates.extend(
            (
                "DELETE FROM checkpoint_blobs WHERE thread_id = ? AND checkpoint_ns = '' "
                "AND channel = ? AND version = ?",
                (thread_id, channel, version),
            )
            for channel, version in blobs_out
        )
        read += 1
        if len(updates) >= batch:
            if not dry_run:
                store._write(*updates)
            updates = []
            if progress is not None:
                progress(read)
            read = 0
    if updates and not dry_run:
        store._write(*updates)
    if progress is not None:
        progress(len(rows) - done + read)
    return Compacted(done, before, max(0, after))


def _replayed(spec: Any, value: Any, writes: list[Any], serde: Any) -> Any:
    ordered = [serde.loads_typed(data) for _, data in sorted(writes, key=_order)]
    return deltas.replay(spec, value, ordered)


def _order(row: tuple[Any, Any]) -> Any:
    return row[0]
