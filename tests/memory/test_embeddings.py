"""Semantic recall at the store, on every store: a vector per turn and model, written
once, gone with its turn, and the nearest turns within the same scope rule as the
full-text search (a vector never brings back a turn its words could not)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.config import event
from tether.memory.embeddings import fuse
from tether.memory.embeddings import store as embedding_store
from tether.memory.embeddings.hybrid import K
from tether.memory.embeddings.vectors import decoded, encoded, packed, unit, unpacked
from tether.memory.people import SqlErasure
from tether.memory.recall import Hit, Scope
from tether.memory.records import Turn
from tether.memory.store import Store

ANN, BOB = "telegram:1001", "telegram:1002"
MODEL = "embed-small"


async def write(store: Store, key: str, conversation: str, owner: str, *texts: str) -> None:
    [row] = await store.accept([(event(key), conversation)])
    assert row is not None
    await store.begin(row)
    await store.checkpoint(key, [], [Turn(conversation, "user", t, owner=owner) for t in texts])


async def ids(store: Store) -> dict[str, int]:
    return {text: ident for ident, text in await store.unembedded(MODEL, 0, 100)}


async def test_a_vector_is_kept_once_per_turn_and_model(store: Store) -> None:
    await write(store, "a", ANN, ANN, "the car is red", "lunch at noon")
    turn = await ids(store)
    assert set(turn) == {"the car is red", "lunch at noon"}
    car = turn["the car is red"]
    await store.save_vectors(MODEL, [(car, [3.0, 4.0, 0.0])])
    # saved again with another vector: the first stays (written once, never re-paid)
    await store.save_vectors(MODEL, [(car, [0.0, 0.0, 1.0]), (999_999, [1.0, 0.0, 0.0])])
    assert await store.vector_count(MODEL) == 1  # the turn that does not exist got none
    assert [t for _, t in await store.unembedded(MODEL, 0, 100)] == ["lunch at noon"]
    assert await store.unembedded("another-model", 0, 100) != []  # per model
    [hit] = await store.neighbours([3.0, 4.0, 0.0], MODEL, Scope.person(ANN, ANN), 5)
    assert (hit.id, hit.text) == (car, "the car is red")
    assert math.isclose(hit.score, 1.0, abs_tol=1e-5)  # stored at unit length: cosine


async def test_the_nearest_are_in_order_above_the_least_and_never_anothers(store: Store) -> None:
    await write(store, "a", ANN, ANN, "ann near", "ann far", "ann opposite")
    await write(store, "b", BOB, BOB, "bob identical")
    turn = await ids(store)
    await store.save_vectors(
        MODEL,
        [
            (turn["ann near"], [1.0, 0.2]),
            (turn["ann far"], [0.2, 1.0]),
            (turn["ann opposite"], [-1.0, 0.0]),
            (turn["bob identical"], [1.0, 0.0]),  # the best match of all, and Bob's
        ],
    )
    ann = Scope.person(ANN, ANN)
    hits = await store.neighbours([1.0, 0.0], MODEL, ann, 10, least=-1.0)
    assert [h.text for h in hits] == ["ann near", "ann far", "ann opposite"]
    assert hits[0].score > hits[1].score > hits[2].score
    # by default at least unrelated (a cosine of 0): the opposite is not near
    default = await store.neighbours([1.0, 0.0], MODEL, ann, 10)
    assert [h.text for h in default] == ["ann near", "ann far"]
    near = await store.neighbours([1.0, 0.0], MODEL, ann, 10, least=0.5)
    assert [h.text for h in near] == ["ann near"]
    assert [h.text for h in await store.neighbours([1.0, 0.0], MODEL, ann, 1)] == ["ann near"]
    # the operator sees every conversation, Bob's too
    operator = await store.neighbours([1.0, 0.0], MODEL, Scope.operator(), 1)
    assert [h.text for h in operator] == ["bob identical"]


async def test_a_large_scope_is_compared_in_its_newest_turns(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await write(store, "a", ANN, ANN, "oldest, the best match", "newer", "newest")
    turn = await ids(store)
    await store.save_vectors(
        MODEL,
        [(turn["oldest, the best match"], [1.0, 0.0]), (turn["newer"], [1.0, 0.5]),
         (turn["newest"], [1.0, 1.0])],
    )  # fmt: skip
    monkeypatch.setattr(embedding_store, "SCAN_MOST", 2)
    hits = await store.neighbours([1.0, 0.0], MODEL, Scope.person(ANN, ANN), 5)
    assert [h.text for h in hits] == ["newer", "newest"]


async def test_an_erased_persons_vectors_go_with_their_turns(store: Store) -> None:
    if not isinstance(store, SqlErasure):
        pytest.skip("erasure is the SQL stores' (tether forget works on a file or a server)")
    await write(store, "a", ANN, ANN, "ann's turn")
    await write(store, "b", BOB, BOB, "bob's turn")
    turn = await ids(store)
    await store.save_vectors(MODEL, [(turn["ann's turn"], [1.0]), (turn["bob's turn"], [1.0])])
    assert await store.vector_count(MODEL) == 2
    await store.erase_person([BOB])
    assert await store.vector_count(MODEL) == 1
    hits = await store.neighbours([1.0], MODEL, Scope.operator(), 5)
    assert [h.text for h in hits] == ["ann's turn"]


def hit(ident: int, created: float = 0.0) -> Hit:
    return Hit(ident, "c", "user", f"turn {ident}", created, 0.0)


def test_fusion_adds_each_lists_vote_by_place() -> None:
    words = [hit(1), hit(2), hit(3)]
    meaning = [hit(4), hit(2)]
    fused = fuse([words, meaning], 10)
    assert [h.id for h in fused] == [2, 1, 4, 3]
    scores = {h.id: h.score for h in fused}
    assert math.isclose(scores[2], 1 / (K + 2) + 1 / (K + 2))
    assert math.isclose(scores[1], 1 / (K + 1))
    assert math.isclose(scores[4], 1 / (K + 1))  # a tie with 1: the first list's hit first
    assert [h.id for h in fuse([words, meaning], 2)] == [2, 1]


@given(
    st.lists(st.integers(1, 200), min_size=1, max_size=K + 1, unique=True),
    st.lists(st.integers(1, 200), min_size=1, max_size=K + 1, unique=True),
)
def test_a_turn_found_both_ways_ranks_above_every_turn_found_one_way(
    first: list[int], second: list[int]
) -> None:
    fused = fuse([[hit(i) for i in first], [hit(i) for i in second]], 1000)
    both = set(first) & set(second)
    assert {h.id for h in fused} == set(first) | set(second)
    places = [h.id in both for h in fused]
    assert places == sorted(places, reverse=True)  # every True before every False


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=1, max_size=64))
def test_vectors_survive_packing_and_are_unit_length(values: list[float]) -> None:
    assert list(unpacked(packed(values))) == list(unpacked(packed(unpacked(packed(values)))))
    scaled = unit(values)
    assert list(decoded(encoded(scaled))) == list(scaled)
    length = math.sqrt(math.fsum(x * x for x in scaled))
    assert length == 0.0 or math.isclose(length, 1.0, rel_tol=1e-4)
