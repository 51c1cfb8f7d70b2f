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

Every contestant runs on the loop ``tether run`` uses (uvloop when it imports), each in a
fresh interpreter of its own, so that nothing one leaves (imports, a warmed heap, the
collector thresholds Tether's ``settle_heap`` sets) helps or hinders the next. The three
contestants run in turns for ``--rounds`` rounds (default 3), because on a shared 2-core
machine one run's ratio moves by a third; each round's ratios are kept and the top-level
ratios are their medians.

Prints one JSON object. Usage:
``python bench/telegram.py [--updates N] [--chats N] [--rounds N] [--no-reference]``,
or ``--only NAME`` to run one contestant (for a profiler).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
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
# This file is named telegram.py: its directory must not shadow the `telegram` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from tether.config import load_text  # noqa: E402
from tether.gateway.app import Gateway  # noqa: E402
from tether.gateway.assembly import build_adapters  # noqa: E402
from tether.gateway.ops import logs, runtime  # noqa: E402
from tether.gateway.ops.runtime import settle_heap  # noqa: E402

_SINK = open(os.devnull, "w")  # noqa: SIM115 - log lines are rendered, then dropped


class FakeServer:
    """The fake Bot API in a child process, driven through its /_fake control routes."""

    def __init__(self, port: int, token: str, proc: subprocess.Popen[str] | None = None) -> None:
        self.proc = proc
        self.port = port
        self.token = token
        self.base_url = f"http://127.0.0.1:{self.port}/bot"

    @classmethod
    def spawn(cls) -> FakeServer:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.telegram_api", "--port", "0"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        hello = json.loads(proc.stdout.readline())
        return cls(hello["port"], hello["token"], proc)

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
        if self.proc is not None:
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


CONTESTANTS = ("ptb", "tether", "ptb_aiohttp_concurrent")
REFERENCES = ("ptb_concurrent", "ptb_aiohttp")


async def contest(name: str, fake: FakeServer, updates: int, log_level: str) -> dict[str, Any]:
    """Run one contestant against the (already loaded) fake, in this process."""
    if name == "tether":
        return await run_tether(fake, updates, log_level)
    concurrent = name in ("ptb_concurrent", "ptb_aiohttp_concurrent")
    aiohttp_transport = name in ("ptb_aiohttp", "ptb_aiohttp_concurrent")
    return await run_ptb(fake, updates, concurrent=concurrent, aiohttp_transport=aiohttp_transport)


async def run_child(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """One contestant in a fresh interpreter: no imports, heap or collector settings
    (Tether's ``settle_heap``) carried from one contestant to the next. Its CPU is
    the contestant's own report: it and the SQLite writer, from after the imports."""
    fake = FakeServer.spawn()  # a fresh one: a fake that served runs before answers slower
    try:
        return await _run_child(args, name, fake)
    finally:
        fake.close()


async def _run_child(args: argparse.Namespace, name: str, fake: FakeServer) -> dict[str, Any]:
    await fake.load(args.updates, args.chats)
    command = [sys.executable, __file__, "--contestant", name, "--updates", str(args.updates)]
    command += ["--fake", f"{fake.port}:{fake.token}", "--log-level", args.log_level]
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*command, stdout=subprocess.PIPE)
    stdout, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{name} exited with {proc.returncode}")
    wall = time.perf_counter() - started
    result: dict[str, Any] = json.loads(stdout)
    cpu = result["cpu_s"]
    return {
        "updates_per_s": rate(result, args.updates),
        "wall_s": round(wall, 2),
        "updates_per_cpu_s": round(args.updates / cpu, 1),
        "api_calls": result["calls"],
    }


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
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of the three contestants; medians reported"
    )
    parser.add_argument("--no-reference", action="store_true", help="skip the references")
    parser.add_argument("--only", help="run one contestant (for profiling); prints no ratios")
    parser.add_argument("--contestant", help=argparse.SUPPRESS)  # a child: run this one
    parser.add_argument("--fake", help=argparse.SUPPRESS)  # the child's fake: PORT:TOKEN
    args = parser.parse_args()

    if args.contestant:
        port, token = args.fake.split(":", 1)
        cpu = _cpu()
        result = await contest(args.contestant, FakeServer(int(port), token), args.updates,
                               args.log_level)  # fmt: skip
        # This process and the children it waited for (Tether's SQLite writer), from
        # after the imports: the contestant's CPU, whatever else the machine runs.
        result["cpu_s"] = _cpu() - cpu
        print(json.dumps(result))
        return

    out: dict[str, Any] = {"updates": args.updates, "chats": args.chats, "rounds": []}
    if args.only:
        for key, value in (await run_child(args, args.only)).items():
            out[f"{args.only}_{key}"] = value
        del out["rounds"]
        print(json.dumps(out))
        return
    for number in range(args.rounds):
        this: dict[str, Any] = {}
        for name in CONTESTANTS:
            print(f"round {number + 1}: running {name}", file=sys.stderr, flush=True)
            this[name] = await run_child(args, name)
        tether, fastest = this["tether"], this["ptb_aiohttp_concurrent"]
        this["ratio_tether_vs_ptb"] = round(
            tether["updates_per_s"] / this["ptb"]["updates_per_s"], 2
        )
        this["ratio_tether_vs_ptb_aiohttp_concurrent"] = round(
            tether["updates_per_s"] / fastest["updates_per_s"], 2
        )
        this["ratio_per_cpu_s_tether_vs_ptb_aiohttp_concurrent"] = round(
            tether["updates_per_cpu_s"] / fastest["updates_per_cpu_s"], 2
        )
        out["rounds"].append(this)
    if not args.no_reference:
        for name in REFERENCES:
            print(f"running {name}", file=sys.stderr, flush=True)
            out[name] = await run_child(args, name)
    for key in (
        "ratio_tether_vs_ptb",
        "ratio_tether_vs_ptb_aiohttp_concurrent",
        "ratio_per_cpu_s_tether_vs_ptb_aiohttp_concurrent",
    ):
        out[key] = statistics.median(r[key] for r in out["rounds"])
    for name in CONTESTANTS:
        out[f"{name}_updates_per_s"] = statistics.median(
            r[name]["updates_per_s"] for r in out["rounds"]
        )
    out["target"] = {"ratio_tether_vs_ptb_aiohttp_concurrent": 1.0}
    out["loop"] = runtime.loop_name()
    out["tether_log_level"] = args.log_level
    print(json.dumps(out))


if __name__ == "__main__":
    runtime.run(main())  # every contestant on the loop `tether run` uses
