"""A reminder made in chat as a :class:`~tether.scheduler.jobs.Job`: its crontab line,
its grace, and the event each fire becomes; and the line a person reads of it.

Kept apart from :mod:`tether.scheduler.reminders` (which runs them) so that what a fire
*is* can be read in one place: a text reminder's event carries its text; a prompt's
also carries its maker, so that the fire runs in the conversation that made it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tether.config.jobs import JobConfig
from tether.cron import Schedule, parse_time, stamp
from tether.events import Conversation, Event, Sender, Target
from tether.memory.reminders import Reminder
from tether.scheduler.jobs import Job, now_utc

#: The ``handler`` of every reminder's job: the name by which the cron router
#: (``gateway/agent/cron.py``) knows a reminder's fire. A name, never imported: fires
#: queued by earlier versions carry it in their stored events.
FIRE = "tether.scheduler.reminders:fire"
#: How late a missed fire still runs: a reminder is worth more late than never.
ONE_OFF_GRACE = timedelta(hours=12)
RECURRING_GRACE = timedelta(hours=1)
#: Shown before the text in the chat.
MARK = "⏰ "


def one_off_cron(at: datetime) -> str:
    """The crontab line (seconds first, UTC) that matches ``at`` once a year."""
    at = at.astimezone(UTC)
    return f"{at.second} {at.minute} {at.hour} {at.day} {at.month} *"


@dataclass(frozen=True, slots=True)
class ReminderJob(Job):
    """A :class:`Job` whose fire event carries the reminder's text; a prompt's, also its
    maker and the conversation it was made in."""

    text: str = ""
    prompt: bool = False
    #: The reminder's maker (``platform:user``) and conversation (its session).
    sender: str = ""
    session: str = ""

    def event(self, scheduled: datetime, *, manual: str | None = None) -> Event:
        base = Job.event(self, scheduled, manual=manual)
        update: dict[str, Any] = {"text": self.text}
        meta = {**base.meta, "reminder": self.id}
        if self.prompt:
            meta |= {"prompt": True, "sender": self.sender}
            update |= as_maker(base.conversation, self.sender, self.session)
        return base.model_copy(update=update | {"meta": meta})


def as_maker(chat: Conversation, sender: str, session: str) -> dict[str, Any]:
    """A prompt fire's ``sender`` and ``conversation``, whose ``Event.session()`` is
    ``session``: the maker's per-user session of a group (``telegram:-100:u7``) when it
    was made there, else the chat (a DM, a shared group). The platform stays ``cron``:
    the fire is the gateway's (never throttled as the maker's flood); the tools that
    act for a person read the maker from ``meta["sender"]``."""
    user = sender.partition(":")[2]
    if not user:  # made by a job's fire, or before senders were kept: the chat
        return {}
    grouped = session == f"{chat.key}:u{user}"
    shape = chat.model_copy(update={"chat_type": "group"}) if grouped else chat
    return {"sender": Sender(id=user), "conversation": shape}


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
        prompt=reminder.prompt,
        sender=reminder.sender,
        session=reminder.conversation,
    )


def describe(reminder: Reminder, now: datetime | None = None) -> str:
    """One line for a person: id, when, text, and the next time it fires."""
    if reminder.cron is not None:
        when = f"cron {reminder.cron!r} ({reminder.timezone})"
    else:
        when = f"once at {reminder.at}"
    upcoming = next_fire(reminder, now or now_utc()) if reminder.cron is not None else None
    after = f", next {stamp(upcoming)}" if upcoming and reminder.status == "active" else ""
    return f"{reminder.id}: {when}{after}: {what(reminder)}"


def what(reminder: Reminder) -> str:
    """Its text, said to be a prompt when it is one."""
    return f"prompt for the agent: {reminder.text}" if reminder.prompt else reminder.text


def next_fire(reminder: Reminder, now: datetime) -> datetime | None:
    try:
        return to_job(reminder).schedule.next_after(now)
    except ValueError:
        return None
