"""Search over the in-memory store's turns: a scan, with the same terms, scope and
ranking as the SQL stores (the tests' and ``memory://``'s)."""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING

from tether.memory.recall.query import Hit, Scope, rank, terms

if TYPE_CHECKING:
    from tether.memory.records import Turn


class MemoryRecall:
    """``search`` for :class:`~tether.memory.inmemory.store.MemoryStore`."""

    if TYPE_CHECKING:
        _turns: dict[str, list[Turn]]

    async def search(self, query: str, scope: Scope, limit: int = 8) -> list[Hit]:
        wanted = terms(query)
        if not wanted or limit <= 0:
            return []
        found = []
        for conversation, turns in self._turns.items():
            for turn in turns:
                if not _in(scope, conversation, turn.owner):
                    continue
                folded = unicodedata.normalize("NFKC", turn.text).lower()
                if any(term in folded for term in wanted.all):
                    found.append(Hit(turn.id, conversation, turn.role, turn.text, turn.created))
        return rank(found, wanted, limit)


def _in(scope: Scope, conversation: str, owner: str | None) -> bool:
    if scope.everywhere:
        return scope.conversation is None or conversation == scope.conversation
    return conversation == scope.conversation or (owner is not None and owner in scope.owners)
