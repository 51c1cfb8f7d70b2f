"""Reminders made in chat: time per add with 200 vs 2,000 of them, in one run.

Each add is what the ``schedule`` tool does for one call (issue 38 measured 2,000 adds
at 269 s when every add rebuilt the reminders' scheduler): the arguments read, the caps
counted (raised here above the count, so that all of them are allowed), the row and its
ledger cursor written to a SQLite file store, and the job put into the running
scheduler. All of them land in one chat, made by one person, so the caps count the
largest index ranges they can.

Baseline, in the same run: the store's own insert (``add_reminder``) for the same rows,
which any implementation pays. The figures that matter: ``per_add_ratio`` and
``per_add_cpu_ratio`` (time per add at 2,000 against 200: 1.0 is flat, i.e. linear in
total; on a loaded machine read the CPU one, wall time swings with the neighbours), and
``last_over_first_tenth_at_large`` (the median add among the last 200 of the 2,000
against the first 200, in one run). The two sizes run in turns, ``--repeat`` times each,
on fresh stores; medians are printed.

    python bench/reminders.py [--small 200] [--large 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tether.config.tools import RemindersConfig
from tether.events import Conversation, Event, Sender
from tether.gateway.handler.context import Context, Turn
from tether.gateway.tools.reminders import _schedule
from tether.memory.sqlite import SqliteStore
from tether.scheduler.reminders import Reminders, new_reminder

CHAT = Conversation(platform="bench", chat_id="1")


class Intake:
    """The gateway's inbox as the scheduler sees it: the store's own accept."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store

    async def accept(
        self, events: Sequence[Event], cursors: Mapping[str, str] | None = None
    ) -> list[bool]:
        rows = await self.store.accept([(e, e.conversation.key) for e in events], cursors)
        return [row is not None for row in rows]


def line(n: int) -> str:
    """A daily line at one of 1,440 times of day: most reminders have a schedule of their own."""
    return f"{n % 60} {n // 60 % 24} * * *"


async def tool_adds(tmp: Path, count: int) -> dict[str, float]:
    """``count`` calls of the schedule tool on a running Reminders; seconds in all."""
    store = SqliteStore(str(tmp / f"tool-{count}.db"))
    await store.open()
    reminders = Reminders(store, interval=3600)  # no periodic look during the run
    await reminders.start(Intake(store))
    limits = RemindersConfig(per_chat=count + 1, per_person=count + 1)
    logger = structlog.get_logger("bench")
    each: list[float] = []
    try:
        started, cpu = time.perf_counter(), time.process_time()
        for n in range(count):
            begun = time.perf_counter()
            event = Event(
                key=f"bench:1:{n}",
                platform="bench",
                conversation=CHAT,
                sender=Sender(id="ana"),
                text="remind me",
            )
            ctx = Context(event, CHAT.key, 1, logger, Turn(store))
            await _schedule(reminders, ctx, f"reminder {n}", None, line(n), "UTC", limits)
            each.append(time.perf_counter() - begun)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert reminders.scheduler is not None and len(reminders.scheduler.jobs) == count
        assert await store.count_reminders(target=CHAT.key) == count
    finally:
        await reminders.stop()
        await store.close()
    tenth = max(1, count // 10)
    return {
        "seconds": elapsed,
        "cpu_seconds": cpu,
        # the median add among the first and the last tenth: growth within one run
        "first_tenth": statistics.median(each[:tenth]),
        "last_tenth": statistics.median(each[-tenth:]),
    }


async def store_adds(tmp: Path, count: int) -> float:
    """The baseline: the same rows through ``add_reminder`` alone; seconds in all."""
    store = SqliteStore(str(tmp / f"store-{count}.db"))
    await store.open()
    try:
        rows = [
            new_reminder(
                reminder_id=f"r-{n:016x}",
                conversation=CHAT.key,
                target=CHAT.key,
                text=f"reminder {n}",
                cron=line(n),
                at=None,
                timezone="UTC",
                event_key=f"bench:1:{n}",
                sender="bench:ana",
            )
            for n in range(count)
        ]
        started = time.perf_counter()
        for row in rows:
            await store.add_reminder(row)
        return time.perf_counter() - started
    finally:
        await store.close()


async def main(small: int, large: int, repeat: int) -> dict[str, Any]:
    runs: dict[int, list[dict[str, float]]] = {small: [], large: []}
    baseline: dict[int, list[float]] = {small: [], large: []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(repeat):
            for count in (small, large):  # in turns: drift on a loaded machine hits both
                folder = Path(tmp) / f"{round_}"
                folder.mkdir(exist_ok=True)
                runs[count].append(await tool_adds(folder, count))
                baseline[count].append(await store_adds(folder, count))

    def per_add_ms(count: int) -> float:
        return statistics.median(r["seconds"] for r in runs[count]) / count * 1000

    def store_ms(count: int) -> float:
        return statistics.median(baseline[count]) / count * 1000

    sizes = {
        str(count): {
            "total_s": round(statistics.median(r["seconds"] for r in runs[count]), 3),
            "per_add_ms": round(per_add_ms(count), 3),
            "per_add_cpu_ms": round(
                statistics.median(r["cpu_seconds"] for r in runs[count]) / count * 1000, 3
            ),
            "baseline_store_insert_ms": round(store_ms(count), 3),
            "median_add_ms_first_tenth": round(_median(runs[count], "first_tenth") * 1000, 3),
            "median_add_ms_last_tenth": round(_median(runs[count], "last_tenth") * 1000, 3),
        }
        for count in (small, large)
    }
    within = _median(runs[large], "last_tenth") / _median(runs[large], "first_tenth")
    return {
        "benchmark": "reminders",
        "repeat": repeat,
        "sizes": sizes,
        "per_add_ratio": round(per_add_ms(large) / per_add_ms(small), 2),
        "per_add_cpu_ratio": round(
            sizes[str(large)]["per_add_cpu_ms"] / sizes[str(small)]["per_add_cpu_ms"], 2
        ),
        "last_over_first_tenth_at_large": round(within, 2),
        "baseline_per_add_ratio": round(store_ms(large) / store_ms(small), 2),
        "store_share_at_large": round(store_ms(large) / per_add_ms(large), 2),
        "target": {"per_add_cpu_ratio": "<= 1.5", "last_over_first_tenth_at_large": "<= 1.5"},
    }


def _median(runs: list[dict[str, float]], name: str) -> float:
    return statistics.median(run[name] for run in runs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--large", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    result = asyncio.run(main(args.small, args.large, args.repeat))
    print(json.dumps(result, indent=2))
