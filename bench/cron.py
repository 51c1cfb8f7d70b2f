"""Scheduler cost: gateway start-up with 10,000 jobs, and fire→delivered latency.

Start-up: the full ``Gateway.start`` (SQLite file, loopback adapter) with N jobs, against
a baseline start with no jobs measured in the same run. Three starts with jobs:

- ``first``: every job is new, so each gets its ledger baseline (N cursors, one commit);
- ``restart``: every ledger is read back and nothing is owed;
- ``catch_up``: a day of downtime later (injected clock), each daily job owes one
  fire: N events and 2N cursors accepted in one transaction.

Latency: one job firing every second (6-field cron) for ``--seconds``, real clock,
measured from the scheduled second to the loopback adapter's send. It includes
APScheduler's timer, the durable accept, the pipeline, the checkpoint and the outbox.

    python bench/cron.py [--jobs N] [--seconds S]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tether.adapters.base import Sent
from tether.adapters.loopback import LoopbackAdapter
from tether.config import Settings, load_text
from tether.cron import parse_time
from tether.events import OutMessage
from tether.gateway.app import Gateway
from tether.gateway.ops import logs


class TimedAdapter(LoopbackAdapter):
    """Records when each fire's reply reached the platform (wall clock)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent_at: dict[str, float] = {}

    async def send(self, message: OutMessage) -> Sent:
        self.sent_at[message.key.rsplit("#", 1)[0]] = time.time()
        return Sent(platform_id=str(len(self.sent_at)))


def settings(tmp: Path, name: str, jobs: list[dict[str, Any]]) -> Settings:
    return load_text(
        json.dumps(
            {
                "memory": {"store": f"sqlite:///{tmp / name}.db"},
                "http": {"enabled": False},
                "platforms": {"console": {"enabled": False}},
                "access": {"allow": ["*"], "rate_limit": {"messages": 0}},
                "jobs": jobs,
            }
        )
    )


#: CPU seconds of this process per start, by start: wall time on a loaded machine (other
#: processes on the same cores) says little, CPU time says what the start itself costs.
CPU: dict[str, float] = {}


async def timed_start(
    config: Settings, clock: Callable[[], datetime] | None = None, name: str = ""
) -> tuple[float, int]:
    """Seconds from constructing the gateway to ``start()`` returning; events accepted."""
    started, cpu = time.perf_counter(), time.process_time()
    gateway = Gateway(config, {"loopback": LoopbackAdapter()})
    if clock is not None and gateway.scheduler is not None:
        gateway.scheduler.clock = clock
    await gateway.start()
    elapsed = time.perf_counter() - started
    CPU[name] = time.process_time() - cpu
    await gateway.drain()
    await gateway.stop()
    await gateway.store.open()
    try:
        accepted = sum((await gateway.store.counts())["inbox"].values())
    finally:
        await gateway.store.close()
    return elapsed, accepted


async def startup(tmp: Path, count: int) -> dict[str, Any]:
    jobs = [
        {
            "id": f"job{n}",
            "cron": f"{n % 60} {n // 60 % 24} * * *",  # 1,440 distinct expressions
            "deliver": f"loopback:{n % 100}",
            "text": f"job {n}",
            "grace": "2d",
        }
        for n in range(count)
    ]
    loaded = settings(tmp, "startup", jobs)  # YAML/pydantic validation is not timed
    baseline, _ = await timed_start(settings(tmp, "baseline", []), name="baseline")
    start = datetime.now(UTC)
    first, _ = await timed_start(loaded, lambda: start, "first")
    restart, _ = await timed_start(loaded, lambda: start + timedelta(seconds=1), "restart")
    late = start + timedelta(days=1, seconds=1)
    catch_up, fires = await timed_start(loaded, lambda: late, "catch_up")
    return {
        "jobs": count,
        "baseline_no_jobs_s": round(baseline, 3),
        "first_start_s": round(first, 3),
        "restart_s": round(restart, 3),
        "catch_up_start_s": round(catch_up, 3),
        "catch_up_fires": fires,
        "restart_over_baseline": round(restart / baseline, 1),
        "restart_per_job_us": round((restart - baseline) / count * 1e6),
        "cpu_s": {name: round(seconds, 3) for name, seconds in CPU.items()},
        "target": {"first_start_s": 1.0},
    }


async def latency(tmp: Path, seconds: float) -> dict[str, Any]:
    config = settings(
        tmp,
        "latency",
        [{"id": "tick", "cron": "* * * * * *", "deliver": "loopback:1", "text": "tick"}],
    )
    adapter = TimedAdapter()
    gateway = Gateway(config, {"loopback": adapter})
    await gateway.start()
    await asyncio.sleep(seconds)
    await gateway.drain()
    await gateway.stop()
    # cron:tick:{scheduled}: the time the fire was due, not when it was noticed
    delays = sorted(
        (sent - parse_time(key.split(":", 2)[2]).timestamp()) * 1000
        for key, sent in adapter.sent_at.items()
    )
    return {
        "seconds": seconds,
        "fires_delivered": len(delays),
        "p50_ms": round(statistics.median(delays), 2),
        "p99_ms": round(delays[max(0, int(len(delays) * 0.99) - 1)], 2),
        "max_ms": round(delays[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "bench.log"
        with log_path.open("w", encoding="utf-8") as log_file:
            logs.configure("info", "json", stream=log_file)
            started = asyncio.run(startup(Path(tmp), args.jobs))
            timing = asyncio.run(latency(Path(tmp), args.seconds))
    print(
        json.dumps({"benchmark": "cron", "startup": started, "fire_to_delivered": timing}, indent=2)
    )


if __name__ == "__main__":
    main()
