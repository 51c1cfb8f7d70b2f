"""What a search asks and what it finds: the query's terms, the asker's scope, a hit.

A query is split into **terms** the way both stores' indexes can take them. Words (any
script with spaces between words) are lowercased; the commonest English words are left
out unless nothing else is left. Text without spaces (Chinese, Japanese) is cut into
overlapping three-character pieces, the trigram index's unit, so "会议地点" finds a
message holding it anywhere, and a question sharing most of its pieces with a message
ranks that message first; a piece of one or two characters is matched as a substring.

The **scope** (DESIGN §13) is who asks: a person in a conversation finds that
conversation's turns and the turns of their own conversations (their DMs, their own
sessions in groups: ``messages.owner``), never another person's; the operator finds
everything. Each store turns it into its query's ``WHERE``, so no caller can widen it.

Ranking is the same for every store: first by how many of the query's terms a turn
holds, then by the store's score (PostgreSQL's ts_rank; on SQLite bm25's weighting of
term frequency and length, without the rarity part that costs a read of every match:
see .sqlite), then the newest first.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

#: Words too common to tell turns apart (English, where most queries are).
_COMMON = (
    "a about all also an and any are as at be been but by can could did do does for from"
    " had has have how i if in into is it its just me my no not of on or our should so"
    " than that the their them then there these they this to too up us very was we were"
    " what when where which who why will with would yes you your"
)
STOPWORDS = frozenset(_COMMON.split())
#: At most this many terms per query (a pasted page is not a question).
MAX_TERMS = 24
_RUN = re.compile(r"\w+", re.UNICODE)
_CJK = re.compile(
    r"[\u1100-\u11ff\u3040-\u30ff\u3100-\u312f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
)


@dataclass(frozen=True, slots=True)
class Terms:
    """A query as the indexes take it."""

    #: Matched through the full-text index (three characters or more).
    indexed: tuple[str, ...]
    #: Matched as substrings within the scope (one or two characters).
    short: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.indexed or self.short)

    @property
    def all(self) -> tuple[str, ...]:
        return self.indexed + self.short


def terms(query: str) -> Terms:
    """The terms of ``query`` (lowercased, deduplicated, in order)."""
    text = unicodedata.normalize("NFKC", query).lower()
    words: list[str] = []
    for run in _RUN.findall(text):
        if _CJK.search(run) and len(run) > 3:
            words += [run[i : i + 3] for i in range(len(run) - 2)]
        else:
            words.append(run)
    kept = [w for w in words if w not in STOPWORDS and (len(w) > 1 or _CJK.match(w))]
    chosen = list(dict.fromkeys(kept or [w for w in words if len(w) > 1]))[:MAX_TERMS]
    return Terms(
        indexed=tuple(w for w in chosen if len(w) >= 3),
        short=tuple(w for w in chosen if len(w) < 3),
    )


@dataclass(frozen=True, slots=True)
class Scope:
    """Who searches, and so what they may find (see the module)."""

    #: The conversation the search is made from: its turns are in scope.
    conversation: str | None = None
    #: The asker's identities (``platform:user``; linked ones too): their conversations'
    #: turns are in scope, from wherever they ask.
    owners: tuple[str, ...] = ()
    #: The operator: every conversation (``conversation``, if given, narrows it to one).
    everywhere: bool = False

    @classmethod
    def person(cls, conversation: str, *owners: str | None) -> Scope:
        return cls(conversation, tuple(o for o in owners if o))

    @classmethod
    def operator(cls, conversation: str | None = None) -> Scope:
        return cls(conversation, (), everywhere=True)


@dataclass(frozen=True, slots=True)
class Hit:
    """One turn a search found."""

    id: int
    conversation: str
    role: str
    text: str
    created: float
    #: The store's score, higher is better (PostgreSQL's ts_rank; see .sqlite).
    score: float = 0.0


def rank(hits: Iterable[Hit], query: Terms, limit: int) -> list[Hit]:
    """``hits`` (each once) in the order the module describes, the best ``limit``."""
    unique = {hit.id: hit for hit in hits}.values()

    def held(hit: Hit) -> int:
        folded = unicodedata.normalize("NFKC", hit.text).lower()
        return sum(1 for term in query.all if term in folded)

    ordered = sorted(unique, key=lambda hit: (held(hit), hit.score, hit.id), reverse=True)
    return [hit for hit in ordered if held(hit)][:limit]


def like_pattern(term: str) -> str:
    """``term`` as a ``LIKE``/``ILIKE`` substring pattern, its wildcards escaped (``\\``)."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"
