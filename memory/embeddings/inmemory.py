"""Vectors in the in-memory store (the tests' and ``memory://``'s): a dict beside the
turns, searched by the same scan and scope rule as the SQL stores."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from tether.memory.embeddings import store
from tether.memory.embeddings.scan import nearest
from tether.memory.embeddings.vectors import Vector, unit
from tether.memory.recall.inmemory import _in
from tether.memory.recall.query import Hit, Scope

if TYPE_CHECKING:
    from tether.memory.records import Turn


class MemoryEmbeddings:
    """:class:`~tether.memory.embeddings.store.EmbeddingStore` in memory."""

    if TYPE_CHECKING:
        _turns: dict[str, list[Turn]]

    def _vectors(self) -> dict[tuple[int, str], array[float]]:
        if not hasattr(self, "_turn_vectors"):
            self._turn_vectors: dict[tuple[int, str], array[float]] = {}
        return self._turn_vectors

    def _all_turns(self) -> Iterator[Turn]:
        for turns in self._turns.values():
            yield from turns

    async def unembedded(self, model: str, after: int, limit: int) -> list[tuple[int, str]]:
        kept = self._vectors()
        found = sorted(
            (turn.id, turn.text)
            for turn in self._all_turns()
            if turn.id > after and (turn.id, model) not in kept
        )
        return found[:limit]

    async def save_vectors(self, model: str, vectors: Sequence[tuple[int, Vector]]) -> None:
        kept, stored = self._vectors(), {turn.id for turn in self._all_turns()}
        for ident, vector in vectors:
            if ident in stored:
                kept.setdefault((ident, model), unit(vector))

    async def neighbours(
        self, vector: Vector, model: str, scope: Scope, limit: int, *, least: float = 0.0
    ) -> list[Hit]:
        kept = self._vectors()
        seen = {
            turn.id: turn
            for conversation, turns in self._turns.items()
            for turn in turns
            if _in(scope, conversation, turn.owner) and (turn.id, model) in kept
        }
        newest = sorted(seen, reverse=True)[: store.SCAN_MOST]
        rows = ((ident, kept[ident, model]) for ident in newest)
        best = nearest(unit(vector), rows, limit, least) if limit > 0 else []
        return [
            Hit(ident, seen[ident].conversation, seen[ident].role, seen[ident].text,
                seen[ident].created, score)
            for score, ident in best
        ]  # fmt: skip

    async def vector_count(self, model: str) -> int:
        stored = {turn.id for turn in self._all_turns()}  # erased turns' vectors do not count
        return sum(1 for ident, named in self._vectors() if named == model and ident in stored)
