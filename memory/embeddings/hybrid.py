"""Hybrid ranking: the full-text hits and the vector neighbours of one query, as one list.

Reciprocal rank fusion (Cormack, Clarke and Büttcher, SIGIR 2009): each list votes for
its hits by their place in it, and a hit's score is the sum of its votes,

    score(turn) = Σ over the lists that hold it of 1 / (K + rank), rank counted from 1,

with K = 60. Ranks, not the engines' own scores, are added: bm25, ts_rank and cosine
similarity are on scales that cannot be compared, and ranks need no tuning per model.
A turn both lists hold gets two votes, so it ranks above every turn only one of them
holds while each list has at most K + 1 entries (2 / (K + n) > 1 / (K + 1) for n ≤ K + 1);
:data:`MOST_CANDIDATES` keeps each list within that. Ties go to the newer turn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tether.memory.recall.query import Hit

#: The fusion constant: how much the first places count over the later ones.
K = 60
#: Candidates each list may bring (see the module: a turn found both ways ranks first).
MOST_CANDIDATES = K + 1


def fuse(rankings: Sequence[Sequence[Hit]], limit: int) -> list[Hit]:
    """The best ``limit`` hits of ``rankings`` (each best first), fused as the module
    says; each hit once, its ``score`` the fused one."""
    scores: dict[int, float] = {}
    first: dict[int, Hit] = {}
    for ranking in rankings:
        for place, hit in enumerate(ranking[:MOST_CANDIDATES], start=1):
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (K + place)
            first.setdefault(hit.id, hit)
    best = sorted(scores, key=lambda ident: (scores[ident], first[ident].created), reverse=True)
    return [dataclasses.replace(first[ident], score=scores[ident]) for ident in best[:limit]]
