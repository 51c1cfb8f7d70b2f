"""SQLite recall's two plans (memory/recall/sqlite.py): a small scope read whole with a
substring test per term, a large one (and the operator's) through the trigram index
newest first, short terms over the newest rows of each index. The threshold is set per
store, so a few turns take either plan: both must find the same turns, within the same
scope, and hold to the same ranking rule.
"""

from __future__ import annotations

import unicodedata
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.config import event
from tether.memory.recall import Scope, terms
from tether.memory.records import Turn
from tether.memory.sqlite import SqliteStore

ANN, BOB = "telegram:1001", "telegram:1002"
GROUP = "telegram:-500"
#: conversation -> (owner, turns), oldest first.
CHATS: dict[str, tuple[str | None, list[str]]] = {
    "telegram:1001": (
        ANN,
        [
            "We picked the Harbour Hall as the venue for the March offsite",
            "会议在三楼",
            *(f"the venue had {n} chairs" for n in range(12)),  # newer, one term each
            "Die ÜBERSETZUNG für den Kunden ist fertig",
            "ПРИВЕТ из Москвы, встреча в пятницу",
            "Ann's AI notes: 会议改到周五",
        ],
    ),
    "telegram:1002": (BOB, ["Bob's secret venue: the boathouse", "Bob's AI plan, 会议 at noon"]),
    f"{GROUP}:u1001": (ANN, ["the offsite budget is 4000 euros", "东京の会议は晴れ"]),
    f"{GROUP}:u1002": (BOB, ["Bob's offsite idea: a boat trip"]),
    GROUP: (None, ["Team lunch at the venue on Friday", "Straße gesperrt, übersetzung folgt"]),
}
SCOPES = {
    "ann's dm": Scope.person("telegram:1001", ANN),
    "bob's dm": Scope.person("telegram:1002", BOB),
    "ann's group session": Scope.person(f"{GROUP}:u1001"),
    "the group": Scope.person(GROUP, ANN),
    "operator": Scope.operator(),
    "operator, one chat": Scope.operator("telegram:1001"),
}
QUERIES = (
    "venue",
    "venue offsite",
    "offsite",
    "boathouse",
    "übersetzung",  # stored as ÜBERSETZUNG and übersetzung: the index folds both
    "привет",  # stored as ПРИВЕТ
    "Straße",
    "会议",  # two characters: a substring, no index
    "会议改到",
    "AI",
    "AI notes 会议",
    "what did we say about the budget and euros",
    "secret",
    "zeppelin",
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    found = SqliteStore(str(tmp_path / "plans.db"))
    await found.open()
    for n, (conversation, (owner, texts)) in enumerate(CHATS.items()):
        [row] = await found.accept([(event(f"e{n}"), conversation)])
        assert row is not None
        await found.begin(row)
        turns = [Turn(conversation, "user", text, owner=owner) for text in texts]
        await found.checkpoint(f"e{n}", [], turns)
    try:
        yield found
    finally:
        await found.close()


def statements(store: SqliteStore) -> list[str]:
    """Records the SQL each search runs on ``store``."""
    seen: list[str] = []
    inner = store._rows

    async def rows(text: str, params: Sequence[Any] = ()) -> list[Any]:
        seen.append(text)
        return await inner(text, params)

    store._rows = rows  # type: ignore[method-assign]
    return seen


def expected(query: str, scope: Scope) -> set[tuple[str, str]]:
    """What a scan finds: each turn in scope that holds a term, case-folded."""
    wanted = terms(query).all
    out = set()
    for conversation, (owner, texts) in CHATS.items():
        if scope.everywhere:
            mine = scope.conversation in (None, conversation)
        else:
            mine = conversation == scope.conversation or owner in scope.owners
        for text in texts:
            folded = unicodedata.normalize("NFKC", text).lower()
            if mine and any(term in folded for term in wanted):
                out.add((conversation, text))
    return out


@pytest.mark.parametrize("plan", ["scope", "index"])
async def test_either_plan_finds_every_turn_in_scope_and_none_outside(
    store: SqliteStore, plan: str
) -> None:
    store.recall_small_scope = 10_000 if plan == "scope" else 0
    seen = statements(store)
    for name, scope in SCOPES.items():
        for query in QUERIES:
            seen.clear()
            hits = await store.search(query, scope, limit=100)
            found = {(hit.conversation, hit.text) for hit in hits}
            assert found == expected(query, scope), (name, query)
            assert len(hits) == len(found)  # each turn once, though two branches read it
            large = plan == "index" or name == "operator"  # everything is never small
            used_index = any("MATCH" in text for text in seen)
            assert used_index == (large and bool(terms(query).indexed)), (name, query)


@pytest.mark.parametrize("plan", ["scope", "index"])
async def test_the_turn_holding_every_term_comes_first_though_older(
    store: SqliteStore, plan: str
) -> None:
    # twelve newer turns hold "venue" alone; a search of one hit reads five candidates
    store.recall_small_scope = 10_000 if plan == "scope" else 0
    for scope in (SCOPES["ann's dm"], SCOPES["operator"]):
        [top] = await store.search("venue offsite", scope, limit=1)
        assert top.text.startswith("We picked the Harbour Hall")


async def test_short_terms_in_a_large_scope_read_only_its_newest_rows(store: SqliteStore) -> None:
    store.recall_small_scope = 0
    store.recall_window = 2  # a person's: each index the scope walks, its two newest rows
    ann = SCOPES["ann's dm"]
    found = {hit.text for hit in await store.search("会议", ann, limit=100)}
    # the DM's newest two are read (its conversation), and Ann's own newest two (her
    # owner index: the group session's); her DM's older one is not, Bob's never
    assert found == {"Ann's AI notes: 会议改到周五", "东京の会议は晴れ"}
    store.recall_window = 10_000
    everything = {hit.text for hit in await store.search("会议", ann, limit=100)}
    assert everything == {*found, "会议在三楼"}
    store.recall_short_scan = 4  # the operator's: the newest four rows of all
    newest = {hit.text for hit in await store.search("会议", SCOPES["operator"], limit=100)}
    assert newest == {"东京の会议は晴れ"}


async def test_a_large_persons_scope_is_read_in_its_newest_rows_and_the_rarer_terms_beyond(
    tmp_path: Path,
) -> None:
    # an old turn holds both terms; twenty newer ones each hold one
    found = SqliteStore(str(tmp_path / "near.db"))
    await found.open()
    texts = ["the kiln and the glaze were ready in March"]
    texts += [f"kiln firing number {n}" for n in range(20)]
    texts += [f"glaze colour number {n}" for n in range(20)]
    [row] = await found.accept([(event("near"), "telegram:1001")])
    assert row is not None
    await found.begin(row)
    turns = [Turn("telegram:1001", "user", text, owner=ANN) for text in texts]
    await found.checkpoint("near", [], turns)
    try:
        found.recall_small_scope = 0  # the scope counts as large
        seen = statements(found)
        ann = Scope.person("telegram:1001", ANN)
        [top] = await found.search("kiln glaze", ann, limit=1)
        assert top.text == texts[0]  # held together, in the scope's newest rows
        assert not any("MATCH" in text for text in seen)  # both common there
        found.recall_window = 10  # each index's newest ten: glaze alone
        [top] = await found.search("kiln glaze", ann, limit=1)
        assert top.text == "kiln firing number 19"  # kiln, rare there, through the index
        assert any("MATCH" in text for text in seen)
    finally:
        await found.close()
