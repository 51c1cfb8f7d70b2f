"""The scheduler: APScheduler says *when* to look, our store says *what* already happened.

APScheduler 3's ``AsyncIOScheduler`` only wakes us up (one job per configured job, on the
cron trigger with jitter). It keeps nothing: with a persistent job store it would drop
missed runs on ``replace_existing`` and fire N times under N workers (PLATFORMS.md).
Instead, at every wakeup we work out from our own ledger which fires are due — those
scheduled after the job's last *decided* time, up to now — and accept them through the
same inbox ``accept`` as platform traffic, with the ledger cursors in the same
transaction. So:

- a restart, a second scheduler or a late wakeup computes the same keys, and the inbox's
  unique key lets each fire in once;
- at start, fires missed while down follow the job's ``catch_up`` within ``grace``;
- a job removed from the YAML is simply never added; a changed schedule starts after the
  last decided time, so nothing already fired can fire again;
- a running scheduler takes a job more (:meth:`Scheduler.add`: its ledger read, what it
  owes accepted, a wakeup of its own) or one less (:meth:`Scheduler.remove`) without a
  rebuild, so adding the 2,000th reminder made in chat costs what adding the first did;
- ``overlap: skip`` skips a fire while the job's previous fire is unfinished in the
  store; ``queue`` accepts it, and the conversation's lane runs it after the previous one.

Logs: ``cron.fired`` for each fire that entered the inbox, ``cron.skipped`` (job,
scheduled time, reason) for each one that did not.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

import structlog

from tether import metrics
from tether.cron import parse_time, stamp
from tether.events import Event
from tether.memory.records import UNFINISHED_INBOX
from tether.memory.roles import InboxStore
from tether.scheduler.jobs import Job, decided_cursor, fire_key, last_cursor, now_utc
from tether.scheduler.ledger import OVERLAP, Plan, Skip, plan

if TYPE_CHECKING:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

log = structlog.get_logger("tether.scheduler")

Clock = Callable[[], datetime]
#: What :func:`last_cursor` and :func:`decided_cursor` names start with.
CURSOR_PREFIX = "cron:"
#: Before the id of a job's own wakeup when it was added to a running scheduler, so it
#: never meets the id of a wakeup :meth:`Scheduler.start` made (a group's first job's).
ADDED = "+"


@dataclass(slots=True)
class _State:
    """What this process knows about one job between wakeups."""

    job: Job
    decided: datetime
    last_key: str | None
    #: The first fire after start, found by the catch-up scan (APScheduler's first wakeup).
    upcoming: datetime | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Intake(Protocol):
    """Where fires go: the gateway's inbox, seen from the scheduler. Each fire is
    committed with the ledger's cursors in one transaction; True where it is new."""

    async def accept(
        self, events: Sequence[Event], cursors: Mapping[str, str] | None = None
    ) -> list[bool]: ...


