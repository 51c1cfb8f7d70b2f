"""Spent console tokens: a session ended by logout, a login form already used.

The console's session cookie is signed, not looked up, so that a restart does not log
the operator out; what a signature cannot say is that the cookie was given up. That is
a row here, ``console_revoked(id, until, claim)``, kept in the store rather than in one
process: a logout then holds after a restart and on every instance sharing a PostgreSQL
database, and a login form's one-time value is spent once for all of them.

:meth:`~RevocationStore.revoke` is the one write, and it says who spent a token first:
the insert is insert-or-ignore with a random ``claim``, read back afterwards, so of two
requests racing with the same value (on one instance or two) exactly one sees its own
claim. A row is only needed until the token would have expired anyway (``until``, epoch
seconds); each revoke deletes the expired ones, so the table stays as small as the number
of tokens spent within a session's lifetime.

Both SQL stores share :class:`SqlRevocations` (one table in both schemas); the
in-memory store keeps a dict (:class:`MemoryRevocations`).
"""

from __future__ import annotations

import abc
import secrets
import time
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

from tether.memory.sql.statements import FINISH, Statement

SPENT = (
    "INSERT INTO console_revoked (id, until, claim) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING"
)
EXPIRED = "DELETE FROM console_revoked WHERE until < ?"
CLAIM = "SELECT claim FROM console_revoked WHERE id = ? AND until >= ?"


class RevocationStore(Protocol):
    """Console tokens given up before they expire (:mod:`tether.memory.revocations`)."""

    @abc.abstractmethod
    async def revoke(self, token: str, until: float) -> bool:
        """Mark ``token`` spent until ``until`` (epoch seconds); True for the first
        caller to revoke it, False when it was spent already (here or on another
        instance)."""

    @abc.abstractmethod
    async def revoked(self, token: str) -> bool:
        """Whether ``token`` was spent and has not expired yet."""


class _Sql(Protocol):
    def _write(self, phase: int, *statements: Statement) -> Awaitable[None]: ...

    async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]: ...


class SqlRevocations:
    """:class:`RevocationStore` for a store with ``_write`` and ``_rows`` (both SQL stores)."""

    async def revoke(self: _Sql, token: str, until: float) -> bool:
        claim, now = secrets.token_hex(8), time.time()
        await self._write(FINISH, (EXPIRED, (now,)), (SPENT, (token, float(until), claim)))
        rows = await self._rows(CLAIM, (token, now))
        return bool(rows) and str(rows[0][0]) == claim

    async def revoked(self: _Sql, token: str) -> bool:
        return bool(await self._rows(CLAIM, (token, time.time())))


class MemoryRevocations:
    """:class:`RevocationStore` in a dict, for the in-memory store."""

    _revoked_tokens: dict[str, float]

    def _spent_tokens(self) -> dict[str, float]:
        if not hasattr(self, "_revoked_tokens"):
            self._revoked_tokens = {}
        return self._revoked_tokens

    async def revoke(self, token: str, until: float) -> bool:
        kept, now = self._spent_tokens(), time.time()
        for expired in [t for t, at in kept.items() if at < now]:
            del kept[expired]
        if token in kept or until < now:
            return False
        kept[token] = float(until)
        return True

    async def revoked(self, token: str) -> bool:
        return self._spent_tokens().get(token, 0.0) >= time.time()
