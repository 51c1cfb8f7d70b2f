"""Reminders and recurring jobs made from chat, fired like the YAML's jobs.

The ``schedule`` tool (:mod:`tether.gateway.tools.reminders`) stores a
:class:`~tether.memory.reminders.Reminder`; :class:`Reminders` turns the active ones
into :class:`~tether.scheduler.jobs.Job` values and runs them on a
:class:`~tether.scheduler.runner.Scheduler` of their own. So a reminder gets exactly
what a YAML job gets: each fire is ``cron:{id}:{scheduled time}`` through the same
ledger cursors and the same inbox ``accept`` (a restart or a second instance cannot
fire it twice), missed fires follow ``catch_up: latest`` within a grace window, and
the fire runs through the pipeline as a ``Kind.CRON`` event.

- A **one-off** is a crontab line for its UTC date and time (``S M H D Mon *``); one
  more than :data:`MAX_AHEAD` ahead is refused, so that line fires exactly once. After
  its fire (or once its time is past the grace window, ``reminder.missed``) it is
  marked ``done``.
- A **recurring** job keeps its crontab line and time zone.
- What a fire does (``fire_reminder`` in ``gateway/agent/cron.py``): it posts the
  reminder's text into the chat that made it, unless the reminder was cancelled
  meanwhile (``tether jobs cancel`` beside a running gateway): then it posts nothing
  (``reminder.skipped``).
- The ledger starts at the reminder's creation (:meth:`Reminders.add` writes the
  ``decided`` cursor first), so a gateway killed right after the reminder was made
  still fires it after a restart, within grace.
- The running set follows the store: after every change made here at once
  (:meth:`Reminders.poke`), and every ``interval`` seconds for changes made elsewhere
  (the CLI, another instance). A change rebuilds the reminders' scheduler; the ledger
  makes that safe (nothing decided is decided again).

Logs: ``reminder.added``, ``reminder.cancelled``, ``reminder.done``,
``reminder.missed``, ``reminder.skipped``; fires log ``cron.fired`` like any job.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import structlog

from tether.config.jobs import JobConfig
from tether.cron import Schedule, parse_time, stamp
from tether.events import Event, Target
from tether.memory.reminders import Reminder, ReminderStatus
from tether.memory.roles import InboxStore, ReminderStore
from tether.scheduler.jobs import Job, decided_cursor, last_cursor, now_utc
from tether.scheduler.runner import Clock, Intake, Scheduler

log = structlog.get_logger("tether.reminders")

#: The ``handler`` of every reminder's job: the name by which the cron router
#: (``gateway/agent/cron.py``) knows a reminder's fire. A name, never imported: fires
#: queued by earlier versions carry it in their stored events.
FIRE = "tether.scheduler.reminders:fire"
#: Every reminder's id starts with this (``tether jobs list`` marks them).
PREFIX = "r-"
#: A one-off at most this far ahead (its crontab line has no year).
MAX_AHEAD = timedelta(days=365)
#: How late a missed fire still runs: a reminder is worth more late than never.
ONE_OFF_GRACE = timedelta(hours=12)
RECURRING_GRACE = timedelta(hours=1)
#: Shown before the text in the chat.
MARK = "⏰ "


class Store(InboxStore, ReminderStore, Protocol):
    """What reminders need: their rows, and the ledger cursors beside the inbox."""


def reminder_id(event_key: str, position: str) -> str:
    """The id of the reminder made by the call at ``position`` in ``event_key``'s turn:
    the same on every run of that turn, so a re-run adds nothing new."""
    digest = hashlib.sha256(f"{event_key}\x00{position}".encode()).hexdigest()
    return PREFIX + digest[:16]


def one_off_cron(at: datetime) -> str:
    """The crontab line (seconds first, UTC) that matches ``at`` once a year."""
    at = at.astimezone(UTC)
    return f"{at.second} {at.minute} {at.hour} {at.day} {at.month} *"


@dataclass(frozen=True, slots=True)
class ReminderJob(Job):
    """A :class:`Job` whose fire event carries the reminder's text."""

    text: str = ""

    def event(self, scheduled: datetime, *, manual: str | None = None) -> Event:
        base = Job.event(self, scheduled, manual=manual)
        return base.model_copy(
            update={"text": self.text, "meta": {**base.meta, "reminder": self.id}}
        )


def to_job(reminder: Reminder) -> ReminderJob:
    """The job that fires ``reminder`` (a ValueError for a row no schedule can read)."""
    if reminder.cron is not None:
        cron, timezone, grace = reminder.cron, reminder.timezone, RECURRING_GRACE
    elif reminder.at is not None:
        cron, timezone, grace = one_off_cron(parse_time(reminder.at)), "UTC", ONE_OFF_GRACE
    else:
        raise ValueError(f"reminder {reminder.id}: neither cron nor at")
    config = JobConfig(
        id=reminder.id,
        cron=cron,
        timezone=timezone,
        deliver=[reminder.target],
        handler=FIRE,
        catch_up="latest",
        grace=grace.total_seconds(),
        overlap="queue",
    )
    return ReminderJob(
        id=reminder.id,
        config=config,
        schedule=Schedule.parse(cron, timezone),
        targets=(Target.parse(reminder.target),),
        text=reminder.text,
    )


def describe(reminder: Reminder, now: datetime | None = None) -> str:
    """One line for a person: id, when, text, and the next time it fires."""
    if reminder.cron is not None:
        when = f"cron {reminder.cron!r} ({reminder.timezone})"
    else:
        when = f"once at {reminder.at}"
    upcoming = next_fire(reminder, now or now_utc()) if reminder.cron is not None else None
    after = f", next {stamp(upcoming)}" if upcoming and reminder.status == "active" else ""
    return f"{reminder.id}: {when}{after}: {reminder.text}"


