"""Telegram latency a person feels: update → reply at the fake Bot API, at a steady rate.

``tether run`` (a real subprocess, its own loop — uvloop when it imports) answers with the
echo agent on a durable SQLite store; logs at ``info`` as JSON into a file, as in
production. The fake Bot API (tests/fakes/telegram_api.py) runs in this process and
stamps each ``sendMessage`` it receives with ``time.monotonic()`` — the same clock this
process stamps each update with, so the difference is the whole trip:

- ``webhook``: this process POSTs each update to Tether's webhook route (with the secret
  token header, as Telegram does); clocked from just before the POST to the reply's
  arrival at the fake. Tether answers the POST after the update is committed.
- ``polling``: each update is queued at the fake, whose pending long poll
  (``getUpdates``, ``poll_timeout`` 10 s) answers at once; clocked from the queueing.

Updates arrive on a fixed schedule (``--rate`` per second, default 50), each from one of
``--chats`` chats, so a slow answer does not slow the load down (an open-loop load, as
people are). The first ``--warmup`` updates of each run are not counted (the first turn
loads the tokenizer). Outbound rate limits are off (``rate_limits: false``): at 50
updates/s Telegram's 30 messages/s would queue replies, which measures Telegram, not
Tether.

    python bench/latency.py [--rate 50] [--updates 1000] [--chats 250]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.cluster import free_port  # noqa: E402
from tests.fakes.telegram_api import FakeTelegram  # noqa: E402

SECRET = "latency-bench-secret"
TARGET_P99_MS = 20.0


async def start_tether(config: dict[str, Any], tmp: Path, name: str) -> asyncio.subprocess.Process:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    log = tmp / f"{name}.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tether.gateway.cli", "run", "-c", str(path),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=env,
        )  # fmt: skip
    for _ in range(600):  # a file another process writes: polled, up to 60 s
        if "gateway.started" in log.read_text(errors="replace"):
            return proc
        if proc.returncode is not None:
            raise RuntimeError(f"{name}: tether run exited: {log.read_text()[-2000:]}")
        await asyncio.sleep(0.1)
    proc.terminate()
    raise RuntimeError(f"{name}: no gateway.started within 60 s")


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        await proc.wait()


def summary(latencies_ms: list[float], wall: float) -> dict[str, Any]:
    ordered = sorted(latencies_ms)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * p))], 2)

    return {
        "updates": len(ordered),
        "offered_per_s": round(len(ordered) / wall, 1),
        "p50_ms": round(statistics.median(ordered), 2),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "max_ms": round(ordered[-1], 2),
    }


async def drive(
    fake: FakeTelegram, send: Any, count: int, rate: float, chats: int, tag: str
) -> tuple[dict[str, float], float]:
    """Offer ``count`` updates at ``rate``/s; returns {text: sent-at} and the wall time."""
    sent_at: dict[str, float] = {}
    tasks: set[asyncio.Task[None]] = set()
    started = time.monotonic()
    for n in range(count):
        due = started + n / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # the load's schedule, not a synchronization
        text = f"{tag} {n}"
        update = {"update_id": 0, "message": fake.message(1000 + n % chats, text)}
        sent_at[text] = time.monotonic()
        task = asyncio.create_task(send(update))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    wall = time.monotonic() - started
    if tasks:
        await asyncio.gather(*tasks)
    return sent_at, wall


async def answered(fake: FakeTelegram, sent_at: dict[str, float]) -> list[float]:
    """Wait for a reply to each text; their latencies in ms."""
    wanted = set(sent_at)

    def replies() -> dict[str, float]:
        return {
            c.params.get("text"): c.at
            for c in fake.calls_to("sendMessage")
            if c.params.get("text") in wanted
        }

    await fake.wait_for(lambda: len(replies()) >= len(wanted), timeout=120)
    got = replies()
    return [(got[text] - at) * 1000 for text, at in sent_at.items()]


async def run_mode(
    mode: str, fake: FakeTelegram, tmp: Path, args: argparse.Namespace
) -> dict[str, Any]:
    port = free_port()
    telegram: dict[str, Any] = {
        "token": fake.token,
        "base_url": fake.base_url,
        "rate_limits": False,
        "poll_timeout": 10,
    }
    if mode == "webhook":
        telegram["mode"] = "webhook"
        telegram["webhook"] = {"url": "https://bot.example.com/tg", "secret_token": SECRET}
    config = {
        "memory": {"store": f"sqlite:///{tmp / mode}.db"},
        "http": {"enabled": mode == "webhook", "host": "127.0.0.1", "port": port},
        "platforms": {"console": {"enabled": False}, "telegram": telegram},
        "logging": {"level": "info", "format": "json"},
        "access": {"allow": ["*"], "rate_limit": {"messages": 0}},
    }
    proc = await start_tether(config, tmp, mode)
    session = aiohttp.ClientSession()
    update_ids = iter(range(10_000_000, 20_000_000))
    try:
        if mode == "webhook":
            await fake.wait_for(lambda: fake.webhook is not None, timeout=60)
            url = f"http://127.0.0.1:{port}/telegram/webhook"
            headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}

            async def send(update: dict[str, Any]) -> None:
                update["update_id"] = next(update_ids)
                async with session.post(url, json=update, headers=headers) as resp:
                    if resp.status != 200:
                        raise RuntimeError(f"webhook answered {resp.status}")

        else:
            await fake.wait_for(lambda: bool(fake.calls_to("getUpdates")), timeout=60)

            async def send(update: dict[str, Any]) -> None:
                fake.push(message=update["message"])

        warm, _ = await drive(fake, send, args.warmup, args.rate, args.chats, f"{mode}-warm")
        await answered(fake, warm)
        sent_at, wall = await drive(fake, send, args.updates, args.rate, args.chats, mode)
        return summary(await answered(fake, sent_at), wall)
    finally:
        await session.close()
        await stop(proc)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--updates", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--chats", type=int, default=250)
    args = parser.parse_args()
    out: dict[str, Any] = {"benchmark": "latency", "agent": "echo", "rate_per_s": args.rate}
    with tempfile.TemporaryDirectory() as tmp_name:
        for mode in ("webhook", "polling"):
            fake = await FakeTelegram().start()
            try:
                print(f"running {mode}", file=sys.stderr, flush=True)
                out[mode] = await run_mode(mode, fake, Path(tmp_name), args)
            finally:
                await fake.stop()
    out["target"] = {"webhook_p99_ms": TARGET_P99_MS}
    out["within_target"] = out["webhook"]["p99_ms"] <= TARGET_P99_MS
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
