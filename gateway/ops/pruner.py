"""The pruner: ``memory.retention`` applied in the background, beside the traffic.

Every ``memory.retention.interval`` it prunes each class with an age
(config/retention.py) through the store (memory/retention/), then gives the space back
(SQLite's incremental vacuum). Each statement deletes at most ``batch`` rows in its own
short transaction, and the pruner yields to the event loop between two, so a pass
never holds a lock long nor pauses a turn. A pass logs ``retention.pruned`` with its
counts per class and adds them to ``tether_pruned_rows_total{class=...}``.

The finished inbox rows are the dedup keys: their cutoff is never later than the
longest redelivery window of the enabled platforms ago, whatever the config says (the
config refuses a shorter one too; this is the second lock on the door). Blobs are
looked at once an hour at most: telling which ones no reply names reads the outbox.
On a store shared by several gateways one prunes at a time, the one holding the
advisory lock ``retention:prune``.

Nothing configured, nothing runs: no task is started.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from tether import metrics
from tether.backoff import equal_jitter
from tether.config.retention import enabled_platforms, longest_window
from tether.config.schema import Settings
from tether.memory.retention import PruneStore
from tether.memory.store import Store

log = structlog.get_logger("tether.retention")

#: The advisory lock of the one pruning gateway on a shared store.
LOCK = "retention:prune"
#: Seconds between two looks at the blobs, at least.
BLOB_EVERY = 3600.0
#: The longest pause after failed passes, seconds.
BACKOFF_CAP = 600.0


class Pruner:
    def __init__(
        self,
        store: Store,
        settings: Callable[[], Settings],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.settings, self.clock = store, settings, clock
        self._task: asyncio.Task[None] | None = None
        self._held = False
        self._blobs_at = float("-inf")
        #: Passes finished (tests wait on it, through :meth:`run_pass`).
        self.passes = 0

    @property
    def wanted(self) -> bool:
        """Is there anything to prune, on a store that can?"""
        return isinstance(self.store, PruneStore) and bool(self.settings().memory.retention.ages())

    def start(self) -> None:
        if not self.wanted:
            return
        self.store.on_locks_lost(self._lost)
        self._task = asyncio.create_task(self._run(), name="retention-pruner")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._held:
            self._held = False
            await self.store.unlock(LOCK)

    def _lost(self, names: frozenset[str]) -> None:
        if LOCK in names:
            self._held = False

    async def _run(self) -> None:
        failures = 0
        while True:
            retention = self.settings().memory.retention
            try:
                if await self._hold():
                    await self.run_pass()
                failures, pause = 0, retention.interval
            except Exception as exc:  # the store: tried again later
                failures += 1
                log.warning("retention.prune_failed", error=str(exc), failures=failures)
                pause = equal_jitter(failures, min(retention.interval, 10.0), BACKOFF_CAP)
            await asyncio.sleep(pause)

    async def _hold(self) -> bool:
        if not self.store.shared:
            return True
        if not self._held:
            self._held = await self.store.try_lock(LOCK)
        return self._held

    def cutoffs(self, now: float) -> dict[str, float]:
        """Per class with an age: rows older than this (epoch seconds) go."""
        settings = self.settings()
        cutoffs = {kind: now - age for kind, age in settings.memory.retention.ages().items()}
        if "inbox" in cutoffs:
            window, _whose = longest_window(enabled_platforms(settings))
            cutoffs["inbox"] = min(cutoffs["inbox"], now - window)
        if "blobs" in cutoffs and now - self._blobs_at < BLOB_EVERY:
            del cutoffs["blobs"]
        return cutoffs

    async def run_pass(self) -> dict[str, int]:
        """One pass over every class with an age; the rows each lost."""
        store = self.store
        assert isinstance(store, PruneStore)
        batch = self.settings().memory.retention.batch
        started = time.monotonic()
        now = self.clock()
        counts: dict[str, int] = {}
        for kind, before in self.cutoffs(now).items():
            counts[kind] = await store.prune(kind, before, batch, _yield)
            if kind == "blobs":
                self._blobs_at = now
            if counts[kind]:
                metrics.PRUNED.labels(kind).inc(counts[kind])
        pages = await store.reclaim() if any(counts.values()) else 0
        self.passes += 1
        log.info(
            "retention.pruned",
            **counts,
            pages_freed=pages,
            duration_ms=round((time.monotonic() - started) * 1000, 1),
        )
        return counts


async def _yield() -> None:
    """Between two statements: whatever the loop has waiting runs first."""
    await asyncio.sleep(0)
