"""One person across platforms, at the store: link codes, links, unlinking, and the facts
a turn sees (the chat's and the writer's, never another person's), on every store."""

from __future__ import annotations

from tests.support.config import event
from tether.memory.people import CODE_TTL_S
from tether.memory.records import MemoryChanges
from tether.memory.store import Store

TG, DC, FS = "telegram:501", "discord:9001", "feishu:ou_77"


async def link(store: Store, issuer: str, claimer: str, code: str, now: float = 1000.0) -> None:
    await store.issue_link_code(issuer, code, now)
    claimed = await store.claim_link_code(code, claimer, now + 1)
    assert (claimed.outcome, claimed.issuer) == ("linked", issuer)


async def test_an_unlinked_identity_is_a_person_of_its_own(store: Store) -> None:
    assert await store.identities(TG) == (TG,)
    assert await store.links(TG) == []
    assert not await store.unlink(TG)


async def test_a_claimed_code_links_both_ways_and_is_spent(store: Store) -> None:
    await link(store, TG, DC, "ABCD2345")
    assert set(await store.identities(TG)) == {TG, DC}
    assert (await store.identities(DC))[0] == DC  # the asker first
    assert {n.identity for n in await store.links(DC)} == {TG, DC}
    assert {n.person for n in await store.links(DC)} == {TG}  # named by the issuer
    again = await store.claim_link_code("ABCD2345", FS, 1002.0)
    assert again.outcome == "unknown"  # one-time
    assert await store.identities(FS) == (FS,)


async def test_a_code_is_refused_when_expired_or_claimed_by_its_issuer(store: Store) -> None:
    await store.issue_link_code(TG, "EXPIRES2", 1000.0)
    assert (await store.claim_link_code("EXPIRES2", TG, 1001.0)).outcome == "self"
    late = await store.claim_link_code("EXPIRES2", DC, 1000.0 + CODE_TTL_S + 1)
    assert late.outcome == "unknown"
    assert await store.identities(DC) == (DC,)


async def test_a_new_code_replaces_the_identitys_earlier_one(store: Store) -> None:
    await store.issue_link_code(TG, "FIRST234", 1000.0)
    await store.issue_link_code(TG, "SECOND23", 1001.0)
    assert (await store.claim_link_code("FIRST234", DC, 1002.0)).outcome == "unknown"
    assert (await store.claim_link_code("SECOND23", DC, 1002.0)).outcome == "linked"


async def test_linking_a_linked_identity_brings_its_person_along(store: Store) -> None:
    await link(store, DC, FS, "DCFS2345")  # discord + feishu
    await link(store, TG, DC, "TGDC2345")  # then telegram claims discord's group
    assert set(await store.identities(FS)) == {TG, DC, FS}


async def test_unlinking_takes_one_identity_out_and_keeps_the_rest_linked(store: Store) -> None:
    await link(store, TG, DC, "TGDC2345")
    await link(store, TG, FS, "TGFS2345", now=2000.0)
    assert await store.unlink(TG)  # the one the person was named after
    assert await store.identities(TG) == (TG,)
    assert set(await store.identities(DC)) == {DC, FS}
    assert await store.unlink(DC)
    assert await store.identities(FS) == (FS,)  # a person of one again: no row left
    assert await store.links(FS) == []


async def checkpoint(store: Store, key: str, changes: MemoryChanges) -> None:
    await store.accept([(event(key), changes.conversation)])
    await store.checkpoint(key, [], [], changes)


async def test_a_turn_sees_the_chats_facts_and_its_writers_never_anothers(store: Store) -> None:
    group = "telegram:-100"
    said = MemoryChanges(
        group,
        facts=[("the launch is on Friday", 6)],
        person_facts=[
            ("I'm vegetarian", 4, TG, False),
            ("I take the train", 5, "telegram:502", False),
        ],
    )
    await checkpoint(store, "k1", said)
    await checkpoint(
        store, "k2", MemoryChanges("discord:dm", person_facts=[("my cat is Miso", 5, DC, True)])
    )
    mine = [f.text for f in await store.facts(group, None, (TG,))]
    assert mine == ["the launch is on Friday", "I'm vegetarian"]
    theirs = [f.text for f in await store.facts(group, None, ("telegram:502",))]
    assert theirs == ["the launch is on Friday", "I take the train"]
    assert [f.text for f in await store.facts(group)] == ["the launch is on Friday"]
    # linked: the person's facts from the other platform, in any conversation
    elsewhere = await store.facts("discord:other", None, (DC, TG))
    assert [(f.text, f.owner) for f in elsewhere] == [
        ("I'm vegetarian", TG),
        ("my cat is Miso", DC),
    ]
    assert [f.text for f in await store.facts("discord:other", 5, (DC, TG))] == ["my cat is Miso"]
    # said in a DM: in the person's DMs only, never in a group where others read along
    in_a_group = await store.facts(group, None, (DC, TG), in_dm=False)
    assert [f.text for f in in_a_group] == ["the launch is on Friday", "I'm vegetarian"]
    assert [f.in_dm for f in elsewhere] == [False, True]


async def test_a_persons_fact_is_forgotten_from_anywhere_by_its_owner(store: Store) -> None:
    await checkpoint(
        store, "k1", MemoryChanges("telegram:dm", person_facts=[("I'm vegetarian", 4, TG, True)])
    )
    [fact] = await store.facts("discord:dm", None, (DC, TG))
    wrong = MemoryChanges("discord:dm", forget_owned=[(fact.id, "telegram:502")])
    await checkpoint(store, "k2", wrong)
    assert len(await store.facts("x", None, (TG,))) == 1  # bound to its owner
    await checkpoint(store, "k3", MemoryChanges("discord:dm", forget_owned=[(fact.id, TG)]))
    assert await store.facts("x", None, (TG,)) == []


async def test_a_repeated_checkpoint_saves_a_persons_fact_once(store: Store) -> None:
    changes = MemoryChanges("c1", facts=[("chat", 1)], person_facts=[("I'm tall", 2, TG, False)])
    await store.accept([(event("k1"), "c1")])
    await store.checkpoint("k1", [], [], changes)
    await store.checkpoint("k1", [], [], changes)
    assert [f.text for f in await store.facts("c1", None, (TG,))] == ["chat", "I'm tall"]
