"""Ordered lanes: one queue per key, run in order; different keys run side by side.

The dispatcher (events by conversation) and the outbox (replies by target chat) both need
the same thing: a key's rows handled one at a time in arrival order, a retry waiting in
its lane so that order holds, different keys never waiting for each other except for a
concurrency limit, and a way to wait until everything queued is done. This module is that
engine; what a row is, when it is finished and how a failure waits stay with the caller
(its ``attempt`` callback and the row's due time).

Two modes:

- **Local** (one process owns the store): rows are handed in with :meth:`Lanes.add`; a
  key with rows has one worker task that runs them from its deque and leaves when the
  deque is empty.
- **Shared** (several processes on one store, PostgreSQL): the database is the queue.
  :meth:`Lanes.poke` says "look at this key"; its worker takes the key's cross-process
  lock, reads the key's rows from the store and runs them in order, lets go, and looks
  once more, because a row may have landed between its last read and the unlock. Another
  process holding the lock means that process runs the lane; this one leaves it alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from tether.gateway.core.slots import Slots
from tether.memory.roles import LaneLocks

Row = TypeVar("Row")

#: One attempt at a key's row, called within a concurrency slot. True once the row is
#: finished; False to try it again when it is due (the callback sets its new due time).
Attempt = Callable[[str, Row], Awaitable[bool]]


@dataclass(frozen=True)
class SharedStore(Generic[Row]):
    """Where a shared lane's rows come from.

    ``lock`` prefixes the lock's name (``f"{lock}:{key}"``); ``read`` returns the key's
    unfinished rows in order; ``usable``, when given, may set a row aside (it is skipped,
    and must be left in a state that ``read`` no longer returns).
    """

    locks: LaneLocks
    lock: str
    read: Callable[[str], Awaitable[Sequence[Row]]]
    usable: Callable[[Row], Awaitable[bool]] | None = None


class Lanes(Generic[Row]):
    """Per-key ordered lanes with one worker task per busy key and a concurrency limit.

    ``due`` tells when a row may be tried (epoch seconds, or None for now): a row that is
    not yet due holds its lane, not a slot. ``task`` names the worker tasks
    (``f"{task}:{key}"``), which is what a stack dump or ``asyncio.all_tasks`` shows.
    ``failed`` is called inside the ``except`` when a shared worker's store calls fail,
    to log it; the worker then ends and the next poke (the sweep) tries again.
    ``finished`` is told of each row a local lane finished, after it left the lane.
    """

    def __init__(
        self,
        attempt: Attempt[Row],
        *,
        due: Callable[[Row], float | None],
        concurrency: int,
        task: str,
        failed: Callable[[str], None],
        shared: SharedStore[Row] | None = None,
        finished: Callable[[Row], None] | None = None,
    ) -> None:
        self._attempt_row = attempt
        self._due = due
        self._slots = Slots(concurrency)  # a Semaphore whose release is O(1): slots.py
        self._task = task
        self._failed = failed
        self._shared = shared
        self._finished = finished
        self._lanes: dict[str, deque[Row]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        #: Keys whose row is inside a slot right now (not waiting for its time or a slot).
        self._running: set[str] = set()
        #: Shared keys poked while their worker was busy: it looks again before it leaves.
        self._dirty: set[str] = set()
        #: Shared keys whose worker reads the store again after its current row.
        self._reread: set[str] = set()
        #: Keys whose head row waits for its due time, and what ends the wait early.
        self._waiting: dict[str, asyncio.Event] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self.stopping = False
        if shared is not None:
            shared.locks.on_locks_lost(self._locks_lost)

    @property
    def shared(self) -> bool:
        """The store is the queue: :meth:`poke` keys instead of :meth:`add` rows."""
        return self._shared is not None

    def add(self, key: str, row: Row) -> None:
        """Local mode: queue ``row`` at the end of ``key``'s lane.

        After :meth:`stop` the row is kept but no worker starts: it stays in the store
        and runs at the next start.
        """
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = deque()
        lane.append(row)
        self._idle.clear()
        if key not in self._workers and not self.stopping:
            self._workers[key] = asyncio.create_task(self._work(key), name=f"{self._task}:{key}")

    def add_next(self, key: str, row: Row) -> None:
        """Local mode: queue ``row`` right behind the row ``key``'s lane runs now (or
        first, in an empty lane): a turn resumed by an answer runs before the events
        that came after the answer."""
        lane = self._lanes.get(key)
        if not lane:
            self.add(key, row)
            return
        lane.insert(1, row)

    def poke_first(self, key: str) -> None:
        """Shared mode: :meth:`poke`, and have a worker running ``key``'s lane read the
        store again after its current row instead of going on with what it read (a
        resumed turn has an older ``seq`` than the rows it read)."""
        if key in self._workers:
            self._reread.add(key)
        self.poke(key)

    def poke(self, key: str) -> None:
        """Shared mode: look at ``key``'s rows in the store (new ones may be there)."""
        if self._shared is None:
            raise RuntimeError("poke needs a shared store; local lanes are given rows")
        if self.stopping:
            return
        if key in self._workers:
            self._dirty.add(key)  # the running worker looks again before it leaves
            return
        self._idle.clear()
        self._workers[key] = asyncio.create_task(
            self._work_shared(key, self._shared), name=f"{self._task}:{key}"
        )

    def wake(self, key: str) -> bool:
        """``key``'s row that waits for its due time is tried now instead (an operator
        requeued it, ``/stop`` called it off); False when none of its rows waits."""
        waiting = self._waiting.get(key)
        if waiting is None:
            return False
        waiting.set()
        return True

    async def _work(self, key: str) -> None:
        lane = self._lanes[key]
        try:
            while lane and not self.stopping:
                row = lane[0]
                if await self._attempt(key, row):
                    lane.popleft()
                    if self._finished is not None:
                        self._finished(row)
        finally:
            self._workers.pop(key, None)
            if not lane:
                self._lanes.pop(key, None)
            if not self._workers:
                self._idle.set()

    async def _work_shared(self, key: str, store: SharedStore[Row]) -> None:
        """Take the key's lock, run what the store holds for it in order, let go, and
        look once more (a row may have landed between the last read and the unlock)."""
        lock = f"{store.lock}:{key}"
        try:
            while not self.stopping:
                self._dirty.discard(key)
                if not await store.locks.try_lock(lock):
                    return  # another process runs this lane; it reads the store again
                try:
                    while not self.stopping and (rows := await store.read(key)):
                        for row in rows:
                            if store.usable is not None and not await store.usable(row):
                                continue
                            while not self.stopping and not await self._attempt(key, row):
                                pass
                            if self.stopping:
                                break
                            if key in self._reread:  # a resumed turn goes first
                                self._reread.discard(key)
                                break
                finally:
                    await store.locks.unlock(lock)
                if key not in self._dirty and not await store.read(key):
                    return
        except Exception:
            self._failed(key)
        finally:
            self._workers.pop(key, None)
            if not self._workers:
                self._idle.set()

    def _locks_lost(self, names: frozenset[str]) -> None:
        """The store lost these locks at once (its session ended), and another process
        may be running their lanes already: stop the workers that held them, a row in a
        slot included (cut off as by a crash, and run again), and look at each key again
        once its worker has gone, which takes the lock anew or finds it taken."""
        assert self._shared is not None
        prefix = f"{self._shared.lock}:"
        for name in names:
            key = name.removeprefix(prefix)
            worker = self._workers.get(key) if name.startswith(prefix) else None
            if worker is not None:
                worker.cancel()
                worker.add_done_callback(functools.partial(self._look_again, key))

    def _look_again(self, key: str, _worker: asyncio.Task[None]) -> None:
        self.poke(key)

    async def _attempt(self, key: str, row: Row) -> bool:
        """Wait until ``row`` is due, then one attempt within a slot; True when finished."""
        due = self._due(row)
        if due is not None and (wait := due - time.time()) > 0:
            woken = self._waiting[key] = asyncio.Event()
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), wait)  # or until wake(key)
            finally:
                if self._waiting.get(key) is woken:
                    del self._waiting[key]
            if self.stopping:
                return False
        async with self._slots:
            if self.stopping:
                return False
            self._running.add(key)
            try:
                return await self._attempt_row(key, row)
            finally:
                self._running.discard(key)

    async def idle(self, timeout: float) -> bool:
        """Wait until no lane has a worker; False if ``timeout`` ran out first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        return False

    async def stop(
        self, grace: float | None = None, *, at_once: Callable[[str], bool] | None = None
    ) -> None:
        """Start nothing new and end the workers.

        Without ``grace`` every worker is cancelled at once. With it, lanes that are only
        waiting (for a row's time or for a slot) are cancelled, and rows inside a slot may
        finish within ``grace`` seconds before they are cancelled too, except in the lanes
        ``at_once`` picks: work that resumes from its steps at the next start (a
        background task may have an hour to go), cut off now rather than at ``grace``.
        """
        self.stopping = True
        for key, task in self._workers.items():
            if grace is None or key not in self._running or (at_once and at_once(key)):
                task.cancel()
        tasks = list(self._workers.values())
        if grace is not None and tasks:
            _done, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
