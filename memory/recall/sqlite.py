"""Search on SQLite: the FTS5 trigram index ``messages_fts`` (its triggers keep it in the
transaction that writes each turn; memory/sqlite/schema.py), for :class:`SqliteStore`.

The plan is chosen by the size of the asker's scope, because what a statement reads is
the larger of the scope and the index's matches, not the hits kept (bench/NOTES.md,
"Full-text recall at 1,000,000 turns"):

- **A small scope** (nearly every person's: at most :data:`SMALL_SCOPE` rows for a
  one-term query, fewer for more terms; counted on the ``messages_conversation`` and
  ``messages_owner`` indexes, never past the bound): its rows are read through those
  indexes, every term a substring test (:mod:`.substring`). A common word matches
  ~30,000 of 1,000,000 turns in the index where the scope holds a few hundred, so the
  scope is the smaller read. One term: each index walked newest first until it has the
  candidates. Several: every row, each term's count in the scope taken on the way, the
  rows holding most terms (the rarer first) kept.
- **A larger scope of a person's** (the busiest conversations, 20,000 to 45,000 of
  1,000,000 turns): read as a small one, but only the newest :data:`WINDOW` rows of each
  of its indexes. A term rarer than that there goes to ``MATCH`` as below, as far back as
  it takes; a common one does not, because the index walks a word's matches back until
  it meets enough of the scope's, and the scope is a twenty-fifth of them (~13 ms a word).
  Terms held together and terms of one or two characters are not looked for further back.
- **The operator's**: terms of three characters or more go to ``MATCH``, each phrase
  walked newest first (``ORDER BY rowid DESC``) so FTS5 stops once it has its
  candidates; how far back a phrase had to go for them tells how rare it is. Then each
  pair of the three rarest terms together (newest first too), so an old turn holding
  two rare terms is not crowded out by the newest turns holding a common one. No bm25:
  its weights need the count of every turn each phrase matches, a read of the whole
  doclist (~13 ms for a common word in 1,000,000 turns) however few rows are kept. Terms
  of one or two characters (two-character Chinese words, "AI"), which the trigram index
  cannot take, are tested in the newest :data:`SHORT_SCAN` rows, and are not found
  further back.

Either way :func:`~.query.rank` orders the candidates, alike for both plans: the terms
held, then bm25's weighting (:func:`_weight`) with each term's rarity counted in the rows
read and estimated from how far back the index walked, then the newest.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import TYPE_CHECKING, Any

from tether.memory.recall.query import Hit, Scope, Terms, rank, terms
from tether.memory.recall.substring import matches, values

#: Candidates read per kind of term, for each hit wanted.
WIDEN = 5
#: A scope of at most this many rows is read whole for a one-term query (for ``k``
#: terms ``4 / (3 + k)`` of it: a row read costs about three substring tests, ~1 µs in
#: all, so the largest such read is ~20 ms however many terms).
SMALL_SCOPE = 20_000
#: In a larger scope, a 1-2 character term is looked for in at most this many of the
#: newest rows of each index the scope walks (nothing indexes such a term).
SHORT_SCAN = 10_000
#: A large scope of a person's is read as a small one in this many of the newest rows
#: of each of its indexes (a row read there costs ~1.3 µs: its page is seldom a
#: neighbour's), and through the index beyond them for the terms rarer there.
WINDOW = 5_000
#: Terms of the operator's query that are also asked for in pairs: the rarest (an
#: empty pair costs a walk of its rarer term's matches, ~12 ms for a common word).
PAIRED = 3
_COLUMNS = "m.id, m.conversation, m.role, m.text, m.created"
#: bm25's constants (FTS5's): how soon saying a term again stops counting, and how much
#: a long turn is discounted.
K1, B = 1.2, 0.75
#: An index a scope is read by, and its value: ("conversation", key) or ("owner", who).
Branch = tuple[str, str]
Statement = tuple[str, list[Any]]


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

    #: Per store, so a test can take either plan with a few rows.
    recall_small_scope: int = SMALL_SCOPE
    recall_short_scan: int = SHORT_SCAN
    recall_window: int = WINDOW

    if TYPE_CHECKING:

        async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Any]: ...

    async def search(self, query: str, scope: Scope, limit: int = 8) -> list[Hit]:
        wanted = terms(query)
        if not wanted or limit <= 0:
            return []
        wide = limit * WIDEN
        small = await self._small(scope, len(wanted.all))
        if small is not None and len(wanted.all) == 1:  # each match holds it all
            rows = await self._rows(*_newest(small, wanted.all, wide))
            return _ranked(rows, wanted, limit, {})
        if small is not None:
            rows = await self._rows(*_held(small, wanted.all, wide))
            if not rows:
                return []
            scope_rows, _, *counts = (int(n) for n in rows[0][5:])  # the same on every row
            rarity = {t: _idf(df, scope_rows) for t, df in zip(wanted.all, counts, strict=True)}
            return _ranked(rows, wanted, limit, rarity)
        [(top,)] = await self._rows("SELECT coalesce(max(id), 0) FROM messages")
        branches = _branches(scope)
        if branches is not None:
            return await self._large(wanted, scope, branches, wide, limit, int(top))
        found, rarity = await self._indexed(wanted, scope, wide, int(top))
        if wanted.short:
            short = await self._rows(
                *_newest(_branches(scope), wanted.short, wide, scan=self.recall_short_scan)
            )
            holding = {t: [int(r[0]) for r in short if t in _fold(str(r[3]))] for t in wanted.short}
            rarity |= _spans(holding, wide, int(top))
            found += short
        return _ranked(found, wanted, limit, rarity)

    async def _large(
        self, wanted: Terms, scope: Scope, branches: list[Branch], wide: int, limit: int, top: int
    ) -> list[Hit]:
        """A large scope of a person's: its newest rows read as a small scope is, then
        each term of three characters or more that is rarer there than ``wide`` walked
        through the index newest first, in scope, as far back as it takes."""
        rows = await self._rows(*_held(branches, wanted.all, wide, scan=self.recall_window))
        counts = [int(n) for n in rows[0][7:]] if rows else [0] * len(wanted.all)
        read, oldest = (int(rows[0][5]), int(rows[0][6])) if rows else (0, top + 1)
        rarity = {t: _idf(df, read) for t, df in zip(wanted.all, counts, strict=True) if df}
        seen = dict(zip(wanted.all, counts, strict=True))
        rare = [t for t in wanted.indexed if seen[t] < wide]
        found: list[Any] = [row[:5] for row in rows]
        if rare:  # each beyond the rows read, to make up its candidates (a seek there)
            where, bound = scope_sql(scope)
            where, bound = f"messages_fts.rowid < ? AND {where}", [oldest, *bound]
            asks = [(_phrase([t]), max(limit, wide - seen[t])) for t in rare]
            walks = await self._rows(*_fts(asks, where, bound))
            density = read / max(top - oldest + 1, 1)  # of the scope's among all rows
            for i, (t, (_, most)) in enumerate(zip(rare, asks, strict=True)):
                ids = [int(row[0]) for row in walks if row[5] == i]
                back = oldest - min(ids) if len(ids) >= most else oldest  # stopped, or all
                held = seen[t] + len(ids)
                rarity[t] = _idf(held, max(read + int(density * back), held))
            found += walks
        return _ranked(found, wanted, limit, rarity)

    async def _small(self, scope: Scope, count: int) -> list[Branch] | None:
        """The indexes to read a scope of ``count`` terms by, if it is small enough to
        read whole (None: it is not, or it is everything). Reading a row costs about
        three substring tests, so the bound falls with the terms: ``recall_small_scope``
        rows for one, half that for five. Counted on the indexes, never past the bound.
        A DM's rows are its person's too: then only the owner index is walked, as a
        conversation whose owner rows are all its own is walked by its own index."""
        branches = _branches(scope)
        if branches is None:
            return None
        bound = self.recall_small_scope * 4 // (3 + count)
        parts = [branches] if len(branches) == 1 else [branches, branches[:1], branches[1:]]
        counted, params = [], []
        for part in parts:
            counted.append(
                f"(SELECT count(*) FROM (SELECT 1 FROM messages m WHERE {_either(part)} LIMIT ?))"
            )
            params += [*(value for _, value in part), bound + 1]
        [counts] = await self._rows("SELECT " + ", ".join(counted), params)
        every, *sides = (int(n) for n in counts)
        if every > bound:
            return None
        if sides and every == sides[1]:  # the conversation's rows are all its owners'
            return branches[1:]
        if sides and every == sides[0]:  # the owners' rows are all in the conversation
            return branches[:1]
        return branches

    async def _indexed(
        self, wanted: Terms, scope: Scope, wide: int, top: int
    ) -> tuple[list[Any], dict[str, float]]:
        """The operator's candidates through the index, and each phrase's rarity: each
        phrase newest first, then the rarest together (see the module). A phrase that
        had fewer than ``wide`` matches in scope was read in full: every turn holding
        it with others is a candidate already, so it is asked for in no group."""
        phrases = list(wanted.indexed)
        if not phrases:
            return [], {}
        where, bound = scope_sql(scope)
        found = await self._rows(*_fts([(_phrase([t]), wide) for t in phrases], where, bound))
        walked = {t: [int(row[0]) for row in found if row[5] == i] for i, t in enumerate(phrases)}
        rarity = _spans(walked, wide, top)
        held = [t for t in phrases if len(walked[t]) >= wide]  # stopped: seen in part
        rarest = sorted(held, key=lambda t: -rarity[t])[:PAIRED]
        pairs = list(combinations(rarest, 2))
        if pairs:  # the turns holding them together are what a question is after
            found += await self._rows(*_fts([(_phrase(g), 2 * wide) for g in pairs], where, bound))
        return found, rarity


def _branches(scope: Scope) -> list[Branch] | None:
    """The indexes a scope is read by: its conversation, each owner (None: everything)."""
    if scope.everywhere:
        return None if scope.conversation is None else [("conversation", scope.conversation)]
    return [("conversation", scope.conversation or ""), *(("owner", o) for o in scope.owners)]


def _either(branches: Sequence[Branch]) -> str:
    return " OR ".join(f"m.{column} = ?" for column, _ in branches)


def _held(
    branches: Sequence[Branch], found: Sequence[str], wide: int, scan: int | None = None
) -> Statement:
    """The ``wide`` turns of a small scope (or of each index's newest ``scan`` rows)
    holding the most of ``found`` (the rarer there first, then the newest), with the
    rows read and each term's count in them: every row read once (``OR`` of the indexes
    plans as one read of each index, the rows deduplicated), its tests kept, not its
    text, until the best are chosen."""
    clauses = matches(found)
    within = [_within(branch, scan) for branch in branches]
    tests = ", ".join(f"({clause}) AS t{i}" for i, (clause, _) in enumerate(clauses))
    held = " + ".join(f"s.t{i}" for i in range(len(clauses)))
    rare = " + ".join(f"s.t{i} * 1.0 / max(d.d{i}, 1)" for i in range(len(clauses)))
    counts = ", ".join(f"sum(t{i}) AS d{i}" for i in range(len(clauses)))
    dfs = ", ".join(f"d.d{i}" for i in range(len(clauses)))
    return (
        f"WITH s AS MATERIALIZED (SELECT m.id AS id, {tests} FROM messages m"
        f" WHERE {' OR '.join(text for text, _ in within)}),"
        f" d AS (SELECT count(*) AS n, coalesce(min(id), 0) AS lo, {counts} FROM s)"
        f" SELECT {_COLUMNS}, d.n, d.lo, {dfs} FROM (SELECT s.id AS id FROM s, d WHERE {held} > 0"
        f" ORDER BY {held} DESC, {rare} DESC, s.id DESC LIMIT ?) AS best"
        " CROSS JOIN d CROSS JOIN messages m ON m.id = best.id",
        [*values(clauses), *(value for _, bound in within for value in bound), wide],
    )


def _phrase(group: Sequence[str]) -> str:
    """``group`` as a ``MATCH`` of every term in it, each a quoted phrase."""
    return " AND ".join('"' + t.replace('"', '""') + '"' for t in group)


def _fts(asks: Sequence[tuple[str, int]], where: str, bound: list[Any]) -> Statement:
    """Each ``MATCH`` of ``asks`` newest first in scope to its limit, one ``UNION ALL``
    branch each, its rows tagged with its place in ``asks``."""
    parts, params = [], []
    for tag, (phrase, most) in enumerate(asks):
        parts.append(
            f"SELECT * FROM (SELECT {_COLUMNS}, {tag} AS tag FROM messages_fts"
            " CROSS JOIN messages m ON m.id = messages_fts.rowid"
            f" WHERE messages_fts MATCH ? AND {where}"
            " ORDER BY messages_fts.rowid DESC LIMIT ?)"
        )
        params += [phrase, *bound, most]
    return " UNION ALL ".join(parts), params


def _newest(
    branches: Sequence[Branch] | None, found: Sequence[str], wide: int, scan: int | None = None
) -> Statement:
    """The newest ``wide`` turns in scope holding any of ``found``: one ``UNION ALL``
    branch per index (``conversation = ? OR owner = ?`` plans as a read of every row of
    both, then a sort), each newest first and stopping at ``wide`` matches, within its
    newest ``scan`` rows if given; ``branches`` None is everything. A turn read by two
    branches is kept once by :func:`~.query.rank`."""
    clauses = matches(found)
    likes = " OR ".join(f"({clause})" for clause, _ in clauses)
    if branches is None:
        newest, bound = "", list[Any]()
        if scan:
            newest, bound = "m.id > (SELECT max(id) FROM messages) - ? AND ", [scan]
        return (
            f"SELECT {_COLUMNS} FROM messages m WHERE {newest}({likes}) ORDER BY m.id DESC LIMIT ?",
            [*bound, *values(clauses), wide],
        )
    parts, params = [], []
    for branch in branches:
        within, bound = _within(branch, scan)
        parts.append(
            f"SELECT * FROM (SELECT {_COLUMNS} FROM messages m WHERE {within}"
            f" AND ({likes}) ORDER BY m.id DESC LIMIT ?)"
        )
        params += [*bound, *values(clauses), wide]
    return " UNION ALL ".join(parts), params


def _within(branch: Branch, scan: int | None) -> Statement:
    """A branch's rows as a test of ``m``, only its newest ``scan`` if given."""
    column, value = branch
    if not scan:
        return f"m.{column} = ?", [value]
    return (
        f"(m.{column} = ? AND m.id >= coalesce((SELECT id FROM messages WHERE {column} = ?"
        " ORDER BY id DESC LIMIT 1 OFFSET ?), 0))",
        [value, value, scan - 1],
    )


