"""One ordered lane per conversation; lanes run side by side up to a limit.

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

from gateway import metrics
from memory.store import InboxRow

#: Runs one event; returns when to try again (epoch seconds), or None when it is finished.
Runner = Callable[[InboxRow], Awaitable[float | None]]

_REMEMBER_FINISHED = 100_000
log = structlog.get_logger("tether.dispatcher")


class Dispatcher:
    def __init__(self, run: Runner, *, concurrency: int = 64, queue_size: int = 10_000) -> None:
        self._run = run
        self._slots = asyncio.Semaphore(concurrency)
        self._queue_size = queue_size
        self._lanes: dict[str, deque[InboxRow]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._queued: set[str] = set()
        self._finished: OrderedDict[str, float] = OrderedDict()
        self._room = asyncio.Event()
        self._running: set[str] = set()
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

    async def _work(self, conversation: str) -> None:
        lane = self._lanes[conversation]
        failures = 0
        try:
            while lane and not self._stopping:
                row = lane[0]
                if row.retry_at is not None and (wait := row.retry_at - time.time()) > 0:
                    await asyncio.sleep(wait)
                    if self._stopping:
                        break
                async with self._slots:
                    if self._stopping:
                        break
                    self._running.add(conversation)
                    try:
                        retry_at = await self._run(row)
                        failures = 0
                    except Exception:
                        # The runner handles handler errors itself; this is the store
                        # failing. Keep the event and try again after a pause.
                        failures += 1
                        log.exception("lane.error", key=row.key, conversation=conversation)
                        retry_at = time.time() + min(30.0, random.uniform(0, 2**failures))
                    finally:
                        self._running.discard(conversation)
                if retry_at is None:
                    lane.popleft()
                    self._done(row.key)
                else:
                    row.retry_at = retry_at
        finally:
            self._workers.pop(conversation, None)
            if not lane:
                self._lanes.pop(conversation, None)
            if not self._workers:
                self._idle.set()

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
