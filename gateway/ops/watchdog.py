"""The watchdog: the gateway watching its own health, so a stall is seen without
scraping ``/metrics``.

Two timers, both cheap enough to run always:

- the lag sampler sleeps ``ops.watchdog.lag_interval`` and notes how late it woke: a
  handler that blocks the loop (``time.sleep``, a CPU-bound parse) shows up as lag, in
  ``tether_loop_lag_seconds`` and, above ``ops.watchdog.loop_lag``, in ``/readyz``;
- every ``ops.watchdog.interval`` one round of checks reads the rest: how long each
  platform has been disconnected, how long the oldest unsent outbox row has waited, the
  dead letters of the last hour, how long a small store write takes, and the checks
  handed in from the floors above (``llm.{provider}``: keys refused, a provider asking
  to wait longer than ``llm.max_retry_after``). Each is a metric,
  and each round goes to :class:`~tether.gateway.ops.alerts.Alerts`, which tells the operator
  when a check trips and when it clears.

Lag is measured on the loop, so it is only seen once the loop runs again; a spike keeps
counting for ``ops.watchdog.lag_window`` so that a probe or an alert still sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping

import structlog

from tether import metrics
from tether.adapters.base import Adapter
from tether.config.ops import WatchdogConfig
from tether.gateway.ops.alerts import Alerts, Reading
from tether.keys import is_task
from tether.memory.store import Store

log = structlog.get_logger("tether.watchdog")

HEARTBEAT = "ops:watchdog"


class Watchdog:
    """Samples the loop's lag, runs the checks, and hands each round to ``alerts``."""

    def __init__(
        self,
        config: WatchdogConfig,
        store: Store,
        adapters: Callable[[], Mapping[str, Adapter]],
        alerts: Alerts,
        handlers: Callable[[], Mapping[str, tuple[str, float]]],
        handler_timeout: float,
        readings: Callable[[], Iterable[Reading]] = tuple,
    ) -> None:
        self.config = config
        self.store = store
        self.adapters = adapters
        self.alerts = alerts
        #: The pipeline's running handlers (key → route, start) and their timeout.
        self.handlers = handlers
        self.handler_timeout = handler_timeout
        #: Checks of parts above this floor, read each round (the model's key pools).
        self.readings = readings
        self._overrun: set[str] = set()
        #: (loop time, lag) of the samples within ``lag_window``, oldest first.
        self._lags: deque[tuple[float, float]] = deque()
        self._down: dict[str, float] = {}
        self._unsent_since: dict[str, float] = {}
        self._tasks: list[asyncio.Task[None]] = []
        #: Rounds of checks done, and a condition notified after each, so a caller can
        #: await what the watchdog saw instead of polling it.
        self.rounds = 0
        self._round_done = asyncio.Condition()

    async def start(self) -> None:
        await self.alerts.load()
        self._tasks = [
            asyncio.create_task(self._sample_lag(), name="watchdog-lag"),
            asyncio.create_task(self._check_forever(), name="watchdog-checks"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    @property
    def lag(self) -> float:
        """The worst lag sampled within ``lag_window``."""
        return max((lag for _, lag in self._lags), default=0.0)

    def problems(self) -> list[str]:
        """What ``/readyz`` should fail on: a loop too late to serve anyone in time, and
        a check handed in from above that an operator must act on (a model provider
        whose keys are all refused, or that asks to wait longer than the bound)."""
        problems = [reading.detail for reading in self.readings() if reading.tripped]
        if self.lag > self.config.loop_lag:
            problems.insert(0, f"event loop lag {self.lag:.2f} s over ops.watchdog.loop_lag")
        return problems

    async def _sample_lag(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.config.lag_interval
        while True:
            before = loop.time()
            await asyncio.sleep(interval)
            now = loop.time()
            self.note_lag(max(0.0, now - before - interval), now)

    def note_lag(self, lag: float, now: float) -> None:
        metrics.LOOP_LAG.set(lag)
        self._lags.append((now, lag))
        while self._lags and self._lags[0][0] < now - self.config.lag_window:
            self._lags.popleft()
        if lag > self.config.loop_lag:
            log.warning("watchdog.loop_lag", lag_s=round(lag, 3), limit_s=self.config.loop_lag)

    async def _check_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.interval)
            await self.check()

    async def check(self) -> None:
        """One round: read every check, move its metric, update the alerts. A failure
        is logged and the next round tries again (a dead store is readiness's to show)."""
        try:
            readings = [self._lag_reading(), self._overrun_reading(), *self._platform_readings()]
            readings += await self._store_readings()
            readings += self.readings()
            await self.alerts.update(readings)
        except Exception:
            log.exception("watchdog.check_failed")
        async with self._round_done:
            self.rounds += 1
            self._round_done.notify_all()

    async def after_round(self, predicate: Callable[[], bool]) -> None:
        """Return after the first round of checks (from the next one on) where
        ``predicate`` holds."""
        seen = self.rounds
        async with self._round_done:
            await self._round_done.wait_for(lambda: self.rounds > seen and predicate())

    def _lag_reading(self) -> Reading:
        lag = self.lag
        detail = f"event loop lag {lag:.2f} s (ops.watchdog.loop_lag {self.config.loop_lag} s)"
        return Reading("loop_lag", lag, self.config.loop_lag, detail)

    def _overrun_reading(self) -> Reading:
        """Handlers still running past ``pipeline.handler_timeout``: one that ignores its
        cancellation, or waits in a shielded call. Each is named once, in a line and the
        metric, and the check stays tripped while any runs on."""
        now = time.monotonic()
        late = {
            key: route
            for key, (route, started) in self.handlers().items()
            if now - started > self.handler_timeout and not is_task(key)  # a task: its deadline
        }
        for key in late.keys() - self._overrun:
            log.warning("watchdog.handler_overrun", key=key, route=late[key])
            metrics.HANDLER_OVERRUNS.labels(late[key]).inc()
        self._overrun = set(late)
        detail = (
            f"{len(late)} handler running past pipeline.handler_timeout"
            f" ({self.handler_timeout} s): {', '.join(sorted(late.values()))}"
        )
        return Reading("handler_overrun", len(late), 0, detail)

    def _platform_readings(self) -> list[Reading]:
        now = time.monotonic()
        readings = []
        adapters = self.adapters()
        self._down = {name: since for name, since in self._down.items() if name in adapters}
        for name, adapter in adapters.items():
            if adapter.connected:
                self._down.pop(name, None)
                down = 0.0
            else:
                down = now - self._down.setdefault(name, now)
            metrics.DISCONNECTED_SECONDS.labels(name).set(down)
            why = f": {adapter.problem}" if not adapter.connected and adapter.problem else ""
            detail = (
                f"{name} disconnected for {down:.0f} s{why}"
                f" (ops.watchdog.disconnected {self.config.disconnected} s)"
            )
            readings.append(Reading(f"platform.{name}", down, self.config.disconnected, detail))
        return readings

    async def _store_readings(self) -> list[Reading]:
        config = self.config
        started = time.monotonic()
        await self.store.set_cursor(HEARTBEAT, str(time.time()))
        write = time.monotonic() - started
        metrics.STORE_WRITE.set(write)
        now = time.monotonic()
        unsent = set(await self.store.unsent_keys())
        self._unsent_since = {key: self._unsent_since.get(key, now) for key in unsent}
        oldest = now - min(self._unsent_since.values(), default=now)
        metrics.OUTBOX_OLDEST.set(oldest)
        hour_ago = time.time() - 3600
        dead = sum(1 for letter in await self.store.dead_letters() if letter.created >= hour_ago)
        metrics.DEAD_LAST_HOUR.set(dead)
        return [
            Reading(
                "store_write",
                write,
                config.store_write,
                f"a store write took {write:.2f} s"
                f" (ops.watchdog.store_write {config.store_write} s)",
            ),
            Reading(
                "outbox_age",
                oldest,
                config.outbox_age,
                f"the oldest unsent reply has waited {oldest:.0f} s"
                f" (ops.watchdog.outbox_age {config.outbox_age} s)",
            ),
            Reading(
                "dead_letters",
                dead,
                config.dead_letters_per_hour,
                f"{dead} dead letters in the last hour"
                f" (ops.watchdog.dead_letters_per_hour {config.dead_letters_per_hour})",
            ),
        ]
