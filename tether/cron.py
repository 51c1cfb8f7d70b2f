"""Cron expressions → APScheduler triggers, fire-time arithmetic, and how a fire time is written.

Why not ``CronTrigger.from_crontab``: it takes 5 fields only, and APScheduler 3 numbers
weekdays from Monday = 0, so crontab's ``1-5`` (Monday to Friday) would fire Tuesday to
Saturday. :func:`trigger` accepts 5 fields (``minute hour day month weekday``), 6 with
seconds first, or a shortcut (``@daily``), and reads the weekday field the way crontab
does (0 and 7 are Sunday).

Crontab lines are pasted from existing servers, so they must fire on the same days there
and here: when both day fields are restricted, Vixie cron fires on a day that matches
*either* (``0 0 13 * 5``: the 13th and every Friday), where one CronTrigger would need
both. Such a line becomes an ``OrTrigger`` of a day-of-month and a weekday CronTrigger.
As in Vixie cron, a day field that starts with ``*`` (``*``, ``*/2``) counts as
unrestricted, and then both fields must match.

:class:`Schedule` is what the scheduler and the catch-up ledger iterate. It fixes one
more APScheduler 3 quirk: when clocks go back (Europe/Berlin, last Sunday of October),
a wall time like 02:30 happens twice and APScheduler fires both. Like Vixie cron, a job
with a fixed hour fires once; a job whose hour field is a wildcard (``*``, ``*/2``)
runs in both hours, because both really pass.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger

_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_DAY_ITEM = re.compile(r"^(\*|[a-z0-9]+)(?:-([a-z0-9]+))?(?:/([0-9]+))?$")
_ONE_MICROSECOND = timedelta(microseconds=1)
_WEEK = timedelta(days=7)
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


#: Vixie cron's shortcuts; ``@reboot`` is refused in :func:`crontab_fields`.
SHORTCUTS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
#: Crontab's name for each field (seconds first), APScheduler's keyword, allowed numbers.
_FIELDS = (
    ("second", "second", (0, 59)),
    ("minute", "minute", (0, 59)),
    ("hour", "hour", (0, 23)),
    ("day-of-month", "day", (1, 31)),
    ("month", "month", (1, 12)),
)
_STEPPED = re.compile(r"^(?:\*|([0-9]+)(?:-([0-9]+))?)/([0-9]+)$")
_SYNTAX = "use *, numbers, ranges 1-5, steps */15 and lists 1,3,5"


@functools.lru_cache(maxsize=4096)
def trigger(expr: str, timezone: str = "UTC", jitter: float | None = None) -> CrontabTrigger:
    """The trigger for a crontab line: one CronTrigger, or two (day of month, weekday)
    when both day fields are restricted (Vixie cron's rule, see the module docstring).

    Cached: a trigger only computes (it is never changed after construction), building
    one costs ~50 µs, and thousands of jobs tend to share a handful of expressions.
    """
    fields = crontab_fields(expr)
    for index, (name, keyword, numbers) in enumerate(_FIELDS):
        fields[index] = _check_field(name, keyword, numbers, fields[index])
    second, minute, hour, day, month, weekday = fields
    common = {"second": second, "minute": minute, "hour": hour, "month": month}
    days = crontab_weekdays(weekday)
    tz = zone(timezone)
    if day.startswith("*") or weekday.startswith("*"):
        parts = [CronTrigger(**common, day=day, day_of_week=days, timezone=tz)]
    else:
        # Both sub-triggers spell out the other day field as ``*``: left out, APScheduler
        # would default ``day`` to 1 (it fills fields after the first given with minimums).
        by_date = CronTrigger(**common, day=day, day_of_week="*", timezone=tz)
        by_weekday = CronTrigger(**common, day="*", day_of_week=days, timezone=tz)
        parts = [by_date, by_weekday]
    built = CrontabTrigger(parts, jitter=jitter or None)
    # Every field parses, yet ``0 0 31 2 *`` (February 31st) matches no date: such a job
    # would be accepted and then silently never run. A schedule that fires at all fires
    # again within 28 years (when dates and weekdays repeat), so a fixed start will do.
    if built.get_next_fire_time(None, _EPOCH) is None:
        raise ValueError(
            f"never fires: no month in {month!r} has a day {day!r}"
            " (February has 29 days at most; April, June, September and November 30)"
        )
    return built


class CrontabTrigger(OrTrigger):  # type: ignore[misc]  # APScheduler 3 has no type hints
    """APScheduler's ``OrTrigger`` (the earliest fire of its CronTriggers) that does not
    skip a fire after clocks go forward.

    APScheduler 3.11 moves from one candidate date to the next by adding the wall-clock
    difference in UTC, so across a spring-forward night it lands an hour late:
    ``0 0 * * *`` in Europe/Berlin, asked on Sunday 29 March 2026 at 00:00:01, answers
    31 March and skips the 30th. A search that starts at or after the last offset change
    adds nothing across one, so each change between the start and the first answer is a
    second start, and the earliest answer wins.
    """

    __slots__ = ()

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        start = now
        if previous_fire_time is not None:  # the start CronTrigger itself would use
            start = min(now, previous_fire_time + _ONE_MICROSECOND)
            # Never the previous fire itself (CronTrigger has the same guard): asked with
            # ``now`` equal to it, the search would answer it again, and APScheduler's
            # walk over missed fires (``while next <= now``) would never end.
            if start <= previous_fire_time:
                start = previous_fire_time + _ONE_MICROSECOND
        found = self._earliest(start)
        if found is None:
            return None
        for change in _offset_changes(found.tzinfo, start, found):
            if change >= found:
                break
            found = min(found, self._earliest(change) or found)
        return self._apply_jitter(found, self.jitter, now)  # type: ignore[no-any-return]

    def _earliest(self, start: datetime) -> datetime | None:
        """The earliest fire any part finds from ``start`` (never before it)."""
        fires = [part.get_next_fire_time(None, start) for part in self.triggers]
        return min((fire for fire in fires if fire is not None and fire >= start), default=None)


def _offset_changes(tz: tzinfo | None, start: datetime, end: datetime) -> Iterator[datetime]:
    """Each instant in ``(start, end)`` where ``tz`` changes its UTC offset, to the second.

    Checked a week at a time (zones change offset months apart), then found by bisection
    over whole seconds, which is what time zone rules are written in.
    """
    low = start.astimezone(UTC)
    end = end.astimezone(UTC)
    while low < end:
        high = min(low + _WEEK, end)
        if low.astimezone(tz).utcoffset() != high.astimezone(tz).utcoffset():
            before, after = math.floor(low.timestamp()), math.ceil(high.timestamp())
            offset = datetime.fromtimestamp(before, tz).utcoffset()
            while after - before > 1:
                middle = (before + after) // 2
                if datetime.fromtimestamp(middle, tz).utcoffset() == offset:
                    before = middle
                else:
                    after = middle
            yield datetime.fromtimestamp(after, UTC)
        low = high


def crontab_fields(expr: str) -> list[str]:
    """A crontab line as 6 fields, seconds first; a shortcut as the line it stands for."""
    words = expr.split()
    if words and words[0].startswith("@"):
        name = words[0].lower()
        if name == "@reboot":
            raise ValueError(
                "@reboot is not supported: a job fires at clock times, and a restart is not"
                " one (catch_up decides what runs after a restart)"
            )
        if name not in SHORTCUTS:
            raise ValueError(
                f"unknown shortcut {words[0]!r} (use @yearly, @annually, @monthly, @weekly,"
                " @daily, @midnight or @hourly)"
            )
        if len(words) > 1:
            raise ValueError(f"a shortcut like {words[0]} stands alone, without other fields")
        words = SHORTCUTS[name].split()
    if len(words) == 5:
        return ["0", *words]
    if len(words) != 6:
        raise ValueError(
            "expected 5 fields (minute hour day-of-month month weekday), 6 (seconds first)"
            f" or a shortcut like @daily, got {len(words)}"
        )
    return words


@functools.lru_cache(maxsize=1024)
def _check_field(name: str, keyword: str, numbers: tuple[int, int], value: str) -> str:
    """The field as APScheduler will take it, or APScheduler's verdict in crontab's words,
    naming the field.

    Checked by building APScheduler's field alone (what ``CronTrigger`` does for each of
    its eight fields), and remembered: fields repeat across a config's crontab lines.
    """
    value = ",".join(_short_step(item, *numbers) for item in value.split(","))
    try:
        CronTrigger.FIELDS_MAP[keyword](keyword, value, is_default=False)
    except ValueError as exc:
        text = str(exc)
        if "higher than the maximum value" in text or "lower than the minimum value" in text:
            reason = "must be {}-{}".format(*numbers)
        elif "range must not be higher" in text:
            reason = "the range runs backwards"
        elif "Increment must be higher than 0" in text:
            reason = "a step must be 1 or more"
        else:
            names = ", or names like jan" if keyword == "month" else ""
            reason = f"cannot read it ({_SYNTAX}{names})"
        raise ValueError(f"{name} {value!r}: {reason}") from None
    return value


def _short_step(item: str, low: int, high: int) -> str:
    """A step longer than its range (``*/60`` minutes, ``5-6/3``) as the one value crontab
    reads in it, the range's first: APScheduler refuses such a step, crontab does not."""
    match = _STEPPED.match(item)
    if not match:
        return item
    first, last, step = match.groups()  # ``*/k``: no first; ``a/k``: no last
    start = low if first is None else int(first)
    end = high if last is None else int(last)
    return str(start) if low <= start <= end <= high and int(step) > end - start else item


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
    trigger: CrontabTrigger
    #: The hour field is a wildcard: a repeated wall-clock hour (clocks going back) fires.
    every_hour: bool

    @classmethod
    def parse(cls, expr: str, timezone: str = "UTC") -> Schedule:
        # First: it names what is wrong with ``expr``. All three arguments, as
        # Job.wakeups passes them: the cache shares the trigger of a job without jitter.
        built = trigger(expr, timezone, None)
        hour = crontab_fields(expr)[2]
        return cls(expr, timezone, built, every_hour=hour.startswith("*"))

    def first_from(self, moment: datetime) -> datetime | None:
        """The first fire at or after ``moment`` (UTC), or None if there is none."""
        return _first_from(self, moment.astimezone(UTC))

    def _first_from(self, moment: datetime) -> datetime | None:
        # Arithmetic in UTC: local wall-clock arithmetic would lose the DST fold.
        found: datetime | None = self.trigger.get_next_fire_time(None, moment)
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


@functools.lru_cache(maxsize=4096)
def _first_from(schedule: Schedule, moment: datetime) -> datetime | None:
    """:meth:`Schedule.first_from`, remembered: a pure function of the crontab line, the
    zone and the moment, and jobs on one line decided at one moment ask the same
    question (starting 10,000 jobs asks it 10,000 times; bench/cron.py). Schedules
    compare by line, zone and trigger, and :func:`trigger` is cached, so equal lines
    share one entry."""
    return schedule._first_from(moment)


def stamp(moment: datetime) -> str:
    """A scheduled fire time as written in event keys: UTC, whole seconds, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    """A time written by :func:`stamp` or ``datetime.isoformat`` (UTC), read back."""
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
