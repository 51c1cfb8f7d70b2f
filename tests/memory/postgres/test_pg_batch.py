"""PostgreSQL group commit (issue 22): concurrent writes and accepts share transactions,
and each caller still gets its own answer, after the commit.

- Concurrent accepts: each caller gets its own rows, in its own order; a key posted
  twice at once is new for exactly one caller; every accepted row is in the table.
- One refused write (or accept) in a batch fails alone: its neighbours are committed.
- Concurrent writes are fewer transactions than writes (the rows' ``xmin``).
- Lane locks asked for at once: each asker gets its own answer; another process sees them.
- Writes sent without BEGIN and COMMIT (one statement, one ``executemany``) are still
  all-or-nothing; an accept with cursors is still one transaction with them.
- Batches sent as one statement over arrays (memory/postgres/arrays.py): each event's
  outbox rows and turns keep their order, every mark lands; a row marked twice in one
  batch is not sent that way, and keeps the later mark.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tether.events import Conversation, Event, OutMessage, Target
from tether.memory.postgres import PostgresStore
from tether.memory.postgres.arrays import INSERT_OUTBOX, as_one
from tether.memory.records import Turn
from tether.memory.sql import statements as sql
from tether.memory.sql.statements import ACCEPT

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


async def test_concurrent_checkpoints_keep_each_events_order(store: PostgresStore) -> None:
    """Begins, checkpoints and marks of 20 events at once: batches of several statement
    texts, each sent as one statement over arrays."""
    chats = [f"c{n}" for n in range(20)]
    rows = [row for chat in chats for row in await store.accept([(event(f"e-{chat}"), chat)])]
    assert all(rows)
    await asyncio.gather(*(store.begin(row) for row in rows if row))

    def reply(chat: str, n: int) -> OutMessage:
        target = Target(platform="test", chat_id=chat)
        return OutMessage(key=f"e-{chat}#{n}", target=target, text=f"{chat} part {n}")

    def turns(chat: str) -> list[Turn]:
        return [Turn(chat, "user", f"{chat} asks"), Turn(chat, "assistant", f"{chat} answers")]

    await asyncio.gather(
        *(store.checkpoint(f"e-{c}", [reply(c, n) for n in range(3)], turns(c)) for c in chats)
    )
    for chat in chats:
        assert (await store.inbox_row(f"e-{chat}")).status == "done"  # type: ignore[union-attr]
        unsent = await store.unsent_for(f"test:{chat}")
        assert [r.key for r in unsent] == [f"e-{chat}#{n}" for n in range(3)]
        assert [r.seq for r in unsent] == sorted(r.seq for r in unsent)
        history = await store.history(chat, 10)
        assert [(t.role, t.text) for t in history] == [(t.role, t.text) for t in turns(chat)]
    keys = [f"e-{c}#{n}" for c in chats for n in range(3)]
    await asyncio.gather(*(store.mark_outbox(k, "sent", platform_id=f"p-{k}") for k in keys))
    for chat in chats:
        marked = await store.outbox_rows(f"e-{chat}")
        assert [(r.status, r.platform_id) for r in marked] == [
            ("sent", f"p-e-{chat}#{n}") for n in range(3)
        ]
    assert await store.busy_targets() == []
    [(transactions,)] = await store._rows("SELECT count(DISTINCT xmin::text) FROM outbox")
    assert transactions < 20  # the 20 checkpoints shared statements


async def test_a_row_marked_twice_in_one_batch_keeps_the_later_mark(store: PostgresStore) -> None:
    [row] = await store.accept([(event("twice"), "c1")])
    assert row is not None
    target = Target(platform="test", chat_id="c1")
    await store.checkpoint("twice", [OutMessage(key="twice#0", target=target, text="x")], [])
    for _ in range(5):
        await asyncio.gather(
            store.mark_outbox("twice#0", "sending", attempts=1),
            store.mark_outbox("twice#0", "sent", platform_id="42"),
        )
        [sent] = await store.outbox_rows("twice")
        assert (sent.status, sent.platform_id) == ("sent", "42")


def test_as_one_takes_only_writes_that_touch_each_row_once() -> None:
    now = time.time()
    done = (sql.FINISHED, (None, now, "k1"))
    saved = (INSERT_OUTBOX, ("k1#0", "k1", "test", "test:c1", "{}", now, now))
    marked = (sql.OUTBOX_MARKED, ("sent", None, None, "7", None, now, "k0#0"))
    one = as_one([done, saved, marked])
    assert one is not None
    text, params = one
    assert text.startswith("WITH w0 AS (UPDATE inbox") and text.count(" AS (") == 3
    assert params[:3] == [[None], [now], ["k1"]]
    assert as_one([done, saved]) is not None
    assert as_one([done]) is None  # one text: one executemany already
    assert as_one([done, (sql.RUNNING, (1, now, "k1"))]) is None  # one inbox row twice
    twice = (sql.OUTBOX_MARKED, ("sending", 1, None, None, None, now, "k1#0"))
    assert as_one([saved, twice]) is None  # marks a row its own batch inserts
    assert as_one([done, (sql.CURSOR_SET, ("c", "v", now))]) is None  # no array form
