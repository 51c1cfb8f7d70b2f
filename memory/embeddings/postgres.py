"""Vectors on PostgreSQL, for :class:`~tether.memory.postgres.PostgresStore`.

``message_vectors(message_id, model, vector real[])``, removed with its turn by a
cascading foreign key (memory/postgres/schema.py). pgvector is not assumed (it is an
extension a managed server may not offer, and the test server here has none): the
similarity is a sum of products over ``unnest`` of the two arrays, computed by the
server for the rows the scope's ``WHERE`` lets through (the newest
:data:`~.store.SCAN_MOST`), the best ``LIMIT`` returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether.memory.embeddings import store
from tether.memory.embeddings.store import UNEMBEDDED, VECTOR_COUNT, Commit
from tether.memory.embeddings.vectors import Vector, unit
from tether.memory.recall.query import Hit, Scope
from tether.memory.recall.sqlite import scope_sql
from tether.memory.sql.statements import OUTBOX

#: Insert-or-ignore, and only for a turn that still exists.
SAVED = (
    "INSERT INTO message_vectors (message_id, model, vector)"
    " SELECT id, ?, ?::real[] FROM messages WHERE id = ? ON CONFLICT DO NOTHING"
)
_NEAREST = (
    "SELECT m.id, m.conversation, m.role, m.text, m.created, s.similarity"
    " FROM (SELECT v.message_id, v.vector FROM message_vectors v"
    " JOIN messages m ON m.id = v.message_id WHERE v.model = ? AND {where}"
    " ORDER BY v.message_id DESC LIMIT ?) c JOIN messages m ON m.id = c.message_id,"
    " LATERAL (SELECT sum(a * b) AS similarity FROM unnest(c.vector, ?::real[]) AS t(a, b)) s"
    " WHERE s.similarity >= ?"
    " ORDER BY s.similarity DESC, m.id DESC LIMIT ?"
)


class PostgresEmbeddings:
    """:class:`~tether.memory.embeddings.store.EmbeddingStore` on PostgreSQL."""

    if TYPE_CHECKING:

        async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Any]: ...

        _write: Commit

    async def unembedded(self, model: str, after: int, limit: int) -> list[tuple[int, str]]:
        rows = await self._rows(UNEMBEDDED, (after, model, limit))
        return [(int(ident), str(text)) for ident, text in rows]

    async def save_vectors(self, model: str, vectors: Sequence[tuple[int, Vector]]) -> None:
        if vectors:
            saved = [(SAVED, (model, list(unit(v)), ident)) for ident, v in vectors]
            await self._write(OUTBOX, *saved)

    async def neighbours(
        self, vector: Vector, model: str, scope: Scope, limit: int, *, least: float = 0.0
    ) -> list[Hit]:
        if limit <= 0:
            return []
        where, values = scope_sql(scope)
        query = [list(unit(vector)), least, limit]
        rows = await self._rows(
            _NEAREST.format(where=where), [model, *values, store.SCAN_MOST, *query]
        )
        return [
            Hit(int(r[0]), str(r[1]), str(r[2]), str(r[3]), float(r[4]), float(r[5])) for r in rows
        ]

    async def vector_count(self, model: str) -> int:
        rows = await self._rows(VECTOR_COUNT, (model,))
        return int(rows[0][0])