class Scheduler:
    def __init__(
        self, jobs: Sequence[Job], store: InboxStore, inbox: Intake, *, clock: Clock = now_utc
    ) -> None:
        self.jobs = {job.id: job for job in jobs}
        self.store = store
        self.inbox = inbox
        #: Injected in tests; APScheduler's own timer still runs on the real clock.
        self.clock = clock
        self._states: dict[str, _State] = {}
        self._aps: AsyncIOScheduler | None = None
        #: job id -> the APScheduler job that wakes it (jobs on one schedule share one),
        #: and each wakeup's jobs (removed with its last one).
        self._wakeup_of: dict[str, str] = {}
        self._members: dict[str, set[str]] = {}
        self._inflight: set[asyncio.Task[None]] = set()
        self._stopping = False

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Catch up on what was missed while down, then let APScheduler wake us."""
        self._stopping = False
        await self.catch_up()
        # Its INFO lines ("Added job", "Running job") would be one per job per fire;
        # cron.fired / cron.skipped are the record. Warnings and errors still show.
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
        # Imported here: a gateway without cron jobs never starts a Scheduler, and the
        # scheduler side of APScheduler (executors, job stores, multiprocessing for its
        # process pool) is 0.6 MB resident for the life of the process (bench/idle.py).
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        aps = AsyncIOScheduler(timezone="UTC")
        self._wakeup_of, self._members = {}, {}
        for ids in wakeup_groups(self.jobs.values(), self._states).values():
            self._wake_by(aps, ids[0], ids)
        aps.start()
        self._aps = aps
        log.info("scheduler.started", jobs=len(self.jobs))

    def _wake_by(self, aps: AsyncIOScheduler, wakeup: str, ids: list[str]) -> None:
        """One APScheduler job, ``wakeup``, that wakes the jobs ``ids`` (one schedule)."""
        job = self.jobs[ids[0]]
        first: dict[str, datetime] = {}
        upcoming = min(self._states[i].upcoming or _NEVER for i in ids)
        if upcoming > now_utc():  # known from the catch-up scan: saves APScheduler a step
            # (never a past time: APScheduler would walk every fire since, one by one)
            first["next_run_time"] = upcoming + timedelta(seconds=random.uniform(0, job.jitter))
        aps.add_job(
            self._on_wakeup,
            trigger=job.wakeups(),
            **first,
            args=ids,
            id=wakeup,
            name=f"cron:{job.id}",
            misfire_grace_time=None,  # a late wakeup still looks; our grace decides
            coalesce=True,  # one look covers every fire that is due
            max_instances=1,
        )
        self._wakeup_of.update(dict.fromkeys(ids, wakeup))
        self._members[wakeup] = set(ids)

    async def add(self, job: Job) -> None:
        """Run ``job`` too, without a rebuild: its ledger is read, what it owes by its
        ``catch_up`` is accepted (a job the ledger has not seen starts now), and it gets
        an APScheduler wakeup of its own. Costs the same however many jobs run already.
        A job with the id of a running one replaces it."""
        if self._aps is None:
            raise RuntimeError("Scheduler.add: not started")
        names = (decided_cursor(job.id), last_cursor(job.id))
        ledger = {name: value for name in names if (value := await self.store.cursor(name))}
        self.remove(job.id)
        self.jobs[job.id] = job
        now = self.clock()
        cursors: dict[str, str] = {}
        decided = self._decide(job, ledger, now, cursors)
        state = self._states[job.id]
        async with state.lock:  # as a wakeup's accept: one at a time per job
            events: list[Event] = []
            if decided is not None:
                await self._check_overlap(state, decided)
                events = self._apply(state, decided, cursors, now)
            if events or cursors:
                accepted = await self.inbox.accept(events, cursors)
                self._log_fired(events, accepted, catch_up=True)
        if self.jobs.get(job.id) is not job or self._aps is None:  # removed meanwhile
            return
        if state.upcoming is None:
            log.warning("cron.never", job=job.id, cron=job.config.cron)
            return
        self._wake_by(self._aps, ADDED + job.id, [job.id])

    def remove(self, job_id: str) -> None:
        """Stop running ``job_id`` (nothing, for a job not running). A wakeup it shares
        with other jobs stays theirs; a wakeup that woke it finds nothing to do."""
        self.jobs.pop(job_id, None)
        self._states.pop(job_id, None)
        wakeup = self._wakeup_of.pop(job_id, None)
        if wakeup is None:
            return
        members = self._members.get(wakeup, set())
        members.discard(job_id)
        if not members:
            self._members.pop(wakeup, None)
            if self._aps is not None and self._aps.get_job(wakeup) is not None:
                self._aps.remove_job(wakeup)

    async def stop(self) -> None:
        """No new wakeups; a wakeup already accepting its fire finishes it."""
        self._stopping = True
        if self._aps is not None and self._aps.running:
            self._aps.shutdown(wait=False)  # runs at the loop's next turn: give it one
            await asyncio.sleep(0)
        self._aps = None
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        log.info("scheduler.stopped")

    def next_fire(self, job_id: str) -> datetime | None:
        """When APScheduler will next wake for ``job_id`` (None when not running)."""
        wakeup = self._wakeup_of.get(job_id)
        found = self._aps.get_job(wakeup) if self._aps and wakeup else None
        return found.next_run_time if found else None

    # -- start: the missed fires ----------------------------------------------------

    async def catch_up(self) -> None:
        """Decide every fire scheduled between each job's ledger and now, in one commit."""
        now = self.clock()
        names = [
            name for job_id in self.jobs for name in (decided_cursor(job_id), last_cursor(job_id))
        ]
        ledger = await _read_cursors(self.store, names)  # one query, not one per name
        plans: list[tuple[_State, Plan]] = []
        cursors: dict[str, str] = {}
        for job in self.jobs.values():
            decided = self._decide(job, ledger, now, cursors)
            if decided is not None:
                plans.append((self._states[job.id], decided))
        # Only `overlap: skip` plans with a fire ask the store (a task each): not 10,000.
        checks = [(s, d) for s, d in plans if _may_overlap(s, d)]
        await asyncio.gather(*(self._check_overlap(state, decided) for state, decided in checks))
        events: list[Event] = []
        for state, decided in plans:
            events += self._apply(state, decided, cursors, now)
        if events or cursors:
            accepted = await self.inbox.accept(events, cursors)
            self._log_fired(events, accepted, catch_up=True)

    def _decide(
        self, job: Job, ledger: Mapping[str, str], now: datetime, cursors: dict[str, str]
    ) -> Plan | None:
        """``job``'s state from its ledger, and what it owes since (None: first sight,
        when nothing is owed from before the job existed and its ledger starts now)."""
        last = ledger.get(last_cursor(job.id))
        seen = [parse_time(v) for v in (ledger.get(decided_cursor(job.id)), last) if v]
        state = _State(job, now, fire_key(job.id, parse_time(last)) if last else None)
        self._states[job.id] = state
        if not seen:
            cursors[decided_cursor(job.id)] = now.isoformat()
            state.upcoming = job.schedule.next_after(now)
            return None
        # A ledger ahead of now (the clock went back) stays decided: no fire twice.
        state.decided = max(now, *seen)
        decided = plan(job.schedule, max(seen), now, job.config.catch_up, job.grace)
        state.upcoming = decided.upcoming
        return decided

    # -- while running: each wakeup -------------------------------------------------

    async def _on_wakeup(self, *job_ids: str) -> None:
        """APScheduler's callback for the jobs of one wakeup. The work runs in tasks of
        ours, shielded, so that APScheduler's shutdown (which cancels its tasks) cannot
        cut an accept in half."""
        tasks = []
        for job_id in job_ids:
            task = asyncio.create_task(self.wake(job_id), name=f"cron:{job_id}")
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
            tasks.append(task)
        await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))

    async def wake(self, job_id: str) -> None:
        """Fire whatever of ``job_id`` is due now (normally exactly one fire)."""
        state = self._states.get(job_id)
        if state is None or self._stopping:
            return
        async with state.lock:
            if self._stopping:
                return
            job, now = state.job, self.clock()
            due = plan(
                job.schedule, state.decided, now, job.config.catch_up, job.grace, on_time=True
            )
            if not due.fire and not due.skip:
                return
            try:
                await self._check_overlap(state, due)
                cursors: dict[str, str] = {}
                previous = (state.decided, state.last_key)
                events = self._apply(state, due, cursors, now)
                try:
                    accepted = await self.inbox.accept(events, cursors)
                except BaseException:
                    state.decided, state.last_key = previous  # try again at the next wakeup
                    raise
                self._log_fired(events, accepted, catch_up=False)
            except Exception:
                log.exception("cron.error", job=job_id)

    # -- shared -------------------------------------------------------------------------

    async def _check_overlap(self, state: _State, decided: Plan) -> None:
        """``overlap: skip``: while the previous fire is unfinished, this plan fires nothing.

        Several fires in one plan (``catch_up: all``) are not each other's overlap: they
        queue one after another in the job's lane.
        """
        if not _may_overlap(state, decided) or state.last_key is None:
            return
        previous = await self.store.inbox_row(state.last_key)
        if previous is not None and previous.status in UNFINISHED_INBOX:
            decided.skip += [Skip(moment, OVERLAP) for moment in decided.fire]
            decided.fire = []

    def _apply(
        self, state: _State, decided: Plan, cursors: dict[str, str], now: datetime
    ) -> list[Event]:
        """Log the skips, build the fire events, and advance the ledger (in ``cursors``)."""
        job = state.job
        for skip in sorted(decided.skip, key=lambda s: s.scheduled):
            metrics.CRON_SKIPS.labels(job.id, skip.reason).inc()
            extra = {"until": stamp(skip.until)} if skip.until else {}
            log.info(
                "cron.skipped",
                job=job.id,
                key=job.key(skip.scheduled),
                scheduled=stamp(skip.scheduled),
                reason=skip.reason,
                **extra,
            )
        newest = decided.newest
        if newest is not None:
            cursors[decided_cursor(job.id)] = newest.isoformat()
        state.decided = max(state.decided, now) if newest is not None else state.decided
        events = [job.event(moment) for moment in decided.fire]
        if events:
            cursors[last_cursor(job.id)] = stamp(decided.fire[-1])
            state.last_key = events[-1].key
        return events

    def _log_fired(self, events: list[Event], accepted: list[bool], *, catch_up: bool) -> None:
        for event, new in zip(events, accepted, strict=True):
            if new:  # a duplicate (another instance won) is logged by the inbox
                metrics.CRON_FIRES.labels(event.meta["job"]).inc()
                log.info(
                    "cron.fired",
                    job=event.meta["job"],
                    key=event.key,
                    conversation=event.conversation.key,
                    scheduled=event.meta["scheduled"],
                    catch_up=catch_up,
                )


