"""``tether jobs list`` and ``tether jobs run ID``: the scheduler seen from the store.

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

from tether.config.schema import Settings
from tether.memory.roles import InboxStore
from tether.scheduler.cron import parse_time, stamp, zone
from tether.scheduler.jobs import Job, fire_key, last_cursor, load_jobs, manual_cursor, now_utc


async def jobs_command(
    settings: Settings, store: InboxStore, action: str, job_id: str | None
) -> int:
    jobs = load_jobs(settings, import_handlers=False)
    if action == "list":
        return await _list(jobs, store)
    found = next((job for job in jobs if job.id == job_id), None)
    if found is None:
        known = ", ".join(job.id for job in jobs) or "none configured"
        print(f"tether jobs run: no job {job_id!r} (jobs: {known})", file=sys.stderr)
        return 1
    return await _run(settings, found, store)


async def _list(jobs: list[Job], store: InboxStore) -> int:
    if not jobs:
        print("no jobs configured")
        return 0
    now = now_utc()
    rows = [("ID", "SCHEDULE", "TIME ZONE", "NEXT FIRE", "LAST FIRE", "OUTCOME")]
    for job in jobs:
        tz = job.config.timezone
        upcoming = job.schedule.next_after(now)
        last_key, last_at, manual = None, None, False
        if last := await store.cursor(last_cursor(job.id)):
            last_at = parse_time(last)
            last_key = fire_key(job.id, last_at)
        manual_key = await store.cursor(manual_cursor(job.id))
        if manual_key:
            manual_at = parse_time(manual_key.rsplit(":manual:", 1)[1].rsplit("-", 1)[0])
            if last_at is None or manual_at > last_at:
                last_key, last_at, manual = manual_key, manual_at, True
        found = await store.inbox_row(last_key) if last_key else None
        outcome = found.status if found else "-"
        rows.append(
            (
                job.id,
                job.config.cron,
                tz,
                _local(upcoming, tz),
                _local(last_at, tz) + (" (manual)" if manual else ""),
                outcome,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


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
