"""No configured secret reaches a log line, an error, a dead letter or `tether check`."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import TETHER, subprocess_env, write_config
from tests.fakes.telegram_api import FakeTelegram


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    server = await FakeTelegram().start()
    try:
        yield server
    finally:
        await server.stop()


async def test_a_leaky_handler_leaks_nothing(tmp_path: Path, fake: FakeTelegram) -> None:
    token = fake.token
    config = write_config(
        tmp_path,
        plugins=["tests.plugins.leaky:router"],
        platforms={
            "telegram": {
                "token": "${TG_TOKEN}",
                "base_url": fake.base_url,
                "poll_timeout": 1,
                "rate_limits": False,
            }
        },
    )
    env = subprocess_env(TG_TOKEN=token)
    fake.push(message=fake.message(7, "leak"))
    fake.push(message=fake.message(7, "hello"))
    log = tmp_path / "tether.log"
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            TETHER, "run", "-c", str(config),
            stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr, env=env,
        )  # fmt: skip
        try:
            await fake.wait_for(lambda: len(fake.sent) >= 1, timeout=30)  # "hello" echoed
        finally:
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0

    with sqlite3.connect(tmp_path / "tether.db") as db:
        [(key, error, traceback, snapshot, event)] = db.execute(
            "SELECT key, error, traceback, snapshot, event FROM dead_letters"
        ).fetchall()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([TETHER, *args], capture_output=True, text=True, env=env)

    shown = await asyncio.to_thread(cli, "dead", "show", key, "-c", str(config))
    checked = await asyncio.to_thread(cli, "check", "-c", str(config))
    assert shown.returncode == 0 and checked.returncode == 0

    logged = log.read_text()
    # The leaks really happened (so the test would see them), and were masked.
    lines = [json.loads(line) for line in logged.splitlines() if line.startswith("{")]
    leaks = [line for line in lines if line["event"] == "leaky.debug"]
    assert leaks and leaks[0]["token"] == "***" and "bot***/getMe" in leaks[0]["url"]
    assert any(line["event"] == "event.dead" for line in lines)
    assert "bot***/sendMessage" in error
    assert "bot***/sendMessage" in traceback and "my token is ***" in snapshot
    assert "token: '***'" in checked.stdout
    for place in (logged, error, traceback, snapshot, shown.stdout, checked.stdout, checked.stderr):
        assert token not in place
    # The part after the colon is the secret half of a bot token: not even that.
    assert token.split(":", 1)[1] not in logged
    del event