async def _read_cursors(store: InboxStore, names: Sequence[str]) -> dict[str, str]:
    """The ledger cursors among ``names``: every job's cursor starts with ``cron:``, so
    one prefix read replaces a round trip per name (20,000 for 10,000 jobs)."""
    every = await store.recent_cursors(CURSOR_PREFIX, 0.0)
    return {name: every[name] for name in names if name in every}


def _may_overlap(state: _State, decided: Plan) -> bool:
    """``overlap: skip`` and something to fire after an earlier fire: ask the store."""
    return bool(decided.fire) and state.job.config.overlap == "skip" and state.last_key is not None


#: Later than any fire: a job that never fires (the 30th of February) wakes no group early.
_NEVER = datetime.max.replace(tzinfo=UTC)


def wakeup_groups(jobs: Iterable[Job], states: Mapping[str, _State]) -> dict[object, list[str]]:
    """Job ids by the APScheduler job that wakes them: one per distinct schedule.

    A wakeup only makes :meth:`Scheduler.wake` look at the ledger, and a job with
    nothing due does nothing, so jobs on the same crontab line and time zone can share
    one: APScheduler's ``add_job`` costs ~150 µs, a large part of starting 10,000 jobs
    (bench/cron.py). A job with jitter keeps its own wakeup, with its own random delay.
    A job that never fires gets none (``cron.never``).
    """
    groups: dict[object, list[str]] = {}
    for job in jobs:
        if states[job.id].upcoming is None:  # e.g. "0 0 30 2 *": never comes
            log.warning("cron.never", job=job.id, cron=job.config.cron)
            continue
        shared = not job.jitter
        key = (job.config.cron, job.config.timezone) if shared else job.id
        groups.setdefault(key, []).append(job.id)
    return groups
