"""``tether backup`` beside a gateway at work, and the backup restored elsewhere.

A real ``tether run`` on SQLite takes Telegram updates by webhook (the echo agent: one
reply an update), offered at about 100 a second, while ``tether backup`` runs as a
process of its own; the updates go on until well after the backup is written, so it is
taken with traffic flowing on both sides of it. ``tether restore`` beside the running
gateway is refused; into a fresh path it makes a store that is intact, at this program's
schema version, and consistent: every inbox row that is done has its replies.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from tests.fakes.cluster import Cluster
from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import write_config
from tests.support.processes import TETHER, subprocess_env
from tether.gateway.cli import main
from tether.memory.sqlite.schema import MIGRATIONS

pytestmark = pytest.mark.slow

#: Offered load: one update every 10 ms (the post itself is awaited, so at most this).
PACE = 0.01
#: Updates before the backup starts, and after it has finished.
BEFORE, AFTER = 150, 150


async def tether(*argv: str) -> tuple[int, str]:
    """A ``tether`` command as its own process: its exit code and what it said."""
    proc = await asyncio.create_subprocess_exec(
        TETHER, *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env=subprocess_env(),
    )  # fmt: skip
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def unanswered_done(db: Path) -> int:
    """Inbox rows that are done but have no reply in the outbox."""
    with sqlite3.connect(db) as conn:
        return int(
            conn.execute(
                "SELECT count(*) FROM inbox i WHERE i.status = 'done'"
                " AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event_key = i.key)"
            ).fetchone()[0]
        )


def one(db: Path, query: str) -> int | str:
    with sqlite3.connect(db) as conn:
        found = conn.execute(query).fetchone()[0]
    assert isinstance(found, int | str)
    return found


async def test_a_backup_taken_while_updates_flow_restores_to_a_consistent_store(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    db = tmp_path / "tether.db"
    saved = tmp_path / "saved.db"
    settings = {"token": telegram.token, "base_url": telegram.base_url}
    cluster = Cluster(tmp_path, 1, f"sqlite:///{db}", settings)
    (instance,) = cluster.instances
    said: list[str] = []
    warmed, backup_done = asyncio.Event(), asyncio.Event()
    after_backup = 0

    async def traffic() -> None:
        nonlocal after_backup
        n = 0
        while not backup_done.is_set() or after_backup < AFTER:
            text = f"m{n}"
            await cluster.post(
                {"update_id": 9000 + n, "message": telegram.message(7 + n % 5, text)}
            )
            said.append(text)
            n += 1
            if n == BEFORE:
                warmed.set()
            if backup_done.is_set():
                after_backup += 1
            await asyncio.sleep(PACE)  # offered load, not synchronization

    async def take_backup() -> tuple[int, str, int]:
        await warmed.wait()  # traffic is flowing
        started_at = len(said)
        code, out = await tether("backup", str(saved), "-c", str(instance.config))
        backup_done.set()
        return code, out, started_at

    async with cluster:
        flowing = asyncio.create_task(traffic())
        code, out, started_at = await take_backup()
        refused, why = await tether("restore", str(saved), "-c", str(instance.config))
        await flowing
        await telegram.wait_for(lambda: set(said) <= {s["text"] for s in telegram.sent}, 120)

    assert code == 0, out
    assert f"to {saved}:" in out and f"schema version {len(MIGRATIONS)}" in out and "bytes" in out
    assert refused == 1 and "running on" in why and "not touched" in why, why
    assert started_at >= BEFORE and after_backup >= AFTER  # traffic on both sides of it
    in_backup = int(one(saved, "SELECT count(*) FROM inbox"))
    assert 0 < in_backup < len(said)  # a moment in the middle of the run

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    config = write_config(fresh)
    assert await asyncio.to_thread(main, ["restore", str(saved), "-c", str(config)]) == 0
    restored = fresh / "tether.db"
    assert one(restored, "PRAGMA integrity_check") == "ok"
    assert one(restored, "PRAGMA user_version") == len(MIGRATIONS)
    assert int(one(restored, "SELECT count(*) FROM inbox WHERE status = 'done'")) > 0
    assert unanswered_done(restored) == 0  # every done inbox row has its replies
    assert not list(fresh.glob("tether.db.before-restore-*"))  # there was nothing to keep
    assert unanswered_done(db) == 0 and one(db, "PRAGMA integrity_check") == "ok"
