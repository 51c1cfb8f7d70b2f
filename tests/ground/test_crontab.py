"""Cron speaks crontab: shortcuts, Vixie cron's day-of-month OR weekday rule, plain errors.

The expected fire times are not computed by the code under test: :func:`reference_fires`
walks wall-clock days and minutes and applies the crontab rules written out below (as
Vixie cron and ``crontab(5)`` state them), then places each wall time on the UTC line by
the rules docs/cron.md promises for daylight saving. The table is then compared with
:class:`~tether.cron.Schedule`, which the scheduler and the catch-up ledger use.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.config import write_config
from tether.config import load_text
from tether.cron import Schedule, stamp, trigger
from tether.errors import ConfigError
from tether.gateway.cli import main
from tether.scheduler.jobs import fire_key, load_jobs
from tether.scheduler.ledger import plan

# -- the crontab rules, written out independently ----------------------------------------

SHORTCUTS = {
    **dict.fromkeys(["@yearly", "@annually"], "0 0 1 1 *"),
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    **dict.fromkeys(["@daily", "@midnight"], "0 0 * * *"),
    "@hourly": "0 * * * *",
}
MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


def field_values(text: str, low: int, high: int, names: list[str] | None = None) -> set[int]:
    """One crontab field as the set of numbers it allows (names are 1-based for months)."""

    def number(token: str) -> int:
        if names and token in names:
            return names.index(token) + (1 if names is MONTHS else 0)
        return int(token)

    values: set[int] = set()
    for item in text.lower().split(","):
        span, _, step = item.partition("/")
        if span == "*":
            first, last = low, high
        elif "-" in span:
            first, last = (number(part) for part in span.split("-"))
        else:
            first = last = number(span)
        values.update(range(first, last + 1, int(step or 1)))
    return values


def matches_day(fields: list[str], day: date) -> bool:
    """Month, then Vixie cron's rule: if either day field starts with ``*``, both must
    match (the ``*`` one always does); if both are restricted, either one is enough."""
    _, _, dom, month, dow = fields
    if day.month not in field_values(month, 1, 12, MONTHS):
        return False
    by_dom = day.day in field_values(dom, 1, 31)
    weekday = (day.weekday() + 1) % 7  # crontab: 0 = Sunday
    by_dow = weekday in {d % 7 for d in field_values(dow, 0, 7, WEEKDAYS)}
    if dom.startswith("*") or dow.startswith("*"):
        return by_dom and by_dow
    return by_dom or by_dow


def reference_fires(line: str, zone: str, start: datetime, count: int = 5) -> list[str]:
    """The first ``count`` fires at or after ``start``, by walking wall-clock minutes.

    Daylight saving as docs/cron.md states it: a wall time that does not exist (spring
    forward) fires at the offset before the change (an hour later by the wall clock, half
    an hour on Lord Howe Island); a wall time
    that happens twice (fall back) fires at its first occurrence, and also at its second
    when the hour field is a wildcard.
    """
    fields = SHORTCUTS.get(line, line).split()
    minute, hour = fields[0], fields[1]
    minutes = field_values(minute, 0, 59)
    hours = field_values(hour, 0, 23)
    tz = ZoneInfo(zone)
    found: list[datetime] = []
    day = start.astimezone(tz).date() - timedelta(days=1)
    while len([f for f in found if f >= start]) < count:
        if matches_day(fields, day):
            for h in sorted(hours):
                for m in sorted(minutes):
                    wall = datetime.combine(day, time(h, m), tz)
                    first = wall.replace(fold=0).astimezone(UTC)
                    second = wall.replace(fold=1).astimezone(UTC)
                    found.append(first)
                    real = second.astimezone(tz).replace(tzinfo=None) == wall.replace(tzinfo=None)
                    if second != first and real and hour.startswith("*"):
                        found.append(second)  # a wall time that really passes twice
        day += timedelta(days=1)
    return [stamp(f) for f in sorted(set(f for f in found if f >= start))[:count]]


def at(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def schedule_fires(line: str, zone: str, start: datetime, count: int = 5) -> list[str]:
    schedule = Schedule.parse(line, zone)
    fire = schedule.first_from(start)
    fires = []
    for _ in range(count):
        assert fire is not None
        fires.append(stamp(fire))
        fire = schedule.next_after(fire)
    return fires


START = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)  # a Thursday
SPRING = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)  # before Berlin's and after New York's
AUTUMN = datetime(2026, 10, 24, 12, 0, tzinfo=UTC)  # the day before Berlin falls back

TABLE = [
    # shortcuts, as Vixie cron defines them
    ("@yearly", "UTC", START),
    ("@annually", "Europe/Berlin", START),
    ("@monthly", "UTC", START),
    ("@monthly", "Europe/Berlin", SPRING),
    ("@weekly", "UTC", START),
    ("@weekly", "Europe/Berlin", AUTUMN),
    ("@daily", "UTC", START),
    ("@midnight", "Europe/Berlin", SPRING),
    ("@hourly", "UTC", START),
    ("@hourly", "Europe/Berlin", AUTUMN),
    ("@hourly", "Europe/Berlin", SPRING),
    # day of month OR weekday when both are restricted
    ("0 0 13 * 5", "UTC", START),  # the 13th, and every Friday
    ("30 9 1,15 * mon", "Europe/Berlin", SPRING),
    ("0 12 1 * 1-5", "America/New_York", START),
    ("0 0 31 2 1", "UTC", START),  # February 31st never comes; Mondays still do
    ("0 8 1-7 * sun", "UTC", START),
    # one day field a wildcard (or starting with *): the other decides, as before
    ("0 0 */2 * 1", "UTC", START),
    ("0 0 13 * *", "UTC", START),
    ("0 0 * * 5", "UTC", START),
    # ranges, steps, lists, names; 0 and 7 are Sunday
    ("*/15 9-17 * * 1-5", "UTC", START),
    ("5,35 */6 * jan,jul *", "UTC", START),
    ("0 22 * * 1-5/2", "Europe/Berlin", START),
    ("0 6 * * 0", "UTC", START),
    ("0 6 * * 7", "UTC", START),
    ("0 6 * * 5-7", "UTC", START),
    ("0 6 * * sat,sun", "Europe/Berlin", START),
    ("0 0 1-10/3 2-11/3 *", "UTC", START),
    ("*/60 */24 1-2/5 * *", "UTC", START),  # steps longer than their range: the first value
    # daylight saving: the skipped and the repeated hour
    ("30 2 * * *", "Europe/Berlin", SPRING),
    ("30 2 * * *", "Europe/Berlin", AUTUMN),
    ("*/20 2 * * *", "Europe/Berlin", AUTUMN),
    ("*/20 * * * *", "Europe/Berlin", datetime(2026, 10, 25, 0, 30, tzinfo=UTC)),
    ("0 2 25 10 0", "Europe/Berlin", AUTUMN),
]


@pytest.mark.slow
@pytest.mark.parametrize("line, zone, start", TABLE)
def test_next_five_fires_match_crontab(line: str, zone: str, start: datetime) -> None:
    assert schedule_fires(line, zone, start) == reference_fires(line, zone, start)


def test_reference_walk_is_itself_crontab() -> None:
    """The walk above, spot-checked against dates read off a calendar."""
    assert reference_fires("0 0 13 * 5", "UTC", START, 4) == [
        "2026-01-02T00:00:00Z",  # Friday
        "2026-01-09T00:00:00Z",  # Friday
        "2026-01-13T00:00:00Z",  # Tuesday the 13th
        "2026-01-16T00:00:00Z",  # Friday
    ]
    assert reference_fires("0 0 */2 * 1", "UTC", START, 2) == [
        "2026-01-05T00:00:00Z",  # Monday the 5th (odd)
        "2026-01-19T00:00:00Z",  # Monday the 19th; the 12th and 26th are even
    ]


def test_both_day_fields_or_in_six_field_lines_too() -> None:
    assert schedule_fires("30 0 0 13 * 5", "UTC", START, 3) == [
        "2026-01-02T00:00:30Z",
        "2026-01-09T00:00:30Z",
        "2026-01-13T00:00:30Z",
    ]


def test_jitter_delays_an_ored_schedule_but_never_moves_it() -> None:
    jittered = trigger("0 0 13 * 5", "UTC", 30.0)
    for since, scheduled in [(START, "2026-01-02T00:00:00Z"), (at("2026-01-10"), "2026-01-13")]:
        for _ in range(20):
            fire = jittered.get_next_fire_time(None, since)
            assert fire is not None
            assert at(scheduled) <= fire <= at(scheduled) + timedelta(seconds=30)


def test_a_wakeup_after_clocks_go_forward_is_not_skipped() -> None:
    """APScheduler alone, asked just after Berlin's midnight before the spring change,
    answers 31 March and skips the 30th; the scheduler sleeps on this trigger."""
    wake = trigger("0 0 * * *", "Europe/Berlin").get_next_fire_time(
        None, at("2026-03-28T23:00:01Z")
    )
    assert wake is not None
    assert stamp(wake) == "2026-03-29T22:00:00Z"


def test_a_shortcut_job_loads_and_wakes_like_its_five_fields() -> None:
    settings = load_text(
        "jobs:\n- {id: nightly, cron: '@daily', timezone: Europe/Berlin,"
        " deliver: 'console:local', text: hi}\n"
    )
    (job,) = load_jobs(settings)
    assert job.schedule.every_hour is False
    wake = job.wakeups().get_next_fire_time(None, SPRING)
    assert stamp(wake) == "2026-03-28T23:00:00Z"
    assert job.key(wake) == "cron:nightly:2026-03-28T23:00:00Z"


# -- existing ledgers stay valid ---------------------------------------------------------

#: Fire times computed before crontab's OR rule and shortcuts existed (at most one day
#: field restricted), from a ledger decided up to LEDGER_SINCE, written down literally:
#: the same jobs must keep these fires and keys.
LEDGER_SINCE = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
LEDGER = [
    ("0 7 * * 1-5", "Europe/Berlin", "03-30T05:00:00 03-31T05:00:00 04-01T05:00:00"),
    ("30 2 * * *", "Europe/Berlin", "03-29T01:30:00 03-30T00:30:00 03-31T00:30:00"),
    ("15 10 * * sun", "America/New_York", "03-29T14:15:00 04-05T14:15:00 04-12T14:15:00"),
    ("0 12 last * *", "UTC", "03-31T12:00:00 04-30T12:00:00 05-31T12:00:00"),
    ("*/30 * * * * *", "UTC", "03-28T12:00:30 03-28T12:01:00 03-28T12:01:30"),
    ("0 9 1 * *", "Europe/Berlin", "04-01T07:00:00 05-01T07:00:00 06-01T07:00:00"),
]


@pytest.mark.parametrize("line, zone, scheduled", LEDGER)
def test_existing_jobs_keep_their_fire_keys(line: str, zone: str, scheduled: str) -> None:
    """Catch-up from a ledger written by an older Tether computes the same keys."""
    keys = [f"cron:job:2026-{moment}Z" for moment in scheduled.split()]
    until = at(keys[-1].removeprefix("cron:job:")) + timedelta(seconds=1)
    decided = plan(Schedule.parse(line, zone), LEDGER_SINCE, until, "all", timedelta(days=400))
    assert [fire_key("job", fire) for fire in decided.fire] == keys


# -- errors: one line, the key path, crontab terms, no library prefixes -------------------


def job(cron: str) -> dict[str, Any]:
    return {"id": "j", "cron": cron, "deliver": "console:local", "text": "hi"}


@pytest.mark.parametrize(
    "cron, expected",
    [
        ("@reboot", "jobs[0].cron: @reboot is not supported"),
        ("@fortnightly", "jobs[0].cron: unknown shortcut '@fortnightly' (use @yearly,"),
        ("0 8 * *", "jobs[0].cron: expected 5 fields (minute hour day-of-month month weekday)"),
        ("@daily 5", "jobs[0].cron: a shortcut like @daily stands alone"),
        ("0 25 * * *", "jobs[0].cron: hour '25': must be 0-23"),
        ("61 * * * *", "jobs[0].cron: minute '61': must be 0-59"),
        ("0 0 0 * *", "jobs[0].cron: day-of-month '0': must be 1-31"),
        ("0 0 * 13 *", "jobs[0].cron: month '13': must be 1-12"),
        ("0 0 * smarch *", "jobs[0].cron: month 'smarch': cannot read it"),
        ("0 8 * * 1-9", "jobs[0].cron: weekday: 9 is not 0-7 (0 and 7 are Sunday)"),
        ("x * * * *", "jobs[0].cron: minute 'x': cannot read it"),
        ("*/0 * * * *", "jobs[0].cron: minute '*/0': a step must be 1 or more"),
        ("0 0 20-10 * *", "jobs[0].cron: day-of-month '20-10': the range runs backwards"),
        ("0 0 31 2 *", "jobs[0].cron: never fires: no month in '2' has a day '31'"),
    ],
)
def test_bad_cron_lines_fail_check_in_one_plain_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cron: str, expected: str
) -> None:
    config = write_config(tmp_path, jobs=[job(cron)])
    assert main(["check", "-c", str(config)]) == 2
    err = capsys.readouterr().err
    assert expected in err
    line = next(line for line in err.splitlines() if "jobs[0].cron" in line)
    assert not re.search(r"Value error|Error validating|apscheduler|Traceback", err), line


def test_an_unknown_zone_is_one_plain_line() -> None:
    with pytest.raises(ConfigError) as caught:
        load_text("jobs:\n- {id: j, cron: '@daily', timezone: Mars/Olympus, handler: 'm:f'}\n")
    assert "jobs[0].timezone: unknown time zone 'Mars/Olympus'" in str(caught.value)
    assert "Value error" not in str(caught.value)


# -- any crontab line, any zone: the table's comparison over generated lines --------------


def crontab_field(low: int, high: int, names: list[str] | None = None) -> st.SearchStrategy[str]:
    """One field as crontab writes it: ``*``, ``*/k``, ``a``, ``a-b``, ``a-b/k``, ``a,b``."""
    value = st.integers(low, high)
    word = value.map(str) if names is None else value.map(str) | st.sampled_from(names)
    span = st.tuples(value, value).map(sorted).map(lambda pair: f"{pair[0]}-{pair[1]}")
    step = st.integers(1, 4).map(str)
    return st.one_of(
        st.just("*"),
        step.map(lambda k: f"*/{k}"),
        word,
        span,
        st.tuples(span, step).map("/".join),
        st.lists(word, min_size=2, max_size=3).map(",".join),
    )


crontab_lines = st.one_of(
    st.sampled_from(sorted(SHORTCUTS)),
    st.tuples(
        crontab_field(0, 59),
        crontab_field(0, 23),
        crontab_field(1, 28),  # days every month has: a line that never fires is refused
        crontab_field(1, 12, MONTHS),
        crontab_field(0, 7, WEEKDAYS),
    ).map(" ".join),
)


@given(
    line=crontab_lines,
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
    start=st.datetimes(datetime(2026, 1, 1), datetime(2027, 12, 31), timezones=st.just(UTC)),
)
@hypothesis.settings(deadline=None)
def test_any_line_fires_as_crontab(line: str, zone: str, start: datetime) -> None:
    assert schedule_fires(line, zone, start) == reference_fires(line, zone, start)


@given(
    line=st.sampled_from(["* * * * * *", "*/5 * * * *", "0 9 * * 1-5", "0 0 31 * *"]),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"]),
    start=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1), timezones=st.just(UTC)
    ),
)
def test_the_next_fire_is_always_after_the_previous_even_asked_at_that_instant(
    line: str, zone: str, start: datetime
) -> None:
    """APScheduler walks missed fires with ``while next <= now: next = trigger(next, now)``;
    a trigger that answered the previous fire again when ``now`` equals it made that walk
    endless (a gateway stuck at full CPU, deaf to SIGTERM)."""
    wakeups = trigger(line, zone, None)
    fire = wakeups.get_next_fire_time(None, start)
    assert fire is not None
    assert wakeups.get_next_fire_time(fire, fire) > fire
    assert wakeups.get_next_fire_time(fire, fire + timedelta(microseconds=1)) > fire
