"""Recall through the real pipeline: the ``search_memory`` tool, ``/search`` and
``memory.recall: auto``, and the property recall exists to keep: isolation.

The loopback platform, the SQLite store and the real ``openai`` client against the fake
OpenAI-compatible server, which records every prompt it was sent. The model here is a
script that reads its prompt: ``search: WORDS`` makes it call ``search_memory``, a tool
result makes it answer, a summary request gets a summary that keeps nothing (so what
fell out of the window can only come back through recall).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.config import make_settings, merge
from tests.support.gateway import running
from tether.gateway.tools.recall import RECALLED
from tether.testing.model import Body, FakeModel, Request, asks_for, tool_call


def last_user(body: Body) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return str(users[-1].get("content") or "") if users else ""


def reading(body: Body) -> Any:
    """The model's script (see the module)."""
    messages = body.get("messages", [])
    if messages and "running summary" in str(messages[0].get("content", "")):
        return "They talked."
    if messages and messages[-1].get("role") == "tool":
        return "Here is what I found."
    text = last_user(body)
    if text.startswith("search: "):
        return asks_for(tool_call("search_memory", {"query": text.removeprefix("search: ")}))
    return "Noted."


def settings_for(tmp_path: Path, model: FakeModel, **memory: Any) -> Any:
    model.reply = reading
    return make_settings(
        tmp_path,
        llm=model.section(timeout=5),
        agent={"handler": "llm"},
        memory=merge({"history_tokens": 60}, memory),
    )


def prompt_text(request: Request) -> str:
    """Everything a request showed the model: system, history, tool results."""
    return json.dumps(request.messages, ensure_ascii=False)


class Chats:
    """Says one message at a time and files the prompts it caused under its chat."""

    def __init__(self, gateway: Any, loop: Any, model: FakeModel) -> None:
        self.gateway, self.loop, self.model = gateway, loop, model
        self.prompts: dict[str, list[str]] = {}
        self.replies: dict[str, list[str]] = {}

    async def say(self, chat: str, user: str, text: str) -> str:
        before_requests, before_sent = len(self.model.requests), len(self.loop.sent)
        kind = "dm" if chat.startswith("d") else "group"
        await self.loop.say(text, chat=chat, user=user, chat_type=kind)
        sent = await self.loop.wait_for_sent(before_sent + 1)
        await self.gateway.drain()
        made = self.model.requests[before_requests:]
        self.prompts.setdefault(chat, []).extend(prompt_text(r) for r in made)
        reply = sent[before_sent].message.text
        self.replies.setdefault(chat, []).append(reply)
        return reply


FILLER = [
    "The printer on the third floor jams every morning before nine o'clock.",
    "Lunch on Friday will be sandwiches from the bakery around the corner.",
    "Someone left a blue umbrella in the meeting room near the kitchen.",
    "The quarterly report template moved to the shared drive folder.",
]


async def test_search_memory_brings_back_a_turn_that_fell_out_of_the_window(
    tmp_path: Path, model: FakeModel
) -> None:
    settings = settings_for(tmp_path, model)
    async with running(settings) as (gateway, loop):
        chats = Chats(gateway, loop, model)
        await chats.say("d1", "u1", "We decided the venue is the Old Mill by the river.")
        for line in FILLER:
            await chats.say("d1", "u1", line)
        before = len(model.requests)
        await chats.say("d1", "u1", "search: venue")
    asked, answered = [r for r in model.requests[before:] if "running summary" not in r.system]
    assert "Old Mill" not in prompt_text(asked)  # summarized away: only recall brings it
    assert "search_memory" in asked.tools
    (result,) = answered.tool_results
    assert "Old Mill" in result["content"] and "this chat" in result["content"]
    assert result["content"].startswith("[20")  # each hit with its date
    assert chats.replies["d1"][-1] == "Here is what I found."


async def test_the_tool_says_so_when_nothing_matches_and_can_be_switched_off(
    tmp_path: Path, model: FakeModel
) -> None:
    settings = settings_for(tmp_path, model)
    async with running(settings) as (gateway, loop):
        chats = Chats(gateway, loop, model)
        await chats.say("d1", "u1", "search: zeppelin")
    assert model.requests[-1].tool_results[0]["content"] == "nothing found for 'zeppelin'"

    (tmp_path / "off").mkdir()
    off = make_settings(
        tmp_path / "off",
        llm=model.section(timeout=5),
        agent={"handler": "llm", "tools": {"search_memory": False}},
    )
    async with running(off) as (gateway, loop):
        await Chats(gateway, loop, model).say("d1", "u1", "hello")
    assert "search_memory" not in model.requests[-1].tools


