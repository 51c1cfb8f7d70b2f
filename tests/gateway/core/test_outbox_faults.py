"""Exactly-once replies while the store fails under them (issue 14, bug 3).

A reply that reached the platform must be recorded as such even when the commit that
carried the mark failed (the SQLite writer killed, a full disk, PostgreSQL refusing):
otherwise it stays ``sending``, the next start takes it for an interrupted send, and
with ``resend_unknown: true`` sends it a second time. And a failed mark must never make
the outbox send the reply again in the same run.

The faults are real: the writer process is SIGKILLed, and a trigger in the database
makes the commit fail the way a full disk would. Nothing of Tether is mocked.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import pytest
import structlog
from structlog.typing import EventDict, WrappedLogger

from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import db_rows, make_settings
from tests.support.gateway import running
from tether.adapters.loopback import LoopbackAdapter
from tether.config import Settings
from tether.errors import SendAmbiguous
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters
from tether.gateway.ops import logs
from tether.memory.sqlite import SqliteStore

CHATS = 40
PER_CHAT = 60
#: Replies between two kills of the writer process.
KILL_EVERY = 100


def telegram_settings(tmp_path: Path, fake: FakeTelegram) -> Settings:
    telegram = {
        "token": fake.token,
        "base_url": fake.base_url,
        "poll_timeout": 1,
        "rate_limits": False,
        "resend_unknown": True,  # anything left 'sending' would be sent again
    }
    # Enough attempts that an event whose checkpoint meets several kills is not buried.
    return make_settings(tmp_path, platforms={"telegram": telegram}, pipeline={"max_attempts": 50})


async def kill_the_writer_as_replies_go_out(
    gateway: Gateway, fake: FakeTelegram, total: int
) -> int:
    """SIGKILL the SQLite writer each time another ``KILL_EVERY`` replies reached the fake."""
    store = gateway.store
    assert isinstance(store, SqliteStore)
    kills = 0
    for threshold in range(KILL_EVERY, total, KILL_EVERY):
        await fake.wait_for(lambda t=threshold: len(fake.sent) >= t, timeout=120)  # type: ignore[misc]
        writer = store._link.process
        if writer is not None and writer.returncode is None:
            writer.kill()
            kills += 1
    return kills


@pytest.mark.crash
@pytest.mark.slow
async def test_writer_killed_under_load_then_resend_unknown_restart_sends_nothing_twice(
    tmp_path: Path,
) -> None:
    fake = await FakeTelegram().start()
    try:
        await answer_all_while_the_writer_is_killed_then_restart(tmp_path, fake)
    finally:
        await fake.stop()


async def answer_all_while_the_writer_is_killed_then_restart(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    expected = Counter(
        (chat, f"c{chat}-m{n}") for chat in range(1, CHATS + 1) for n in range(PER_CHAT)
    )
    for n in range(PER_CHAT):
        for chat in range(1, CHATS + 1):
            fake.push(message=fake.message(chat, f"c{chat}-m{n}"))
    total = expected.total()

    settings = telegram_settings(tmp_path, fake)
    gateway = Gateway(settings, build_adapters(settings))
    await gateway.start()
    try:
        kills = await kill_the_writer_as_replies_go_out(gateway, fake, total)
        await fake.wait_for(lambda: len(fake.sent) >= total, timeout=120)
        await gateway.drain()
    finally:
        await gateway.stop()
    assert kills >= 10

    # Every reply that went out is recorded as sent: nothing is left for a restart to guess.
    statuses = dict(db_rows(tmp_path, "SELECT status, count(*) FROM outbox GROUP BY status"))
    assert statuses == {"sent": total}

    # A restart that resends whatever it is unsure of finds nothing to resend.
    restarted = Gateway(settings, build_adapters(settings))
    await restarted.start()
    try:
        await restarted.drain()
    finally:
        await restarted.stop()
    delivered = Counter((s["chat_id"], s["text"]) for s in fake.sent)
    assert delivered - expected == Counter(), "replies sent twice"
    assert expected - delivered == Counter(), "replies never sent"


# -- one reply, its mark refused by the database --------------------------------------------


class Logged:
    """Every log entry as it is made, and a way to wait for one (no polling)."""

    def __init__(self) -> None:
        self.entries: list[EventDict] = []
        self._changed = asyncio.Event()

    def __call__(self, _logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
        self.entries.append(event_dict)
        self._changed.set()
        raise structlog.DropEvent

    async def wait_for(self, name: str, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not any(entry["event"] == name for entry in self.entries):
                self._changed.clear()
                await self._changed.wait()


@contextmanager
def logged() -> Iterator[Logged]:
    entries = Logged()
    structlog.configure(processors=[entries])
    try:
        yield entries
    finally:
        logs.configure("info", "json", stream=sys.stderr)


def outcome(loop: LoopbackAdapter, status: str) -> None:
    """Script the platform: the send arrives ('sent'), or its fate is unknown."""
    if status == "unknown":
        loop.fail_next(SendAmbiguous("timed out after the request went out"))


@pytest.mark.parametrize("status", ["sent", "unknown"])
async def test_sqlite_a_mark_refused_by_the_database_lands_once_it_can_and_nothing_is_resent(
    tmp_path: Path, status: str
) -> None:
    """The writer's commit fails (as on a full disk) while the outcome of a send is being
    recorded; once the database accepts writes again, the outcome lands. The reply is
    never sent again, neither now nor by a restart."""
    loop = LoopbackAdapter()
    outcome(loop, status)
    with logged() as entries:
        async with running(make_settings(tmp_path), adapter=loop):
            db = sqlite3.connect(tmp_path / "tether.db", isolation_level=None, timeout=30)
            db.execute(
                "CREATE TRIGGER disk_full BEFORE UPDATE ON outbox"
                f" WHEN NEW.status = '{status}'"
                " BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
            )
            await loop.say("hello")
            await entries.wait_for("store.write_failed")
            db.execute("DROP TRIGGER disk_full")
            db.close()
    assert db_rows(tmp_path, "SELECT status FROM outbox") == [(status,)]
    assert len(loop.attempts) == 1


@pytest.mark.parametrize("status", ["sent", "unknown"])
async def test_postgres_a_mark_refused_by_the_database_is_retried_not_the_send(
    tmp_path: Path, pg_dsn: str, status: str
) -> None:
    """PostgreSQL refuses the first two commits of the mark: the outbox retries the mark,
    never the platform call."""
    setup = await asyncpg.connect(pg_dsn)
    loop = LoopbackAdapter()
    outcome(loop, status)
    try:
        settings = make_settings(tmp_path, memory={"store": pg_dsn})
        async with running(settings, adapter=loop) as (gateway, _loop):
            # The budget is a sequence: its increments survive the rollback they cause.
            await setup.execute(
                f"""
                CREATE SEQUENCE refusals;
                CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF nextval('refusals') <= 2 THEN
                        RAISE EXCEPTION 'could not extend file: No space left on device';
                    END IF;
                    RETURN NEW;
                END $$;
                CREATE TRIGGER disk_full BEFORE UPDATE ON outbox FOR EACH ROW
                    WHEN (NEW.status = '{status}') EXECUTE FUNCTION refuse();
                """
            )
            event = await loop.say("hello")
            await gateway.drain()
            rows = await gateway.store.outbox_rows(event.key)
        assert await setup.fetchval("SELECT last_value FROM refusals") == 3
    finally:
        await setup.close()
    assert [row.status for row in rows] == [status]
    assert len(loop.attempts) == 1
