"""A turn's search with semantic recall: its words and its meaning, ranked as one.

With ``memory.embeddings`` off this is the full-text search, as it always was (and no
embeddings call is made). With it on, the query is embedded, the store's nearest turns
within the same scope are read beside the full-text hits, and both lists (and the
documents' hits, for ``search_memory``) are fused by reciprocal rank
(:mod:`tether.memory.embeddings.hybrid`, the formula in docs/recall.md). So a turn is
found by a word it holds, or by what it means when it shares no word with the query, and
one found both ways ranks first.

The query's vector is a memoized step of the turn (``embed:{digest}``): a turn re-run
after a crash reads it instead of paying for it again; the same query twice in one run
is embedded once. A query the endpoint cannot embed now is searched by its words alone,
and that too is what a re-run of the turn does.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from tether.gateway.handler.context import turn_of
from tether.gateway.llm.embeddings import EmbeddingFailed, Semantic
from tether.memory.embeddings.hybrid import MOST_CANDIDATES, fuse
from tether.memory.embeddings.vectors import decoded, encoded
from tether.memory.recall import Hit, Scope
from tether.memory.recall.query import rank, terms
from tether.memory.recall.sqlite import WIDEN

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context

#: Each run's query vectors by step name, for as long as its context lives.
_runs: WeakKeyDictionary[Context, dict[str, array[float] | None]] = WeakKeyDictionary()


async def recalled(
    ctx: Context, query: str, scope: Scope, limit: int, documents: Sequence[Hit] = ()
) -> list[Hit]:
    """The best ``limit`` of the turns ``scope`` may see for ``query``, and of the
    documents' ``documents`` hits (see the module)."""
    turn = turn_of(ctx)
    semantic = turn.semantic
    if semantic is None:
        hits = await turn.store.search(query, scope, limit)
        return rank([*hits, *documents], terms(query), limit) if documents else hits
    wide = min(MOST_CANDIDATES, limit * WIDEN)
    hits = await turn.store.search(query, scope, wide)
    vector = await query_vector(ctx, semantic, query)
    if vector is None:  # by its words, as with embeddings off
        return rank([*hits, *documents], terms(query), limit)
    near = await semantic.store.neighbours(
        vector, semantic.model, scope, wide, least=semantic.least
    )
    return fuse([hits, near, documents], limit)


async def query_vector(ctx: Context, semantic: Semantic, query: str) -> array[float] | None:
    """``query``'s vector, a memoized step of ``ctx``'s turn; None when the endpoint
    could not embed it (logged; the search goes on by its words)."""
    digest = hashlib.sha256(f"{semantic.model}\0{query}".encode()).hexdigest()[:16]
    name = f"embed:{digest}"
    memo = _runs.setdefault(ctx, {})
    if name in memo:
        return memo[name]

    async def embed() -> str | None:
        try:
            [vector] = await semantic.embedder.embed([query], "query")
        except EmbeddingFailed as exc:
            ctx.log.warning("embeddings.query_failed", error=str(exc))
            return None
        return encoded(vector)

    stored = await ctx.step(name, embed)
    memo[name] = vector = decoded(stored) if isinstance(stored, str) else None
    return vector
