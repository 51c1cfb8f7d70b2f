"""Group commit for the PostgreSQL store: the writes of one moment, one transaction.

Each event's writes — ``begin`` (the row is running), the checkpoint, the outbox row's
``sending`` and ``sent`` — used to be a transaction each, of one to five round trips, and
a webhook gateway has dozens of events in flight. As SQLite's writer does
(memory/sqlite/link.py), writes that arrive while a commit is in flight wait for it and
then go together: sorted by phase (a write may depend on an earlier phase's rows, never
on a later one's), one ``executemany`` per statement shape, one transaction. Under load
a round trip carries many events' writes; alone, a write commits at once as before.
The usual batch (marks, checkpoints) goes as one statement over arrays instead
(:mod:`~tether.memory.postgres.arrays`): one round trip, not BEGIN, one per shape, COMMIT.

Every caller still learns the fate of its own write, and only after COMMIT (persist
before acknowledging). If a batch fails, each of its writes is committed again on its
own, so one write the server refuses (or a deadlock with another instance) fails that
write alone, not its neighbours.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from tether.events import Event
from tether.memory.postgres.arrays import as_one
from tether.memory.records import InboxRow
from tether.memory.sql.statements import Statement, numbered

Commit = Callable[..., Awaitable[None]]


@dataclass(slots=True)
class _Write:
    phase: int
    statements: tuple[Statement, ...]
    done: asyncio.Future[None]


class GroupCommit:
    """``write(phase, *statements)``: returns once those statements are committed.

    ``alone`` commits one write by itself (the store's own transaction, which also keeps
    its health record); ``batch`` runs a group's statements inside one transaction on a
    pool connection and ``committed`` is told when a batch succeeded.
    """

    #: Writes in one transaction at most: a huge batch holds its row locks longer.
    max_writes = 500

    def __init__(
        self,
        pool: Callable[[], asyncpg.Pool],
        alone: Commit,
        committed: Callable[[], None],
    ) -> None:
        self._pool = pool
        self._alone = alone
        self._committed = committed
        self._waiting: list[_Write] = []
        self._flusher: asyncio.Task[None] | None = None

    async def write(self, phase: int, *statements: Statement) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Write(phase, statements, done))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="postgres-group-commit")
        await done

    async def _flush(self) -> None:
        """Commit what waits, batch after batch, until nothing does."""
        try:
            while self._waiting:
                batch = self._waiting[: self.max_writes]
                del self._waiting[: self.max_writes]
                if len(batch) == 1:
                    await self._one(batch[0])
                else:
                    await self._many(batch)
        finally:
            self._flusher = None
            for write in self._waiting:  # only when cancelled (the loop is ending)
                write.done.cancel()
            self._waiting.clear()

    async def drain(self) -> None:
        """Wait until every write handed in so far has its answer (before closing)."""
        while self._flusher is not None:
            await asyncio.shield(self._flusher)

    async def _one(self, write: _Write) -> None:
        try:
            await self._alone(write.phase, *write.statements)
        except BaseException as exc:
            _settle(write, exc)
            if not isinstance(exc, Exception):
                raise
        else:
            _settle(write, None)

    async def _many(self, batch: list[_Write]) -> None:
        in_order = sorted(batch, key=lambda w: w.phase)
        groups: dict[tuple[int, str], list[Sequence[Any]]] = {}
        for write in in_order:
            for text, params in write.statements:
                groups.setdefault((write.phase, text), []).append(params)
        # One statement over arrays (arrays.py), when no row is touched twice.
        one = as_one([statement for write in in_order for statement in write.statements])
        try:
            if one is not None:
                await self._pool().execute(one[0], *one[1])
            elif len(groups) == 1:  # one executemany is atomic by itself: no BEGIN, COMMIT
                [((_phase, text), rows)] = groups.items()
                await self._pool().executemany(numbered(text), rows)
            else:
                async with self._pool().acquire() as db, db.transaction():
                    for (_phase, text), rows in groups.items():
                        if len(rows) == 1:
                            await db.execute(numbered(text), *rows[0])
                        else:
                            await db.executemany(numbered(text), rows)
        except Exception:
            # One write may be at fault, or the server: each alone, so only the faulty
            # ones fail (and a server that is down fails them all, each with its error).
            for write in batch:
                await self._one(write)
            return
        except BaseException as exc:  # cancelled: nobody may wait for an answer forever
            for write in batch:
                _settle(write, exc)
            raise
        self._committed()
        for write in batch:
            _settle(write, None)


def _settle(write: _Write, error: BaseException | None) -> None:
    if write.done.done():  # the caller was cancelled: its write landed (or not) anyway
        return
    if error is None:
        write.done.set_result(None)
    else:
        write.done.set_exception(error)


Accept = Callable[[Sequence[tuple[Event, str]]], Awaitable[list[InboxRow | None]]]
#: One caller of :meth:`GroupAccept.accept`: its items and where its rows go.
_Caller = tuple[Sequence[tuple[Event, str]], "asyncio.Future[list[InboxRow | None]]"]


class GroupAccept:
    """``accept(items)`` of concurrent callers as one ``INSERT ... RETURNING``.

    A webhook gateway accepts each post on its own, and each was a transaction of four
    round trips. Posts that arrive while an accept is in flight go together in the next:
    the items in arrival order, so an update posted twice at once (Telegram's retry) is
    new for the first caller and a duplicate for the second, as within one call. Each
    caller gets its own rows back, after COMMIT; if the batch fails, each caller's items
    are accepted again on their own.
    """

    max_items = 1000

    def __init__(self, accept: Accept) -> None:
        self._accept = accept
        self._waiting: list[_Caller] = []
        self._flusher: asyncio.Task[None] | None = None

    async def accept(self, items: Sequence[tuple[Event, str]]) -> list[InboxRow | None]:
        done: asyncio.Future[list[InboxRow | None]] = asyncio.get_running_loop().create_future()
        self._waiting.append((items, done))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="postgres-group-accept")
        return await done

    async def _flush(self) -> None:
        try:
            while self._waiting:
                batch: list[_Caller] = []
                count = 0
                while self._waiting and (not batch or count < self.max_items):
                    batch.append(self._waiting.pop(0))
                    count += len(batch[-1][0])
                await (self._one(*batch[0]) if len(batch) == 1 else self._many(batch))
        finally:
            self._flusher = None
            for _items, done in self._waiting:  # only when cancelled (the loop is ending)
                done.cancel()
            self._waiting.clear()

    async def _one(
        self, items: Sequence[tuple[Event, str]], done: asyncio.Future[list[InboxRow | None]]
    ) -> None:
        try:
            rows = await self._accept(items)
        except BaseException as exc:
            if not done.done():
                done.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            if not done.done():
                done.set_result(rows)

    async def _many(self, batch: list[_Caller]) -> None:
        try:
            rows = await self._accept([item for items, _done in batch for item in items])
        except Exception:
            for items, done in batch:
                await self._one(items, done)
            return
        except BaseException as exc:
            for _items, done in batch:
                if not done.done():
                    done.set_exception(exc)
            raise
        start = 0
        for items, done in batch:
            if not done.done():
                done.set_result(rows[start : start + len(items)])
            start += len(items)

    async def drain(self) -> None:
        while self._flusher is not None:
            await asyncio.shield(self._flusher)
