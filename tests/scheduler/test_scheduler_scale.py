"""Starting many jobs cheaply (issue 22) without changing what fires.

- Jobs on one crontab line and zone share one APScheduler wakeup; that wakeup fires each
  of them once, and ``next_fire`` answers for each. A job with jitter keeps its own.
- The ledger is read in one prefix query: a restart owes nothing and fires nothing.
- A remembered next-fire answer is the answer: equal schedules share it, other lines
  and zones do not.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support.config import make_settings
from tests.support.gateway import Clock, gateway_at
from tether.adapters.loopback import LoopbackAdapter
from tether.cron import Schedule


def job(id: str, **fields: Any) -> dict[str, Any]:
    return {"id": id, "cron": "0 8 * * *", "deliver": f"loopback:{id}", "text": id} | fields


async def test_jobs_on_one_line_share_a_wakeup_that_fires_each_once(tmp_path: Path) -> None:
    jobs = [job("a"), job("b"), job("c", jitter=5), job("d", cron="0 9 * * *")]
    settings = make_settings(tmp_path, jobs=jobs)
    adapter = LoopbackAdapter()
    clock = Clock("2026-01-01T07:00Z")
    async with gateway_at(settings, clock, adapter) as (gateway, sched, _):
        assert sched._aps is not None
        wakeups = {aps_job.id: aps_job.args for aps_job in sched._aps.get_jobs()}
        assert wakeups == {"a": ("a", "b"), "c": ("c",), "d": ("d",)}
        assert all(sched.next_fire(name) is not None for name in "abcd")
        assert sched.next_fire("a") == sched.next_fire("b")
        clock.set("2026-01-01T08:00:01Z")
        shared = sched._aps.get_job("a")
        await shared.func(*shared.args)  # what APScheduler runs at 08:00
        await shared.func(*shared.args)  # a second look finds nothing owed
        await adapter.wait_for_sent(2)
        await gateway.drain()
    assert sorted(d.message.key for d in adapter.sent) == [
        "cron:a:2026-01-01T08:00:00Z#0",
        "cron:b:2026-01-01T08:00:00Z#0",
    ]


async def test_a_restart_reads_the_ledger_back_and_fires_nothing_twice(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, jobs=[job(f"j{n}") for n in range(30)])
    adapter = LoopbackAdapter()
    clock = Clock("2026-01-01T07:00Z")
    async with gateway_at(settings, clock, adapter) as (gateway, sched, _):
        clock.set("2026-01-01T08:00:01Z")
        for n in range(30):
            await sched.wake(f"j{n}")
        await adapter.wait_for_sent(30)
    clock.set("2026-01-01T08:00:02Z")
    async with gateway_at(settings, clock, adapter) as (gateway, sched, _):
        await gateway.drain()
        assert sched.next_fire("j0") is not None
    assert len(adapter.sent) == 30


def test_remembered_next_fires_are_per_line_and_zone() -> None:
    moment = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
    berlin = Schedule.parse("0 8 * * *", "Europe/Berlin")
    assert berlin == Schedule.parse("0 8 * * *", "Europe/Berlin")
    utc = Schedule.parse("0 8 * * *", "UTC")
    nine = Schedule.parse("0 9 * * *", "UTC")
    answers = [s.next_after(moment) for s in (berlin, utc, nine, berlin)]
    assert answers == [
        datetime(2026, 3, 29, 6, 0, tzinfo=UTC),  # 08:00 CEST, the night clocks go forward
        datetime(2026, 3, 29, 8, 0, tzinfo=UTC),
        datetime(2026, 3, 29, 9, 0, tzinfo=UTC),
        datetime(2026, 3, 29, 6, 0, tzinfo=UTC),
    ]
