"""PostgreSQL's side of the lane locks: which session holds one, and ending that session
as a server restart, a failover or an operator's ``pg_terminate_backend`` would."""

from __future__ import annotations

import asyncpg

#: The backend holding the session advisory lock named ``$1``. A lane's key is one
#: bigint, ``hashtextextended(name, 0)`` (memory/postgres/locks.py), which ``pg_locks``
#: shows as its high and low 32 bits.
_HOLDER = """
WITH k AS (SELECT hashtextextended($1, 0) AS k)
SELECT l.pid FROM pg_locks l, k
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.classid::bigint = (k.k >> 32) & 4294967295 AND l.objid::bigint = k.k & 4294967295
"""


async def lock_holder(dsn: str, name: str) -> int | None:
    """The server process whose session holds lock ``name``, or None."""
    admin = await asyncpg.connect(dsn)
    try:
        pid: int | None = await admin.fetchval(_HOLDER, name)
        return pid
    finally:
        await admin.close()


async def end_session_holding(dsn: str, name: str) -> int:
    """Terminate the session that holds lock ``name``; returns its server process."""
    pid = await lock_holder(dsn, name)
    assert pid is not None, f"no session holds {name}"
    admin = await asyncpg.connect(dsn)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()
    return pid
