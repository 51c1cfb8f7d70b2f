"""Scale-out: throughput with 1, 2 and 3 `tether run` instances on one PostgreSQL.

Each run gets a fresh schema and feeds the same workload: Telegram updates by webhook
over 50 chats (each chat's updates one after the other, chats in parallel), spread over
the instances round-robin as a load balancer would, answered by the echo agent through a
fake Bot API. Throughput counts from the first post until the last reply reached the
fake. On a 2-core machine the instances, PostgreSQL and this driver share two cores, so
read the scaling factor with that in mind.

    python bench/scaleout.py [--events N] [--chats N] [--dsn postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


async def run_once(dsn: str, instances: int, events: int, chats: int) -> dict[str, Any]:
    schema = f"tether_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(dsn)
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    fake = await FakeTelegram().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            telegram = {"token": fake.token, "base_url": fake.base_url}
            async with Cluster(Path(tmp), instances, f"{dsn}?search_path={schema}", telegram) as c:
                per_chat = events // chats
                started = time.perf_counter()

                async def chat(chat_id: int) -> None:
                    for n in range(per_chat):
                        message = fake.message(chat_id, f"c{chat_id}-m{n}")
                        await c.post({"update_id": chat_id * 100_000 + n, "message": message})

                await asyncio.gather(*(chat(i) for i in range(1, chats + 1)))
                accepted = time.perf_counter() - started
                await fake.wait_for(lambda: len(fake.sent) >= per_chat * chats, timeout=600)
                elapsed = time.perf_counter() - started
        return {
            "instances": instances,
            "events": per_chat * chats,
            "seconds": round(elapsed, 3),
            "events_per_s": round(per_chat * chats / elapsed, 1),
            "accept_seconds": round(accepted, 3),
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
    runs = [asyncio.run(run_once(args.dsn, n, args.events, args.chats)) for n in (1, 2, 3)]
    base = runs[0]["events_per_s"]
    print(
        json.dumps(
            {
                "benchmark": "scaleout",
                "store": "postgresql",
                "ingress": "telegram webhook, round-robin over instances",
                "runs": runs,
                "scaling": {f"{r['instances']}x": round(r["events_per_s"] / base, 2) for r in runs},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
