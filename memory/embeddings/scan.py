"""The nearest vectors by a scan: every vector the scope may see, compared with the
query's, the best kept. Used where the database has no vector index (SQLite, whose
Python here cannot load sqlite-vec; the in-memory store). Linear in the scope's turns,
which the scope's ``WHERE`` has already cut to one person's conversations or one chat.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any

from tether.memory.embeddings.vectors import Vector, similarity, unpacked
from tether.memory.recall.query import Hit


def nearest(
    query: Vector, rows: Iterable[tuple[int, Vector]], limit: int, least: float
) -> list[tuple[float, int]]:
    """(similarity, id) of the ``limit`` rows nearest ``query``, at least ``least``,
    best first (the newer of equals first)."""
    scored = ((similarity(query, vector), ident) for ident, vector in rows)
    return heapq.nlargest(limit, (pair for pair in scored if pair[0] >= least))


def nearest_blobs(
    query: Vector, rows: Sequence[Sequence[Any]], limit: int, least: float
) -> list[tuple[float, int]]:
    """:func:`nearest` over ``(id, float32 BLOB)`` rows (run in a thread)."""
    return nearest(query, ((int(row[0]), unpacked(row[1])) for row in rows), limit, least)


def ordered(best: Sequence[tuple[float, int]], rows: Sequence[Sequence[Any]]) -> list[Hit]:
    """``rows`` (id, conversation, role, text, created) as hits in ``best``'s order,
    scored by their similarity; an id without a row (gone meanwhile) is left out."""
    by_id = {int(row[0]): row for row in rows}
    return [
        Hit(ident, str(row[1]), str(row[2]), str(row[3]), float(row[4]), score)
        for score, ident in best
        if (row := by_id.get(ident)) is not None
    ]
