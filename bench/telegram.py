"""Telegram throughput: plain python-telegram-bot vs Tether's adapter on the durable pipeline.

Both are fed the same 5,000 text updates from 100 chats by the same fake Bot API
(tests/fakes/telegram_api.py, in its own process so it does not share a CPU with the
contestant) and both answer each with an echo that quotes the message. Outbound rate
limits are off in both (PTB has none unless you add AIORateLimiter; Tether's are
``platforms.telegram.rate_limits: false``). The clock is the fake's: from the first
non-empty getUpdates answer to the 5,000th sendMessage it received.

- ``ptb``: a plain ``Application`` (Updater polling, one ``MessageHandler``, in memory,
  default settings, so updates are handled one at a time). PTB confirms each batch
  before handling it: a crash loses it.
- ``tether``: ``tether run``'s Gateway with the Telegram adapter, SQLite store (WAL,
  ``synchronous=normal``), every update committed before its offset is confirmed and
  every reply an outbox row before it is sent. Like the PTB bot it lets everyone in
  (``access.allow: ["*"]``, no per-sender flood limit); logs at ``info`` are rendered as
  JSON into /dev/null (``--log-level``). After start it settles its heap
  (``settle_heap``), as ``tether run`` does.
- ``ptb_aiohttp_concurrent``: the fastest PTB configuration, PTB with
  ``concurrent_updates(True)`` on Tether's aiohttp transport (adapters/telegram/http.py),
  in memory; ``ratio_tether_vs_ptb_aiohttp_concurrent`` is the target (≥ 1.0).
- References: ``ptb_concurrent`` is PTB with ``concurrent_updates(True)``; ``ptb_aiohttp``
  is PTB on the aiohttp transport, to show how much of a gap is the HTTP client.

Every contestant runs on the loop ``tether run`` uses (uvloop when it imports).

Prints one JSON object. Usage: ``python bench/telegram.py [--updates N] [--chats N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parent.parent
# This file is named telegram.py: its directory must not shadow the `telegram` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from tether.config import load_text  # noqa: E402
from tether.gateway import logs, runtime  # noqa: E402
from tether.gateway.app import Gateway, build_adapters, settle_heap  # noqa: E402

_SINK = open(os.devnull, "w")  # noqa: SIM115 - log lines are rendered, then dropped


class FakeServer:
    """The fake Bot API in a child process, driven through its /_fake control routes."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.telegram_api", "--port", "0"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        hello = json.loads(self.proc.stdout.readline())
        self.port: int = hello["port"]
        self.token: str = hello["token"]
        self.base_url = f"http://127.0.0.1:{self.port}/bot"

    async def load(self, updates: int, chats: int) -> None:
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{self.port}/_fake/load"
            async with session.post(url, json={"updates": updates, "chats": chats}) as resp:
                resp.raise_for_status()

    async def wait(self, count: int) -> dict[str, Any]:
        timeout = aiohttp.ClientTimeout(total=900)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            url = f"http://127.0.0.1:{self.port}/_fake/wait?count={count}&timeout=120"
            async with session.get(url) as resp:
                result: dict[str, Any] = await resp.json()
                if resp.status != 200:
                    raise RuntimeError(f"not every update was answered in time: {result}")
                return result

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


