"""Content-addressed bytes: the files of replies, stored before the rows that name them.

``ctx.reply(files=...)`` puts each file's bytes here while the handler runs, under
their sha256; the outbox row that the checkpoint commits names only that hash. So a
row can never point at bytes that are not stored (the bytes were durable first), a
handler that runs again stores nothing new (same bytes, same key), and a resend after
a crash uploads exactly what the first attempt did. A blob no row names is harmless
(a handler that failed after storing it); it is never read.

The two SQL stores share :class:`SqlBlobs` (one table, ``blobs``, in both schemas); the
in-memory store keeps a dict (:class:`MemoryBlobs`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

from tether.memory.sql.statements import STEP, Statement

#: The largest file a reply may carry: Telegram's bot upload limit (Discord's is 10 MB
#: without boosts, Feishu's 30 MB for files and 10 MB for images; they refuse more).
MAX_BLOB_BYTES = 50 * 1024 * 1024

BLOB_SAVED = (
    "INSERT INTO blobs (sha256, data, size, created) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (sha256) DO NOTHING"
)
BLOB = "SELECT data FROM blobs WHERE sha256 = ?"


class BlobTooLarge(ValueError):
    """A file over :data:`MAX_BLOB_BYTES` (or the cap the caller gave)."""


def blob_key(data: bytes) -> str:
    """The key of ``data``: its sha256, in hex."""
    return hashlib.sha256(data).hexdigest()


def check_size(data: bytes, cap: int = MAX_BLOB_BYTES) -> None:
    if len(data) > cap:
        raise BlobTooLarge(f"a file of {len(data)} bytes is over the cap of {cap} bytes")


class _Sql(Protocol):
    def _write(self, phase: int, *statements: Statement) -> Awaitable[None]: ...

    async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]: ...


class SqlBlobs:
    """``put_blob``/``blob`` for a store with ``_write`` and ``_rows`` (both SQL stores)."""

    async def put_blob(self: _Sql, data: bytes) -> str:
        check_size(data)
        key = blob_key(data)
        await self._write(STEP, (BLOB_SAVED, (key, data, len(data), time.time())))
        return key

    async def blob(self: _Sql, key: str) -> bytes | None:
        rows = await self._rows(BLOB, (key,))
        return bytes(rows[0][0]) if rows else None


class MemoryBlobs:
    """``put_blob``/``blob`` for the in-memory store."""

    _blobs: dict[str, bytes]

    async def put_blob(self, data: bytes) -> str:
        check_size(data)
        key = blob_key(data)
        if not hasattr(self, "_blobs"):
            self._blobs = {}
        self._blobs.setdefault(key, bytes(data))
        return key

    async def blob(self, key: str) -> bytes | None:
        return getattr(self, "_blobs", {}).get(key)
