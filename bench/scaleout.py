"""Scale-out: throughput with 1, 2 and 3 `tether run` instances on one PostgreSQL, and
one instance on SQLite, on the same workload.

Each run gets a fresh schema (or database file) and feeds the same workload: Telegram
updates by webhook over 50 chats (each chat's updates one after the other, chats in
parallel), spread over the instances round-robin as a load balancer would, answered by
the echo agent through a fake Bot API. Throughput counts from the first post until the
last reply reached the fake.

On a 2-core machine the instances, PostgreSQL and this driver share two cores, so wall
time says little about scaling. CPU time does: each run reports the CPU seconds its
instances spent on the workload (every ``tether run`` process and its children, the
SQLite writer, from /proc), and PostgreSQL's (every ``postgres`` process on the machine,
so other use of the server counts too), and events per CPU-second of the instances.
Flat events per CPU-second as instances are added is linear scaling, given the cores.

    python bench/scaleout.py [--events N] [--chats N] [--dsn postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fakes.cluster import Cluster
from tests.fakes.telegram_api import FakeTelegram
from tether.gateway import runtime

TICKS = os.sysconf("SC_CLK_TCK")


def _stats() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command name, CPU seconds) of every process on the machine."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        # fields[1] is the parent (stat field 4); utime and stime are fields 14 and 15
        found[int(entry)] = (int(fields[1]), name, (int(fields[11]) + int(fields[12])) / TICKS)
    return found


def cpu_seconds(roots: list[int]) -> tuple[float, float]:
    """(CPU seconds of the process trees under ``roots``, of every postgres process)."""
    stats = _stats()
    children: dict[int, list[int]] = {}
    for pid, (parent, _name, _cpu) in stats.items():
        children.setdefault(parent, []).append(pid)
    ours, todo = 0.0, list(roots)
    while todo:
        pid = todo.pop()
        ours += stats[pid][2] if pid in stats else 0.0
        todo += children.get(pid, [])
    postgres = sum(cpu for _parent, name, cpu in stats.values() if name == "postgres")
    return ours, postgres


async def run_once(dsn: str, instances: int, events: int, chats: int, store: str) -> dict[str, Any]:
    schema = f"tether_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(dsn)
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    fake = await FakeTelegram().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            telegram = {"token": fake.token, "base_url": fake.base_url}
            url = (
                f"{dsn}?search_path={schema}" if store == "postgresql" else f"sqlite:///{tmp}/b.db"
            )
            # The default sweep (2 s), not the tests' 0.2 s: each sweep pokes every busy
            # lane, most of them held by another instance.
            async with Cluster(Path(tmp), instances, url, telegram, sweep_interval=2.0) as c:
                pids = [i.proc.pid for i in c.instances if i.proc is not None]
                per_chat = events // chats
                cpu_before, pg_before = cpu_seconds(pids)
                started = time.perf_counter()

                async def chat(chat_id: int) -> None:
                    for n in range(per_chat):
                        message = fake.message(chat_id, f"c{chat_id}-m{n}")
                        await c.post({"update_id": chat_id * 100_000 + n, "message": message})

                await asyncio.gather(*(chat(i) for i in range(1, chats + 1)))
                accepted = time.perf_counter() - started
                await fake.wait_for(lambda: len(fake.sent) >= per_chat * chats, timeout=600)
                elapsed = time.perf_counter() - started
                cpu_after, pg_after = cpu_seconds(pids)
        done = per_chat * chats
        cpu = cpu_after - cpu_before
        return {
            "store": store,
            "instances": instances,
            "events": done,
            "seconds": round(elapsed, 3),
            "events_per_s": round(done / elapsed, 1),
            "accept_seconds": round(accepted, 3),
            "instances_cpu_s": round(cpu, 2),
            "postgres_cpu_s": round(pg_after - pg_before, 2) if store == "postgresql" else 0.0,
            "events_per_cpu_s": round(done / cpu, 1) if cpu else None,
        }
    finally:
        await fake.stop()
        await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    sqlite = runtime.run(run_once(args.dsn, 1, args.events, args.chats, "sqlite"))
    runs = [
        runtime.run(run_once(args.dsn, n, args.events, args.chats, "postgresql")) for n in (1, 2, 3)
    ]
    base, per_cpu = runs[0]["events_per_s"], runs[0]["events_per_cpu_s"]
    print(
        json.dumps(
            {
                "benchmark": "scaleout",
                "ingress": "telegram webhook, round-robin over instances",
                "sqlite": sqlite,
                "runs": runs,
                "scaling": {f"{r['instances']}x": round(r["events_per_s"] / base, 2) for r in runs},
                "per_cpu_s_scaling": {
                    f"{r['instances']}x": round(r["events_per_cpu_s"] / per_cpu, 2) for r in runs
                },
                "postgresql_over_sqlite": round(base / sqlite["events_per_s"], 2),
                "target": {"postgresql_over_sqlite": 0.5, "per_cpu_s_scaling_3x": 0.8},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
