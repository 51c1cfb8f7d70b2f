"""`tether run` processes sharing one PostgreSQL store, fed by Telegram webhooks.

Used by the chaos test and by bench/scaleout.py: each instance gets its own config (in its
own directory) and HTTP port; :meth:`Cluster.post` spreads updates over the live
instances the way a load balancer would.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import yaml

SECRET = "cluster-secret_token"
ROOT = Path(__file__).resolve().parents[2]
TETHER = str(Path(sys.executable).with_name("tether"))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for a subprocess's HTTP server)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Instance:
    def __init__(self, config: Path, port: int, log: Path) -> None:
        self.config = config
        self.port = port
        self.log = log
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        with self.log.open("ab") as stderr:
            self.proc = await asyncio.create_subprocess_exec(
                TETHER, "run", "-c", str(self.config),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=env,
            )  # fmt: skip

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


class Cluster:
    def __init__(
        self,
        directory: Path,
        count: int,
        store: str,
        telegram: dict[str, Any],
        plugins: list[str] | None = None,
        sweep_interval: float = 0.2,
    ) -> None:
        self.instances: list[Instance] = []
        for index in range(count):
            home = directory / f"instance{index}"
            home.mkdir(parents=True, exist_ok=True)
            port = free_port()
            config = {
                "memory": {"store": store},
                "http": {"enabled": True, "port": port},
                "pipeline": {"sweep_interval": sweep_interval},
                "platforms": {
                    "console": {"enabled": False},
                    "telegram": {
                        "mode": "webhook",
                        "webhook": {"url": "https://bot.example.com/tg", "secret_token": SECRET},
                        "rate_limits": False,
                        "typing": False,
                        **telegram,
                    },
                },
                "access": {"allow": ["*"], "rate_limit": {"messages": 0}},
                "plugins": plugins or [],
                "logging": {"format": "json"},
            }
            path = home / "tether.yaml"
            path.write_text(yaml.safe_dump(config))
            self.instances.append(Instance(path, port, home / "tether.log"))
        self._rotation = itertools.count()
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Cluster:
        self.session = aiohttp.ClientSession()
        for instance in self.instances:
            await instance.start()
        for instance in self.instances:
            await self.wait_ready(instance)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        for instance in self.instances:
            if instance.alive and instance.proc is not None:
                instance.proc.terminate()
        for instance in self.instances:
            if instance.proc is not None:
                await asyncio.wait_for(instance.proc.wait(), 60)
        if self.session is not None:
            await self.session.close()

    async def wait_ready(self, instance: Instance) -> None:
        assert self.session is not None
        for _ in range(1200):
            try:
                url = f"http://127.0.0.1:{instance.port}/readyz"
                async with self.session.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)  # a process starting up: nothing to await but its port
        raise TimeoutError(f"instance on port {instance.port} never became ready")

    async def post_to(self, index: int, update: dict[str, Any]) -> None:
        """Deliver one update to instance ``index`` (a sticky balancer: bench/scaleout.py's
        reference run, each chat to one instance); it must take it."""
        assert self.session is not None
        url = f"http://127.0.0.1:{self.instances[index].port}/telegram/webhook"
        headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
        async with self.session.post(url, data=json.dumps(update), headers=headers) as response:
            response.raise_for_status()

    async def post(self, update: dict[str, Any]) -> None:
        """Deliver one update to some live instance; retry elsewhere until one takes it."""
        assert self.session is not None
        body = json.dumps(update).encode()
        headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
        while True:
            instance = self.instances[next(self._rotation) % len(self.instances)]
            if not instance.alive:
                await asyncio.sleep(0)
                continue
            url = f"http://127.0.0.1:{instance.port}/telegram/webhook"
            try:
                async with self.session.post(url, data=body, headers=headers) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass  # killed or starting: Telegram would retry, so does the balancer
