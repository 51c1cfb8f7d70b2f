"""Search on SQLite: the FTS5 trigram index ``messages_fts`` (its triggers keep it in the
transaction that writes each turn; memory/sqlite/schema.py), for :class:`SqliteStore`.

Terms of three characters or more go to ``MATCH`` as quoted phrases joined by ``OR``
(a trigram phrase is a substring match), ranked by bm25; shorter ones (two-character
Chinese words, "AI") are ``LIKE`` substrings over the scope's rows, which the
conversation and owner indexes bound. :func:`~.query.rank` orders the union.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether.memory.recall.query import Hit, Scope, like_pattern, rank, terms

#: Candidates read per kind of term, for each hit wanted.
WIDEN = 5


def scope_sql(scope: Scope, column: str = "m.") -> tuple[str, list[Any]]:
    """The scope as a ``WHERE`` clause over ``messages`` (aliased ``m``) and its values."""
    if scope.everywhere:
        if scope.conversation is None:
            return "1 = 1", []
        return f"{column}conversation = ?", [scope.conversation]
    owners = list(scope.owners)
    marks = ", ".join("?" for _ in owners)
    mine = f" OR {column}owner IN ({marks})" if owners else ""
    return f"({column}conversation = ?{mine})", [scope.conversation or "", *owners]


class SqliteRecall:
    """``search`` over the trigram index, for :class:`~tether.memory.sqlite.SqliteStore`."""

    if TYPE_CHECKING:

        async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Any]: ...

    async def search(self, query: str, scope: Scope, limit: int = 8) -> list[Hit]:
        wanted = terms(query)
        if not wanted or limit <= 0:
            return []
        where, values = scope_sql(scope)
        found: list[Hit] = []
        if wanted.indexed:
            phrase = " OR ".join('"' + t.replace('"', '""') + '"' for t in wanted.indexed)
            rows = await self._rows(
                "SELECT m.id, m.conversation, m.role, m.text, m.created, bm25(messages_fts)"
                " FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
                f" WHERE messages_fts MATCH ? AND {where}"
                " ORDER BY bm25(messages_fts) LIMIT ?",
                [phrase, *values, limit * WIDEN],
            )
            found += [_hit(row, -float(row[5])) for row in rows]
        if wanted.short:
            likes = " OR ".join("m.text LIKE ? ESCAPE '\\'" for _ in wanted.short)
            rows = await self._rows(
                "SELECT m.id, m.conversation, m.role, m.text, m.created, 0 FROM messages m"
                f" WHERE {where} AND ({likes}) ORDER BY m.id DESC LIMIT ?",
                [*values, *(like_pattern(t) for t in wanted.short), limit * WIDEN],
            )
            found += [_hit(row, 0.0) for row in rows]
        return rank(found, wanted, limit)


def _hit(row: Sequence[Any], score: float) -> Hit:
    return Hit(
        id=int(row[0]),
        conversation=str(row[1]),
        role=str(row[2]),
        text=str(row[3]),
        created=float(row[4]),
        score=score,
    )
