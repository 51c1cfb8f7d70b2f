"""Events by conversation: one ordered lane each, lanes side by side up to a limit.

The lanes themselves (order, workers, the shared store's cross-process lock, idle and
stop) are :mod:`tether.gateway.core.lanes`. What is the dispatcher's own:

- **Backpressure**: the number of queued events is bounded; ``submit`` waits for room,
  which slows ingress instead of growing memory.
- **What is known**: queued events, and those finished lately, so that the inbox sweep
  does not resubmit an event from a stale read (:meth:`Dispatcher.knows`).
- **Retries wait in their lane**: the runner returns when to try again, which becomes the
  row's ``retry_at``; the lane holds its place until then, so order holds. A waiting row
  is run at once when the store says it was requeued (``tether dead retry``, the
  console: :meth:`Dispatcher.requeued`) or ``/stop`` calls it off (:meth:`Dispatcher.wake`).
- **A failing store pauses the lane**: the runner handles handler errors itself, so an
  exception out of it is the store; the event is kept and tried again after a pause.
  An outage that fails every lane is one ``lane.error`` with its traceback, then a count
  (:mod:`tether.gateway.core.streaks`), and ``lane.recovered`` when a run gets through.
- **Stop lets running handlers finish** (within a timeout); waiting lanes are cancelled.

With a shared store (PostgreSQL, several processes) the database is the queue: submitted
rows only say which conversation to look at.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable

import structlog

from tether import metrics
from tether.backoff import full_jitter
from tether.gateway.core.lanes import Lanes, SharedStore
from tether.gateway.core.stop import is_stop
from tether.gateway.core.streaks import Streak
from tether.keys import is_task_lane
from tether.memory.records import InboxRow
from tether.memory.roles import InboxStore

#: Runs one event; returns when to try again (epoch seconds), or None when it is finished.
Runner = Callable[[InboxRow], Awaitable[float | None]]

_REMEMBER_FINISHED = 100_000
#: The pause after the store failed under a lane: up to 2 s, doubling, at most 30 s.
_PAUSE_BASE, _PAUSE_MAX = 2.0, 30.0
log = structlog.get_logger("tether.dispatcher")


class Dispatcher:
    def __init__(
        self,
        run: Runner,
        *,
        concurrency: int = 64,
        queue_size: int = 10_000,
        store: InboxStore | None = None,
    ) -> None:
        self._run = run
        shared = (
            SharedStore[InboxRow](store, "lane", store.lane)
            if store is not None and store.shared
            else None
        )
        self._lanes = Lanes(
            self._attempt,
            due=_retry_at,
            concurrency=concurrency,
            task="lane",
            failed=_lane_failed,
            shared=shared,
            finished=self._done,
        )
        self._queue_size = queue_size
        self._queued: set[str] = set()
        self._finished: OrderedDict[str, float] = OrderedDict()
        self._room = asyncio.Event()
        self._failures: dict[str, int] = {}
        self._store_errors = Streak(log, "lane.error", recovered="lane.recovered")
        #: ``/stop`` rows running beside their lanes.
        self._beside: set[asyncio.Task[None]] = set()
        #: Per conversation, the row waiting in its lane for a retry, and since when.
        self._waiting: dict[str, tuple[InboxRow, float]] = {}

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
        lanes = self._lanes
        rows = [row for row in rows if not self._beside_lane(row)]
        for row in rows:
            self.requeued(row, time.monotonic())
        if lanes.shared:
            for conversation in dict.fromkeys(row.conversation for row in rows):
                lanes.poke(conversation)
            return
        for row in rows:
            while len(self._queued) >= self._queue_size and not lanes.stopping:
                self._room.clear()
                await self._room.wait()
            if row.key in self._queued:
                continue
            self._finished.pop(row.key, None)
            self._queued.add(row.key)
            lanes.add(row.conversation, row)
        metrics.LANE_DEPTH.set(len(self._queued))

    def _beside_lane(self, row: InboxRow) -> bool:
        """``/stop`` runs at once, beside its lane: queued, it would wait for the very
        turn it is meant to stop (:mod:`tether.gateway.core.stop`). With a shared store the
        lane may read it too once the turn is over: a second run finds it done, or answers
        under the same outbox key (written once)."""
        if self._lanes.stopping or not is_stop(row.event):
            return False
        if row.key not in self._queued:
            self._queued.add(row.key)
            task = asyncio.create_task(self._run_beside(row), name=f"stop:{row.conversation}")
            self._beside.add(task)
            task.add_done_callback(self._beside.discard)
        return True

    async def _run_beside(self, row: InboxRow) -> None:
        if await self._attempt(row.conversation, row):
            self._done(row)
        elif self._lanes.shared:  # to be tried again: the store is the queue
            self._done(row)
            self._lanes.poke(row.conversation)
        else:  # to be tried again (the store failed): it waits in its lane like any retry
            self._lanes.add(row.conversation, row)

    def resume(self, row: InboxRow) -> None:
        """Run ``row``, a suspended turn whose wait just ended, next in its lane: ahead of
        the events that came after its answer, without waiting for room (it is called
        from inside a lane, which must not block on backpressure)."""
        lanes = self._lanes
        if lanes.shared:
            lanes.poke_first(row.conversation)
            return
        if row.key in self._queued or lanes.stopping:
            return  # queued already; or stopping: it is received in the store, run at start
        self._finished.pop(row.key, None)
        self._queued.add(row.key)
        lanes.add_next(row.conversation, row)
        metrics.LANE_DEPTH.set(len(self._queued))

    def poke(self, conversation: str) -> None:
        """Shared store: look at ``conversation``'s lane (new events may be there)."""
        self._lanes.poke(conversation)

    def waiting(self, conversation: str) -> str | None:
        """The key of the event waiting in ``conversation``'s lane for its retry, if any."""
        held = self._waiting.get(conversation)
        return held[0].key if held else None

    def wake(self, conversation: str) -> bool:
        """Run the event waiting in ``conversation``'s lane now, not at its retry time."""
        return self._lanes.wake(conversation)

    def requeued(self, row: InboxRow, since: float) -> bool:
        """``row``, as the store read it at ``since`` (``time.monotonic()``), is received
        again while its lane holds it waiting since before that read: an operator
        requeued it, so it runs now, with the attempts the requeue reset."""
        held = self._waiting.get(row.conversation)
        if row.status != "received" or held is None or held[0].key != row.key:
            return False
        if held[1] >= since:
            return False  # the read is older than the wait: its "received" is stale
        held[0].attempts, held[0].retry_at = row.attempts, None
        log.info("lane.requeued", key=row.key, conversation=row.conversation)
        return self._lanes.wake(row.conversation)

    async def _attempt(self, conversation: str, row: InboxRow) -> bool:
        """One run of ``row``; True when it is finished, else its ``retry_at`` is set."""
        if (held := self._waiting.get(conversation)) and held[0] is row:
            del self._waiting[conversation]
        try:
            retry_at = await self._run(row)
            self._failures.pop(conversation, None)
            self._store_errors.passed()
        except Exception:
            # The runner handles handler errors itself; this is the store failing.
            # Keep the event and try again after a pause.
            failures = self._failures[conversation] = self._failures.get(conversation, 0) + 1
            self._store_errors.failed(key=row.key, conversation=conversation)
            retry_at = time.time() + full_jitter(failures, _PAUSE_BASE, _PAUSE_MAX)
        if retry_at is None:
            return True
        row.retry_at = retry_at
        self._waiting[conversation] = (row, time.monotonic())
        return False

    def _done(self, row: InboxRow) -> None:
        self._queued.discard(row.key)
        self._finished[row.key] = time.monotonic()
        if len(self._finished) > _REMEMBER_FINISHED:
            self._finished.popitem(last=False)
        metrics.LANE_DEPTH.set(len(self._queued))
        self._room.set()

    async def drain(self, timeout: float) -> bool:
        """Wait until every queued event is finished; False if ``timeout`` ran out first."""
        return await self._lanes.idle(timeout)

    async def stop(self, timeout: float) -> None:
        """Let running handlers finish (within ``timeout``) and start nothing new.

        Queued and retry-waiting events stay in the store and run at the next start;
        a handler cut off by the timeout stays ``running`` there and is recovered. A
        background task's lane is cut off at once: it resumes from its memoized steps,
        and may have hours to go.
        """
        self._room.set()  # a submit waiting for room sees the stop and returns
        await self._lanes.stop(grace=timeout, at_once=is_task_lane)
        self._store_errors.flush()
        for task in list(self._beside):
            task.cancel()
        await asyncio.gather(*self._beside, return_exceptions=True)


def _retry_at(row: InboxRow) -> float | None:
    return row.retry_at


def _lane_failed(conversation: str) -> None:
    log.exception("lane.error", conversation=conversation)
