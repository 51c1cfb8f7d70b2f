"""``tether jobs list``, ``tether jobs run ID`` and ``tether jobs cancel ID``: the
scheduler seen from the store. The list shows the YAML's jobs and the active ones made
in chat (:mod:`tether.scheduler.reminders`, ids ``r-…``); ``cancel`` stops one of those
(a YAML job is removed from the YAML instead).

Both work beside a running gateway (they only read the store, or insert one event).
A manual fire is inserted as ``received`` with its own key,
``cron:{job}:manual:{time}-{random}``, so it never collides with a scheduled fire: a
running gateway's sweep picks it up within ``pipeline.sweep_interval``, and otherwise
the next start's recovery does — the same path as ``tether dead retry``.
"""

from __future__ import annotations

import sys
import uuid
from datetime import datetime
from typing import Protocol

from tether.config.schema import Settings
from tether.cron import stamp, zone
from tether.memory.roles import InboxStore, ReminderStore
from tether.scheduler.jobs import Job, last_fire, load_jobs, manual_cursor, now_utc
from tether.scheduler.reminders import cancel, to_job


class JobStore(InboxStore, ReminderStore, Protocol):
    """The ledger, and the jobs made in chat."""


async def jobs_command(settings: Settings, store: JobStore, action: str, job_id: str | None) -> int:
    jobs = load_jobs(settings)
    if action == "cancel":
        return await _cancel(settings, jobs, store, str(job_id))
    jobs += await _made_in_chat(store)
    if action == "list":
        return await _list(jobs, store)
    found = next((job for job in jobs if job.id == job_id), None)
    if found is None:
        known = ", ".join(job.id for job in jobs) or "none configured"
        print(f"tether jobs run: no job {job_id!r} (jobs: {known})", file=sys.stderr)
        return 1
    return await _run(settings, found, store)


async def _made_in_chat(store: JobStore) -> list[Job]:
    """The active jobs made in chat; a row no schedule reads is left out and named."""
    jobs: list[Job] = []
    for reminder in await store.reminders():
        try:
            jobs.append(to_job(reminder))
        except ValueError as exc:
            print(f"tether jobs: {reminder.id}: {exc}", file=sys.stderr)
    return jobs


async def _list(jobs: list[Job], store: InboxStore) -> int:
    if not jobs:
        print("no jobs configured")
        return 0
    now = now_utc()
    rows = [("ID", "SCHEDULE", "TIME ZONE", "NEXT FIRE", "LAST FIRE", "OUTCOME")]
    for job in jobs:
        tz = job.config.timezone
        upcoming = job.schedule.next_after(now)
        last = await last_fire(store, job.id)
        rows.append(
            (
                job.id,
                job.config.cron,
                tz,
                _local(upcoming, tz),
                _local(last.at, tz) + (" (manual)" if last.manual else ""),
                last.outcome,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


async def _cancel(settings: Settings, jobs: list[Job], store: JobStore, job_id: str) -> int:
    found = await cancel(store, job_id)
    if found is not None:
        print(
            f"cancelled {found.id} ({found.conversation}): {found.text!r}; a running gateway"
            f" stops it within {settings.pipeline.sweep_interval:g}s"
        )
        return 0
    if any(job.id == job_id for job in jobs):
        print(
            f"tether jobs cancel: {job_id!r} is configured in jobs: (remove it there);"
            " cancel is for jobs made in chat",
            file=sys.stderr,
        )
    else:
        print(f"tether jobs cancel: no active job {job_id!r} made in chat", file=sys.stderr)
    return 1


async def _run(settings: Settings, job: Job, store: InboxStore) -> int:
    now = now_utc()
    suffix = f"{stamp(now)}-{uuid.uuid4().hex[:8]}"
    event = job.event(now, manual=suffix)
    conversation = event.session(settings.agent.group_sessions)
    await store.accept([(event, conversation)], {manual_cursor(job.id): event.key})
    print(
        f"fired {event.key}: a running gateway picks it up within"
        f" {settings.pipeline.sweep_interval:g}s, else at its next start"
    )
    return 0


def _local(moment: datetime | None, tz: str) -> str:
    if moment is None:
        return "-"
    return moment.astimezone(zone(tz)).strftime("%Y-%m-%d %H:%M:%S%z")
