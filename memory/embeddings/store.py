"""What a store keeps for semantic recall: one vector per turn and model, and the
nearest turns a scope may see.

A turn's vector is written once, keyed by the turn's row id and the model that made it
(``message_vectors``), and removed with the turn (a trigger on SQLite, a cascading
foreign key on PostgreSQL: an erased turn leaves no vector behind). Writing it again is
a no-op, and a vector whose turn is gone by then is dropped, so the indexer
(gateway/llm/indexing.py) may be cut off and re-run at any point. Which turns lack a
vector is a question to the store, so a restart embeds only those.

:meth:`EmbeddingStore.neighbours` applies the asker's :class:`~tether.memory.recall.Scope`
in its query's ``WHERE`` (:func:`~tether.memory.recall.sqlite.scope_sql`), exactly as the
full-text search does: a vector never brings back a turn its words could not.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Sequence
from typing import Protocol

from tether.memory.embeddings.vectors import Vector
from tether.memory.recall.query import Hit, Scope
from tether.memory.sql.statements import Statement

#: Turns after an id without a vector of a model, oldest first (both SQL stores).
UNEMBEDDED = (
    "SELECT m.id, m.text FROM messages m WHERE m.id > ? AND NOT EXISTS"
    " (SELECT 1 FROM message_vectors v WHERE v.message_id = m.id AND v.model = ?)"
    " ORDER BY m.id LIMIT ?"
)
VECTOR_COUNT = "SELECT count(*) FROM message_vectors WHERE model = ?"
#: The newest turns of a scope compared with a query, at most: without a vector index
#: the comparison is a scan (6 KB a turn at 1,536 dimensions), so a scope as large as a
#: busy shared group's is searched by meaning in its newest turns, by words in all.
SCAN_MOST = 20_000


class Commit(Protocol):
    """A SQL store's ``_write``: statements committed as one transaction, in a phase."""

    def __call__(self, phase: int, *statements: Statement) -> Awaitable[None]: ...


class EmbeddingStore(Protocol):
    """Vectors of turns (see the module)."""

    @abc.abstractmethod
    async def unembedded(self, model: str, after: int, limit: int) -> list[tuple[int, str]]:
        """Up to ``limit`` turns (id, text) with an id above ``after`` and no vector of
        ``model``, oldest first."""

    @abc.abstractmethod
    async def save_vectors(self, model: str, vectors: Sequence[tuple[int, Vector]]) -> None:
        """Keep each (turn id, vector) of ``model``, scaled to unit length; a turn that has
        one already keeps it, a turn that no longer exists gets none."""

    @abc.abstractmethod
    async def neighbours(
        self, vector: Vector, model: str, scope: Scope, limit: int, *, least: float = 0.0
    ) -> list[Hit]:
        """The ``limit`` turns ``scope`` may see whose ``model`` vectors are most similar
        to ``vector`` (cosine, at least ``least``), best first; ``score`` is the
        similarity."""

    @abc.abstractmethod
    async def vector_count(self, model: str) -> int:
        """How many turns have a vector of ``model``."""
