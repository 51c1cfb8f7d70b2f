"""Feishu webhook ack latency on the durable pipeline: how long Feishu waits for its 200.

Feishu redelivers any event not answered 200 within 3 s, and Tether answers only after
the event is committed to SQLite, so the ack latency is the commit latency plus the
verification (signature, AES decryption) under load. This drives a real ``tether run``
(SQLite store, WAL, ``synchronous=normal``, echo agent, webhook mode with an encrypt key
and a verification token) with encrypted, signed ``im.message.receive_v1`` posts at a
fixed rate (open loop: each request leaves at its scheduled time, whether or not the
earlier ones were answered), from 50 chats, and measures each request from send to
response. Replies go to the fake open platform (tests/fakes/feishu_api.py) in a third
process, so the gateway does its full work: handle, checkpoint, send.

Target: p99 < 50 ms at 200 requests/s. Prints one JSON object.
Usage: ``python bench/feishu.py [--rate 200] [--seconds 20] [--log-level info]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
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

from tests.fakes.feishu_api import (  # noqa: E402
    APP_ID,
    APP_SECRET,
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    message_event,
    signed_request,
)

TETHER = str(Path(sys.executable).with_name("tether"))
PATH = "/feishu/webhook"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def wait_ready(
    session: aiohttp.ClientSession, port: int, proc: subprocess.Popen[Any]
) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("tether run exited during start")
        try:
            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError("tether run did not become ready")


async def load(port: int, rate: float, seconds: float, chats: int) -> dict[str, Any]:
    """Post ``rate`` signed events per second for ``seconds``; latencies in ms."""
    count = int(rate * seconds)
    requests = [
        signed_request(
            message_event(f"om_bench_{n}", f"m{n}", chat_id=f"oc_{n % chats}", open_id=f"ou_{n}")
        )
        for n in range(count)
    ]
    url = f"http://127.0.0.1:{port}{PATH}"
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lag: list[float] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(body: bytes, headers: dict[str, str], due: float) -> None:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            started = time.perf_counter()
            lag.append(started - due)
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                statuses[response.status] = statuses.get(response.status, 0) + 1
            latencies.append((time.perf_counter() - started) * 1000)

        t0 = time.perf_counter() + 0.5
        await asyncio.gather(
            *(one(body, headers, t0 + n / rate) for n, (body, headers) in enumerate(requests))
        )
        elapsed = time.perf_counter() - t0
    return {
        "requests": count,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "achieved_rate": round(count / elapsed, 1),
        "p50_ms": round(statistics.median(latencies), 2),
        "p90_ms": round(percentile(latencies, 0.90), 2),
        "p99_ms": round(percentile(latencies, 0.99), 2),
        "max_ms": round(max(latencies), 2),
        "client_lag_p99_ms": round(percentile(lag, 0.99) * 1000, 2),
    }


async def measure(
    port: int, fake_port: int, proc: subprocess.Popen[Any], args: argparse.Namespace
) -> dict[str, Any]:
    """Load once the gateway is ready, then wait (up to 60 s) for every reply to be sent."""
    async with aiohttp.ClientSession() as session:
        await wait_ready(session, port, proc)
        result = await load(port, args.rate, args.seconds, args.chats)
        drain_started = time.perf_counter()
        stats_url = f"http://127.0.0.1:{fake_port}/_fake/stats"
        while True:
            async with session.get(stats_url) as response:
                stats = await response.json()
            done = stats["messages"] >= result["requests"]
            if done or time.perf_counter() - drain_started > 60:
                break
            await asyncio.sleep(0.2)
    result["replies_sent"] = stats["messages"]
    result["replies_drained_s"] = round(time.perf_counter() - drain_started, 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args()

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    fake = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.feishu_api", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    tether: subprocess.Popen[Any] | None = None
    try:
        assert fake.stdout is not None
        fake_port = json.loads(fake.stdout.readline())["port"]
        with tempfile.TemporaryDirectory() as tmp:
            port = free_port()
            config = {
                "memory": {"store": f"sqlite:///{tmp}/tether.db"},
                "http": {"host": "127.0.0.1", "port": port},
                "platforms": {
                    "console": {"enabled": False},
                    "feishu": {
                        "app_id": APP_ID,
                        "app_secret": APP_SECRET,
                        "domain": f"http://127.0.0.1:{fake_port}",
                        "mode": "webhook",
                        "verification_token": VERIFICATION_TOKEN,
                        "encrypt_key": ENCRYPT_KEY,
                        "rate_limits": False,  # the fake has none; measure Tether, not waits
                    },
                },
                # Every request is a new sender: no allow-list pairing, no flood limit.
                "access": {"allow": ["*"], "rate_limit": {"messages": 0}},
                "logging": {"level": args.log_level, "format": "json", "file": f"{tmp}/log"},
            }
            path = Path(tmp) / "tether.yaml"
            path.write_text(yaml.safe_dump(config))
            tether = subprocess.Popen(
                [TETHER, "run", "-c", str(path)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
            )
            result = asyncio.run(measure(port, fake_port, tether, args))
            tether.terminate()
            tether.wait(60)
    finally:
        if tether is not None and tether.poll() is None:
            tether.kill()
        fake.terminate()
        fake.wait(10)
    summary = {
        "bench": "feishu_webhook_ack",
        "store": "sqlite",
        "rate": args.rate,
        "seconds": args.seconds,
        **result,
        "target_p99_ms": 50,
        "meets_target": result["p99_ms"] < 50,
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
