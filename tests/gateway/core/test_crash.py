"""kill -9 while a handler is blocked: the restart finishes the event exactly once.

A real `tether` subprocess runs the blocking plugin (tests/plugins/blocking.py). The
test holds the handler on a Unix socket, SIGKILLs the process, restarts it and lets the
handler go: the reply comes once, the outbox has one row, and the memoized step's side
effect happened once.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from pathlib import Path

import pytest

from tests.support.config import write_config
from tests.support.processes import control_socket, spawn, subprocess_env

#: Every test here kills a real tether process with SIGKILL.
pytestmark = [pytest.mark.crash, pytest.mark.slow]


@pytest.mark.parametrize("command", ["chat", "run"])
async def test_sigkill_while_handler_blocked_finishes_exactly_once(
    tmp_path: Path, command: str
) -> None:
    config = write_config(
        tmp_path,
        plugins=["tests.plugins.blocking:router"],
        platforms={"console": {"enabled": True}},
    )
    sock = tmp_path / "ctl.sock"
    env = subprocess_env(TETHER_TEST_DIR=str(tmp_path), TETHER_TEST_SOCKET=str(sock))

    async with control_socket(sock) as handlers:
        first = await spawn(command, config, env)
        assert first.stdin is not None
        first.stdin.write(b"block\n")
        await first.stdin.drain()
        line, _writer = await asyncio.wait_for(handlers.entered.get(), 30)
        assert line == "entered 1"
        first.send_signal(signal.SIGKILL)
        await first.wait()

        with sqlite3.connect(tmp_path / "tether.db") as db:
            assert db.execute("SELECT status, attempts FROM inbox").fetchall() == [("running", 1)]
            assert db.execute("SELECT count(*) FROM outbox").fetchone() == (0,)
        assert (tmp_path / "side_effects").read_text() == "ran\n"

        second = await spawn(command, config, env)
        assert second.stdin is not None and second.stdout is not None
        if command == "chat":
            second.stdin.close()  # EOF: chat drains what was recovered, then exits
        line, writer = await asyncio.wait_for(handlers.entered.get(), 30)
        assert line == "entered 2"
        writer.write(b"go\n")
        await writer.drain()
        reply = await asyncio.wait_for(second.stdout.readline(), 30)
        assert reply == b"done:value-from-step\n"
        if command == "run":
            second.send_signal(signal.SIGTERM)  # graceful stop
        out, err = await asyncio.wait_for(second.communicate(), 60)
        assert second.returncode == 0, err.decode()[-2000:]
        assert out == b""  # nothing more was printed: one reply

    assert (tmp_path / "side_effects").read_text() == "ran\n"  # the step did not run again
    with sqlite3.connect(tmp_path / "tether.db") as db:
        assert db.execute("SELECT status, attempts FROM inbox").fetchall() == [("done", 2)]
        assert db.execute("SELECT key, status FROM outbox").fetchall() == [
            (db.execute("SELECT key FROM inbox").fetchone()[0] + "#0", "sent")
        ]
        assert db.execute("SELECT count(*) FROM steps").fetchone() == (1,)
    assert b"step.cached" in err and b"gateway.recovered" in err


async def test_second_sigterm_exits_at_once_while_the_first_drains(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        plugins=["tests.plugins.blocking:router"],
        platforms={"console": {"enabled": True}},
        pipeline={"drain_timeout": 300},
    )
    sock = tmp_path / "ctl.sock"
    env = subprocess_env(TETHER_TEST_DIR=str(tmp_path), TETHER_TEST_SOCKET=str(sock))
    async with control_socket(sock) as handlers:
        proc = await spawn("run", config, env)
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(b"block\n")
        await proc.stdin.drain()
        await asyncio.wait_for(handlers.entered.get(), 30)
        proc.send_signal(signal.SIGTERM)
        while b"gateway.stopping" not in await asyncio.wait_for(proc.stderr.readline(), 30):
            pass  # the first SIGTERM: ingress stopped, now waiting for the blocked handler
        assert proc.returncode is None
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 1
    with sqlite3.connect(tmp_path / "tether.db") as db:  # left for the next start to finish
        assert db.execute("SELECT status FROM inbox").fetchall() == [("running",)]
