"""One ordered lane per conversation; lanes run side by side up to a limit.

With a shared store (PostgreSQL, several processes) a lane is also a cross-process lock:
the process that holds it reads the conversation's events from the store and runs them
in order; the others leave that conversation alone until it is free again.

A conversation's events run one at a time in arrival order (a retry waits in its lane,
so order holds); different conversations never wait for each other except for the
concurrency limit. The number of queued events is bounded: ``submit`` waits for room,
which slows ingress instead of growing memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable

import structlog

from tether.gateway import metrics
from tether.memory.store import InboxRow, Store

#: Runs one event; returns when to try again (epoch seconds), or None when it is finished.
Runner = Callable[[InboxRow], Awaitable[float | None]]

_REMEMBER_FINISHED = 100_000
log = structlog.get_logger("tether.dispatcher")


class Dispatcher:
    def __init__(
        self,
        run: Runner,
        *,
        concurrency: int = 64,
        queue_size: int = 10_000,
        store: Store | None = None,
    ) -> None:
        self._run = run
        #: With a shared store the database is the queue: lanes are taken with a lock
        #: and read from the store; submitted rows only say which lane to look at.
        self._shared = store if store is not None and store.shared else None
        self._dirty: set[str] = set()
        self._slots = asyncio.Semaphore(concurrency)
        self._queue_size = queue_size
        self._lanes: dict[str, deque[InboxRow]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._queued: set[str] = set()
        self._finished: OrderedDict[str, float] = OrderedDict()
        self._room = asyncio.Event()
        self._running: set[str] = set()
        self._failures: dict[str, int] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = False

    @property
    def depth(self) -> int:
        return len(self._queued)

    def knows(self, key: str, since: float) -> bool:
        """Queued or running, or finished after ``since`` (``time.monotonic()``).

        A sweep that read the store at ``since`` must not resubmit what finished after
        its read: its copy of that row is stale.
        """
        finished = self._finished.get(key)
        return key in self._queued or (finished is not None and finished >= since)

    async def submit(self, rows: Iterable[InboxRow]) -> None:
        """Queue rows in their conversations' lanes; a row already queued is skipped."""
        if self._shared:
            for conversation in dict.fromkeys(row.conversation for row in rows):
                self.poke(conversation)
            return
        for row in rows:
            while len(self._queued) >= self._queue_size and not self._stopping:
                self._room.clear()
                await self._room.wait()
            if row.key in self._queued:
                continue
            self._finished.pop(row.key, None)
            self._queued.add(row.key)
            self._idle.clear()
            lane = self._lanes.get(row.conversation)
            if lane is None:
                lane = self._lanes[row.conversation] = deque()
            lane.append(row)
            if row.conversation not in self._workers and not self._stopping:
                self._workers[row.conversation] = asyncio.create_task(
                    self._work(row.conversation), name=f"lane:{row.conversation}"
                )
        metrics.LANE_DEPTH.set(len(self._queued))

    def poke(self, conversation: str) -> None:
        """Shared store: look at ``conversation``'s lane (new events may be there)."""
        if self._stopping:
            return
        if conversation in self._workers:
            self._dirty.add(conversation)  # the running worker looks again before it leaves
            return
        self._idle.clear()
        self._workers[conversation] = asyncio.create_task(
            self._work_shared(conversation), name=f"lane:{conversation}"
        )

    async def _work(self, conversation: str) -> None:
        lane = self._lanes[conversation]
        try:
            while lane and not self._stopping:
                row = lane[0]
                if await self._attempt(conversation, row):
                    lane.popleft()
                    self._done(row.key)
        finally:
            self._workers.pop(conversation, None)
            if not lane:
                self._lanes.pop(conversation, None)
            if not self._workers:
                self._idle.set()

    async def _work_shared(self, conversation: str) -> None:
        """Take the lane's lock, run what the store holds for it in order, let go, and
        look once more (an event may have landed between the last read and the unlock)."""
        store = self._shared
        assert store is not None
        lock = f"lane:{conversation}"
        try:
            while not self._stopping:
                self._dirty.discard(conversation)
                if not await store.try_lock(lock):
                    return  # another process runs this lane; it reads the store again
                try:
                    while not self._stopping and (rows := await store.lane(conversation)):
                        for row in rows:
                            while not self._stopping and not await self._attempt(conversation, row):
                                pass
                            if self._stopping:
                                break
                finally:
                    await store.unlock(lock)
                if conversation not in self._dirty and not await store.lane(conversation):
                    return
        except Exception:
            log.exception("lane.error", conversation=conversation)
        finally:
            self._workers.pop(conversation, None)
            if not self._workers:
                self._idle.set()

    async def _attempt(self, conversation: str, row: InboxRow) -> bool:
        """One attempt at ``row`` (after its retry time); True when it is finished."""
        if row.retry_at is not None and (wait := row.retry_at - time.time()) > 0:
            await asyncio.sleep(wait)
            if self._stopping:
                return False
        async with self._slots:
            if self._stopping:
                return False
            self._running.add(conversation)
            try:
                retry_at = await self._run(row)
                self._failures.pop(conversation, None)
            except Exception:
                # The runner handles handler errors itself; this is the store failing.
                # Keep the event and try again after a pause.
                failures = self._failures[conversation] = self._failures.get(conversation, 0) + 1
                log.exception("lane.error", key=row.key, conversation=conversation)
                retry_at = time.time() + min(30.0, random.uniform(0, 2**failures))
            finally:
                self._running.discard(conversation)
        if retry_at is None:
            return True
        row.retry_at = retry_at
        return False

    def _done(self, key: str) -> None:
        self._queued.discard(key)
        self._finished[key] = time.monotonic()
        if len(self._finished) > _REMEMBER_FINISHED:
            self._finished.popitem(last=False)
        metrics.LANE_DEPTH.set(len(self._queued))
        self._room.set()

    async def drain(self, timeout: float) -> bool:
        """Wait until every queued event is finished; False if ``timeout`` ran out first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        return False

    async def stop(self, timeout: float) -> None:
        """Let running handlers finish (within ``timeout``) and start nothing new.

        Queued and retry-waiting events stay in the store and run at the next start;
        a handler cut off by the timeout stays ``running`` there and is recovered.
        """
        self._stopping = True
        self._room.set()
        for conversation, task in self._workers.items():
            if conversation not in self._running:
                task.cancel()
        tasks = list(self._workers.values())
        if not tasks:
            return
        _done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
