"""The in-memory store's facts: the chat's and people's, read as a turn sees them and
changed by a checkpoint (the SQL stores' are memory/sql/statements.py ``facts_query``
and ``_memory``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tether.memory.records import Fact, MemoryChanges


class FactTables:
    _facts: dict[str, list[Fact]]
    _fact_keys: set[tuple[str, int]]
    _fact_id: int

    def _check(self) -> None: ...

    async def facts(
        self,
        conversation: str,
        budget: int | None = None,
        owners: Sequence[str] = (),
        *,
        in_dm: bool = True,
    ) -> list[Fact]:
        self._check()
        stored = sorted(
            (
                fact
                for facts in self._facts.values()
                for fact in facts
                if (fact.conversation == conversation and fact.owner is None)
                or (fact.owner in owners and (in_dm or not fact.in_dm))
            ),
            key=lambda fact: fact.id,
        )
        if budget is None:
            return [replace(fact) for fact in stored]
        out: list[Fact] = []
        used = 0
        for fact in reversed(stored):
            if used + fact.tokens > budget:
                break
            out.append(replace(fact))
            used += fact.tokens
        out.reverse()
        return out

    def _apply_facts(self, key: str, changes: MemoryChanges, now: float, first: int) -> None:
        """``changes``' new facts (numbered from ``first``, once per key and position)
        and forgets."""
        conversation = changes.conversation
        new = [(text, tokens, None, False) for text, tokens in changes.facts]
        for position, (text, tokens, owner, in_dm) in enumerate(
            [*new, *changes.person_facts], start=first
        ):
            if (key, position) not in self._fact_keys:
                self._fact_keys.add((key, position))
                self._fact_id += 1
                fact = Fact(self._fact_id, conversation, text, tokens, now, owner, in_dm)
                self._facts.setdefault(conversation, []).append(fact)
        if changes.forget or changes.retire:
            gone = set(changes.forget) | set(changes.retire)
            stored = self._facts.get(conversation, [])
            self._facts[conversation] = [f for f in stored if f.id not in gone]
        for fact_id, owner in changes.forget_owned:
            for where, stored in self._facts.items():
                self._facts[where] = [
                    f for f in stored if not (f.id == fact_id and f.owner == owner)
                ]
