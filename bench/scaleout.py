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

The target is the round-robin figure (``per_cpu_s_scaling``). Three reference runs say
where the rest goes (``reference``), each against the 1-instance run of the same round:
``per_cpu_s_3x_sticky``, 3 instances with each chat posted to one instance (a sticky
balancer: a lane never changes instance), and ``per_cpu_s_third_load``, one instance
fed a third of the chats (and events), which is what each of three instances gets: the
cost of smaller batches alone, with nothing else on the cores and no other instance;
and ``per_cpu_s_3x_independent``, three stacks that share nothing but the machine (each
one instance on a schema of its own, fed a third of the chats): what three instances can
score on these cores at best, so ``per_cpu_s_3x_over_independent`` is what sharing one
store costs Tether itself.
``--repeat N`` runs the PostgreSQL configurations N times, in turns, and reports each
ratio's median (one run's ratios move by ~0.1 on a busy machine).

    python bench/scaleout.py [--events N] [--chats N] [--repeat N] [--dsn postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.procs import descendants, processes
from tests.fakes.cluster import Cluster
from tests.fakes.telegram_api import FakeTelegram
from tether.gateway.ops import runtime


def cpu_seconds(roots: list[int]) -> tuple[float, float]:
    """(CPU seconds of the process trees under ``roots``, of every postgres process)."""
    procs = processes()
    ours = sum(procs[pid].cpu for pid in descendants(roots, procs) if pid in procs)
    postgres = sum(proc.cpu for proc in procs.values() if proc.name == "postgres")
    return ours, postgres


async def run_once(
    dsn: str,
    instances: int,
    events: int,
    chats: int,
    store: str,
    *,
    sticky: bool = False,
    independent: bool = False,
) -> dict[str, Any]:
    """One configuration on a fresh schema (or file); ``sticky`` posts each chat to one
    instance instead of round-robin; ``independent`` runs each instance alone on a schema
    of its own, with its share of the chats: nothing is shared but the machine."""
    schemas = [
        f"tether_bench_{uuid.uuid4().hex[:8]}" for _ in range(instances if independent else 1)
    ]
    admin = await asyncpg.connect(dsn)
    for schema in schemas:
        await admin.execute(f'CREATE SCHEMA "{schema}"')
    fake = await FakeTelegram().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            telegram = {"token": fake.token, "base_url": fake.base_url}

            def url(schema: str) -> str:
                return (
                    f"{dsn}?search_path={schema}"
                    if store == "postgresql"
                    else f"sqlite:///{tmp}/b.db"
                )

            # The default sweep (2 s), not the tests' 0.2 s: each sweep pokes every busy
            # lane, most of them held by another instance.
            if independent:
                stacks = [
                    Cluster(Path(tmp) / f"stack{n}", 1, url(schema), telegram, sweep_interval=2.0)
                    for n, schema in enumerate(schemas)
                ]
            else:
                stacks = [
                    Cluster(Path(tmp), instances, url(schemas[0]), telegram, sweep_interval=2.0)
                ]
            async with contextlib.AsyncExitStack() as running:
                for stack in stacks:
                    await running.enter_async_context(stack)
                c = stacks[0]
                pids = [i.proc.pid for s in stacks for i in s.instances if i.proc is not None]
                per_chat = events // chats
                cpu_before, pg_before = cpu_seconds(pids)
                started = time.perf_counter()

                async def chat(chat_id: int) -> None:
                    for n in range(per_chat):
                        message = fake.message(chat_id, f"c{chat_id}-m{n}")
                        update = {"update_id": chat_id * 100_000 + n, "message": message}
                        if independent:
                            await stacks[chat_id % instances].post(update)
                        elif sticky:
                            await c.post_to(chat_id % instances, update)
                        else:
                            await c.post(update)

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
            "balancer": "independent" if independent else "sticky" if sticky else "round-robin",
            "chats": chats,
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
        for schema in schemas:
            await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await admin.close()


Round = dict[str, dict[str, Any]]


def one_round(args: argparse.Namespace) -> Round:
    """Each PostgreSQL configuration once: 1-3 instances round-robin, and the references."""

    def pg(instances: int, events: int, chats: int, **mode: bool) -> dict[str, Any]:
        return runtime.run(run_once(args.dsn, instances, events, chats, "postgresql", **mode))

    third = max(1, args.chats // 3)
    found = {f"{n}x": pg(n, args.events, args.chats) for n in (1, 2, 3)}
    found["3x_sticky"] = pg(3, args.events, args.chats, sticky=True)
    found["3x_independent"] = pg(3, args.events, args.chats, independent=True)
    found["third_load"] = pg(1, args.events // args.chats * third, third)
    return found


def median_ratio(rounds: list[Round], run: str, field: str) -> float:
    """``run``'s ``field`` over the 1-instance run's, within each round; the median."""
    return round(statistics.median(float(r[run][field] / r["1x"][field]) for r in rounds), 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    sqlite = runtime.run(run_once(args.dsn, 1, args.events, args.chats, "sqlite"))
    rounds = [one_round(args) for _ in range(args.repeat)]
    first = rounds[0]
    per_cpu = "events_per_cpu_s"
    print(
        json.dumps(
            {
                "benchmark": "scaleout",
                "ingress": "telegram webhook, round-robin over instances",
                "repeat": args.repeat,
                "sqlite": sqlite,
                "runs": [first[f"{n}x"] for n in (1, 2, 3)],
                "scaling": {
                    f"{n}x": median_ratio(rounds, f"{n}x", "events_per_s") for n in (1, 2, 3)
                },
                "per_cpu_s_scaling": {
                    f"{n}x": median_ratio(rounds, f"{n}x", per_cpu) for n in (1, 2, 3)
                },
                "per_cpu_s_scaling_3x_each": [
                    round(r["3x"][per_cpu] / r["1x"][per_cpu], 2) for r in rounds
                ],
                "postgresql_over_sqlite": round(
                    first["1x"]["events_per_s"] / sqlite["events_per_s"], 2
                ),
                "reference": {
                    "per_cpu_s_3x_sticky": median_ratio(rounds, "3x_sticky", per_cpu),
                    "per_cpu_s_third_load": median_ratio(rounds, "third_load", per_cpu),
                    # Three stacks sharing nothing but the machine: the ceiling of
                    # per_cpu_s_scaling.3x on it (what falls here is the cores, not Tether).
                    "per_cpu_s_3x_independent": median_ratio(rounds, "3x_independent", per_cpu),
                    "per_cpu_s_3x_over_independent": round(
                        statistics.median(
                            r["3x"][per_cpu] / r["3x_independent"][per_cpu] for r in rounds
                        ),
                        2,
                    ),
                    "runs": [first["3x_sticky"], first["third_load"], first["3x_independent"]],
                },
                "target": {"postgresql_over_sqlite": 0.5, "per_cpu_s_scaling_3x": 0.8},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
