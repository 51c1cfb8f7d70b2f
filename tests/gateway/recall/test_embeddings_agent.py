"""Semantic recall through the real pipeline: the openai SDK against the fake server's
``/v1/embeddings``, the SQLite store, the indexer in the background.

The fake embeds a text as the sum of its words' fixed directions, and ``concepts``
says which different words mean the same (``vehicle`` is ``car``), so a test knows
which turns are near a query without sharing a word with it.
"""

from __future__ import annotations

import collections
import hashlib
import re
import uuid
from pathlib import Path
from typing import Any

from tests.support.config import make_settings
from tests.support.gateway import running
from tether.gateway.app import Gateway
from tether.testing.model import Body, FakeModel, asks_for, tool_call

MODEL = "embed-small"
CONCEPTS = {"vehicle": "car", "automobile": "car", "sedan": "car"}


def last_user(body: Body) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return str(users[-1].get("content") or "") if users else ""


def script(body: Body) -> Any:
    """``search: WORDS`` calls ``search_memory``; a tool result is answered; anything
    else gets a reply that names what it answers (each stored turn's text its own)."""
    messages = body.get("messages", [])
    if messages and "running summary" in str(messages[0].get("content", "")):
        return "They talked."
    if messages and messages[-1].get("role") == "tool":
        return "Here is what I found."
    text = last_user(body)
    if text.startswith("search: "):
        return asks_for(tool_call("search_memory", {"query": text.removeprefix("search: ")}))
    return noted(text)


def noted(text: str) -> str:
    """The reply to ``text``: its own, and sharing no word with it."""
    return f"Noted: {hashlib.sha1(text.encode()).hexdigest()[:8]}"


def settings_for(tmp_path: Path, model: FakeModel, embeddings: bool = True) -> Any:
    model.reply, model.concepts = script, CONCEPTS
    memory: dict[str, Any] = {"history_tokens": 60}
    if embeddings:
        memory["embeddings"] = {"provider": "fake", "model": MODEL}
    return make_settings(
        tmp_path, llm=model.section(timeout=5), agent={"handler": "llm"}, memory=memory
    )


async def say(gateway: Gateway, loop: Any, chat: str, user: str, text: str) -> str:
    before = len(loop.sent)
    await loop.say(text, chat=chat, user=user, chat_type="dm", key=f"loopback:{uuid.uuid4()}")
    sent = await loop.wait_for_sent(before + 1)
    await gateway.drain()
    return str(sent[before].message.text)


async def indexed(gateway: Gateway) -> None:
    """Until every stored turn has its vector (the background pass, then ours)."""
    assert gateway.recall.indexer is not None
    await gateway.recall.indexer.catch_up()


def found(model: FakeModel) -> list[str]:
    """The texts of the last ``search_memory`` result, best first."""
    (result,) = model.requests[-1].tool_results
    lines = str(result["content"]).splitlines()
    return [re.sub(r"^\[[^]]*\] \w+: ", "", line) for line in lines]


SAID = [
    "The automobile club meets on Tuesday evenings",  # by its words and by its meaning
    "I sold my old vehicle",  # by meaning alone: no word shared
    "Automobiles of the fifties are in the museum",  # by its words alone (trigrams)
    "Lunch on Friday is at noon in the courtyard",  # neither
]


async def test_a_turn_is_found_by_meaning_and_one_found_both_ways_ranks_first(
    tmp_path: Path, model: FakeModel
) -> None:
    async with running(settings_for(tmp_path, model)) as (gateway, loop):
        for text in SAID:
            await say(gateway, loop, "d1", "u1", text)
        await say(gateway, loop, "d2", "u2", "My automobile is a blue sedan")  # Bob's DM
        await indexed(gateway)
        await say(gateway, loop, "d1", "u1", "search: automobile")
    hits = found(model)
    assert hits[0] == SAID[0]
    assert set(hits[1:3]) == {SAID[1], SAID[2]}
    assert not any("Lunch" in hit for hit in hits)
    assert not any("blue sedan" in hit for hit in hits)  # another person's DM, near or not
    # the query was embedded (once) as a memoized step of its turn
    assert model.embedded.count("automobile") == 1


async def test_with_embeddings_off_no_call_is_made_and_words_alone_find(
    tmp_path: Path, model: FakeModel
) -> None:
    async with running(settings_for(tmp_path, model, embeddings=False)) as (gateway, loop):
        assert gateway.recall.indexer is None
        for text in SAID:
            await say(gateway, loop, "d1", "u1", text)
        await say(gateway, loop, "d1", "u1", "search: automobile")
    assert set(found(model)) == {SAID[0], SAID[2]}  # the vehicle needs a meaning
    assert model.embedding_requests == []


async def test_each_turn_is_embedded_once_across_a_restart(
    tmp_path: Path, model: FakeModel
) -> None:
    settings = settings_for(tmp_path, model)
    async with running(settings) as (gateway, loop):
        for text in SAID[:2]:
            await say(gateway, loop, "d1", "u1", text)
        await indexed(gateway)
        first = list(model.embedded)
    assert sorted(first) == sorted([*SAID[:2], *(noted(t) for t in SAID[:2])])

    async with running(settings) as (gateway, loop):
        await indexed(gateway)  # the start's pass found nothing left to embed
        assert model.embedded == first
        await say(gateway, loop, "d1", "u1", SAID[3])
        await indexed(gateway)
        stored = await gateway.store.vector_count(MODEL)
    counts = collections.Counter(model.embedded)
    assert set(counts.values()) == {1}, counts  # no text paid for twice
    assert set(counts) == {*SAID[:2], SAID[3], *(noted(t) for t in (*SAID[:2], SAID[3]))}
    assert stored == 6


async def test_an_endpoint_that_fails_leaves_search_by_words_and_indexing_catches_up(
    tmp_path: Path, model: FakeModel
) -> None:
    async with running(settings_for(tmp_path, model)) as (gateway, loop):
        await say(gateway, loop, "d1", "u1", SAID[0])
        await indexed(gateway)
        model.fail(503, when=lambda body: body.get("input") == ["automobile"])  # the query's
        await say(gateway, loop, "d1", "u1", "search: automobile")
        assert found(model) == [SAID[0]]  # by its words, and an answer, not silence
        await say(gateway, loop, "d1", "u1", SAID[1])
        await indexed(gateway)
        assert await gateway.store.vector_count(MODEL) == 6  # every turn, the search's too
