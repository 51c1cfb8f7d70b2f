"""Cron expressions → APScheduler triggers, fire-time arithmetic, and how a fire time is written.

Why not ``CronTrigger.from_crontab``: it takes 5 fields only, and APScheduler 3 numbers
weekdays from Monday = 0, so crontab's ``1-5`` (Monday to Friday) would fire Tuesday to
Saturday. :func:`trigger` accepts 5 fields (``minute hour day month weekday``) or 6 with
seconds first, and reads the weekday field the way crontab does (0 and 7 are Sunday).

:class:`Schedule` is what the scheduler and the catch-up ledger iterate. It fixes one
more APScheduler 3 quirk: when clocks go back (Europe/Berlin, last Sunday of October),
a wall time like 02:30 happens twice and APScheduler fires both. Like Vixie cron, a job
with a fixed hour fires once; a job whose hour field is a wildcard (``*``, ``*/2``)
runs in both hours, because both really pass.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger

_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_DAY_ITEM = re.compile(r"^(\*|[a-z0-9]+)(?:-([a-z0-9]+))?(?:/([0-9]+))?$")
_ONE_MICROSECOND = timedelta(microseconds=1)
#: Where the "does it ever fire" check starts looking (a leap year, so Feb 29 is found).
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; ValueError (not KeyError) when it does not exist."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r} (use an IANA name like Europe/Berlin)"
        ) from None


@functools.lru_cache(maxsize=4096)
def trigger(expr: str, timezone: str = "UTC", jitter: float | None = None) -> CronTrigger:
    """A CronTrigger for a 5-field crontab line, or 6 fields with seconds first.

    Cached: a trigger only computes (it is never changed after construction), building
    one costs ~50 µs, and thousands of jobs tend to share a handful of expressions.
    """
    fields = expr.split()
    if len(fields) == 5:
        fields = ["0", *fields]
    elif len(fields) != 6:
        raise ValueError(
            f"expected 5 fields (minute hour day month weekday) or 6 (seconds first), "
            f"got {len(fields)}"
        )
    second, minute, hour, day, month, weekday = fields
    built = CronTrigger(
        second=second,
        minute=minute,
        hour=hour,
        day=day,
        month=month,
        day_of_week=crontab_weekdays(weekday),
        timezone=zone(timezone),
        jitter=jitter or None,
    )
    # Every field parses, yet ``0 0 31 2 *`` (February 31st) matches no date: such a job
    # would be accepted and then silently never run. A schedule that fires at all fires
    # again within 28 years (when dates and weekdays repeat), so a fixed start will do.
    if built.get_next_fire_time(None, _EPOCH) is None:
        raise ValueError(
            f"never fires: no month in {month!r} has a day {day!r}"
            " (February has 29 days at most; April, June, September and November 30)"
        )
    return built


def crontab_weekdays(field: str) -> str:
    """Crontab's weekday field (0/7 = Sunday, names, ranges, steps) as APScheduler names."""
    field = field.lower()
    if field == "*":
        return "*"
    days: set[int] = set()
    for item in field.split(","):
        match = _DAY_ITEM.match(item)
        if not match:
            raise ValueError(f"weekday: cannot read {item!r}")
        start, end, step = match.groups()
        if start == "*":
            if end is not None:
                raise ValueError(f"weekday: cannot read {item!r}")
            low, high = 0, 6
        else:
            low = _day_number(start)
            high = _day_number(end) if end is not None else (6 if step else low)
            if end in ("0", "sun") and low > 0:  # Sunday closing a range ends the week
                high = 7
            if high < low:
                raise ValueError(f"weekday: range {item!r} runs backwards")
        days.update(day % 7 for day in range(low, high + 1, int(step or 1)))
    # APScheduler counts Monday as 0: list the days by name so the numbering cannot leak.
    return ",".join(_DAYS[day] for day in sorted(days, key=lambda d: (d - 1) % 7))


def _day_number(token: str) -> int:
    if token.isdigit():
        number = int(token)
        if number > 7:
            raise ValueError(f"weekday: {token} is not 0-7 (0 and 7 are Sunday)")
        return number
    if token[:3] in _DAYS and len(token) == 3:
        return _DAYS.index(token)
    raise ValueError(f"weekday: unknown day {token!r}")


@dataclass(frozen=True, slots=True)
class Schedule:
    """A job's fire times: the trigger without jitter (jitter delays a fire, never moves
    its scheduled time, so the event key stays the same)."""

    expr: str
    timezone: str
    trigger: CronTrigger
    #: The hour field is a wildcard: a repeated wall-clock hour (clocks going back) fires.
    every_hour: bool

    @classmethod
    def parse(cls, expr: str, timezone: str = "UTC") -> Schedule:
        hour = expr.split()[-4] if len(expr.split()) in (5, 6) else "*"
        return cls(expr, timezone, trigger(expr, timezone), every_hour=hour.startswith("*"))

    def first_from(self, moment: datetime) -> datetime | None:
        """The first fire at or after ``moment`` (UTC), or None if there is none."""
        # Arithmetic in UTC: local wall-clock arithmetic would lose the DST fold.
        found: datetime | None = self.trigger.get_next_fire_time(None, moment.astimezone(UTC))
        while found is not None and self._repeat(found):
            after = found.astimezone(UTC) + _ONE_MICROSECOND
            found = self.trigger.get_next_fire_time(None, after)
        return found.astimezone(UTC) if found is not None else None

    def next_after(self, moment: datetime) -> datetime | None:
        """The first fire strictly after ``moment``."""
        return self.first_from(moment.astimezone(UTC) + _ONE_MICROSECOND)

    def _repeat(self, fire: datetime) -> bool:
        """The second occurrence of a wall time when clocks go back, for a fixed-hour job."""
        if self.every_hour or fire.fold != 1:
            return False
        return fire.replace(fold=0).utcoffset() != fire.utcoffset()


def stamp(moment: datetime) -> str:
    """A scheduled fire time as written in event keys: UTC, whole seconds, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    """A time written by :func:`stamp` or ``datetime.isoformat`` (UTC), read back."""
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
