"""Cron jobs: each fire is one event through the pipeline, missed fires follow the policy.

Most tests drive the scheduler with an injected clock: the gateway starts at a chosen
time (catch-up is computed against it) and ``tether.scheduler.wake(job)`` is what APScheduler
calls at a fire time. APScheduler's own timer keeps running on the real clock, but with
the clock frozen it finds nothing due. One test runs a per-second job on the real clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
import yaml
from prometheus_client import REGISTRY

from tests.fakes.cluster import SECRET, Instance, free_port
from tests.fakes.telegram_api import FakeTelegram
from tests.plugins import cron_jobs
from tests.support.config import config_dict, db_rows, make_settings, write_config
from tests.support.gateway import Clock, at, gateway_at
from tests.support.processes import TETHER, subprocess_env
from tether.adapters.loopback import LoopbackAdapter
from tether.config import load_text
from tether.cron import Schedule, crontab_weekdays, stamp
from tether.errors import ConfigError, GatewayError, SendRetryable
from tether.gateway.app import Gateway
from tether.gateway.cli import main
from tether.gateway.ops import logs
from tether.scheduler.jobs import load_jobs
from tether.scheduler.ledger import LIST_LIMIT, plan
from tether.scheduler.runner import Scheduler


def job(id: str = "report", **fields: Any) -> dict[str, Any]:
    return {"id": id, "cron": "0 8 * * *", "deliver": "loopback:1", "text": "good morning"} | fields


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def log_to_capsys() -> None:
    """Point structlog at capsys's stream, which only replaces sys.stderr once the test
    body runs (the autouse logging fixture ran before, in the setup phase)."""
    logs.configure("info", "json", stream=sys.stderr)


def logged(text: str, event: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == event]


@pytest.fixture
def jobs_state() -> Iterator[cron_jobs.State]:
    yield cron_jobs.reset()
    cron_jobs.state.gate.set()


# -- cron expressions ------------------------------------------------------------------


def test_weekdays_read_like_crontab_not_like_apscheduler() -> None:
    assert crontab_weekdays("1-5") == "mon,tue,wed,thu,fri"
    assert crontab_weekdays("0") == crontab_weekdays("7") == "sun"
    assert crontab_weekdays("5-7") == "fri,sat,sun"
    fires, moment = [], at("2026-01-01T00:00:00Z")  # a Thursday
    schedule = Schedule.parse("0 9 * * 1-5")
    for _ in range(5):
        found = schedule.next_after(moment)
        assert found is not None
        fires.append(found.strftime("%a"))
        moment = found
    assert fires == ["Thu", "Fri", "Mon", "Tue", "Wed"]


def test_six_fields_put_seconds_first() -> None:
    schedule = Schedule.parse("*/15 * * * * *")
    assert schedule.next_after(at("2026-01-01T00:00:00Z")) == at("2026-01-01T00:00:15Z")


@pytest.mark.parametrize(
    "day, expected",
    [
        # clocks go forward: 02:30 does not exist; it fires once, an hour later
        ("2026-03-29", ["2026-03-28T01:30:00Z", "2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z"]),
        # clocks go back: 02:30 happens twice; a fixed-hour job fires once
        ("2026-10-25", ["2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]),
    ],
)
def test_daily_job_fires_once_on_a_dst_day(day: str, expected: list[str]) -> None:
    schedule = Schedule.parse("30 2 * * *", "Europe/Berlin")
    moment, fires = at(f"{day}T00:00:00+00:00") - timedelta(days=1, hours=1), []
    for _ in range(3):
        found = schedule.next_after(moment)
        assert found is not None
        fires.append(stamp(found))
        moment = found
    assert fires == expected


def test_hourly_job_runs_in_both_repeated_hours() -> None:
    schedule = Schedule.parse("30 * * * *", "Europe/Berlin")
    moment, fires = at("2026-10-24T23:45:00Z"), []
    while (found := schedule.next_after(moment)) is not None and found < at("2026-10-25T02:00Z"):
        fires.append(stamp(found))
        moment = found
    assert fires == ["2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"]  # 02:30 CEST and CET


# -- catch-up policy -------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy, fired, skipped",
    [
        ("latest", ["03"], ["01", "02"]),
        ("all", ["01", "02", "03"], []),
        ("skip", [], ["01", "02", "03"]),
    ],
)
def test_plan_three_missed_fires(policy: Any, fired: list[str], skipped: list[str]) -> None:
    schedule = Schedule.parse("0 8 * * *")
    decided = plan(
        schedule, at("2025-12-31T09:00Z"), at("2026-01-03T09:00Z"), policy, timedelta(days=5)
    )
    assert [f.strftime("%d") for f in decided.fire] == fired
    assert [s.scheduled.strftime("%d") for s in decided.skip] == skipped
    assert all(s.reason == f"catch_up: {policy}" for s in decided.skip)


def test_plan_skips_fires_outside_grace_and_summarizes_long_downtime() -> None:
    schedule = Schedule.parse("0 * * * *")
    decided = plan(
        schedule, at("2026-01-01T00:30Z"), at("2026-01-01T05:30Z"), "all", timedelta(hours=2)
    )
    assert [stamp(f) for f in decided.fire] == ["2026-01-01T04:00:00Z", "2026-01-01T05:00:00Z"]
    assert [(stamp(s.scheduled), s.reason) for s in decided.skip] == [
        (f"2026-01-01T0{h}:00:00Z", "outside grace") for h in (1, 2, 3)
    ]
    # ten years of a per-minute job: the first LIST_LIMIT are listed, then one summary
    minutely = Schedule.parse("* * * * *")
    decided = plan(
        minutely, at("2016-01-01T00:00Z"), at("2026-01-01T00:00Z"), "latest", timedelta(hours=1)
    )
    summary = decided.skip[LIST_LIMIT]
    assert (stamp(summary.scheduled), summary.until) == (
        "2016-01-01T16:41:00Z",
        at("2025-12-31T23:00Z"),
    )
    assert len(decided.skip) == LIST_LIMIT + 1 + 60  # listed, summary, 23:00-23:59 by policy
    assert [stamp(f) for f in decided.fire] == ["2026-01-01T00:00:00Z"]


def test_plan_on_time_fire_runs_even_under_skip() -> None:
    schedule = Schedule.parse("0 * * * *")
    decided = plan(
        schedule,
        at("2026-01-01T00:30Z"),
        at("2026-01-01T02:00:01Z"),
        "skip",
        timedelta(hours=1),
        on_time=True,
    )
    assert [stamp(f) for f in decided.fire] == ["2026-01-01T02:00:00Z"]
    assert [stamp(s.scheduled) for s in decided.skip] == ["2026-01-01T01:00:00Z"]


# -- config ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "jobs, expected",
    [
        ([job(cron="0 8 * *")], "jobs[0].cron: expected 5 fields"),
        ([job(cron="0 25 * * *")], "jobs[0].cron: hour '25': must be 0-23"),
        ([job(cron="0 8 * * 1-9")], "jobs[0].cron: weekday: 9 is not 0-7"),
        ([job(timezone="Mars/Olympus")], "jobs[0].timezone: unknown time zone"),
        ([job(), job()], "jobs[1].id: duplicate job id (jobs[0].id has it too)"),
        ([job(id="a:b")], "jobs[0].id: Value error"),
        ([job(prompt="hi")], "jobs[0]: Value error, needs exactly one of text, prompt or handler"),
        ([job(text=None)], "jobs[0]: Value error, needs exactly one of"),
        ([job(deliver=[])], "jobs[0]: Value error, text needs deliver"),
        ([job(deliver="telegram")], "jobs[0].deliver: Value error, expected platform:chat"),
        ([job(grace="soon")], "jobs[0].grace: Value error, expected seconds or a duration"),
        ([job(catch_up="some")], "jobs[0].catch_up: Input should be 'latest', 'all' or 'skip'"),
        ([job(text=None, handler="nomodule")], "should be 'package.module:function'"),
    ],
)
def test_bad_jobs_fail_check_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], jobs: list[Any], expected: str
) -> None:
    config = write_config(tmp_path, jobs=jobs)
    assert main(["check", "-c", str(config)]) == 2
    assert expected in capsys.readouterr().err


def test_job_defaults_and_durations() -> None:
    settings = load_text(
        "jobs:\n- {id: a, cron: '0 8 * * *', deliver: 'console:local', text: hi}\n"
        "- {id: b, cron: '0 8 * * *', handler: 'm:f', grace: 1h30m, jitter: 5}\n"
    )
    first, second = settings.jobs
    assert (first.timezone, first.catch_up, first.grace, first.overlap) == (
        "UTC",
        "latest",
        3600,
        "skip",
    )
    assert first.deliver == ["console:local"]
    assert (second.grace, second.jitter, second.deliver) == (5400, 5, [])
    with pytest.raises(ConfigError, match=r"jobs\[0\]\.grace"):
        load_text("jobs:\n- {id: a, cron: '0 8 * * *', handler: 'm:f', grace: -1}\n")


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"deliver": "telegram:42"}, "jobs[0].deliver: 'telegram:42': platform 'telegram'"),
        ({"text": None, "handler": "tests.plugins.nope:f"}, "jobs[0].handler: cannot import"),
        ({"text": None, "handler": "tests.plugins.cron_jobs:nope"}, "jobs[0].handler:"),
    ],
)
def test_start_and_check_refuse_jobs_that_cannot_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fields: dict[str, Any], expected: str
) -> None:
    settings = make_settings(tmp_path, jobs=[job(**fields)])
    with pytest.raises(GatewayError) as raised:
        Gateway(settings, {"loopback": LoopbackAdapter()})
    assert expected in str(raised.value)
    config = write_config(tmp_path, jobs=[job(**fields)])
    assert main(["check", "-c", str(config)]) == 1
    assert expected in capsys.readouterr().err


# -- fires through the pipeline ----------------------------------------------------------


@pytest.mark.slow
async def test_a_fire_on_the_real_clock_is_delivered_exactly_once(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, jobs=[job("tick", cron="* * * * * *", text="tick")])
    adapter = LoopbackAdapter()
    async with gateway_at(settings, None, adapter) as (gateway, _, _):
        await adapter.wait_for_sent(1, timeout=5)
        await gateway.drain()
    fired = db_rows(tmp_path, "SELECT key, status FROM inbox ORDER BY seq")
    assert fired and all(status == "done" for _, status in fired)
    assert all(key.startswith("cron:tick:") and key.endswith("Z") for key, _ in fired)
    assert sorted(d.message.key for d in adapter.sent) == sorted(f"{key}#0" for key, _ in fired)
    assert {d.message.text for d in adapter.sent} == {"tick"}


async def test_first_sight_owes_nothing_and_a_restart_in_the_same_second_does_not_refire(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_to_capsys()
    settings = make_settings(tmp_path, jobs=[job("tick", cron="* * * * * *", text="tick")])
    clock = Clock("2026-05-01T12:00:00.200Z")
    adapter = LoopbackAdapter()
    async with gateway_at(settings, clock, adapter) as (gateway, sched, _):
        await gateway.drain()
        assert adapter.sent == []  # the job existed for no fire time yet
        clock.set("2026-05-01T12:00:01.300Z")
        await sched.wake("tick")
        await adapter.wait_for_sent(1)
    clock.set("2026-05-01T12:00:01.800Z")
    async with gateway_at(settings, clock, adapter) as (gateway, sched, _):
        await sched.wake("tick")
        await gateway.drain()
    assert [d.message.key for d in adapter.sent] == ["cron:tick:2026-05-01T12:00:01Z#0"]
    assert db_rows(tmp_path, "SELECT key FROM inbox") == [("cron:tick:2026-05-01T12:00:01Z",)]
    assert len(logged(capsys.readouterr().err, "cron.fired")) == 1


@pytest.mark.parametrize(
    "policy, fired, skipped",
    [
        ("latest", ["03"], ["01", "02"]),
        ("all", ["01", "02", "03"], []),
        ("skip", [], ["01", "02", "03"]),
    ],
)
async def test_downtime_across_three_fire_times(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    policy: str,
    fired: list[str],
    skipped: list[str],
) -> None:
    log_to_capsys()
    settings = make_settings(tmp_path, jobs=[job(catch_up=policy, grace="5d")])
    adapter = LoopbackAdapter()
    async with gateway_at(settings, Clock("2026-01-01T07:00Z"), adapter):
        pass  # first sight at 07:00; down until the 3rd at 09:00
    capsys.readouterr()
    fires_before = metric("tether_cron_fires_total", job="report")
    skips_before = metric("tether_cron_skips_total", job="report", reason=f"catch_up: {policy}")
    async with gateway_at(settings, Clock("2026-01-03T09:00Z"), adapter) as (gateway, _, _):
        await gateway.drain()
    err = capsys.readouterr().err
    keys = [f"cron:report:2026-01-{day}T08:00:00Z" for day in fired]
    assert [d.message.key for d in adapter.sent] == [f"{key}#0" for key in keys]
    assert [line["key"] for line in logged(err, "cron.fired")] == keys
    skips = logged(err, "cron.skipped")
    assert [(s["job"], s["scheduled"], s["reason"]) for s in skips] == [
        ("report", f"2026-01-{day}T08:00:00Z", f"catch_up: {policy}") for day in skipped
    ]
    assert metric("tether_cron_fires_total", job="report") - fires_before == len(fired)
    reason = f"catch_up: {policy}"
    assert metric("tether_cron_skips_total", job="report", reason=reason) - skips_before == len(
        skipped
    )
    # Restarting again owes nothing: every fire was decided, fired or skipped.
    async with gateway_at(settings, Clock("2026-01-03T09:30Z"), adapter) as (gateway, _, _):
        await gateway.drain()
    err = capsys.readouterr().err
    assert len(adapter.sent) == len(fired)
    assert logged(err, "cron.fired") == logged(err, "cron.skipped") == []


async def test_a_clock_that_went_back_does_not_reopen_decided_fires(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, jobs=[job(catch_up="skip", grace="5d")])
    adapter = LoopbackAdapter()
    clock = Clock("2026-01-01T07:00Z")
    async with gateway_at(settings, clock, adapter):
        pass
    clock.set("2026-01-03T09:00Z")
    async with gateway_at(settings, clock, adapter):
        pass  # three fires skipped by policy: decided up to the 3rd, 08:00
    clock.set("2026-01-02T09:00Z")  # the machine's clock went back a day
    async with gateway_at(settings, clock, adapter) as (gateway, sched, _):
        clock.set("2026-01-03T08:00:01Z")
        await sched.wake("report")
        await gateway.drain()
        clock.set("2026-01-04T08:00:01Z")  # the first fire not yet decided
        await sched.wake("report")
        [delivery] = await adapter.wait_for_sent(1)
    assert delivery.message.key == "cron:report:2026-01-04T08:00:00Z#0"


@pytest.mark.parametrize("overlap", ["skip", "queue"])
async def test_a_slow_job_never_overlaps_itself(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    jobs_state: cron_jobs.State,
    overlap: str,
) -> None:
    log_to_capsys()
    slow = job(
        "slow", cron="0 * * * *", text=None, handler="tests.plugins.cron_jobs:slow", overlap=overlap
    )
    settings = make_settings(tmp_path, jobs=[slow])
    clock = Clock("2026-01-01T00:30Z")
    async with gateway_at(settings, clock) as (gateway, sched, adapter):
        clock.set("2026-01-01T01:00:01Z")
        await sched.wake("slow")
        await jobs_state.entered.wait()  # the 01:00 run is in the handler now
        for hour in ("02", "03"):
            clock.set(f"2026-01-01T{hour}:00:01Z")
            await sched.wake("slow")
        jobs_state.gate.set()
        await adapter.wait_for_sent(1 if overlap == "skip" else 3)
        await gateway.drain()
        clock.set("2026-01-01T04:00:01Z")  # the previous run is finished: this one runs
        await sched.wake("slow")
        sent = await adapter.wait_for_sent(2 if overlap == "skip" else 4)
        await gateway.drain()
    ran = ["01", "04"] if overlap == "skip" else ["01", "02", "03", "04"]
    assert jobs_state.runs == [f"2026-01-01T{h}:00:00Z" for h in ran]
    assert jobs_state.max_active == 1
    assert [d.message.text for d in sent] == [f"done 2026-01-01T{h}:00:00Z" for h in ran]
    skips = logged(capsys.readouterr().err, "cron.skipped")
    if overlap == "skip":
        assert [(s["scheduled"], s["reason"]) for s in skips] == [
            (f"2026-01-01T{h}:00:00Z", "overlap: previous fire unfinished") for h in ("02", "03")
        ]
    else:
        assert skips == []


async def test_failed_delivery_is_retried_by_the_outbox_not_by_rerunning_the_handler(
    tmp_path: Path, jobs_state: cron_jobs.State
) -> None:
    report = job(text=None, handler="tests.plugins.cron_jobs:report")
    settings = make_settings(tmp_path, jobs=[report])
    clock = Clock("2026-01-01T07:00Z")
    adapter = LoopbackAdapter()
    adapter.fail_next(SendRetryable("502"), SendRetryable("502"))
    async with gateway_at(settings, clock, adapter) as (gateway, sched, _):
        clock.set("2026-01-01T08:00:00.5Z")
        await sched.wake("report")
        [delivery] = await adapter.wait_for_sent(1)
        await gateway.drain()
    assert delivery.message.text == "report for 2026-01-01T08:00:00Z"
    assert len(adapter.attempts) == 3
    assert jobs_state.runs == ["2026-01-01T08:00:00Z"]
    assert db_rows(tmp_path, "SELECT status, attempts FROM inbox") == [("done", 1)]
    assert db_rows(tmp_path, "SELECT status, attempts FROM outbox") == [("sent", 3)]


async def test_prompt_runs_through_the_agent_once_and_failed_sends_are_retried(
    tmp_path: Path,
) -> None:
    briefing = job(
        "briefing",
        text=None,
        prompt="Morning briefing, please.",
        deliver=["loopback:1", "loopback:2"],
    )
    settings = make_settings(tmp_path, jobs=[briefing])
    clock = Clock("2026-01-01T07:00Z")
    adapter = LoopbackAdapter()
    adapter.fail_next(SendRetryable("502"))
    async with gateway_at(settings, clock, adapter) as (gateway, sched, _):
        clock.set("2026-01-01T08:00:00.5Z")
        await sched.wake("briefing")
        sent = await adapter.wait_for_sent(2)
        await gateway.drain()
        history = await gateway.store.history("loopback:1", 10)
    # the built-in agent (echo) answered in the first target's conversation, with memory
    assert [(t.role, t.text) for t in history] == [
        ("user", "Morning briefing, please."),
        ("assistant", "Morning briefing, please."),
    ]
    assert sorted((d.message.target.key, d.message.text) for d in sent) == [
        ("loopback:1", "Morning briefing, please."),
        ("loopback:2", "Morning briefing, please."),
    ]
    assert len(adapter.attempts) == 3
    assert db_rows(tmp_path, "SELECT key, status, attempts FROM inbox") == [
        ("cron:briefing:2026-01-01T08:00:00Z", "done", 1)
    ]


@pytest.mark.parametrize(
    "first, then, wakes, expected",
    [
        # down over the night clocks went back: the 02:30 wall time passed twice, one fire
        ("2026-10-24T12:00Z", "2026-10-25T06:00Z", [], ["2026-10-25T00:30:00Z"]),
        # running through it: APScheduler wakes at both 02:30s, the second finds nothing due
        (
            "2026-10-24T12:00Z",
            "2026-10-24T12:00Z",
            ["00:30:05", "01:30:05"],
            ["2026-10-25T00:30:00Z"],
        ),
        # the night clocks went forward: 02:30 does not exist, still one fire
        ("2026-03-28T12:00Z", "2026-03-29T06:00Z", [], ["2026-03-29T01:30:00Z"]),
    ],
)
async def test_a_dst_change_in_a_named_zone_fires_once(
    tmp_path: Path, first: str, then: str, wakes: list[str], expected: list[str]
) -> None:
    nightly = job(
        "nightly", cron="30 2 * * *", timezone="Europe/Berlin", catch_up="all", grace="1d"
    )
    settings = make_settings(tmp_path, jobs=[nightly])
    adapter = LoopbackAdapter()
    clock = Clock(first)
    async with gateway_at(settings, clock, adapter):
        pass
    clock.set(then)
    async with gateway_at(settings, clock, adapter) as (gateway, sched, _):
        for moment in wakes:
            clock.set(f"2026-10-25T{moment}Z")
            await sched.wake("nightly")
            await gateway.drain()  # finished: a second fire would not be an overlap
        await gateway.drain()
    assert [d.message.key for d in adapter.sent] == [f"cron:nightly:{t}#0" for t in expected]


async def test_changed_schedule_takes_effect_without_a_double_fire_and_removed_jobs_stop(
    tmp_path: Path,
) -> None:
    adapter = LoopbackAdapter()
    clock = Clock("2026-01-01T07:00Z")
    before = make_settings(tmp_path, jobs=[job(), job("gone", text="bye")])
    async with gateway_at(before, clock, adapter) as (gateway, sched, _):
        clock.set("2026-01-01T08:00:01Z")
        await sched.wake("report")
        await sched.wake("gone")
        await adapter.wait_for_sent(2)
    # 08:30 Berlin is 07:30 UTC, before the 08:00 fire; "gone" was removed
    after = make_settings(tmp_path, jobs=[job(cron="30 8 * * *", timezone="Europe/Berlin")])
    clock.set("2026-01-01T09:00Z")
    async with gateway_at(after, clock, adapter) as (gateway, sched, _):
        await gateway.drain()
        assert sched.next_fire("gone") is None
        assert sched.next_fire("report") is not None
        clock.set("2026-01-02T07:30:01Z")  # the new schedule's first fire
        await sched.wake("report")
        await adapter.wait_for_sent(3)
        clock.set("2026-01-02T08:00:01Z")  # the old time: nothing
        await sched.wake("report")
        await gateway.drain()
    assert [d.message.key for d in adapter.sent] == [
        "cron:report:2026-01-01T08:00:00Z#0",
        "cron:gone:2026-01-01T08:00:00Z#0",
        "cron:report:2026-01-02T07:30:00Z#0",
    ]


async def test_two_schedulers_on_one_store_let_each_fire_in_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The dedup that two `tether run` processes rely on (they need PostgreSQL; SQLite
    allows one gateway per file): both compute the same key, the store admits one."""
    log_to_capsys()
    settings = make_settings(tmp_path, jobs=[job()])
    clock = Clock("2026-01-01T07:00Z")
    async with gateway_at(settings, clock) as (gateway, first, adapter):
        second = Scheduler(load_jobs(settings), gateway.store, gateway.inbox, clock=clock)
        await second.catch_up()
        for count, day in enumerate(("01", "02"), start=1):
            clock.set(f"2026-01-{day}T08:00:01Z")
            await asyncio.gather(first.wake("report"), second.wake("report"))
            await adapter.wait_for_sent(count)
            await gateway.drain()  # done, so the next fire is no overlap
    assert [d.message.key for d in adapter.sent] == [
        "cron:report:2026-01-01T08:00:00Z#0",
        "cron:report:2026-01-02T08:00:00Z#0",
    ]
    err = capsys.readouterr().err
    assert len(logged(err, "cron.fired")) == 2
    assert len(logged(err, "event.duplicate")) == 2


