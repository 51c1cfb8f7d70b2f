"""Recall on every store (the ``store`` fixture runs each): what a search finds, in what
order, and above all what it must never find.

The turns are written the way the gateway writes them, through checkpoints, so the
index is the one the database keeps beside the history; a SQLite store made before the
index existed is backfilled by its migration.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.config import event
from tether.memory.recall import Scope, terms
from tether.memory.records import Turn
from tether.memory.sqlite import SqliteStore
from tether.memory.sqlite import schema as sqlite_schema
from tether.memory.store import Store

ANN, BOB = "telegram:1001", "telegram:1002"
GROUP = "telegram:-500"
#: conversation -> (owner, turns): two people's DMs, each one's own session in a group,
#: a chat they share, and Ann's DM on another platform.
CHATS: dict[str, tuple[str | None, list[str]]] = {
    "telegram:1001": (
        ANN,
        [
            "My passport number is X1234567, keep it safe",
            "We picked the Harbour Hall as the venue for the March offsite",
        ],
    ),
    "telegram:1002": (BOB, ["My doctor said the allergy test came back positive"]),
    f"{GROUP}:u1001": (ANN, ["I think the budget for flights is 4000 euros"]),
    f"{GROUP}:u1002": (BOB, ["Bob's secret plan: propose on the boat trip"]),
    GROUP: (None, ["Team lunch is on Friday at noon"]),
    "feishu:ou_ann": (ANN, ["会议地点定在北京国贸三期二十楼", "明天的会议改到下午三点"]),
    "discord:77": (
        "discord:77",
        [
            "東京の天気は晴れです",
            "회의 장소는 서울역 근처 카페입니다",
            "The quarterly report is due on 15 April",
            "Die Rechnung für den Server kam heute",
        ],
    ),
}


async def fill(store: Store) -> None:
    for n, (conversation, (owner, texts)) in enumerate(CHATS.items()):
        key = f"e{n}"
        [row] = await store.accept([(event(key), conversation)])
        assert row is not None
        await store.begin(row)
        turns = [Turn(conversation, "user", text, owner=owner) for text in texts]
        await store.checkpoint(key, [], turns)


def texts(hits: list[object]) -> list[str]:
    return [hit.text for hit in hits]  # type: ignore[attr-defined]


async def test_a_person_finds_their_own_conversations_and_never_anothers(store: Store) -> None:
    await fill(store)
    ann = Scope.person("telegram:1001", ANN)
    found = texts(await store.search("venue March offsite", ann))
    assert found[0].startswith("We picked the Harbour Hall")
    assert texts(await store.search("budget flights", ann)) == [
        "I think the budget for flights is 4000 euros"  # her own session in the group
    ]
    # Bob's DM and Bob's session in the group are never Ann's to find, whatever she asks
    for query in ("doctor allergy positive", "secret plan boat", "Bob"):
        assert await store.search(query, ann) == [], query
    # the shared chat is found from within it, not from a DM
    assert await store.search("team lunch Friday", ann) == []
    assert texts(await store.search("team lunch Friday", Scope.person(GROUP, ANN))) == [
        "Team lunch is on Friday at noon"
    ]
    bob = Scope.person("telegram:1002", BOB)
    assert await store.search("passport number", bob) == []
    assert await store.search("会议", bob) == []


async def test_the_operator_finds_everything_or_one_conversation(store: Store) -> None:
    await fill(store)
    everywhere = texts(await store.search("passport allergy secret", Scope.operator()))
    assert len(everywhere) == 3
    one = texts(await store.search("passport allergy", Scope.operator("telegram:1002")))
    assert one == ["My doctor said the allergy test came back positive"]


@pytest.mark.parametrize(
    ("query", "answer"),
    [
        ("会议地点在哪里", "会议地点定在北京国贸三期二十楼"),
        ("会议", "会议地点定在北京国贸三期二十楼"),  # two characters: a substring
        ("下午三点的会议", "明天的会议改到下午三点"),
        ("北京", "会议地点定在北京国贸三期二十楼"),
        ("東京の天気", "東京の天気は晴れです"),
        ("회의 장소", "회의 장소는 서울역 근처 카페입니다"),
        ("when is the quarterly report due", "The quarterly report is due on 15 April"),
        ("Rechnung Server", "Die Rechnung für den Server kam heute"),
        ("passport", "My passport number is X1234567, keep it safe"),
        ("what did we decide about the venue", "We picked the Harbour Hall as the venue"),
    ],
)
async def test_each_language_finds_its_answer_in_the_top_three(
    store: Store, query: str, answer: str
) -> None:
    await fill(store)
    scope = Scope.operator()
    top = texts(await store.search(query, scope, limit=3))
    assert any(text.startswith(answer) for text in top), (query, top)


async def test_a_query_of_nothing_but_punctuation_finds_nothing(store: Store) -> None:
    await fill(store)
    for query in ("", "   ", "?!", '"', "*", "%", "_", "'; --", "NEAR(a b)", 'x"y'):
        assert await store.search(query, Scope.operator()) == [], query
    # the index's own syntax is text to it: a quote, a star, OR, a column filter
    for query in ('"Harbour', "Harb*", "text:venue", "venue OR passport"):
        found = texts(await store.search(query, Scope.operator()))
        assert found and all("Harbour" in t or "passport" in t for t in found), query


async def test_a_sqlite_store_from_before_the_index_is_backfilled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "old.db"
    [index, *_] = [i for i, m in enumerate(sqlite_schema.MIGRATIONS) if "messages_fts" in m]
    with monkeypatch.context() as patched:
        patched.setattr(sqlite_schema, "MIGRATIONS", sqlite_schema.MIGRATIONS[:index])
        sqlite_schema.migrate(str(file), "normal", str(file))
    with sqlite3.connect(file) as db:
        db.execute(
            "INSERT INTO messages (conversation, role, text, tokens, event_key, position,"
            " created) VALUES ('telegram:1001', 'user', 'the old venue was the boathouse',"
            " 7, 'e-old', 0, 1.0)"
        )
    store = SqliteStore(str(file))
    await store.open()
    try:
        found = await store.search("boathouse", Scope.person("telegram:1001", ANN))
        # an old row has no owner: found from its own conversation only
        assert await store.search("boathouse", Scope.person("telegram:9", ANN)) == []
    finally:
        await store.close()
    assert [hit.text for hit in found] == ["the old venue was the boathouse"]
    with sqlite3.connect(file) as db:
        db.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_terms_of_any_text_are_bounded_and_never_empty_strings(query: str) -> None:
    found = terms(query)
    assert len(found.all) <= 24
    assert all(term and term == term.strip() for term in found.all)
    assert all(len(term) >= 3 for term in found.indexed)
