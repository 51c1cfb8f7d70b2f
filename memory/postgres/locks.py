"""Lane locks for the PostgreSQL store: session advisory locks, many per round trip.

A lane (a conversation's events, a chat's replies) is run by one process at a time: it
holds ``pg_try_advisory_lock`` on a connection of its own, so a crashed process's locks
go with its connection. Every try and every release used to be a round trip on that one
connection, one after another; each instance's sweep pokes every busy lane (most held
by another instance), so with three instances those tries queued in front of the real
work (bench/scaleout.py: 2,400 tries for 1,000 events). Here the operations asked for
while one is in flight go together: consecutive tries in one query, consecutive
releases in another, in the order they were asked for.

A lock lives as long as the session that took it. When the session ends under this
process — PostgreSQL restarted or failed over, ``pg_terminate_backend``, a proxy that
cut the connection — every lock it held is gone at once, and other instances' sweeps
take those lanes over within an interval, while this process would still be running
them. So the session is watched: asyncpg calls a connection's termination listeners
when the server closes it, whether or not a query was in flight, and a query on a broken
connection raises. Either way the session is written off with everything it held: the
:meth:`AdvisoryLocks.on_lost` callbacks get the names (the lanes stop running them,
gateway/core/lanes.py), ``store.lane_locks_lost`` is logged, and the next try opens a
new session, where each lane must be taken again like any other. A query on the lock
connection that fails for any other reason (an asyncpg ``InternalClientError``, a query
cancelled half-way) ends the session too: which locks it holds is no longer known (a try
cut off may have been granted), and a closed session is known to hold nothing.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import asyncpg
import structlog

from tether import metrics

Op = Literal["lock", "unlock"]
#: Told the names of the locks a lost session held.
LostLocks = Callable[[frozenset[str]], None]

_QUERIES: dict[Op, str] = {
    "lock": "SELECT pg_try_advisory_lock(hashtextextended(n, 0))"
    " FROM unnest($1::text[]) WITH ORDINALITY AS t(n, i) ORDER BY i",
    "unlock": "SELECT pg_advisory_unlock(hashtextextended(n, 0))"
    " FROM unnest($1::text[]) WITH ORDINALITY AS t(n, i) ORDER BY i",
}
#: Lock names a ``store.lane_locks_lost`` line lists (the count has them all).
_NAMES_LOGGED = 20

log = structlog.get_logger("tether.postgres")


@dataclass(slots=True)
class _Ask:
    op: Op
    name: str
    done: asyncio.Future[bool]


class AdvisoryLocks:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._connection: asyncpg.Connection | None = None
        self._backend = 0  # the session's server process, for the log
        #: What the current session holds, and how often (a session lock taken twice is
        #: held until released twice).
        self._held: Counter[str] = Counter()
        self._on_lost: list[LostLocks] = []
        self._waiting: list[_Ask] = []
        self._flusher: asyncio.Task[None] | None = None

    async def try_lock(self, name: str) -> bool:
        """Take the lock ``name``; False if another process (or lane here) holds it."""
        return await self._ask("lock", name)

    async def unlock(self, name: str) -> None:
        if self._held[name] > 0:  # else its session is gone, and the lock with it
            await self._ask("unlock", name)

    def on_lost(self, callback: LostLocks) -> None:
        """Call ``callback`` with the names held whenever the session is lost."""
        self._on_lost.append(callback)

    async def close(self) -> None:
        while self._flusher is not None:
            await asyncio.shield(self._flusher)
        connection, self._connection = self._connection, None  # closed on purpose: not lost
        self._held.clear()
        if connection is not None:
            await connection.close()

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
        key). Releases are sent for what this session holds, duplicates included: a
        session lock taken twice (in two batches) is held until released twice, as it
        was taken. A lock granted by a session that was lost before the answer was read
        is answered False: it is gone already.
        """
        if op == "unlock":
            return await self._release(names)
        connection = self._live() or await self._connect()
        unique = list(dict.fromkeys(names))
        rows = await self._query(connection, op, unique)
        if connection is not self._connection:
            return [False] * len(names)  # lost while the answer was on its way
        taken = {name: bool(row[0]) for name, row in zip(unique, rows, strict=True)}
        self._held.update(name for name, granted in taken.items() if granted)
        return [taken.pop(name, False) for name in names]

    async def _release(self, names: list[str]) -> list[bool]:
        left = self._held.copy()
        held_at = []  # which of the names this session holds (a lost one's are gone)
        for index, name in enumerate(names):
            if left[name] > 0:
                left[name] -= 1
                held_at.append(index)
        answers = [False] * len(names)
        connection = self._live()
        if not held_at or connection is None:
            return answers
        sent = [names[index] for index in held_at]
        rows = await self._query(connection, "unlock", sent)
        if connection is self._connection:
            self._held -= Counter(sent)
        for index, row in zip(held_at, rows, strict=True):
            answers[index] = bool(row[0])
        return answers

    def _live(self) -> asyncpg.Connection | None:
        """The session's connection, unless it has closed (its listener may not have
        run yet): then it is lost now."""
        connection = self._connection
        if connection is not None and connection.is_closed():
            self._lose(connection, "the server closed the connection")
            return None
        return connection

    async def _query(
        self, connection: asyncpg.Connection, op: Op, names: list[str]
    ) -> list[asyncpg.Record]:
        try:
            return list(await connection.fetch(_QUERIES[op], names))
        except BaseException as exc:
            self._lose(connection, f"{op} failed: {type(exc).__name__}: {exc}")
            raise

    async def _connect(self) -> asyncpg.Connection:
        connection = await asyncpg.connect(self.dsn)
        connection.add_termination_listener(self._terminated)
        self._connection, self._backend = connection, connection.get_server_pid()
        log.info("store.lane_locks_connected", backend_pid=self._backend)
        return connection

    def _terminated(self, connection: asyncpg.Connection) -> None:
        self._lose(connection, "the server closed the connection")

    def _lose(self, connection: asyncpg.Connection, reason: str) -> None:
        """The session of ``connection`` is over, or can no longer be trusted: end it,
        and tell the lanes that everything it held is gone."""
        if self._connection is None or connection is not self._connection:
            return  # closed on purpose, or written off already
        self._connection = None
        held = frozenset(self._held)
        self._held.clear()
        connection.terminate()  # if it is still open, the server releases what it holds
        metrics.LANE_LOCKS_LOST.inc(len(held))
        level = log.error if held else log.warning
        level(
            "store.lane_locks_lost",
            reason=reason,
            backend_pid=self._backend,
            locks=len(held),
            names=sorted(held)[:_NAMES_LOGGED],
        )
        for callback in self._on_lost:
            callback(held)
