"""A write sent as one statement over arrays (memory/postgres/arrays.py) leaves the tables
as running its statements one at a time, in order, would; or it is refused.

Hypothesis draws writes over a few keys, so that rows repeat: inbox marks, outbox rows
inserted (some already there, some twice), outbox marks (some on rows the same write
inserts), history rows (some twice). Each side runs in a transaction that is rolled
back, on a schema seeded with inbox and outbox rows; sequence numbers are compared by
order, not value (a rolled-back sequence does not go back).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.memory.postgres import PostgresStore
from tether.memory.postgres.arrays import INSERT_OUTBOX, as_one
from tether.memory.sql import statements as sql
from tether.memory.sql.statements import Statement, numbered

INBOX = [f"k{n}" for n in range(8)]
OUTBOX = [f"o{n}" for n in range(6)]  # already in the table
NEW = [f"n{n}" for n in range(6)]  # inserted by the writes
maybe_int = st.none() | st.integers(0, 5)
when = st.floats(1.0, 2.0e9, allow_nan=False)
small_text = st.sampled_from(["a", "b", "sent", "sending", "retry_wait"])

running = st.tuples(st.integers(0, 5), when, st.sampled_from(INBOX)).map(lambda p: (sql.RUNNING, p))
finished = st.tuples(maybe_int, when, st.sampled_from(INBOX)).map(lambda p: (sql.FINISHED, p))
saved = st.tuples(
    st.sampled_from(OUTBOX + NEW),
    st.sampled_from(INBOX),
    st.just("test"),
    st.sampled_from(["test:c1", "test:c2"]),
    small_text,
    when,
    when,
).map(lambda p: (INSERT_OUTBOX, p))
marked = st.tuples(
    small_text,
    maybe_int,
    st.none() | when,
    st.none() | small_text,
    st.none() | small_text,
    when,
    st.sampled_from(OUTBOX + NEW),
).map(lambda p: (sql.OUTBOX_MARKED, p))
message = st.tuples(
    st.sampled_from(["c1", "c2"]),
    st.sampled_from(["user", "assistant"]),
    small_text,
    maybe_int,
    st.sampled_from(INBOX),
    st.integers(0, 2),
    when,
    st.none() | st.sampled_from(["test:u1", "test:u2"]),
).map(lambda p: (sql.MESSAGE_SAVED, p))
writes = st.lists(st.one_of(running, finished, saved, marked, message), min_size=1, max_size=12)


async def _seed(db: asyncpg.Connection) -> None:
    for key in INBOX:
        await db.execute(
            "INSERT INTO inbox (key, conversation, payload, status, attempts, created, updated)"
            " VALUES ($1, 'c1', '{}', 'received', 1, 0, 0)",
            key,
        )
    for key in OUTBOX:
        await db.execute(
            "INSERT INTO outbox (key, event_key, platform, target, payload, status,"
            " platform_id, created, updated) VALUES ($1, 'k0', 'test', 'test:c1', 'p',"
            " 'pending', 'old', 0, 0)",
            key,
        )


async def _tables(db: asyncpg.Connection) -> list[list[tuple[Any, ...]]]:
    return [
        [tuple(r) for r in await db.fetch(query)]
        for query in (
            "SELECT key, status, attempts, error, retry_at, updated FROM inbox ORDER BY key",
            "SELECT key, event_key, platform, target, payload, status, attempts, next_at,"
            " platform_id, error, created, updated FROM outbox ORDER BY seq",
            "SELECT conversation, role, text, tokens, event_key, position, created"
            " FROM messages ORDER BY id",
        )
    ]


async def _compare(dsn: str, statements: Sequence[Statement]) -> None:
    one = as_one(statements)
    if one is None:
        return
    db = await asyncpg.connect(dsn)
    try:
        results = []
        for together in (True, False):
            tx = db.transaction()
            await tx.start()
            try:
                await _seed(db)
                if together:
                    await db.execute(one[0], *one[1])
                else:
                    for text, params in statements:
                        await db.execute(numbered(text), *params)
                results.append(await _tables(db))
            finally:
                await tx.rollback()
        assert results[0] == results[1]
    finally:
        await db.close()


@pytest.fixture
def migrated(pg_dsn: str) -> str:
    async def migrate() -> None:
        store = PostgresStore(pg_dsn)
        await store.open()
        await store.close()

    asyncio.run(migrate())
    return pg_dsn


def test_one_statement_equals_the_statements_in_turn(migrated: str) -> None:
    @given(writes)
    def check(statements: list[Statement]) -> None:
        asyncio.run(_compare(migrated, statements))

    check()


def test_a_refusal_is_for_a_row_touched_twice() -> None:
    """The property above holds for what is accepted; refusals must stay rare in real
    batches: distinct events' marks and checkpoints are accepted."""
    statements: list[Statement] = []
    for n in range(5):
        statements += [
            (sql.RUNNING, (1, 1.0, f"r{n}")),
            (sql.FINISHED, (None, 1.0, f"d{n}")),
            (INSERT_OUTBOX, (f"d{n}#0", f"d{n}", "test", "test:c", "{}", 1.0, 1.0)),
            (sql.MESSAGE_SAVED, ("c", "user", "hi", None, f"d{n}", 0, 1.0, None)),
            (sql.OUTBOX_MARKED, ("sent", None, None, "1", None, 1.0, f"s{n}#0")),
        ]
    assert as_one(statements) is not None