async def test_slash_search_answers_in_chat_with_the_same_scope(
    tmp_path: Path, model: FakeModel
) -> None:
    settings = settings_for(tmp_path, model)
    async with running(settings) as (gateway, loop):
        chats = Chats(gateway, loop, model)
        await chats.say("d1", "u1", "My bike lock combination is 3819.")
        calls = model.calls
        found = await chats.say("d1", "u1", "/search combination")
        assert model.calls == calls  # a command, not a model call
        empty = await chats.say("g", "u2", "/search combination")
        bare = await chats.say("d1", "u1", "/search")
    assert "3819" in found and "this chat" in found
    assert empty == "Nothing found for 'combination'."
    assert bare == "What should I look for? /search WORDS"


async def test_recall_auto_adds_the_best_matches_to_the_prompt_marked_as_recalled(
    tmp_path: Path, model: FakeModel
) -> None:
    settings = settings_for(tmp_path, model, recall="auto")
    async with running(settings) as (gateway, loop):
        chats = Chats(gateway, loop, model)
        await chats.say("d1", "u1", "Our anniversary dinner is booked at Luigi's trattoria.")
        for line in FILLER:
            await chats.say("d1", "u1", line)
        before = len(model.requests)
        await chats.say("d1", "u1", "Which trattoria did we book?")
    (asked,) = [r for r in model.requests[before:] if "running summary" not in r.system]
    assert RECALLED in asked.system
    recalled = asked.system.split(RECALLED, 1)[1]
    assert "Luigi's trattoria" in recalled
    # the message itself is the newest turn, not something recalled
    assert "Which trattoria" not in recalled


async def test_recall_off_adds_nothing(tmp_path: Path, model: FakeModel) -> None:
    settings = settings_for(tmp_path, model)
    async with running(settings) as (gateway, loop):
        chats = Chats(gateway, loop, model)
        await chats.say("d1", "u1", "Our anniversary dinner is booked at Luigi's trattoria.")
        await chats.say("d1", "u1", "Which trattoria did we book?")
    assert all(RECALLED not in r.system for r in model.requests)


@pytest.mark.slow
async def test_neither_persons_dm_or_facts_reach_the_others_prompts_or_searches(
    tmp_path: Path, model: FakeModel
) -> None:
    """Two people in one group and each in their DM, recall on and the tool called with
    the other's secrets: every prompt the fake model recorded is checked."""
    settings = settings_for(tmp_path, model, recall="auto")
    async with running(settings) as (gateway, loop):
        chats = Chats(gateway, loop, model)
        await chats.say("d1", "u1", "My diagnosis came back: pneumonia, says doctor Okafor.")
        await chats.say("d1", "u1", "/remember I take warfarin every evening")
        await chats.say("d2", "u2", "The code for my locker is 4417, behind the gym.")
        await chats.say("d2", "u2", "/remember my sister Ingrid lives in Tromsø")
        for user in ("u1", "u2"):  # each in the group, asking about both secrets
            await chats.say("g", user, "Who saw doctor Okafor about pneumonia?")
            await chats.say("g", user, "search: pneumonia Okafor")
            await chats.say("g", user, "search: locker code 4417")
            await chats.say("g", user, "search: warfarin Ingrid Tromsø")
            await chats.say("g", user, "/search pneumonia")
            await chats.say("g", user, "/search locker")
        await chats.say("d2", "u2", "search: pneumonia Okafor")
        await chats.say("d2", "u2", "/search pneumonia")
        await chats.say("d1", "u1", "search: locker 4417")
        await chats.say("d1", "u1", "/search locker")
        # the controls: each person's own search from their DM finds their own words
        own_1 = await chats.say("d1", "u1", "/search pneumonia")
        own_2 = await chats.say("d2", "u2", "/search locker")
        before = len(model.requests)
        await chats.say("d1", "u1", "search: doctor Okafor")
        (own_result,) = model.requests[-1].tool_results
        assert len(model.requests) > before
    assert "pneumonia, says doctor Okafor" in own_1 and "4417, behind the gym" in own_2
    assert "pneumonia, says doctor Okafor" in own_result["content"]
    assert any("warfarin every" in p for p in chats.prompts["d1"])  # u1's own fact, u1's prompt

    u1_secrets = ["pneumonia, says doctor Okafor", "I take warfarin every"]
    u2_secrets = ["4417, behind the gym", "my sister Ingrid lives"]
    group_said = "Who saw doctor Okafor about pneumonia?"  # said in the group: fair there
    for secret in u1_secrets:
        seen = [p for p in chats.prompts["d2"] + chats.prompts["g"] if secret in p]
        assert not seen, f"u1's {secret!r} reached a prompt outside u1's DM"
        assert not [r for r in chats.replies["d2"] + chats.replies["g"] if secret in r]
    for secret in u2_secrets:
        seen = [p for p in chats.prompts["d1"] + chats.prompts["g"] if secret in p]
        assert not seen, f"u2's {secret!r} reached a prompt outside u2's DM"
        assert not [r for r in chats.replies["d1"] + chats.replies["g"] if secret in r]
    assert any(group_said in p for p in chats.prompts["g"])