@pytest.mark.crash
@pytest.mark.slow
async def test_two_tether_run_processes_on_one_postgresql_fire_each_time_once(
    tmp_path: Path, pg_dsn: str
) -> None:
    """Both processes compute every fire and try to accept it; the store admits one."""
    fake = await FakeTelegram().start()
    instances: list[Instance] = []
    try:
        for index in range(2):
            home = tmp_path / f"instance{index}"
            home.mkdir()
            port = free_port()
            config = config_dict(
                home,
                memory={"store": pg_dsn},
                http={"enabled": True, "port": port},
                platforms={
                    "telegram": {
                        "token": fake.token,
                        "base_url": fake.base_url,
                        "mode": "webhook",
                        "webhook": {"url": "https://bot.example.com/tg", "secret_token": SECRET},
                        "rate_limits": False,
                        "typing": False,
                    }
                },
                jobs=[job("tick", cron="* * * * * *", deliver="telegram:4242", text="tick")],
            )
            (home / "tether.yaml").write_text(yaml.safe_dump(config))
            instances.append(Instance(home / "tether.yaml", port, home / "tether.log"))
        for instance in instances:
            await instance.start()
        async with aiohttp.ClientSession() as session:
            for instance in instances:
                await wait_ready(session, instance.port)
        both_up = len(fake.sent)
        # Five fires: the first one or two after both answer /readyz may still have been
        # tried by one instance alone (a start-up finishing); at least three are shared.
        await fake.wait_for(lambda: len(fake.sent) >= both_up + 5, timeout=30)
        for instance in instances:
            assert instance.proc is not None
            instance.proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(instance.proc.wait(), 60) == 0
    finally:
        for instance in instances:
            if instance.alive and instance.proc is not None:
                instance.proc.kill()
        await fake.stop()

    db = await asyncpg.connect(pg_dsn)
    try:
        rows = await db.fetch("SELECT key, status FROM inbox WHERE key LIKE 'cron:tick:%'")
    finally:
        await db.close()
    keys = {row["key"] for row in rows}
    done = {row["key"] for row in rows if row["status"] == "done"}
    # A fire accepted during the shutdown may wait, 'received', for the next start.
    assert {row["status"] for row in rows} <= {"done", "received"} and len(keys - done) <= 2
    assert len(fake.sent) == len(done) >= 3  # one message per fire time
    assert {(m["chat_id"], m["text"]) for m in fake.sent} == {(4242, "tick")}
    fired = [{line["key"] for line in logged(i.log.read_text(), "cron.fired")} for i in instances]
    lost = [
        {line["key"] for line in logged(i.log.read_text(), "event.duplicate")} for i in instances
    ]
    assert fired[0].isdisjoint(fired[1]) and fired[0] | fired[1] == keys
    assert len(lost[0] | lost[1]) >= 3  # both really tried the fires they shared