def next_fire(reminder: Reminder, now: datetime) -> datetime | None:
    try:
        return to_job(reminder).schedule.next_after(now)
    except ValueError:
        return None


class Reminders:
    """The active reminders, run by a scheduler of their own that follows the store."""

    def __init__(self, store: Store, *, interval: float = 2.0, clock: Clock = now_utc) -> None:
        self.store = store
        self.interval = interval
        self.clock = clock
        self.inbox: Intake | None = None
        self.scheduler: Scheduler | None = None
        self._running: dict[str, Reminder] = {}
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------

    async def start(self, inbox: Intake) -> None:
        self.inbox = inbox
        await self.sync()
        self._task = asyncio.create_task(self._follow(), name="reminders")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        async with self._lock:
            if self.scheduler is not None:
                await self.scheduler.stop()
                self.scheduler = None
            self._running = {}
        self.inbox = None

    def poke(self) -> None:
        """Look at the store now (a reminder was added or cancelled here)."""
        self._wake.set()

    async def _follow(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            # Shielded: a stop in the middle must not leave a half-started scheduler
            # behind; stop() takes the lock after this sync is over.
            await asyncio.shield(self._sync_logged())

    async def _sync_logged(self) -> None:
        try:
            await self.sync()
        except Exception:
            log.exception("reminder.sync_failed")

    # -- the running set follows the store ---------------------------------------------

    async def sync(self) -> None:
        """Finish the one-offs whose time was decided; run exactly the active rest."""
        async with self._lock:
            if self.inbox is None:
                return
            active = [r for r in await self.store.reminders() if not await self._finished(r)]
            wanted = {r.id: r for r in active}
            if wanted == self._running and (self.scheduler is not None or not wanted):
                return
            jobs = []
            for reminder in active:
                try:
                    jobs.append(to_job(reminder))
                except ValueError as exc:  # a row no schedule reads (written by hand)
                    log.warning("reminder.unreadable", reminder=reminder.id, error=str(exc))
            if self.scheduler is not None:
                await self.scheduler.stop()
                self.scheduler = None
            if jobs:
                scheduler = Scheduler(jobs, self.store, self.inbox, clock=self.clock)
                await scheduler.start()
                self.scheduler = scheduler
            self._running = wanted

    async def _finished(self, reminder: Reminder) -> bool:
        """A one-off whose time the ledger has decided (fired, or skipped as too late)
        is marked done here, if the fire itself did not already."""
        if reminder.at is None:
            return False
        at = parse_time(reminder.at)
        if at > self.clock():
            return False  # not due yet: nothing to read (most rows, most of the time)
        fired = await self.store.cursor(last_cursor(reminder.id))
        decided = await self.store.cursor(decided_cursor(reminder.id))
        if fired is not None and parse_time(fired) >= at:
            event = "reminder.done"
        elif decided is not None and parse_time(decided) >= at:
            event = "reminder.missed"
        elif self.clock() - at > ONE_OFF_GRACE + timedelta(minutes=1):
            event = "reminder.missed"  # past grace: the ledger will only skip it
        else:
            return False
        if await self.store.finish_reminder(reminder.id, "done"):
            log.info(event, reminder=reminder.id, conversation=reminder.conversation)
        return True

    # -- what the tools and the CLI do ---------------------------------------------------

    async def add(self, reminder: Reminder) -> Reminder:
        """Store ``reminder`` (once: its id is deterministic) with its ledger starting at
        its creation, and schedule it now."""
        cursor = decided_cursor(reminder.id)
        if await self.store.cursor(cursor) is None:
            created = datetime.fromtimestamp(reminder.created, UTC)
            await self.store.set_cursor(cursor, created.isoformat())
        stored = await self.store.add_reminder(reminder)
        if stored.created == reminder.created:
            log.info(
                "reminder.added",
                reminder=stored.id,
                conversation=stored.conversation,
                cron=stored.cron,
                at=stored.at,
            )
        self.poke()
        return stored

    async def owned(self, conversation: str) -> list[Reminder]:
        return await self.store.reminders(conversation)

    async def cancel(self, reminder_id: str, conversation: str | None = None) -> Reminder | None:
        """Cancel an active reminder (of ``conversation`` only, when given)."""
        return await cancel(self.store, reminder_id, conversation, self.poke)


async def cancel(
    store: ReminderStore,
    reminder_id: str,
    conversation: str | None = None,
    changed: Any = None,
    status: ReminderStatus = "cancelled",
) -> Reminder | None:
    """Mark an active reminder cancelled; the row, or None when there is no such active
    reminder (or it belongs to another conversation)."""
    found = await store.reminder(reminder_id)
    if found is None or found.status != "active":
        return None
    if conversation is not None and found.conversation != conversation:
        return None
    if not await store.finish_reminder(reminder_id, status):
        return None
    log.info("reminder.cancelled", reminder=reminder_id, conversation=found.conversation)
    if changed is not None:
        changed()
    return found


def new_reminder(
    *,
    reminder_id: str,
    conversation: str,
    target: str,
    text: str,
    cron: str | None,
    at: datetime | None,
    timezone: str,
    event_key: str,
    created: float | None = None,
) -> Reminder:
    """A new active reminder; ``created`` (epoch seconds, default now) starts its ledger."""
    now = time.time() if created is None else created
    return Reminder(
        id=reminder_id,
        conversation=conversation,
        target=target,
        text=text,
        cron=cron,
        at=stamp(at) if at is not None else None,
        timezone=timezone,
        status="active",
        event_key=event_key,
        created=now,
        updated=now,
    )


def listing(reminders: Sequence[Reminder], now: datetime) -> list[str]:
    return [describe(reminder, now) for reminder in reminders]
