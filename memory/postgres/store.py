"""The scale-out store: PostgreSQL through asyncpg, shared by several gateway processes.

Same contract as the SQLite store (one contract suite runs against both), and the same
queries (:class:`tether.memory.sql.store.SqlStore`). What differs is how concurrency is
made safe: writes of concurrent events are committed together, a transaction per batch
(:mod:`~tether.memory.postgres.batch`: fewer round trips, which is where one instance
lost to SQLite), dedup is ``ON CONFLICT DO NOTHING`` on the unique key,
and a conversation's events are run by one process at a time because its lane is a
session-level advisory lock (``pg_try_advisory_lock``) held on one dedicated connection:
a crashed process's connection closes and its locks go with it, so another instance
takes the lane over at once.

``postgresql://user@host:port/db?search_path=schema`` picks a schema (asyncpg passes
unknown query parameters on as server settings), which is how the tests isolate a run.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import asyncpg
import structlog

from tether.events import Event, OutMessage
from tether.memory.embeddings import PostgresEmbeddings
from tether.memory.postgres.arrays import INSERT_OUTBOX, as_one
from tether.memory.postgres.batch import GroupAccept, GroupCommit
from tether.memory.postgres.locks import AdvisoryLocks
from tether.memory.postgres.schema import migrate
from tether.memory.recall import PostgresRecall
from tether.memory.records import InboxRow, MemoryChanges, OutboxRow, OutboxStatus, Turn
from tether.memory.sql import statements as sql
from tether.memory.sql.rows import INBOX_COLUMNS, OUTBOX_COLUMNS, Row, inbox_row, outbox_row
from tether.memory.sql.statements import BEGIN, FINISH, OUTBOX, Statement, numbered
from tether.memory.sql.store import SqlStore
from tether.memory.store import WritesFailing
from tether.redaction import MASK, redactor

_UNSENT_FOR = (
    f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE target = ? AND {sql.IS_UNSENT} ORDER BY seq"
)
_BUSY_TARGETS = f"SELECT DISTINCT target FROM outbox WHERE {sql.IS_UNSENT}"
#: Accepted events, in the order given (the sequence follows ``ORDER BY n``).
_ACCEPT = (
    "INSERT INTO inbox (key, conversation, payload, status, created, updated)"
    " SELECT k, c, p, 'received', $4, $4 FROM unnest($1::text[], $2::text[],"
    " $3::text[]) WITH ORDINALITY AS t(k, c, p, n) ORDER BY n"
    " ON CONFLICT (key) DO NOTHING RETURNING seq, key"
)
_CURSORS_SET = (
    "INSERT INTO cursors (name, value, updated)"
    " SELECT n, v, $3 FROM unnest($1::text[], $2::text[]) AS t(n, v)"
    " ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated = excluded.updated"
)
#: A write that changes nothing and still needs the right to write: a read-only server
#: (a failed-over replica) or revoked privileges refuse it as they refuse real writes.
_PROBE = "UPDATE cursors SET updated = updated WHERE false"

log = structlog.get_logger("tether.postgres")


async def _keep_session(_connection: asyncpg.Connection) -> None:
    """The pool's reset after each use: nothing to send.

    asyncpg's default sends ``SELECT pg_advisory_unlock_all(); CLOSE ALL; ...`` each time
    a connection goes back to the pool — a round trip for every query run through the
    pool, six per event (bench/scaleout.py). Pool connections never hold session state:
    no advisory lock (lane locks live on their own connection), cursor, LISTEN or SET.
    asyncpg still rolls back a transaction left open (a cancelled write) before this runs.
    """


#: A lane's rows, each with whether the conversation has an open wait.
_LANE_AND_WAITS = (
    f"SELECT {INBOX_COLUMNS}, EXISTS (SELECT 1 FROM waits WHERE status = 'open'"
    f" AND conversation = ?) FROM inbox WHERE {sql.IS_UNFINISHED} AND conversation = ?"
    " ORDER BY seq"
)


class PostgresStore(PostgresEmbeddings, PostgresRecall, SqlStore):
    shared = True
    _newest_unsummarized, _oldest_unsummarized = sql.unsummarized_pages("messages")
    _last_received = sql.last_received("split_part(conversation, ':', 1)")
    _payload_platform = "(payload::json ->> 'platform')"
    _payload_sender = "(payload::json -> 'sender' ->> 'id')"
    _after_erasure: tuple[str, ...] = ()
    #: The console's time buckets (memory/sql/console.py): a CAST to integer would round here.
    _bucket = "floor(({column} - ?) / ?)::bigint"

    def __init__(self, dsn: str, *, pool_size: int = 10) -> None:
        self.dsn = dsn
        self.pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self._locks = AdvisoryLocks(dsn)
        #: Writes of concurrent events share a transaction (memory/postgres/batch.py).
        self._group = GroupCommit(lambda: self.pool, self._commit, self._recovered)
        self._write = self._group.write
        self._accepts = GroupAccept(self._accept_now)
        #: Why the last write failed, until one succeeds (see :meth:`ping`). Never the
        #: DSN: it may hold the password.
        self._problem: str | None = None

    # -- lifecycle ------------------------------------------------------------------

    def open_problem(self, exc: BaseException) -> str:
        """Host, port and database only; the password out of whatever the driver said."""
        parts = urlsplit(self.dsn)
        where = parts.netloc.rpartition("@")[2] + parts.path  # no user, no password, no query
        reason = "connection refused" if isinstance(exc, ConnectionRefusedError) else None
        if isinstance(exc, socket.gaierror):
            reason = f"unknown host ({exc.strerror})"
        reason = reason or f"{type(exc).__name__}: {exc}"
        line = f"cannot connect to PostgreSQL at {where}: {reason}"
        return _without_password(line, self.dsn)

    async def open(self) -> None:
        self._pool = await asyncpg.create_pool(
            self.dsn, min_size=1, max_size=self.pool_size, reset=_keep_session
        )
        await migrate(self._pool)

    async def close(self) -> None:
        await self._accepts.drain()
        await self._group.drain()
        await self._locks.close()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("store is closed")
        return self._pool

    async def ping(self) -> None:
        """Also raise while writes fail and a probe write fails too, so that readiness
        follows the last write, and comes back without waiting for traffic."""
        await self.pool.fetchval("SELECT 1")
        if self._problem is not None:
            try:
                await self._commit(OUTBOX, (_PROBE, ()))
            except Exception as exc:
                raise WritesFailing(f"writes fail: {self._problem}") from exc

    @contextlib.asynccontextmanager
    async def _outcome(self) -> AsyncIterator[None]:
        """Record how the write inside ends: the store's health for :meth:`ping`."""
        try:
            yield
        except Exception as exc:
            if self._problem is None:
                log.error("store.write_failed", error=f"{type(exc).__name__}: {exc}")
            self._problem = f"{type(exc).__name__}: {exc}"
            raise
        self._recovered()

    def _recovered(self) -> None:
        """A write went through: if writes were failing, they no longer are."""
        if self._problem is not None:
            log.info("store.writes_recovered", was=self._problem)
            self._problem = None

    async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(await self.pool.fetch(numbered(text), *params))

    async def lane(self, conversation: str) -> list[InboxRow]:
        # With each row, whether the conversation has an open wait (gateway/core/waits.py):
        # read with the lane, under its lock, so that a message is not a read of its own.
        rows = await self._rows(_LANE_AND_WAITS, (conversation, conversation))
        found = []
        for row in rows:
            inbox = inbox_row(row[:-1])
            inbox.waits_open = bool(row[-1])
            found.append(inbox)
        return found

    async def _commit(self, phase: int, *statements: Statement) -> None:
        """One transaction. Statements of one text run as one ``executemany``, as SQLite's
        writer runs them: none of a write's statements depends on another's order. A lone
        statement, or one ``executemany`` (atomic since asyncpg 0.22), is a transaction by
        itself: no BEGIN and COMMIT round trips around it."""
        async with self._outcome():
            if len(statements) == 1:
                [(text, params)] = statements
                await self.pool.execute(numbered(text), *params)
                return
            one = as_one(statements)  # a checkpoint: one statement (arrays.py)
            if one is not None:
                await self.pool.execute(one[0], *one[1])
                return
            groups: dict[str, list[Sequence[Any]]] = {}
            for text, params in statements:
                groups.setdefault(text, []).append(params)
            if len(groups) == 1:
                [(text, rows)] = groups.items()
                await self.pool.executemany(numbered(text), rows)
                return
            async with self.pool.acquire() as db, db.transaction():
                for text, rows in groups.items():
                    await db.executemany(numbered(text), rows)

    # -- lanes: one process per conversation at a time ------------------------------

    async def try_lock(self, name: str) -> bool:
        """Take the session-level advisory lock ``name``; False if another process holds it.

        Held on one dedicated connection until :meth:`unlock` or until this process dies
        (tries and releases of one moment share a round trip: memory/postgres/locks.py).
        """
        return await self._locks.try_lock(name)

    async def unlock(self, name: str) -> None:
        await self._locks.unlock(name)

    def on_locks_lost(self, callback: Callable[[frozenset[str]], None]) -> None:
        """The lock connection's session ended: all its locks are gone (locks.py)."""
        self._locks.on_lost(callback)

    async def unsent_for(self, target: str) -> list[OutboxRow]:  # indexed, unlike the default
        return [outbox_row(row) for row in await self._rows(_UNSENT_FOR, (target,))]

    async def busy_targets(self) -> list[str]:  # indexed, unlike the default
        return [str(row[0]) for row in await self._rows(_BUSY_TARGETS)]

    # -- inbox ----------------------------------------------------------------------

    async def accept(
        self, items: Sequence[tuple[Event, str]], cursors: Mapping[str, str] | None = None
    ) -> list[InboxRow | None]:
        if not items and not cursors:
            return []
        if not cursors:  # concurrent posts share one INSERT (memory/postgres/batch.py)
            return await self._accepts.accept(items)
        return await self._accept_now(items, cursors)

    async def _accept_now(
        self, items: Sequence[tuple[Event, str]], cursors: Mapping[str, str] | None = None
    ) -> list[InboxRow | None]:
        now = time.time()
        first: dict[str, int] = {}
        for index, (event, _conversation) in enumerate(items):
            first.setdefault(event.key, index)
        keys = list(first)
        conversations = [items[i][1] for i in first.values()]
        payloads = [items[i][0].to_json() for i in first.values()]
        async with self._outcome():
            if cursors:
                async with self.pool.acquire() as db, db.transaction():
                    inserted = await db.fetch(_ACCEPT, keys, conversations, payloads, now)
                    await db.execute(_CURSORS_SET, list(cursors), list(cursors.values()), now)
            else:  # one statement is a transaction by itself: no BEGIN and COMMIT round trips
                inserted = await self.pool.fetch(_ACCEPT, keys, conversations, payloads, now)
        seqs = {row["key"]: row["seq"] for row in inserted}
        out: list[InboxRow | None] = []
        for index, (event, conversation) in enumerate(items):
            if first[event.key] == index and event.key in seqs:
                out.append(
                    InboxRow(
                        seq=seqs[event.key], key=event.key, conversation=conversation, event=event
                    )
                )
            else:
                out.append(None)
        return out

    async def begin(self, row: InboxRow) -> None:
        row.attempts += 1
        row.status = "running"
        await self._write(BEGIN, (sql.RUNNING, (row.attempts, time.time(), row.key)))

    async def checkpoint(
        self,
        key: str,
        outbox: Sequence[OutMessage],
        turns: Sequence[Turn],
        changes: MemoryChanges | None = None,
    ) -> list[OutboxRow]:
        now = time.time()
        statements: list[Statement] = [(sql.FINISHED, (None, now, key))]
        statements += [self._outbox_saved(key, m, now) for m in outbox]
        statements += sql.turns_and_memory(key, turns, changes, now)
        await self._write(FINISH, *statements)
        return [OutboxRow(seq=0, key=m.key, event_key=key, message=m) for m in outbox]

    def _outbox_saved(self, event_key: str, message: OutMessage, now: float) -> Statement:
        target = message.target
        row = (message.key, event_key, target.platform, target.key, message.to_json(), now, now)
        return (INSERT_OUTBOX, row)

    async def requeue(self, key: str) -> bool:
        now = time.time()
        async with self.pool.acquire() as db, db.transaction():
            if await db.execute(numbered(sql.EVENT_REQUEUED), now, key) != "UPDATE 0":
                await db.execute(numbered(sql.DEAD_LETTER_DROPPED), key)
                return True
            return bool(await db.execute(numbered(sql.REPLY_REQUEUED), now, key) != "UPDATE 0")

    # -- outbox ---------------------------------------------------------------------

    async def mark_outbox(
        self,
        key: str,
        status: OutboxStatus,
        *,
        attempts: int | None = None,
        next_at: float | None = None,
        platform_id: str | None = None,
        error: str | None = None,
        durable: bool = True,  # every write is durable here
    ) -> None:
        await self._write(
            OUTBOX,
            (sql.OUTBOX_MARKED, (status, attempts, next_at, platform_id, error, time.time(), key)),
        )


def _without_password(line: str, url: str) -> str:
    """``line`` with the URL's password masked, as typed and percent-decoded (the driver
    may echo either), and then through the log redactor (which knows the others)."""
    try:
        password = urlsplit(url).password
    except ValueError:  # a malformed netloc: nothing was parsed out of it
        password = None
    for form in {password, unquote(password)} if password else ():
        line = line.replace(form, MASK)
    return redactor.scrub(line)