async def wait_ready(session: aiohttp.ClientSession, port: int) -> None:
    for _ in range(1200):
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                if response.status == 200:
                    return
        await asyncio.sleep(0.05)  # a process starting up: nothing to await but its port
    raise TimeoutError(f"tether on port {port} never became ready")


# -- CLI ---------------------------------------------------------------------------------


@pytest.mark.slow
async def test_jobs_run_and_list_beside_a_running_gateway(tmp_path: Path) -> None:
    jobs = [job(text="daily report"), job("weekly", cron="0 9 * * 1", timezone="Europe/Berlin")]
    config = write_config(tmp_path, jobs=jobs)
    settings = make_settings(tmp_path, jobs=jobs)

    async def tether(*args: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            TETHER,
            *args,
            "-c",
            str(config),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=subprocess_env(),
        )
        out, err = await process.communicate()
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    async with gateway_at(settings, Clock("2026-01-01T07:00Z")) as (gateway, _, adapter):
        code, out, _ = await tether("jobs", "run", "report")
        assert code == 0 and out.startswith("fired cron:report:manual:")
        assert "picks it up within 0.1s, else at its next start" in out
        [delivery] = await adapter.wait_for_sent(1)  # the running gateway's sweep
        await gateway.drain()
    assert delivery.message.text == "daily report"
    assert delivery.message.key == out.split()[1].rstrip(":") + "#0"

    code, out, _ = await tether("jobs", "list")
    assert code == 0
    header, report, weekly = out.splitlines()
    assert header.split() == [
        "ID",
        "SCHEDULE",
        "TIME",
        "ZONE",
        "NEXT",
        "FIRE",
        "LAST",
        "FIRE",
        "OUTCOME",
    ]
    assert report.split()[:7] == ["report", "0", "8", "*", "*", "*", "UTC"]
    assert report.split()[-2:] == ["(manual)", "done"]
    assert weekly.split()[:7] == ["weekly", "0", "9", "*", "*", "1", "Europe/Berlin"]
    assert " 09:00:00+0" in weekly and weekly.split()[-2:] == ["-", "-"]

    code, _, err = await tether("jobs", "run", "nope")
    assert code == 1 and "no job 'nope' (jobs: report, weekly)" in err
