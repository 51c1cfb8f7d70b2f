"""Which fires to run and which to skip, between the last decided time and now.

Pure functions over a :class:`~tether.cron.Schedule`, so the policy is tested
without a clock. The same :func:`plan` serves the start (fires missed while Tether was
down) and each wakeup while running (normally the one fire that is due now):

- a fire older than ``grace`` is skipped (``outside grace``): it is too late to matter;
- of the fires within grace, ``catch_up`` picks: ``latest`` the newest, ``all`` every
  one, ``skip`` none (``catch_up: …``);
- while running, the newest due fire is on time, not missed: it runs whatever the policy
  (``on_time=True``), and only older ones (a stalled loop, a suspended machine) follow it.

Every skip is returned with its reason so the runner can log one ``cron.skipped`` each.
A decade of downtime on a per-second job is not listed fire by fire: past
:data:`LIST_LIMIT` fires before the grace window, the rest is one summary skip.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from tether.cron import Schedule

Policy = Literal["latest", "all", "skip"]
#: Fires before the grace window listed one by one before the rest is summarized.
LIST_LIMIT = 1000

OUTSIDE_GRACE = "outside grace"
OVERLAP = "overlap: previous fire unfinished"


@dataclass(frozen=True, slots=True)
class Skip:
    scheduled: datetime
    reason: str
    #: For a summary: every fire from ``scheduled`` up to this time was skipped too.
    until: datetime | None = None


@dataclass(slots=True)
class Plan:
    fire: list[datetime] = field(default_factory=list)
    skip: list[Skip] = field(default_factory=list)
    #: The first fire after ``now`` (found anyway when the scan stops; None: never again).
    upcoming: datetime | None = None

    @property
    def newest(self) -> datetime | None:
        """The newest scheduled time this plan decides (fired or skipped)."""
        times = [*self.fire, *(s.until or s.scheduled for s in self.skip)]
        return max(times) if times else None


def plan(
    schedule: Schedule,
    since: datetime,
    now: datetime,
    policy: Policy,
    grace: timedelta,
    *,
    on_time: bool = False,
) -> Plan:
    """Decide every fire in ``(since, now]``."""
    result = Plan()
    horizon = now - grace
    fire = schedule.next_after(since)
    listed = 0
    while fire is not None and fire <= now and fire < horizon:
        if listed == LIST_LIMIT:
            result.skip.append(Skip(fire, OUTSIDE_GRACE, until=horizon))
            fire = schedule.first_from(horizon)
            break
        result.skip.append(Skip(fire, OUTSIDE_GRACE))
        listed += 1
        fire = schedule.next_after(fire)
    due: list[datetime] = []
    while fire is not None and fire <= now:
        due.append(fire)
        fire = schedule.next_after(fire)
    result.upcoming = fire
    if not due:
        return result
    missed, newest = (due[:-1], due[-1:]) if on_time else (due, [])
    if policy == "all":
        chosen = missed
    elif policy == "latest":
        chosen = [] if newest else missed[-1:]
    else:
        chosen = []
    reason = f"catch_up: {policy}"
    result.skip += [Skip(moment, reason) for moment in missed if moment not in chosen]
    result.fire = [*chosen, *newest]
    return result
