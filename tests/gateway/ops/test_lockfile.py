"""One processing gateway per SQLite file, whatever name the file is reached by.

The lock used to be a ``.lock`` file named after the configured path, so a second
``tether run`` on a symlink to the database, on a hard link of it (what a file
bind-mounted into two containers is), or after someone deleted the ``.lock``, got a lock
of its own and ran beside the first: updates were answered twice, and with a hard link
each process wrote its own WAL (SQLite names ``-wal`` and ``-shm`` after the path), which
broke the database. Each test runs two real ``tether run`` processes: the first answers
Telegram updates while the second tries to start on the same file by another name.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

from tests.fakes.cluster import free_port
from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import write_config
from tests.support.processes import TETHER, ready, spawn_run, subprocess_env, writers

#: Seconds a refused start may take before the test calls it hung.
HANG = 30.0
UPDATES = 20


def gateway_config(home: Path, database: Path, fake: FakeTelegram, port: int) -> Path:
    """``tether run`` on ``database`` polling the fake Bot API, its logs in a file (so
    that stderr holds only what the CLI prints)."""
    home.mkdir(parents=True, exist_ok=True)
    telegram: dict[str, Any] = {
        "token": fake.token,
        "base_url": fake.base_url,
        "poll_timeout": 1,
        "rate_limits": False,
    }
    return write_config(
        home,
        memory={"store": f"sqlite:///{database}"},
        http={"enabled": True, "port": port},
        platforms={"telegram": telegram},
        plugins=["tests.plugins.slow_echo:router"],
        logging={"format": "json", "file": str(home / "log")},
    )


def logs_beside(database: Path) -> list[str]:
    """The write-ahead log files SQLite made beside this name of the database."""
    return [s for s in ("-wal", "-shm") if os.path.exists(f"{database}{s}")]


async def refused(proc: asyncio.subprocess.Process, port: int) -> list[str]:
    """The lines a second gateway printed as it refused to start; the test fails if it
    became ready instead (it runs beside the first) or hung."""
    exited = asyncio.ensure_future(proc.communicate())
    started = asyncio.ensure_future(ready(port, proc))
    await asyncio.wait({exited, started}, timeout=HANG, return_when=asyncio.FIRST_COMPLETED)
    ran = started.done() and not started.cancelled() and started.exception() is None
    started.cancel()
    with contextlib.suppress(BaseException):
        await started
    if not exited.done():
        proc.kill()
        await exited
        pytest.fail(
            "a second gateway started on the same database file"
            if ran
            else f"the second gateway neither started nor exited within {HANG:g} s"
        )
    assert proc.returncode not in (0, None)
    _out, err = exited.result()
    return err.decode(errors="replace").splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["symlink", "hard link", "lock file deleted"])
async def test_a_second_gateway_on_the_same_file_by_another_name_is_refused(
    tmp_path: Path, fake: FakeTelegram, how: str
) -> None:
    database = tmp_path / "data" / "tether.db"
    database.parent.mkdir()
    port = free_port()
    first = await spawn_run(
        gateway_config(tmp_path / "first", database, fake, port), tmp_path / "first.err"
    )
    try:
        await ready(port, first)  # the database exists and the first gateway polls
        other = tmp_path / "elsewhere" / "tether.db"
        other.parent.mkdir()
        if how == "symlink":
            other.symlink_to(database)
        elif how == "hard link":
            os.link(database, other)
        else:
            other = database
            with contextlib.suppress(FileNotFoundError):  # the lock a gateway once kept
                os.remove(f"{database}.lock")
        for n in range(UPDATES // 2):
            fake.push(message=fake.message(100 + n % 4, f"before-{n}"))
        second_port = free_port()
        config = gateway_config(tmp_path / "second", other, fake, second_port)
        second = await asyncio.create_subprocess_exec(
            TETHER, "run", "-c", str(config),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=subprocess_env(),
        )  # fmt: skip
        for n in range(UPDATES // 2):  # traffic while the second one tries
            fake.push(message=fake.message(100 + n % 4, f"during-{n}"))
        lines = await refused(second, second_port)
        await fake.wait_for(lambda: len(fake.sent) >= UPDATES, timeout=30)
    finally:
        if first.returncode is None:
            first.terminate()
        assert await asyncio.wait_for(first.wait(), 60) == 0

    assert len(lines) == 1, "\n".join(lines[:40])
    [line] = lines
    assert line.startswith("tether: memory.store: another tether process") and str(other) in line
    assert writers(other) == []
    if how == "hard link":  # it never opened the database: no WAL of its own
        assert logs_beside(other) == []
    replies = Counter(sent["text"] for sent in fake.sent)
    expected = {f"{when}-{n}" for when in ("before", "during") for n in range(UPDATES // 2)}
    assert set(replies) == expected and set(replies.values()) == {1}  # each answered once
    with sqlite3.connect(database) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        statuses = db.execute("SELECT status, count(*) FROM inbox GROUP BY status").fetchall()
    assert statuses == [("done", UPDATES)]


async def test_a_gateway_on_a_hard_linked_database_says_so(tmp_path: Path) -> None:
    from tests.support.config import make_settings
    from tether.gateway.app import Gateway

    database = tmp_path / "tether.db"
    sqlite3.connect(database).close()
    os.link(database, tmp_path / "copy.db")
    gateway = Gateway(make_settings(tmp_path, memory={"store": f"sqlite:///{database}"}), {})
    with structlog.testing.capture_logs() as logs:
        await gateway.start()
        await gateway.stop()
    [warning] = [entry for entry in logs if entry["event"] == "store.hard_linked"]
    assert warning["links"] == 2 and warning["path"] == str(database)
