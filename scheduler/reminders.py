"""Reminders and recurring jobs made from chat, fired like the YAML's jobs.

The ``schedule`` tool (:mod:`tether.gateway.tools.reminders`) stores a
:class:`~tether.memory.reminders.Reminder`; :class:`Reminders` turns the active ones
into :class:`~tether.scheduler.jobs.Job` values (:mod:`.reminder_jobs`) and runs them on a
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
  reminder's text into the chat that made it, or, for a **prompt**, runs one agent turn
  with it in the conversation that made it; unless the reminder was cancelled
  meanwhile (``tether jobs cancel`` beside a running gateway): then it does nothing
  (``reminder.skipped``). A prompt's fire event carries its maker (``as_maker``),
  so that its ``Event.session()`` — its memory and lane — is that conversation, a
  group's per-user session included.
- The ledger starts at the reminder's creation (:meth:`Reminders.add` writes the
  ``decided`` cursor first), so a gateway killed right after the reminder was made
  still fires it after a restart, within grace.
- Bounded (``agent.tools.reminders``, :mod:`.bounds`): :meth:`Reminders.add` refuses a
  reminder past its chat's or its maker's cap (``Refused``, which the tool hands the
  model as its result), counted from the store's indexes under one lock, so that
  concurrent turns of one process cannot both take the last place. A re-run of the
  turn that made it finds its row and is never refused. (Several instances on
  PostgreSQL each hold their own lock: two adding at one instant may pass a cap by one.)
- The running set follows the store without rebuilds: a reminder added or cancelled
  here goes into (or out of) the running scheduler at once (:meth:`Scheduler.add`,
  :meth:`Scheduler.remove`: constant time however many run), and every ``interval``
  seconds the store is read for changes made elsewhere (the CLI, another instance),
  applied the same way. With no active reminder no scheduler runs. The ledger makes
  every path safe: nothing decided is decided again.

Logs: ``reminder.added``, ``reminder.refused``, ``reminder.cancelled``, ``reminder.done``,
``reminder.missed``, ``reminder.skipped``, ``reminder.prompted``; fires log ``cron.fired``
like any job.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import structlog

from tether.config.tools import RemindersConfig
from tether.cron import parse_time, stamp
from tether.memory.reminders import Reminder, ReminderStatus
from tether.memory.roles import InboxStore, ReminderStore
from tether.scheduler.bounds import check_caps
from tether.scheduler.jobs import decided_cursor, last_cursor, now_utc

# What a reminder's job is lives in reminder_jobs; named here too for their importers.
from tether.scheduler.reminder_jobs import FIRE as FIRE
from tether.scheduler.reminder_jobs import MARK as MARK
from tether.scheduler.reminder_jobs import ONE_OFF_GRACE, ReminderJob
from tether.scheduler.reminder_jobs import describe as describe
from tether.scheduler.reminder_jobs import one_off_cron as one_off_cron
from tether.scheduler.reminder_jobs import to_job as to_job
from tether.scheduler.runner import Clock, Intake, Scheduler

log = structlog.get_logger("tether.reminders")

#: Every reminder's id starts with this (``tether jobs list`` marks them).
PREFIX = "r-"
#: A one-off at most this far ahead (its crontab line has no year).
MAX_AHEAD = timedelta(days=365)


class Store(InboxStore, ReminderStore, Protocol):
    """What reminders need: their rows, and the ledger cursors beside the inbox."""


def reminder_id(event_key: str, position: str) -> str:
    """The id of the reminder made by the call at ``position`` in ``event_key``'s turn:
    the same on every run of that turn, so a re-run adds nothing new."""
    digest = hashlib.sha256(f"{event_key}\x00{position}".encode()).hexdigest()
    return PREFIX + digest[:16]


class Reminders:
    """The active reminders, run by a scheduler of their own that follows the store."""

    def __init__(self, store: Store, *, interval: float = 2.0, clock: Clock = now_utc) -> None:
        self.store = store
        self.interval = interval
        self.clock = clock
        self.inbox: Intake | None = None
        self.scheduler: Scheduler | None = None
        #: The reminders the scheduler was given (a row no schedule reads included).
        self._running: dict[str, Reminder] = {}
        self._lock = asyncio.Lock()
        #: Held from a cap's count to the insert it allows.
        self._adding = asyncio.Lock()
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

    async def _follow(self) -> None:
        """Every ``interval``: what changed in the store elsewhere (the CLI, another
        instance); what this process changes is applied where it is changed."""
        while True:
            await asyncio.sleep(self.interval)
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
            if self.scheduler is None:  # all at once: one catch-up read for every ledger
                jobs = [job for reminder in active if (job := _job(reminder)) is not None]
                if jobs:
                    scheduler = Scheduler(jobs, self.store, self.inbox, clock=self.clock)
                    await scheduler.start()
                    self.scheduler = scheduler
                self._running = wanted
                return
            for new in wanted.keys() - self._running.keys():  # first: a scheduler whose
                await self._run(wanted[new])  # last job goes stops, and would be rebuilt
            for gone in self._running.keys() - wanted.keys():
                await self._drop(gone)

    async def _run(self, reminder: Reminder) -> None:
        """Into the running scheduler (started for it, if none runs). Under ``_lock``."""
        assert self.inbox is not None
        self._running[reminder.id] = reminder
        job = _job(reminder)
        if job is None:
            return
        if self.scheduler is None:
            scheduler = Scheduler([job], self.store, self.inbox, clock=self.clock)
            await scheduler.start()
            self.scheduler = scheduler
        else:
            await self.scheduler.add(job)

    async def _drop(self, reminder_id: str) -> None:
        """Out of the running scheduler, stopped with its last job. Under ``_lock``."""
        if self._running.pop(reminder_id, None) is None or self.scheduler is None:
            return
        if self._running:
            self.scheduler.remove(reminder_id)
        else:
            await self.scheduler.stop()
            self.scheduler = None

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

    async def add(self, reminder: Reminder, limits: RemindersConfig | None = None) -> Reminder:
        """Store ``reminder`` (once: its id is deterministic) with its ledger starting at
        its creation, and schedule it now; :class:`Refused` past one of ``limits``' caps
        (a reminder already stored, made by an earlier run of the same turn, never is)."""
        async with self._adding:
            stored = await self.store.reminder(reminder.id)
            if stored is None:
                if limits is not None:
                    await check_caps(self.store, reminder, limits)
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
                        sender=stored.sender,
                        prompt=stored.prompt,
                        cron=stored.cron,
                        at=stored.at,
                    )
        if stored.status == "active":
            async with self._lock:
                if self.inbox is not None and stored.id not in self._running:
                    await self._run(stored)
        return stored

    async def in_chat(self, target: str) -> list[Reminder]:
        """The active reminders that post into chat ``target``, oldest first."""
        return await self.store.reminders(target=target)

    async def cancel(self, reminder_id: str, conversation: str | None = None) -> Reminder | None:
        """Cancel an active reminder (of ``conversation`` only, when given), and take it
        out of the running scheduler at once."""
        found = await cancel(self.store, reminder_id, conversation)
        if found is not None:
            async with self._lock:
                await self._drop(found.id)
        return found


def _job(reminder: Reminder) -> ReminderJob | None:
    """The reminder's job, or None (and a warning) for a row no schedule reads."""
    try:
        return to_job(reminder)
    except ValueError as exc:  # e.g. written by hand
        log.warning("reminder.unreadable", reminder=reminder.id, error=str(exc))
        return None


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
    sender: str = "",
    prompt: bool = False,
) -> Reminder:
    """A new active reminder; ``created`` (epoch seconds, default now) starts its ledger."""
    now = time.time() if created is None else created
    return Reminder(
        sender=sender,
        prompt=prompt,
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
