"""A failure that goes on is said once, then counted (issue 38, item 11): the first in
full, a line with ``repeated=N`` once a minute while it lasts, and one when it ends.

And the sweep through a store outage: however many intervals it lasts, one error line
with its traceback and a count when the store answers again; the chores (which need the
store too) wait for it instead of failing beside the sweep. The outage is real: another
connection renames the tables the sweep and the chores read, as a botched migration
would, and renames them back. (The outbox's: tests/gateway/core/test_outbox.py.)
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import structlog

from tests.support.config import events_named, make_settings
from tests.support.gateway import running
from tether.gateway.core.streaks import Streak


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def outage() -> OSError:
    return OSError("database or disk is full")


def test_a_streak_is_one_line_then_a_count_a_minute_then_its_end() -> None:
    clock = Clock()
    streak = Streak(structlog.get_logger("t"), "x.failed", recovered="x.recovered", clock=clock)
    with structlog.testing.capture_logs() as logs:
        for _ in range(100):  # a failure every second for 100 s
            streak.failed(outage(), key="k")
            clock.now += 1
        streak.passed()
        streak.passed()  # nothing on: nothing to say
    first, summary, end = logs
    assert first == {
        "event": "x.failed", "log_level": "error", "key": "k",
        "error": "OSError: database or disk is full", "exc_info": first["exc_info"],
    }  # fmt: skip
    assert isinstance(first["exc_info"], OSError)  # rendered as the traceback
    assert summary["event"] == "x.failed" and "exc_info" not in summary
    assert (summary["repeated"], summary["failures"], summary["since_s"]) == (60, 61, 60)
    assert end == {"event": "x.recovered", "log_level": "info", "failures": 100, "duration_s": 100}


def test_a_new_streak_after_an_end_is_said_in_full_again_and_a_stop_says_the_count() -> None:
    clock = Clock()
    streak = Streak(structlog.get_logger("t"), "x.failed", recovered="x.recovered", clock=clock)
    with structlog.testing.capture_logs() as logs:
        streak.failed(outage())
        streak.passed()
        for _ in range(5):
            streak.failed(outage())
        streak.flush()  # stopping with the outage still on
        streak.flush()
    assert [(e["event"], e.get("repeated"), "exc_info" in e) for e in logs] == [
        ("x.failed", None, True),
        ("x.recovered", None, False),
        ("x.failed", None, True),
        ("x.failed", 4, False),
    ]


def test_the_exception_being_handled_is_the_one_said() -> None:
    streak = Streak(structlog.get_logger("t"), "x.failed", recovered="x.recovered")
    with structlog.testing.capture_logs() as logs:
        try:
            raise outage()
        except OSError:
            streak.failed()
    [entry] = logs
    assert entry["error"] == "OSError: database or disk is full"


# -- the sweep through a store outage ------------------------------------------------------

SWEEPS = 40


async def test_a_store_outage_over_many_sweeps_is_one_error_line_and_a_count(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, pipeline={"sweep_interval": 3600})  # the test sweeps
    with structlog.testing.capture_logs() as logs:
        async with running(settings) as (gateway, _loop):
            db = sqlite3.connect(tmp_path / "tether.db", isolation_level=None, timeout=30)
            for table in ("inbox", "pairings"):
                db.execute(f"ALTER TABLE {table} RENAME TO {table}_away")
            for _ in range(SWEEPS):  # what SWEEPS intervals of the sweep's task do
                await gateway.sweep.sweep_once()
            for table in ("inbox", "pairings"):
                db.execute(f"ALTER TABLE {table}_away RENAME TO {table}")
            db.close()
            await gateway.sweep.sweep_once()
    [failed] = events_named(logs, "gateway.sweep_failed")
    assert "no such table: inbox" in failed["error"] and failed["exc_info"]
    [recovered] = events_named(logs, "gateway.sweep_recovered")
    assert recovered["failures"] == SWEEPS
    assert events_named(logs, "access.tell_approved_failed") == []  # the chores waited
    assert len([entry for entry in logs if entry.get("exc_info")]) == 1
