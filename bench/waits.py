"""Durable waits: press → the resumed turn's reply, with 10,000 waits open on SQLite.

Issue 29's acceptance: the p99 from a button press to the reply of the turn it resumes is
at most 50 ms on SQLite at 20 presses a second while 10,000 waits are open. One gateway
in this process, on a SQLite file (the writer process, logs at info as JSON into a file,
as in production), the loopback adapter, and a handler that asks::

    /ask  → ctx.ask("Which one?", buttons=["yes", "no"])  → reply "chose yes"
    other → reply "echo TEXT"

1. **Open**: ``--waits`` conversations (direct chats ``w0``, ``w1``, …, each its own
   person) send ``/ask``, in batches with at most ``--in-flight`` questions not yet sent,
   as a poller with backpressure would; each question's ``tw:`` button data is read from
   what the adapter was handed. How long that took is reported.
2. **Baseline**: plain messages (in chats of their own, ``m0`` … ``m99``) at ``--rate``
   per second for ``--seconds`` on the same gateway with every wait open, each clocked
   from handing it to the inbox to its reply reaching the adapter's ``send``.
3. **Presses**: the same schedule of presses on random open waits (each by the person
   asked, on the question's message), each clocked from handing it to the inbox to the
   resumed turn's reply reaching ``send``.

Both loads are open-loop (each event at its scheduled time, not after the previous
reply), as people are. The two phases take turns in blocks of ``--block`` seconds
(messages, presses, messages, …; each block's replies are in before the next starts),
so on a shared machine both meet the same neighbours, and the figure to read beside the
target is ``press_over_message_p99``. The first ``--warmup`` events of each phase are
not counted.

    python bench/waits.py [--waits 10000] [--rate 20] [--seconds 30] [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tether import Context, Router
from tether.adapters.base import Sent
from tether.adapters.loopback import LoopbackAdapter
from tether.config import load_text
from tether.events import Event, OutMessage
from tether.gateway.app import Gateway
from tether.gateway.ops import logs, runtime
from tether.gateway.ops.runtime import settle_heap

TARGET_P99_MS = 50.0
QUESTION = "Which one?"


class TimedAdapter(LoopbackAdapter):
    """Stamps each reply when it is handed to ``send``, by chat; keeps each question's
    button data. Nothing else is recorded, so 10,000 questions cost little memory."""

    def __init__(self) -> None:
        super().__init__()
        #: chat → its question's press data (the first button's).
        self.questions: dict[str, str] = {}
        #: chat → the platform id of its question (what a press names).
        self.question_ids: dict[str, str] = {}
        #: chat → the future waiting for its next non-question reply: (when, text).
        self.waiting: dict[str, asyncio.Future[tuple[float, str]]] = {}
        self.changed = asyncio.Event()
        self.sends = 0

    async def send(self, message: OutMessage) -> Sent:
        at = time.perf_counter()
        self.sends += 1
        platform_id = str(self.sends)
        chat = message.target.chat_id
        if message.text == QUESTION:
            data = message.buttons[0][0].data
            assert data is not None
            self.questions[chat] = data
            self.question_ids[chat] = platform_id
            self.changed.set()
        else:
            future = self.waiting.pop(chat, None)
            if future is not None and not future.done():
                future.set_result((at, message.text))
        return Sent(platform_id=platform_id)

    def reply_in(self, chat: str) -> asyncio.Future[tuple[float, str]]:
        future: asyncio.Future[tuple[float, str]] = asyncio.get_running_loop().create_future()
        self.waiting[chat] = future
        return future


def router() -> Router:
    router = Router()

    @router.command("ask")
    async def ask(ctx: Context) -> None:
        answer = await ctx.ask(QUESTION, buttons=["yes", "no"])
        await ctx.reply(f"chose {answer.data}")

    @router.fallback
    async def echo(ctx: Context) -> None:
        await ctx.reply(f"echo {ctx.event.text}")

    return router


async def open_waits(adapter: TimedAdapter, count: int, batch: int, in_flight: int) -> float:
    """``count`` conversations ask; seconds until every question was handed to send."""
    started = time.perf_counter()
    for first in range(0, count, batch):
        while first - len(adapter.questions) > in_flight:
            adapter.changed.clear()
            await asyncio.wait_for(adapter.changed.wait(), 120)
        chunk = [
            adapter.event("/ask", chat=f"w{n}", user=f"u{n}", key=f"open:{n}")
            for n in range(first, min(first + batch, count))
        ]
        await adapter.deliver(*chunk)
    while len(adapter.questions) < count:
        adapter.changed.clear()
        await asyncio.wait_for(adapter.changed.wait(), 120)
    return time.perf_counter() - started


async def offer(
    make: Callable[[int], tuple[Event, str, str]],
    adapter: TimedAdapter,
    numbers: range,
    rate: float,
) -> tuple[list[float], float]:
    """Events ``numbers`` at ``rate``/s on a fixed schedule; each one's latency in ms (from
    handing it to the inbox to the reply in its chat reaching send) and the wall time."""
    latencies: list[float] = []
    tasks: list[asyncio.Task[None]] = []

    async def one(event: Event, chat: str, expected: str) -> None:
        reply = adapter.reply_in(chat)
        injected = time.perf_counter()
        await adapter.deliver(event)
        at, text = await asyncio.wait_for(reply, 60)
        if text != expected:
            raise RuntimeError(f"{chat}: the reply was {text!r}, not {expected!r}")
        latencies.append((at - injected) * 1000)

    started = time.perf_counter()
    for i, n in enumerate(numbers):
        delay = started + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)  # the load's schedule, not a synchronization
        tasks.append(asyncio.create_task(one(*make(n))))
    wall = time.perf_counter() - started
    await asyncio.gather(*tasks)
    return latencies, wall


def summary(latencies_ms: list[float], wall: float, gaps: int) -> dict[str, Any]:
    """Percentiles, and the rate achieved: ``gaps`` intervals between injections took
    ``wall`` seconds."""
    ordered = sorted(latencies_ms)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * p))], 2)

    return {
        "count": len(ordered),
        "rate_per_s": round(gaps / wall, 2) if wall else None,
        "p50_ms": round(statistics.median(ordered), 2),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "max_ms": round(ordered[-1], 2),
    }


async def run(args: argparse.Namespace, db: Path) -> dict[str, Any]:
    settings = load_text(
        json.dumps(
            {
                "memory": {"store": f"sqlite:///{db}"},
                "http": {"enabled": False},
                "platforms": {"console": {"enabled": False}},
                "pipeline": {"concurrency": 100, "queue_size": 2000},
                "outbox": {"concurrency": 100},
                "access": {"allow": ["*"], "rate_limit": {"messages": 0}},
            }
        )
    )
    adapter = TimedAdapter()
    gateway = Gateway(settings, {"loopback": adapter}, plugins=[router()])
    await gateway.start()
    settle_heap()  # as `tether run` does after start
    out: dict[str, Any] = {}
    try:
        cpu = time.process_time()
        opened_s = await open_waits(adapter, args.waits, args.batch, args.in_flight)
        await gateway.drain()
        out["open"] = {
            "waits": args.waits,
            "seconds": round(opened_s, 2),
            "per_s": round(args.waits / opened_s),
            "cpu_s": round(time.process_time() - cpu, 2),
        }
        out["waits_open_before"] = len(await gateway.store.open_waits())
        settle_heap()  # the opening's garbage is not billed to what follows
        count = int(args.rate * args.seconds)
        warmup = min(args.warmup, count // 10)

        def message(n: int) -> tuple[Event, str, str]:
            chat = f"m{n % 100}"
            event = adapter.event(f"hello {n}", chat=chat, user=f"p{n % 100}")
            return event, chat, f"echo hello {n}"

        order = list(range(args.waits))
        random.Random(args.seed).shuffle(order)
        if count > len(order):
            raise SystemExit(f"{count} presses need at least as many waits (--waits)")

        def press(n: int) -> tuple[Event, str, str]:
            chat = f"w{order[n]}"
            data = adapter.questions[chat]
            event = adapter.press(
                data, chat=chat, user=f"u{order[n]}", message_id=adapter.question_ids[chat]
            )
            return event, chat, "chose yes"

        phases: dict[str, Callable[[int], tuple[Event, str, str]]] = {
            "message": message,
            "press": press,
        }
        latencies: dict[str, list[float]] = {name: [] for name in phases}
        walls = dict.fromkeys(phases, 0.0)
        gaps = dict.fromkeys(phases, 0)  # intervals between injections, over ``walls``
        cpus = dict.fromkeys(phases, 0.0)
        profilers = {name: cProfile.Profile() for name in phases} if args.profile else {}
        # The phases take turns in blocks, so that both see the same neighbours on a
        # shared machine; each block's replies are all in before the next block starts.
        block = max(1, int(args.rate * args.block))
        for first in range(0, count, block):
            last = min(first + block, count)
            for name, make in phases.items():
                print(f"{name} {first}..{last - 1}", file=sys.stderr, flush=True)
                cpu = time.process_time()
                profiler = profilers.get(name)
                if profiler is not None:
                    profiler.enable()
                took, wall = await offer(make, adapter, range(first, last), args.rate)
                if profiler is not None:
                    profiler.disable()
                cpus[name] += time.process_time() - cpu
                walls[name] += wall
                gaps[name] += last - first - 1
                latencies[name].extend(took)
        for name in phases:
            result = summary(latencies[name][warmup:], walls[name], gaps[name])
            result["cpu_s"] = round(cpus[name], 2)
            out[name] = result
            if name in profilers:
                profilers[name].dump_stats(f"{args.profile}.{name}")
        await gateway.drain()
        out["waits_open_after"] = len(await gateway.store.open_waits())
        out["expected_open_after"] = args.waits - count
    finally:
        await gateway.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--waits", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--block", type=float, default=5.0, help="seconds per turn of a phase")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--in-flight", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument(
        "--profile", help="write a cProfile of each phase to PROFILE.message, PROFILE.press"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "bench.log"
        with log_path.open("w", encoding="utf-8") as log_file:
            logs.configure("info", "json", stream=log_file)
            result: dict[str, Any] = runtime.run(run(args, Path(tmp) / "waits.db"))
    press, message = result["press"], result["message"]
    print(
        json.dumps(
            {
                "benchmark": "waits",
                "store": "sqlite",
                "loop": runtime.loop_name(),
                "rate_per_s": args.rate,
                "seconds": args.seconds,
                **result,
                "press_over_message_p99": round(press["p99_ms"] / message["p99_ms"], 3),
                "press_over_message_p50": round(press["p50_ms"] / message["p50_ms"], 3),
                "target": {"press_p99_ms": TARGET_P99_MS, "waits_open": 10_000, "rate": 20},
                "within_target": press["p99_ms"] <= TARGET_P99_MS,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
