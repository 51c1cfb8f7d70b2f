"""``jobs:`` config → :class:`Job`: its schedule, its targets, and the event each fire becomes.

A fire is an ordinary inbound event so it gets the pipeline's guarantees (dedup,
checkpoint, retries, dead letters) without a second code path. Its key is
``cron:{job}:{scheduled UTC time}``: every instance and every restart that computes the
same fire computes the same key, and the inbox's unique key lets only one of them in.
The event carries what the job does (``meta``) so a fire queued before a config change
still does what it was fired to do.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from tether.config.schema import JobConfig, Settings
from tether.cron import CrontabTrigger, Schedule, parse_time, stamp, trigger
from tether.errors import JobError
from tether.events import Conversation, Event, Kind, Target
from tether.memory.roles import InboxStore

Action = Literal["text", "prompt", "handler", "reflect"]
#: The platform of every fire event; its conversation is the job's first deliver target.
PLATFORM = "cron"


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    config: JobConfig
    schedule: Schedule
    targets: tuple[Target, ...]

    @property
    def action(self) -> Action:
        if self.config.text is not None:
            return "text"
        if self.config.reflect is not None:
            return "reflect"
        return "prompt" if self.config.prompt is not None else "handler"

    @property
    def jitter(self) -> float:
        return self.config.jitter or 0.0

    @property
    def grace(self) -> timedelta:
        return timedelta(seconds=self.config.grace)

    @property
    def conversation(self) -> Conversation:
        """Where the job runs: its first target's chat (memory, lane, ``ctx.reply``).

        A handler job without ``deliver`` gets a conversation of its own, ``cron:{id}``.
        """
        if not self.targets:
            return Conversation(platform=PLATFORM, chat_id=self.id)
        first = self.targets[0]
        return Conversation(
            platform=first.platform, chat_id=first.chat_id, thread_id=first.thread_id
        )

    def wakeups(self) -> CrontabTrigger:
        """The trigger APScheduler sleeps on: the schedule plus jitter."""
        return trigger(self.config.cron, self.config.timezone, self.config.jitter)

    def key(self, scheduled: datetime) -> str:
        return fire_key(self.id, scheduled)

    def event(self, scheduled: datetime, *, manual: str | None = None) -> Event:
        """The event for the fire at ``scheduled`` (or a manual fire, keyed by ``manual``)."""
        key = f"cron:{self.id}:manual:{manual}" if manual else self.key(scheduled)
        return Event(
            key=key,
            platform=PLATFORM,
            kind=Kind.CRON,
            conversation=self.conversation,
            text=self.config.prompt or self.config.text or "",
            timestamp=scheduled,
            meta={
                "job": self.id,
                "scheduled": stamp(scheduled),
                "manual": manual is not None,
                "action": self.action,
                "deliver": [target.key for target in self.targets],
                "handler": self.config.handler,
                "reflect": self.config.reflect.model_dump() if self.config.reflect else None,
            },
        )


def fire_key(job_id: str, scheduled: datetime) -> str:
    return f"cron:{job_id}:{stamp(scheduled)}"


def last_cursor(job_id: str) -> str:
    """The scheduled time of the job's last fire accepted into the inbox."""
    return f"cron:{job_id}:last"


def decided_cursor(job_id: str) -> str:
    """Every fire up to this time was fired or skipped: catch-up starts after it."""
    return f"cron:{job_id}:decided"


def manual_cursor(job_id: str) -> str:
    """The key of the job's last manual fire (``tether jobs run``)."""
    return f"cron:{job_id}:manual"


@dataclass(frozen=True, slots=True)
class LastFire:
    """A job's latest fire as the ledger and the inbox know it (``tether jobs list``
    and the console's Jobs page show the same thing): scheduled or run by hand."""

    key: str | None = None
    at: datetime | None = None
    manual: bool = False
    #: The fire's inbox status, ``-`` when there is none.
    outcome: str = "-"


async def last_fire(store: InboxStore, job_id: str) -> LastFire:
    """The newer of the last scheduled fire and the last manual run."""
    key, at, manual = None, None, False
    if last := await store.cursor(last_cursor(job_id)):
        at = parse_time(last)
        key = fire_key(job_id, at)
    manual_key = await store.cursor(manual_cursor(job_id))
    if manual_key:
        manual_at = parse_time(manual_key.rsplit(":manual:", 1)[1].rsplit("-", 1)[0])
        if at is None or manual_at > at:
            key, at, manual = manual_key, manual_at, True
    found = await store.inbox_row(key) if key else None
    return LastFire(key, at, manual, found.status if found else "-")


def load_jobs(settings: Settings) -> list[Job]:
    """Every configured job. A job's ``handler`` is the gateway's to import and check
    (``tether.gateway.handler.plugins.check_job_handlers``)."""
    jobs = []
    for index, config in enumerate(settings.jobs):
        if config.reflect is not None:
            _check_reflect(settings, config.reflect.model, index)
        jobs.append(
            Job(
                id=config.id,
                config=config,
                schedule=Schedule.parse(config.cron, config.timezone),
                targets=tuple(_target(spec) for spec in config.deliver),
            )
        )
    return jobs


#: ``Target.parse`` once per distinct ``deliver`` entry: a Target is frozen, so jobs that
#: deliver to one chat can share it (10,000 jobs, a few chats: bench/cron.py).
_target = functools.lru_cache(maxsize=1024)(Target.parse)


def _check_reflect(settings: Settings, model: str | None, index: int) -> None:
    """A reflection job asks a model: without one it could only fail every night."""
    if settings.llm is None:
        raise JobError(f"jobs[{index}].reflect: needs an llm section (the model it asks)")
    if model is not None and model not in settings.llm.models:
        known = ", ".join(sorted(settings.llm.models))
        raise JobError(f"jobs[{index}].reflect.model: no model {model!r} in llm.models ({known})")


def check_targets(jobs: list[Job], platforms: Collection[str]) -> None:
    """Every deliver target's platform must be enabled, or the job could never deliver."""
    for index, job in enumerate(jobs):
        for target in job.targets:
            if target.platform not in platforms:
                enabled = ", ".join(sorted(platforms)) or "none"
                raise JobError(
                    f"jobs[{index}].deliver: {target.key!r}: platform {target.platform!r}"
                    f" is not enabled (enabled: {enabled})"
                )


def now_utc() -> datetime:
    return datetime.now(UTC)
