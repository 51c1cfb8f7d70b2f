"""Lane locks for the PostgreSQL store: session advisory locks, many per round trip.

A lane (a conversation's events, a chat's replies) is run by one process at a time: it
holds ``pg_try_advisory_lock`` on a connection of its own, so a crashed process's locks
go with its connection. Every try and every release used to be a round trip on that one
connection, one after another; each instance's sweep pokes every busy lane (most held
by another instance), so with three instances those tries queued in front of the real
work (bench/scaleout.py: 2,400 tries for 1,000 events). Here the operations asked for
while one is in flight go together: consecutive tries in one query, consecutive
releases in another, in the order they were asked for.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

import asyncpg

Op = Literal["lock", "unlock"]

_QUERIES: dict[Op, str] = {
    "lock": "SELECT pg_try_advisory_lock(hashtextextended(n, 0))"
    " FROM unnest($1::text[]) WITH ORDINALITY AS t(n, i) ORDER BY i",
    "unlock": "SELECT pg_advisory_unlock(hashtextextended(n, 0))"
    " FROM unnest($1::text[]) WITH ORDINALITY AS t(n, i) ORDER BY i",
}


@dataclass(slots=True)
class _Ask:
    op: Op
    name: str
    done: asyncio.Future[bool]


class AdvisoryLocks:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._connection: asyncpg.Connection | None = None
        self._waiting: list[_Ask] = []
        self._flusher: asyncio.Task[None] | None = None

    async def try_lock(self, name: str) -> bool:
        """Take the lock ``name``; False if another process (or lane here) holds it."""
        return await self._ask("lock", name)

    async def unlock(self, name: str) -> None:
        await self._ask("unlock", name)

    async def close(self) -> None:
        while self._flusher is not None:
            await asyncio.shield(self._flusher)
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    async def _ask(self, op: Op, name: str) -> bool:
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Ask(op, name, done))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="postgres-lane-locks")
        return await done

    async def _flush(self) -> None:
        try:
            while self._waiting:
                op = self._waiting[0].op
                count = next(
                    (i for i, ask in enumerate(self._waiting) if ask.op != op), len(self._waiting)
                )
                batch = self._waiting[:count]
                del self._waiting[:count]
                try:
                    answers = await self._run(op, [ask.name for ask in batch])
                except BaseException as exc:
                    for ask in batch:
                        if not ask.done.done():
                            ask.done.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for ask, answer in zip(batch, answers, strict=True):
                    if not ask.done.done():
                        ask.done.set_result(answer)
        finally:
            self._flusher = None
            for ask in self._waiting:  # only when cancelled (the loop is ending)
                ask.done.cancel()
            self._waiting.clear()

    async def _run(self, op: Op, names: list[str]) -> list[bool]:
        """Each asker's answer, in order.

        A lock asked for twice in one batch is tried once and given to the first asker
        (a second try in this session would succeed too, and two lanes would run one
        key). Releases are all sent, duplicates included: a session lock taken twice
        (in two batches) is held until released twice, as it was taken.
        """
        if op == "unlock":
            if self._connection is None or self._connection.is_closed():
                return [False] * len(names)  # the connection, and every lock, is gone
            rows = await self._connection.fetch(_QUERIES[op], names)
            return [bool(row[0]) for row in rows]
        if self._connection is None or self._connection.is_closed():
            self._connection = await asyncpg.connect(self.dsn)
        unique = list(dict.fromkeys(names))
        rows = await self._connection.fetch(_QUERIES[op], unique)
        taken = {name: bool(row[0]) for name, row in zip(unique, rows, strict=True)}
        return [taken.pop(name, False) for name in names]
