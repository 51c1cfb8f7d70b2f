"""What a reminder made in chat may be: how often it fires, and how many there are.

Both bounds are ``agent.tools.reminders``; the ``schedule`` tool hands their refusals
to the model as its result, and the model tells the person.

- **Cadence.** A recurring reminder whose crontab line fires more often than
  ``min_interval`` is refused (``* * * * * *`` is every second). :func:`shortest_gap`
  reads it from the line's second, minute and hour fields, not by walking fire times:
  the times of day a line fires at are the product of those three sets, so its two
  closest fires are neighbours in one of four places — two seconds of one minute, the
  last second of a minute and the first of the next listed minute, the same across two
  listed hours, and the last fire of a day and the first of the next. That is a few
  dozen steps for any line, where walking ``* * * * *`` until it repeats is 1,440
  fires. The gap is read on the wall clock of the line's time zone and assumes two
  consecutive days can both match (a weekday-only line counts like a daily one); a
  change of the clocks can bring one pair of fires an hour closer on that night.
- **Caps.** :func:`check_caps` refuses a reminder when its chat already has
  ``per_chat`` active ones, or its maker ``per_person`` over every chat, counted from
  the store's indexes (:meth:`~tether.memory.roles.ReminderStore.count_reminders`).
"""

from __future__ import annotations

import re
from itertools import pairwise

import structlog

from tether.config.tools import RemindersConfig
from tether.cron import crontab_fields
from tether.memory.reminders import Reminder
from tether.memory.roles import ReminderStore

log = structlog.get_logger("tether.reminders")

DAY = 86_400.0
#: The second, minute and hour fields: their first value and how many seconds one step is.
_FIELDS = ((0, 59, 1), (0, 59, 60), (0, 23, 3600))
_ITEM = re.compile(r"^(\*|\d+)(?:-(\d+))?(?:/(\d+))?$")


def shortest_gap(expr: str) -> float:
    """Seconds between the two closest fires of ``expr``, a line :class:`~tether.cron.
    Schedule` accepts (5 or 6 fields, or a shortcut); a line that fires once a day or
    less often answers a day or more. A ValueError for a line it cannot read."""
    seconds, minutes, hours = (
        [value * unit for value in _values(field, low, high)]
        for field, (low, high, unit) in zip(crontab_fields(expr)[:3], _FIELDS, strict=True)
    )
    gaps = [DAY]
    span = 0  # from the first to the last fire within one unit of the next field up
    for values in (seconds, minutes, hours):
        if len(values) > 1:
            gaps.append(min(b - a for a, b in pairwise(values)) - span)
        span += values[-1] - values[0]
    gaps.append(DAY - span)  # the last fire of a day, the first of the next
    return float(min(gaps))


def _values(field: str, low: int, high: int) -> list[int]:
    """The sorted numbers one of those fields matches (the syntax APScheduler reads in
    them: ``*``, ``a``, ``a-b``, each with an optional ``/step``, in a comma list)."""
    found: set[int] = set()
    for item in field.split(","):
        match = _ITEM.match(item.strip())
        if match is None:
            raise ValueError(f"cannot read {item!r}")
        first, last, step = match.groups()
        start = low if first == "*" else int(first)
        if last is not None:
            end = int(last)
        elif first == "*" or step is not None:  # ``*`` and ``a/k`` run to the field's end
            end = high
        else:
            end = start
        found.update(range(start, min(end, high) + 1, int(step or 1)))
    if not found:
        raise ValueError(f"{field!r} matches nothing")
    return sorted(found)


class Refused(ValueError):
    """A reminder the caps do not allow; the message says which cap and what to do."""


async def check_caps(store: ReminderStore, reminder: Reminder, limits: RemindersConfig) -> None:
    """:class:`Refused` when ``reminder``'s chat or maker already holds a cap's worth."""
    chat = await store.count_reminders(target=reminder.target, limit=limits.per_chat)
    reason = None
    if chat >= limits.per_chat:
        reason = (
            f"this chat already has {chat} active reminders, the most it may have"
            " (agent.tools.reminders.per_chat); cancel one first (list_schedules shows them)"
        )
    elif reminder.sender:
        mine = await store.count_reminders(sender=reminder.sender, limit=limits.per_person)
        if mine >= limits.per_person:
            reason = (
                f"this person already has {mine} active reminders, the most one person may"
                " have (agent.tools.reminders.per_person); cancel one first (list_schedules"
                " shows them)"
            )
    if reason is not None:
        log.warning(
            "reminder.refused",
            reminder=reminder.id,
            conversation=reminder.conversation,
            sender=reminder.sender,
            reason=reason,
        )
        raise Refused(reason)
