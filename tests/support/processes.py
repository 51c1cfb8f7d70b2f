"""``tether`` as a subprocess: started, signalled, killed with SIGKILL, and the sockets a
blocking plugin talks to the test through (tests/plugins/blocking.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

import tether.memory.sqlite.writer as writer_module
from tests.support.config import ROOT

TETHER = str(Path(sys.executable).with_name("tether"))


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a `tether` subprocess that can import the tests' plugins."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


async def spawn_run(
    config: Path, log: Path, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    """`tether run -c config` as a subprocess, stderr appended to ``log``, no stdin."""
    with log.open("ab") as stderr:
        return await asyncio.create_subprocess_exec(
            TETHER, "run", "-c", str(config),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
            env=env or subprocess_env(),
        )  # fmt: skip


class Handlers:
    """The test's end of the blocking plugin's socket."""

    def __init__(self) -> None:
        self.entered: asyncio.Queue[tuple[str, asyncio.StreamWriter]] = asyncio.Queue()

    async def on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).decode().strip()
        await self.entered.put((line, writer))


@asynccontextmanager
async def control_socket(path: Path) -> AsyncIterator[Handlers]:
    handlers = Handlers()
    server = await asyncio.start_unix_server(handlers.on_connect, path=str(path))
    try:
        yield handlers
    finally:
        server.close()


async def spawn(command: str, config: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        TETHER,
        command,
        "-c",
        str(config),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )


def writers(db: Path) -> list[int]:
    """Pids of SQLite writer processes on ``db`` (its command line names both)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if writer_module.__file__.encode() in argv and str(db).encode() in argv:
                found.append(int(entry.name))
    return found


async def ready(port: int, proc: asyncio.subprocess.Process) -> None:
    """Until /readyz answers 200 (the subprocess opened, recovered, and listens)."""
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            assert proc.returncode is None, "tether run exited"
            try:
                async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)  # polling a port that is not open yet
    raise TimeoutError("tether run did not become ready")
