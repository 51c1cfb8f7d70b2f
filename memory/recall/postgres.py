"""Search on PostgreSQL, for :class:`~tether.memory.postgres.PostgresStore`.

Words go to the expression index ``messages_search`` (``to_tsvector('simple', text)``,
kept by PostgreSQL in the transaction that writes each turn) as prefix lexemes joined by
``|``, ranked by ``ts_rank``. Text without spaces is one lexeme to that parser, so the
Chinese and Japanese pieces, and terms of one or two characters, are ``ILIKE``
substrings over the scope's rows, which the conversation and owner indexes bound.
:func:`~.query.rank` orders the union, as on SQLite.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether.memory.recall.query import _CJK, Hit, Scope, like_pattern, rank, terms
from tether.memory.recall.sqlite import WIDEN, _hit, scope_sql

_LEXEME = re.compile(r"^\w+$", re.UNICODE)


class PostgresRecall:
    """``search`` over the tsvector index and substrings, for the PostgreSQL store."""

    if TYPE_CHECKING:

        async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Any]: ...

    async def search(self, query: str, scope: Scope, limit: int = 8) -> list[Hit]:
        wanted = terms(query)
        if not wanted or limit <= 0:
            return []
        where, values = scope_sql(scope)
        words = [t for t in wanted.indexed if _LEXEME.match(t) and not _CJK.search(t)]
        pieces = [t for t in wanted.all if t not in words]
        found: list[Hit] = []
        if words:
            tsquery = " | ".join(f"'{w}':*" for w in words)
            rows = await self._rows(
                "SELECT m.id, m.conversation, m.role, m.text, m.created,"
                " ts_rank(to_tsvector('simple', m.text), q) FROM messages m,"
                " to_tsquery('simple', ?) AS q"
                f" WHERE to_tsvector('simple', m.text) @@ q AND {where}"
                " ORDER BY 6 DESC, m.id DESC LIMIT ?",
                [tsquery, *values, limit * WIDEN],
            )
            found += [_hit(row, float(row[5])) for row in rows]
        if pieces:
            likes = " OR ".join("m.text ILIKE ?" for _ in pieces)
            rows = await self._rows(
                "SELECT m.id, m.conversation, m.role, m.text, m.created, 0 FROM messages m"
                f" WHERE {where} AND ({likes}) ORDER BY m.id DESC LIMIT ?",
                [*values, *(like_pattern(t) for t in pieces), limit * WIDEN],
            )
            found += [_hit(row, 0.0) for row in rows]
        return rank(found, wanted, limit)
