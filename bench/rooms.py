"""Multi-agent rooms under load: 10 rooms x 3 agents, 60 human messages per minute per room.

``tether run`` (a subprocess, SQLite store, the ``agents:`` config) serves three agents,
each its own Telegram bot on its own fake Bot API (tests/fakes/telegram_api.py, run in
this process), all three in each of 10 group chats. Two people per room write one
message per second per room, each addressing one agent by its @username; every fifth
asks that agent to ask another, whose answer comes through the room relay. A fake
OpenAI-compatible model (here) answers each call after 0.5-2 s (a fixed pseudo-random
time per call, recorded).

Measured per reply: latency (from the person's message being offered to the bot, or
from the asking agent's message reaching Telegram for a relayed answer, to the reply
reaching the fake Bot API) minus the model's own time for that answer: ``overhead_ms``,
p50 and p99. ``lost``: replies expected and not received by the end (a grace period
after the last message); ``duplicated``: replies received more than once. Outbound rate
limits and the per-sender flood limit are off (the fake enforces neither; Telegram's
20/min per group would otherwise be the latency). ``loadavg`` says how busy the machine
was: the run shares it with whatever else runs.

Prints one JSON object. Usage: ``python bench/rooms.py [--seconds 120] [--quick]``.
Target: 0 lost, 0 duplicated, overhead p99 < 250 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from tests.fakes.telegram_api import FakeTelegram  # noqa: E402
from tether.testing.model import FakeModel  # noqa: E402

AGENTS = ("alice", "bob", "carol")
ROOMS = 10
PER_MINUTE = 60
_PERSONA = re.compile(r"You are (\w+)\.")
_ID = re.compile(r"\bm(\d+)\b")
_ASK = re.compile(r"\bask (\w+)")


def model_seconds(agent: str, message: int) -> float:
    """The fake model's time for ``agent`` answering message ``message``: 0.5-2 s."""
    digest = hashlib.sha256(f"{agent}:{message}".encode()).digest()
    return 0.5 + 1.5 * int.from_bytes(digest[:4], "big") / 2**32


class TimedTelegram(FakeTelegram):
    """The fake Bot API, with the time each message reached it."""

    def __init__(self, token: str, username: str) -> None:
        super().__init__(token, username)
        self.arrivals: list[tuple[float, str]] = []

    async def _api_sendMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        self.arrivals.append((time.perf_counter(), str(params.get("text"))))
        return await super()._api_sendMessage(params)


def who_and_what(body: dict[str, Any]) -> tuple[str, int, str]:
    """The asking agent (from its persona), the message number, and the answer."""
    system = str(body["messages"][0].get("content", ""))
    said = str(body["messages"][-1].get("content", ""))
    persona = _PERSONA.search(system)
    agent = persona[1] if persona else "nobody"
    found = _ID.search(said)
    number = int(found[1]) if found else -1
    asked = _ASK.search(said)
    if asked and asked[1] != agent:
        return agent, number, f"{asked[1]}, m{number} what do you think?"
    return agent, number, f"{agent} re m{number}"


class FakeModel(FakeModel):
    """The tests' fake OpenAI server (streamed answers included), answering as the agent
    named by the persona (``ask X`` → ``X, mN what do you think?``, else ``AGENT re mN``)
    after :func:`model_seconds`, recorded in ``spent``."""

    def __init__(self) -> None:
        super().__init__(reply=lambda body: who_and_what(body)[2])
        self.spent: dict[tuple[str, int], float] = {}

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        agent, number, _ = who_and_what(await request.json())
        seconds = model_seconds(agent, number)
        await asyncio.sleep(seconds)
        self.spent[agent, number] = seconds
        return await super()._completions(request)


def config(fakes: dict[str, TimedTelegram], model: FakeModel, db: Path) -> dict[str, Any]:
    telegram = {"poll_timeout": 5, "rate_limits": False, "typing": False}
    return {
        "memory": {"store": f"sqlite:///{db}"},
        "http": {"enabled": False},
        "platforms": {"console": {"enabled": False}},
        "logging": {"level": "info", "format": "json"},
        "access": {"allow": ["*"], "rate_limit": {"messages": 0}},
        "llm": {
            "providers": {"fake": {"base_url": model.url, "api_key": "sk-bench", "timeout": 30}},
            "models": {"main": {"provider": "fake", "model": "main"}},
        },
        "agents": [
            {
                "name": agent,
                "persona": f"You are {agent}.",
                "platforms": {
                    "telegram": {"token": fake.token, "base_url": fake.base_url, **telegram}
                },
            }
            for agent, fake in fakes.items()
        ],
    }


