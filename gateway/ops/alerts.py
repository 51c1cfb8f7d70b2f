"""Alerts: a tripped watchdog check told once, and its recovery told once.

An alert is durable in two places, written in one transaction by ``Inbox.accept``:

- a cursor ``ops:alert:{check}`` holding the check's state (open since when, why), which
  ``tether status`` reads from another process and a restarted gateway resumes from,
  so a restart neither forgets an open alert nor sends it again;
- when ``ops.alerts.deliver`` names a chat, an inbox event keyed
  ``ops:alert:{check}:{window}`` (or ``ops:recovered:...``): a cron-style ``text`` event
  that the built-in cron handler sends through the outbox. The key is per check and
  time window, so a check that flaps inside one window sends one alert and one recovery,
  however often it trips.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from tether import metrics
from tether.config.ops import AlertsConfig
from tether.events import Conversation, Event, Kind
from tether.memory.roles import CursorStore

log = structlog.get_logger("tether.alerts")

CURSOR = "ops:alert:"
#: Alert events run as cron ``text`` fires: trusted, sent to ``deliver``, no new handler.
PLATFORM = "cron"

#: ``Inbox.accept``: commits events and cursors together.
Accept = Callable[[Sequence[Event], Mapping[str, str]], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Reading:
    """One check's value against its limit; tripped above it."""

    check: str
    value: float
    limit: float
    #: What a person reads: ``event loop lag 2.0 s (ops.watchdog.loop_lag 1.0 s)``.
    detail: str

    @property
    def tripped(self) -> bool:
        return self.value > self.limit


@dataclass(frozen=True, slots=True)
class OpenAlert:
    check: str
    since: float
    window: int
    detail: str


async def open_alerts(store: CursorStore) -> list[OpenAlert]:
    """The alerts open now, oldest first, as the store holds them (``tether status``)."""
    found = []
    for name, value in (await store.recent_cursors(CURSOR, 0.0)).items():
        state = _decode(value)
        if state.get("open"):
            found.append(
                OpenAlert(
                    name.removeprefix(CURSOR),
                    float(state.get("since", 0.0)),
                    int(state.get("window", 0)),
                    str(state.get("detail", "")),
                )
            )
    return sorted(found, key=lambda alert: alert.since)


class Alerts:
    """Turns each round of readings into alert and recovery transitions."""

    def __init__(self, config: AlertsConfig, store: CursorStore, accept: Accept) -> None:
        self.config = config
        self.store = store
        self.accept = accept
        self._open: dict[str, OpenAlert] = {}

    async def load(self) -> None:
        """Resume the alerts a previous run left open (a recovery is still owed)."""
        self._open = {alert.check: alert for alert in await open_alerts(self.store)}
        for check in self._open:
            metrics.ALERT_OPEN.labels(check).set(1)

    @property
    def open(self) -> list[str]:
        return sorted(self._open)

    async def update(self, readings: Iterable[Reading]) -> None:
        """Open what tripped, clear what recovered (or is no longer watched)."""
        seen = set()
        for reading in readings:
            seen.add(reading.check)
            if reading.tripped and reading.check not in self._open:
                await self._trip(reading)
            elif not reading.tripped and reading.check in self._open:
                await self._clear(reading.check, reading.detail)
        for check in [check for check in self._open if check not in seen]:
            await self._clear(check, "no longer watched")

    async def _trip(self, reading: Reading) -> None:
        now = time.time()
        alert = OpenAlert(reading.check, now, int(now // self.config.window), reading.detail)
        state = {"open": True, "since": now, "window": alert.window, "detail": reading.detail}
        text = f"Tether alert: {reading.detail}"
        await self._commit(f"{CURSOR}{reading.check}:{alert.window}", text, reading.check, state)
        self._open[reading.check] = alert
        metrics.ALERT_OPEN.labels(reading.check).set(1)
        log.warning("alert.opened", check=reading.check, detail=reading.detail)

    async def _clear(self, check: str, detail: str) -> None:
        alert = self._open[check]
        lasted = time.time() - alert.since
        state = {"open": False, "since": alert.since, "cleared": time.time(), "detail": detail}
        text = f"Tether recovered: {check} after {lasted:.0f} s ({detail})"
        await self._commit(f"ops:recovered:{check}:{alert.window}", text, check, state)
        del self._open[check]
        metrics.ALERT_OPEN.labels(check).set(0)
        log.info("alert.cleared", check=check, detail=detail, lasted_s=round(lasted, 1))

    async def _commit(self, key: str, text: str, check: str, state: dict[str, Any]) -> None:
        cursors = {f"{CURSOR}{check}": json.dumps(state)}
        target = self.config.target
        if target is None:
            await self.store.set_cursor(*next(iter(cursors.items())))
            return
        event = Event(
            key=key,
            platform=PLATFORM,
            kind=Kind.CRON,
            conversation=Conversation(
                platform=target.platform, chat_id=target.chat_id, thread_id=target.thread_id
            ),
            text=text,
            meta={"job": "ops.alerts", "action": "text", "deliver": [target.key]},
        )
        await self.accept([event], cursors)


def _decode(value: str) -> dict[str, Any]:
    try:
        state = json.loads(value)
    except ValueError:
        return {}
    return state if isinstance(state, dict) else {}