def _spans(walked: Mapping[str, Sequence[int]], wide: int, top: int) -> dict[str, float]:
    """Each term's rarity, estimated from the ids of the newest candidates holding it: a
    walk that stopped at ``wide`` found that many in the ids from the oldest it kept to
    ``top`` (the newest id), one that did not found every match in all of them."""
    out = {}
    for term, ids in walked.items():
        span = top - min(ids) + 1 if len(ids) >= wide else top
        out[term] = _idf(len(ids), max(span, len(ids)))
    return out


def _idf(df: int, n: int) -> float:
    """bm25's rarity of a term ``df`` of ``n`` turns hold (kept above 0, as bm25+ does)."""
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def _ranked(
    rows: Sequence[Sequence[Any]], wanted: Terms, limit: int, rarity: Mapping[str, float]
) -> list[Hit]:
    """``rows`` as hits, each scored by :func:`_weight`, in :func:`~.query.rank`'s order."""
    folded = [_fold(str(row[3])) for row in rows]
    mean = max(1.0, sum(map(len, folded)) / len(folded)) if folded else 1.0
    return rank(
        [
            _hit(row, _weight(text, wanted.all, mean, rarity))
            for row, text in zip(rows, folded, strict=True)
        ],
        wanted,
        limit,
    )


def _weight(folded: str, found: Sequence[str], mean: float, rarity: Mapping[str, float]) -> float:
    """bm25 of a turn: for each term it holds, the term's rarity (1 where unknown) times
    how often the turn says it, discounted for a turn longer than the candidates' mean."""
    norm = K1 * (1 - B + B * len(folded) / mean)
    return sum(
        rarity.get(term, 1.0) * tf * (K1 + 1) / (tf + norm)
        for term in found
        if (tf := folded.count(term))
    )


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def _hit(row: Sequence[Any], score: float) -> Hit:
    return Hit(
        id=int(row[0]),
        conversation=str(row[1]),
        role=str(row[2]),
        text=str(row[3]),
        created=float(row[4]),
        score=score,
    )
