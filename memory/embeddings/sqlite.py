"""Vectors on SQLite, for :class:`~tether.memory.sqlite.SqliteStore`.

``message_vectors(message_id, model, vector)`` holds each turn's float32 BLOB (the
layout sqlite-vec reads), written through the store's writer process like every other
write, removed by a trigger with its turn (memory/sqlite/schema.py). The nearest turns
are found by a scan (:mod:`.scan`) of the vectors the scope's ``WHERE`` lets through
(the newest :data:`~.store.SCAN_MOST`):
the stdlib ``sqlite3`` of many Python builds, this one's too, cannot load extensions,
so sqlite-vec is not required to run anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether.memory.embeddings import store
from tether.memory.embeddings.scan import nearest_blobs, ordered
from tether.memory.embeddings.store import UNEMBEDDED, VECTOR_COUNT, Commit
from tether.memory.embeddings.vectors import Vector, packed, unit
from tether.memory.recall.query import Hit, Scope
from tether.memory.recall.sqlite import scope_sql
from tether.memory.sql.statements import OUTBOX

#: Insert-or-ignore, and only for a turn that still exists (the WHERE also settles
#: SQLite's parse of ``INSERT ... SELECT ... ON CONFLICT``).
SAVED = (
    "INSERT INTO message_vectors (message_id, model, vector)"
    " SELECT id, ?, ? FROM messages WHERE id = ? ON CONFLICT DO NOTHING"
)
_IN_SCOPE = (
    "SELECT v.message_id, v.vector FROM message_vectors v"
    " JOIN messages m ON m.id = v.message_id WHERE v.model = ? AND {where}"
    " ORDER BY v.message_id DESC LIMIT ?"
)
_ROWS = "SELECT id, conversation, role, text, created FROM messages WHERE id IN ({marks})"


class SqliteEmbeddings:
    """:class:`~tether.memory.embeddings.store.EmbeddingStore` on SQLite."""

    if TYPE_CHECKING:

        async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Any]: ...

        _write: Commit

    async def unembedded(self, model: str, after: int, limit: int) -> list[tuple[int, str]]:
        rows = await self._rows(UNEMBEDDED, (after, model, limit))
        return [(int(ident), str(text)) for ident, text in rows]

    async def save_vectors(self, model: str, vectors: Sequence[tuple[int, Vector]]) -> None:
        if vectors:
            # The last phase: nothing else in a batch depends on these rows.
            saved = [(SAVED, (model, packed(unit(v)), ident)) for ident, v in vectors]
            await self._write(OUTBOX, *saved)

    async def neighbours(
        self, vector: Vector, model: str, scope: Scope, limit: int, *, least: float = 0.0
    ) -> list[Hit]:
        if limit <= 0:
            return []
        where, values = scope_sql(scope)
        rows = await self._rows(_IN_SCOPE.format(where=where), [model, *values, store.SCAN_MOST])
        best = await asyncio.to_thread(nearest_blobs, unit(vector), rows, limit, least)
        if not best:
            return []
        marks = ", ".join("?" for _ in best)
        found = await self._rows(_ROWS.format(marks=marks), [ident for _, ident in best])
        return ordered(best, found)

    async def vector_count(self, model: str) -> int:
        rows = await self._rows(VECTOR_COUNT, (model,))
        return int(rows[0][0])
