"""Idle memory of ``tether run``: resident set of the whole process tree, per configuration.

A gateway spends most of its life waiting, so what it holds while idle is what a small
VPS pays for. Each configuration starts a real ``tether run -c FILE`` subprocess (the
SQLite writer is its child process, so the tree is summed), waits for
``gateway.started``, lets it idle for ``--settle`` seconds and reads ``VmRSS`` of
every process in the tree from ``/proc`` (RSS, the target's measure, and PSS, which
does not count a page shared by the gateway and its writer twice); then one console
turn is answered and, idle again, the tree's RSS is read once more.

- ``console``: console + echo, no ``llm:`` (the quick start);
- ``console_telegram_discord``: console + Telegram (long-poll) + Discord (gateway
  WebSocket) against the fake servers of tests/fakes, on 127.0.0.1, no ``llm:`` — the
  configuration the target is for;
- ``..._llm``: the same plus an ``llm:`` section (a fake OpenAI endpoint that is never
  called), which loads the tiktoken encoding at start.

Prints one JSON object. ``python bench/idle.py [--settle SECONDS]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.procs import descendants  # noqa: E402
from tests.fakes.discord_api import FakeDiscord  # noqa: E402
from tests.fakes.telegram_api import FakeTelegram  # noqa: E402

#: ``tether`` of the tree this file is in (PYTHONPATH below), not whatever is installed.
TETHER = [sys.executable, "-m", "tether.gateway.cli"]
TARGET_MB = 80


def memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process: PSS splits each shared page among the processes that
    map it, so it sums correctly over a tree (the writer shares libpython with the
    gateway); RSS counts such a page once per process."""
    rss = pss = 0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Rss:"):
            rss = int(line.split()[1])
        elif line.startswith("Pss:"):
            pss = int(line.split()[1])
    return rss, pss


async def measure(name: str, config: dict[str, Any], tmp: Path, settle: float) -> dict[str, Any]:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    log = tmp / f"{name}.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            *TETHER, "run", "-c", str(path),
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr, env=env,
        )  # fmt: skip
    try:
        for _ in range(600):  # up to 60 s for the start (a loaded machine)
            if "gateway.started" in log.read_text(errors="replace"):
                break
            if proc.returncode is not None:
                raise RuntimeError(f"{name}: tether run exited: {log.read_text()[-2000:]}")
            await asyncio.sleep(0.1)  # polling a file another process writes
        else:
            raise RuntimeError(f"{name}: no gateway.started in 60 s")
        await asyncio.sleep(settle)  # idle: nothing happens for this long
        pids = descendants([proc.pid])
        per = {pid: memory_kb(pid) for pid in pids}
        # One console turn, then idle again: an echo bot must stay small after traffic.
        assert proc.stdin is not None
        proc.stdin.write(b"hello\n")
        await proc.stdin.drain()
        for _ in range(600):
            if '"outbox.sent"' in log.read_text(errors="replace"):
                break
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError(f"{name}: the console turn was not answered in 60 s")
        await asyncio.sleep(settle)
        after = sum(memory_kb(pid)[0] for pid in descendants([proc.pid]))
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
    rss = sum(kb for kb, _ in per.values())
    main_kb = per[proc.pid][0]
    return {
        "processes": len(pids),
        "rss_mb": round(rss / 1024, 1),
        "pss_mb": round(sum(kb for _, kb in per.values()) / 1024, 1),
        "main_rss_mb": round(main_kb / 1024, 1),
        "children_rss_mb": round((rss - main_kb) / 1024, 1),
        "rss_mb_after_a_turn": round(after / 1024, 1),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--settle", type=float, default=3.0)
    args = parser.parse_args()
    telegram = await FakeTelegram().start()
    discord = await FakeDiscord().start()
    out: dict[str, Any] = {"benchmark": "idle", "settle_s": args.settle}
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)

            def config(store: str, **extra: Any) -> dict[str, Any]:
                base: dict[str, Any] = {
                    "memory": {"store": f"sqlite:///{tmp / store}.db"},
                    "http": {"enabled": False},
                    "logging": {"format": "json"},
                    "platforms": {"console": {"enabled": True}},
                }
                base.update(extra)
                return base

            platforms = {
                "console": {"enabled": True},
                "telegram": {"token": telegram.token, "base_url": telegram.base_url},
                "discord": {
                    "token": discord.token,
                    "api_base": discord.api_base,
                    "gateway_url": discord.gateway_url,
                },
            }
            llm = {
                "providers": {"fake": {"base_url": "http://127.0.0.1:9/v1", "api_key": "sk-x"}},
                "models": {"main": {"provider": "fake", "model": "gpt-4o-mini"}},
            }
            configs = {
                "console": config("console"),
                "console_telegram_discord": config("three", platforms=platforms),
                "console_telegram_discord_llm": config(
                    "three_llm", platforms=platforms, llm=llm, agent={"handler": "llm"}
                ),
            }
            for name, cfg in configs.items():
                print(f"running {name}", file=sys.stderr, flush=True)
                out[name] = await measure(name, cfg, tmp, args.settle)
    finally:
        await discord.stop()
        await telegram.stop()
    out["target"] = {"console_telegram_discord_rss_mb": TARGET_MB}
    out["within_target"] = out["console_telegram_discord"]["rss_mb"] <= TARGET_MB
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
