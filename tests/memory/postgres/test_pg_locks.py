"""The lane locks' session (memory/postgres/locks.py): when PostgreSQL ends it, every lock
it held is gone at once, and the store says so before anyone else can use them unnoticed.

Two ``AdvisoryLocks`` stand for two instances. The test ends the first one's session the
way a restart, a failover or an operator would (``pg_terminate_backend``).
"""

from __future__ import annotations

import asyncio
import uuid

import structlog.testing

from tests.support.advisory import end_session_holding, lock_holder
from tether.memory.postgres.locks import AdvisoryLocks


async def test_a_session_ended_by_the_server_tells_of_every_lock_it_held(pg_dsn: str) -> None:
    ours, theirs = AdvisoryLocks(pg_dsn), AdvisoryLocks(pg_dsn)
    a, b, c = (f"test:{uuid.uuid4().hex}:{n}" for n in "abc")  # the database's, not a schema's
    told: list[frozenset[str]] = []
    lost = asyncio.Event()

    def on_lost(names: frozenset[str]) -> None:
        told.append(names)
        lost.set()

    ours.on_lost(on_lost)
    try:
        assert await ours.try_lock(a) and await ours.try_lock(a)  # a session lock, taken twice
        assert await ours.try_lock(b) and await ours.try_lock(c)
        await ours.unlock(c)
        assert not await theirs.try_lock(a)
        with structlog.testing.capture_logs() as logs:
            backend = await end_session_holding(pg_dsn, a)
            await asyncio.wait_for(lost.wait(), 10)
        assert told == [frozenset({a, b})]  # what it held then; c was released before
        [line] = [entry for entry in logs if entry["event"] == "store.lane_locks_lost"]
        assert line["log_level"] == "error" and line["locks"] == 2
        assert line["backend_pid"] == backend and sorted(line["names"]) == sorted([a, b])

        assert await theirs.try_lock(a)  # gone with the session: another instance takes it
        await ours.unlock(a)  # nothing of ours to release: no query, no error
        assert await lock_holder(pg_dsn, a) not in (None, backend)
        assert not await ours.try_lock(a)  # a new session, which must take it like anyone
        await theirs.unlock(a)
        assert await ours.try_lock(a)
        assert await lock_holder(pg_dsn, a) not in (None, backend)
        assert told == [frozenset({a, b})]  # the new session was not lost
    finally:
        await ours.close()
        await theirs.close()
    assert await lock_holder(pg_dsn, a) is None


async def test_closing_is_not_a_loss(pg_dsn: str) -> None:
    locks = AdvisoryLocks(pg_dsn)
    told: list[frozenset[str]] = []
    locks.on_lost(told.append)
    name = f"test:{uuid.uuid4().hex}"
    assert await locks.try_lock(name)
    await locks.close()
    await asyncio.sleep(0)  # termination listeners run on the loop's next turn
    assert told == [] and await lock_holder(pg_dsn, name) is None