async def run(seconds: float, grace: float) -> dict[str, Any]:
    fakes = {
        agent: TimedTelegram(f"{7100 + i}:BENCH-token_abcdefghijklmnopqrstuvwxyz", f"{agent}_bot")
        for i, agent in enumerate(AGENTS)
    }
    model = FakeModel()
    await model.start()
    for fake in fakes.values():
        await fake.start()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tether.yaml"
        path.write_text(yaml.safe_dump(config(fakes, model, Path(tmp) / "tether.db")))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        tether = str(Path(sys.executable).with_name("tether"))
        log = await asyncio.to_thread(open, os.environ.get("BENCH_LOG", os.devnull), "ab")
        proc = await asyncio.create_subprocess_exec(
            tether, "run", "-c", str(path),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env,
        )  # fmt: skip
        try:
            for fake in fakes.values():  # every bot is polling: the gateway is up
                await fake.wait_for(lambda f=fake: len(f.offsets) >= 1, timeout=60)  # type: ignore[misc]
            offered, expected = await feed(fakes, seconds)
            deadline = time.perf_counter() + seconds + grace
            while time.perf_counter() < deadline:
                if sum(len(f.arrivals) for f in fakes.values()) >= len(expected):
                    break
                await asyncio.sleep(0.2)  # the bench's own clock, not a test's sync
            await asyncio.sleep(2.0)  # late duplicates would show within this
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 60)
            log.close()
    for fake in fakes.values():
        await fake.stop()
    await model.close()
    return measure(fakes, model, offered, expected)


async def feed(
    fakes: dict[str, TimedTelegram], seconds: float
) -> tuple[dict[int, float], dict[tuple[str, int], str | None]]:
    """Offer the people's messages on schedule; returns when each was offered and the
    replies expected: (agent, message) → the agent it answers for (None: a person)."""
    offered: dict[int, float] = {}
    expected: dict[tuple[str, int], str | None] = {}
    interval = 60.0 / (PER_MINUTE * ROOMS)
    total = int(seconds / interval)
    start = time.perf_counter()
    for n in range(total):
        await asyncio.sleep(max(0.0, start + n * interval - time.perf_counter()))
        room = n % ROOMS
        agent = AGENTS[(n // ROOMS) % len(AGENTS)]
        person = 600 + 2 * room + (n // 7) % 2
        other = AGENTS[(AGENTS.index(agent) + 1) % len(AGENTS)]
        if (n // ROOMS) % 5 == 0:  # every fifth message of each room: 12 relays a minute
            text = f"@{agent}_bot m{n} please ask {other}"
            expected[other, n] = agent
        else:
            text = f"@{agent}_bot m{n} hello"
        expected[agent, n] = None
        offered[n] = time.perf_counter()
        for fake in fakes.values():  # every bot in the group receives it
            fake.push(message=fake.message(-1000 - room, text, user_id=person))
    return offered, expected


def measure(
    fakes: dict[str, TimedTelegram],
    model: FakeModel,
    offered: dict[int, float],
    expected: dict[tuple[str, int], str | None],
) -> dict[str, Any]:
    arrivals: dict[tuple[str, int], list[float]] = {}
    for agent, fake in fakes.items():
        for at, text in fake.arrivals:
            found = _ID.search(text)
            if found:
                arrivals.setdefault((agent, int(found[1])), []).append(at)
    lost = [key for key in expected if key not in arrivals]
    duplicated = [key for key, times in arrivals.items() if len(times) > 1]
    unexpected = [key for key in arrivals if key not in expected]
    overheads = []
    for (agent, n), asker in expected.items():
        if (agent, n) not in arrivals or (agent, n) not in model.spent:
            continue
        if asker is None:
            began = offered[n]
        elif (asker, n) in arrivals:
            began = arrivals[asker, n][0]
        else:
            continue
        latency = arrivals[agent, n][0] - began
        overheads.append((latency - model.spent[agent, n]) * 1000)
    overheads.sort()

    def pct(p: float) -> float | None:
        if not overheads:
            return None
        return round(overheads[min(len(overheads) - 1, int(p * len(overheads)))], 1)

    return {
        "rooms": ROOMS,
        "agents": len(AGENTS),
        "human_messages": len(offered),
        "replies_expected": len(expected),
        "replies_received": sum(len(t) for t in arrivals.values()),
        "lost": len(lost),
        "duplicated": len(duplicated),
        "unexpected": len(unexpected),
        "overhead_ms_p50": pct(0.50),
        "overhead_ms_p99": pct(0.99),
        "overhead_ms_mean": round(statistics.fmean(overheads), 1) if overheads else None,
        "model_s_mean": round(statistics.fmean(model.spent.values()), 3) if model.spent else None,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=120.0, help="how long people write")
    parser.add_argument("--grace", type=float, default=30.0, help="wait for the last replies")
    parser.add_argument("--quick", action="store_true", help="20 seconds instead of 120")
    args = parser.parse_args()
    seconds = 20.0 if args.quick else args.seconds
    result = asyncio.run(run(seconds, args.grace))
    result["seconds"] = seconds
    print(json.dumps(result))


if __name__ == "__main__":
    main()