async def run_ptb(
    fake: FakeServer, updates: int, *, concurrent: bool = False, aiohttp_transport: bool = False
) -> dict[str, Any]:
    from telegram import Update
    from telegram.ext import Application, ContextTypes, MessageHandler, filters

    async def echo(update: Update, _context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None and update.message.text is not None
        await update.message.reply_text(update.message.text, do_quote=True)

    builder = Application.builder().token(fake.token).base_url(fake.base_url)
    if concurrent:
        builder = builder.concurrent_updates(True)
    if aiohttp_transport:
        from tether.adapters.telegram.http import AiohttpRequest

        builder = builder.request(AiohttpRequest()).get_updates_request(
            AiohttpRequest(connection_pool_size=1)
        )
    app = builder.build()
    app.add_handler(MessageHandler(filters.TEXT, echo))
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(timeout=1, poll_interval=0)
        result = await fake.wait(updates)
        await app.updater.stop()
        await app.stop()
    return result


async def run_tether(fake: FakeServer, updates: int, log_level: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        config = {
            "memory": {"store": f"sqlite:///{Path(tmp) / 'bench.db'}"},
            "http": {"enabled": False},
            "platforms": {
                "console": {"enabled": False},
                "telegram": {
                    "token": fake.token,
                    "base_url": fake.base_url,
                    "poll_timeout": 1,
                    "rate_limits": False,
                },
            },
            "logging": {"level": log_level, "format": "json"},
            # Like the plain PTB echo bot: everyone may talk to it, no per-sender flood limit.
            "access": {"allow": ["*"], "rate_limit": {"messages": 0}},
        }
        settings = load_text(yaml.safe_dump(config))
        logs.configure(settings.logging.level, "json", settings.secrets(), _SINK)
        gateway = Gateway(settings, build_adapters(settings))
        await gateway.start()
        settle_heap()  # as `tether run` does after start
        try:
            result = await fake.wait(updates)
        finally:
            await gateway.stop()
        return result


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def rate(result: dict[str, Any], updates: int) -> float:
    seconds = result["last_sent_at"] - result["first_batch_at"]
    return round(updates / seconds, 1)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--updates", type=int, default=5000)
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning"],
        help="Tether's logging.level (lines are rendered as JSON into /dev/null)",
    )
    parser.add_argument("--no-reference", action="store_true", help="skip ptb_concurrent")
    parser.add_argument("--only", help="run one contestant (for profiling); prints no ratios")
    args = parser.parse_args()

    fake = FakeServer()
    out: dict[str, Any] = {"updates": args.updates, "chats": args.chats}
    try:
        contestants: list[tuple[str, Any]] = [
            ("ptb", lambda: run_ptb(fake, args.updates)),
            ("tether", lambda: run_tether(fake, args.updates, args.log_level)),
            (
                "ptb_aiohttp_concurrent",
                lambda: run_ptb(fake, args.updates, concurrent=True, aiohttp_transport=True),
            ),
        ]
        if not args.no_reference:
            contestants += [
                ("ptb_concurrent", lambda: run_ptb(fake, args.updates, concurrent=True)),
                ("ptb_aiohttp", lambda: run_ptb(fake, args.updates, aiohttp_transport=True)),
            ]
        if args.only:
            contestants = [c for c in contestants if c[0] == args.only]
        for name, run in contestants:
            print(f"running {name}", file=sys.stderr, flush=True)
            await fake.load(args.updates, args.chats)
            started, cpu = time.perf_counter(), _cpu()
            result = await run()
            out[f"{name}_updates_per_s"] = rate(result, args.updates)
            out[f"{name}_wall_s"] = round(time.perf_counter() - started, 2)
            # This process and its children that ended (Tether's SQLite writer): the
            # contestant's CPU, whatever else the machine runs meanwhile.
            out[f"{name}_updates_per_cpu_s"] = round(args.updates / (_cpu() - cpu), 1)
            out[f"{name}_api_calls"] = result["calls"]
    finally:
        fake.close()
    if args.only:
        print(json.dumps(out))
        return
    tether = out["tether_updates_per_s"]
    out["ratio_tether_vs_ptb"] = round(tether / out["ptb_updates_per_s"], 2)
    fastest = out["ptb_aiohttp_concurrent_updates_per_s"]
    out["ratio_tether_vs_ptb_aiohttp_concurrent"] = round(tether / fastest, 2)
    out["ratio_per_cpu_s_tether_vs_ptb_aiohttp_concurrent"] = round(
        out["tether_updates_per_cpu_s"] / out["ptb_aiohttp_concurrent_updates_per_cpu_s"], 2
    )
    out["target"] = {"ratio_tether_vs_ptb_aiohttp_concurrent": 1.0}
    out["loop"] = runtime.loop_name()
    out["tether_log_level"] = args.log_level
    print(json.dumps(out))


if __name__ == "__main__":
    runtime.run(main())  # every contestant on the loop `tether run` uses
