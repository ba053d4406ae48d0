"""One turn at a time per thread, across windows, processes and hosts.

A turn holds its thread's lease, a row of ``chatbot_leases`` with an expiry renewed while the
turn runs: a second turn on a busy thread waits, saying so; turns on different threads never
wait for each other. A process killed mid-turn holds it until it expires, unless it ran on this
machine, where a holder whose process is gone is passed over at once. (Not PostgreSQL's
advisory locks: behind pgbouncer in transaction mode a session is not the client's.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from chatbot.store.base import LEASE_SECONDS, SqlStore

POLL_SECONDS = 0.1
"""How often a waiting turn asks again."""


def _this_place() -> str:
    """This machine's boot and PID namespace, where Linux says them (else empty): where a
    process id means one process only."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    return f"{boot}/{namespace}" if boot else ""


PLACE = _this_place()


def _holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}:{PLACE}"


HOLDER = _holder()
"""This process's name on its leases: host, process id, a random part, and :data:`PLACE`. One
per process: a turn that re-enters renews its own lease instead of waiting for itself."""


def gone(holder: str) -> bool:
    """True when ``holder`` names a process of this place that no longer runs, whose lease is
    taken at once; any doubt says no, and that lease only expires."""
    parts = holder.split(":")
    if len(parts) != 4:
        return False
    _, pid, _, place = parts
    if not PLACE or place != PLACE or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # (PermissionError: another user's process, alive)
        return False
    return False


class _Renewer:
    """Renews every lease this process holds, on one daemon thread started at the first."""

    def __init__(self) -> None:
        self._due: dict[Lease, float] = {}
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def hold(self, lease: Lease) -> None:
        with self._changed:
            self._due[lease] = time.monotonic() + lease.seconds / 3
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="chatbot-lease", daemon=True)
                self._thread.start()
            self._changed.notify()

    def drop(self, lease: Lease) -> None:
        with self._changed:
            self._due.pop(lease, None)

    def _run(self) -> None:
        while True:
            with self._changed:
                now = time.monotonic()
                due = [lease for lease, when in self._due.items() if when <= now]
                if not due:
                    soonest = min(self._due.values(), default=None)
                    self._changed.wait(None if soonest is None else soonest - now)
                    continue
                for lease in due:
                    self._due[lease] = now + lease.seconds / 3
            for lease in due:
                if not lease.renew():  # a closed store at exit: the lease expires by itself
                    self.drop(lease)


_renewer = _Renewer()
# (a forked child has no renewer thread, and holds none of its parent's leases)
os.register_at_fork(after_in_child=lambda: globals().update(_renewer=_Renewer(), HOLDER=_holder()))


class Lease:
    """A thread's lease, taken with :meth:`acquire` or :meth:`aacquire`, renewed in the
    background while held, given back on :meth:`release`."""

    def __init__(self, store: SqlStore, thread_id: str, seconds: float = LEASE_SECONDS) -> None:
        self.store = store
        self.thread_id = thread_id
        self.seconds = seconds
        self._held = False
        self._renewing = threading.Lock()
        """Held while the lease is renewed or given back, so no renewal follows the release."""

    def _take(self) -> bool:
        """Take the lease if it is free, ours, or held by a process that is :func:`gone`."""
        if self.store.try_lease(self.thread_id, HOLDER, self.seconds):
            return True
        holder = self.store.lease_holder(self.thread_id)
        return (
            holder is not None
            and gone(holder)
            and self.store.try_lease(self.thread_id, HOLDER, self.seconds, replacing=holder)
        )

    def try_acquire(self) -> bool:
        """Take the lease if it is free (or ours); False without waiting if not."""
        return next(self._waits(lambda: None), True)

    def _waits(self, on_wait: Callable[[], None]) -> Iterator[bool]:
        """False for each poll to wait before the lease is ours (then it is renewed);
        ``on_wait`` is called before the first."""
        if not self._take():
            on_wait()
            yield False
            while not self._take():
                yield False
        self._held = True
        _renewer.hold(self)

    def acquire(self, on_wait: Callable[[], None] = lambda: None) -> None:
        """Wait until the lease is ours; ``on_wait`` is called once if it has to wait."""
        for _ in self._waits(on_wait):
            time.sleep(POLL_SECONDS)

    async def aacquire(self, on_wait: Callable[[], None] = lambda: None) -> None:
        """:meth:`acquire` for a task: cancelling it (Ctrl-C) stops the waiting."""
        for _ in self._waits(on_wait):
            await asyncio.sleep(POLL_SECONDS)

    def renew(self) -> bool:
        """Renew the lease if it is still held; False when the store cannot be reached."""
        with self._renewing:
            if not self._held:
                return True
            try:
                self.store.try_lease(self.thread_id, HOLDER, self.seconds)
            except Exception:
                return False
            return True

    def release(self) -> None:
        """Give the lease back and stop renewing it. A store that cannot be written any more
        leaves it to expire by itself: the error that stopped the turn is the one to tell."""
        _renewer.drop(self)
        with self._renewing:
            self._held = False
            with contextlib.suppress(Exception):
                self.store.release_lease(self.thread_id, HOLDER)

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
