"""PostgreSQL group commit (issue 22): concurrent writes and accepts share transactions,
and each caller still gets its own answer, after the commit.

- Concurrent accepts: each caller gets its own rows, in its own order; a key posted
  twice at once is new for exactly one caller; every accepted row is in the table.
- One refused write (or accept) in a batch fails alone: its neighbours are committed.
- Concurrent writes are fewer transactions than writes (the rows' ``xmin``).
- Lane locks asked for at once: each asker gets its own answer; another process sees them.
- Writes sent without BEGIN and COMMIT (one statement, one ``executemany``) are still
  all-or-nothing; an accept with cursors is still one transaction with them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tether.events import Conversation, Event
from tether.memory import sql
from tether.memory.postgres import PostgresStore
from tether.memory.sql import ACCEPT

CHAT = Conversation(platform="test", chat_id="c1")


def event(key: str) -> Event:
    return Event(key=key, platform="test", conversation=CHAT, text="hi")


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    s = PostgresStore(pg_dsn)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


async def test_concurrent_accepts_each_get_their_own_rows(store: PostgresStore) -> None:
    calls = [[(event(f"k{n}-{i}"), "c1") for i in range(n % 3 + 1)] for n in range(30)]
    calls.append([(event("twice"), "c1"), (event("k0-0"), "c1")])  # k0-0: another caller's
    calls += [[(event("twice"), "c1")] for _ in range(5)]
    results = await asyncio.gather(*(store.accept(items) for items in calls))
    for items, rows in zip(calls[:30], results[:30], strict=True):
        assert [row.key if row else None for row in rows] == [e.key for e, _c in items]
    twice = [rows[0] for rows in results[30:]]
    assert sum(row is not None for row in twice) == 1
    assert results[30][1] is None  # already accepted by the first caller
    keys = {row.key for rows in results for row in rows if row is not None}
    assert len(keys) == sum(n % 3 + 1 for n in range(30)) + 1
    assert (await store.counts())["inbox"] == {"received": len(keys)}


async def test_a_refused_write_fails_alone(store: PostgresStore) -> None:
    good = [
        store._write(ACCEPT, (sql.CURSOR_SET, (f"cursor{n}", str(n), time.time())))
        for n in range(10)
    ]
    bad = store._write(ACCEPT, (sql.CURSOR_SET, ("refused", None, time.time())))  # NOT NULL
    results = await asyncio.gather(*good, bad, return_exceptions=True)
    assert results[:10] == [None] * 10
    assert isinstance(results[10], asyncpg.NotNullViolationError)
    assert [await store.cursor(f"cursor{n}") for n in range(10)] == [str(n) for n in range(10)]
    assert await store.cursor("refused") is None


async def test_concurrent_writes_share_transactions(store: PostgresStore) -> None:
    await asyncio.gather(
        *(store._write(ACCEPT, (sql.CURSOR_SET, (f"c{n}", "v", time.time()))) for n in range(50))
    )
    assert [await store.cursor(f"c{n}") for n in range(50)] == ["v"] * 50
    # Rows written by one transaction carry its id (xmin): fewer ids than writes.
    [(transactions,)] = await store._rows(
        "SELECT count(DISTINCT xmin::text) FROM cursors WHERE name LIKE 'c%'"
    )
    assert transactions < 50


async def test_lane_locks_asked_together_are_answered_each(pg_dsn: str) -> None:
    here, there = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
    await here.open()
    await there.open()
    try:
        names = [f"lane:c{n}" for n in range(20)]
        taken = await asyncio.gather(*(here.try_lock(name) for name in names))
        assert taken == [True] * 20
        twice = await asyncio.gather(there.try_lock("lane:x"), there.try_lock("lane:x"))
        assert sorted(twice) == [False, True]  # asked twice at once: one lane gets it
        assert await asyncio.gather(*(there.try_lock(name) for name in names[:5])) == [False] * 5
        await asyncio.gather(*(here.unlock(name) for name in names[:5]))
        assert await asyncio.gather(*(there.try_lock(name) for name in names[:5])) == [True] * 5
    finally:
        await here.close()
        await there.close()


async def test_a_refused_accept_fails_alone(store: PostgresStore) -> None:
    """PostgreSQL refuses a NUL in text: that caller's accept fails, the others' land."""
    good = [store.accept([(event(f"ok{n}"), "c1")]) for n in range(10)]
    bad = store.accept([(event("nul"), "c\x00")])
    results = await asyncio.gather(*good, bad, return_exceptions=True)
    keys = [rows[0].key if isinstance(rows, list) and rows[0] else rows for rows in results[:10]]
    assert keys == [f"ok{n}" for n in range(10)]
    assert isinstance(results[10], asyncpg.PostgresError)
    assert (await store.counts())["inbox"] == {"received": 10}


async def test_a_lane_lock_taken_twice_is_held_until_released_twice(pg_dsn: str) -> None:
    """Session locks count: taken in two batches, released by two unlocks sent at once
    (one query), it is free for another process afterwards, not held forever."""
    here, there = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
    await here.open()
    await there.open()
    try:
        assert await here.try_lock("lane:twice")
        assert await here.try_lock("lane:twice")  # this session again: PostgreSQL counts it
        await asyncio.gather(here.unlock("lane:twice"), here.unlock("lane:twice"))
        assert await there.try_lock("lane:twice")
    finally:
        await here.close()
        await there.close()


async def test_a_lone_write_of_one_text_is_all_or_nothing(store: PostgresStore) -> None:
    """Rows of one statement text go as one ``executemany``, without BEGIN and COMMIT:
    a refused row takes the write's other rows with it, as a transaction would."""
    now = time.time()
    with pytest.raises(asyncpg.NotNullViolationError):
        await store._commit(
            ACCEPT, (sql.CURSOR_SET, ("first", "1", now)), (sql.CURSOR_SET, ("second", None, now))
        )
    assert await store.cursor("first") is None
    await store._commit(
        ACCEPT, (sql.CURSOR_SET, ("first", "1", now)), (sql.CURSOR_SET, ("second", "2", now))
    )
    assert [await store.cursor("first"), await store.cursor("second")] == ["1", "2"]


async def test_an_accept_with_cursors_is_one_transaction(store: PostgresStore) -> None:
    """Without cursors an accept is one statement; with them, a refused cursor (a NUL in
    text) leaves none of the events: a poller would fetch them again, never skip them."""
    with pytest.raises(asyncpg.PostgresError):
        await store.accept([(event("e1"), "c1"), (event("e2"), "c1")], {"poll": "7\x00"})
    assert (await store.counts())["inbox"] == {}
    assert await store.cursor("poll") is None
    rows = await store.accept([(event("e1"), "c1"), (event("e2"), "c1")], {"poll": "7"})
    assert [row.key if row else None for row in rows] == ["e1", "e2"]
    assert await store.cursor("poll") == "7"
