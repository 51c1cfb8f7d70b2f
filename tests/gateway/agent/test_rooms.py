"""Rooms: three agents (each its own Telegram bot, fake LLM) and two people in one group.

The real Gateway with ``agents:``, one fake Bot API per bot (tests/fakes/room.py), a
fake OpenAI server whose answers name the agent from its persona. What is checked is
what each bot posted in the group: each person's message is answered once by exactly
the agents it addresses; an agent that names another gets one answer; a chain of
agents passing a message on stops at ``rooms.max_agent_turns``; a SIGKILL of ``tether
run`` mid-exchange loses nothing and duplicates nothing.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from prometheus_client import REGISTRY

from tests.fakes.discord_api import snowflake_at, user
from tests.fakes.room import (
    AGENTS,
    CHANNEL_ID,
    PEOPLE,
    DiscordRoom,
    TelegramRoom,
    llm_section,
    room_reply,
)
from tests.support.config import db_rows, events_named, make_settings, write_config
from tests.support.processes import TETHER, spawn_run, subprocess_env
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters
from tether.testing.model import FakeModel


@pytest.fixture
async def room() -> AsyncIterator[TelegramRoom]:
    fakes = await TelegramRoom().start()
    try:
        yield fakes
    finally:
        await fakes.stop()


@pytest.fixture
def model(model: FakeModel) -> FakeModel:
    """The shared fake (model, tests/fixtures.py), as this module uses it."""
    model.reply = room_reply
    return model


COUNTED = [
    "events:alice:platform",
    "events:bob:room",
    "events:carol:room",
    "relays:bob",
    "tokens:alice",
    "tokens:bob",
    "tokens:carol",
]


def metric(name: str) -> float:
    """A sample of the agents' metrics, by a short name (``events:AGENT:SOURCE``...)."""
    kind, agent, *rest = name.split(":")
    sample = {
        "events": ("tether_agent_events_total", {"agent": agent, "source": "".join(rest)}),
        "relays": ("tether_room_relays_total", {"agent": agent}),
        "tokens": ("tether_agent_llm_tokens_total", {"agent": agent}),
    }[kind]
    return REGISTRY.get_sample_value(*sample) or 0.0


def room_config(room: TelegramRoom, model: FakeModel, **rooms: Any) -> dict[str, Any]:
    return {"llm": llm_section(model.url), "agents": room.agents_section(), "rooms": rooms}


async def settled(gateways: Gateway | list[Gateway], room: TelegramRoom, **posts: int) -> None:
    """Wait until each named agent's bot posted ``posts[agent]`` messages, then until the
    gateways have nothing left to do (a relay is accepted while its message is sent, so
    drain until nothing moves: a message too many would show)."""
    for agent, count in posts.items():
        fake = room.fakes[agent]
        await fake.wait_for(lambda f=fake, n=count: len(f.sent) >= n, timeout=30)  # type: ignore[misc]
    running = gateways if isinstance(gateways, list) else [gateways]
    while True:
        before = room.total()
        for gateway in running * 2:
            await gateway.drain()
        if room.total() == before:
            return


async def test_each_message_is_answered_once_by_the_agents_it_addresses(
    tmp_path: Path, room: TelegramRoom, model: FakeModel
) -> None:
    settings = make_settings(tmp_path, **room_config(room, model))
    gateway = Gateway(settings, build_adapters(settings))
    await gateway.start()
    try:
        room.say(PEOPLE[0], "@alice_bot hello")
        await settled(gateway, room, alice=1)
        room.say(PEOPLE[1], "@bob_bot @carol_bot hi both")
        await settled(gateway, room, alice=1, bob=1, carol=1)
        room.say(PEOPLE[0], "good morning everyone")  # addresses nobody
        await settled(gateway, room, alice=1, bob=1, carol=1)
    finally:
        await gateway.stop()
    assert room.sent("alice") == ["alice says ok"]
    assert room.sent("bob") == ["bob says ok"]
    assert room.sent("carol") == ["carol says ok"]
    # Memory is per agent and conversation: alice's session is hers alone.
    sessions = {row[0] for row in db_rows(tmp_path, "SELECT conversation FROM inbox")}
    assert sessions == {
        f"telegram@alice:-100500:u{PEOPLE[0]}",
        f"telegram@bob:-100500:u{PEOPLE[1]}",
        f"telegram@carol:-100500:u{PEOPLE[1]}",
    }


async def test_an_agent_that_names_another_gets_one_answer(
    tmp_path: Path, room: TelegramRoom, model: FakeModel
) -> None:
    settings = make_settings(tmp_path, **room_config(room, model))
    gateway = Gateway(settings, build_adapters(settings))
    before = {name: metric(name) for name in COUNTED}
    await gateway.start()
    try:
        room.say(PEOPLE[0], "@alice_bot ask bob about lunch")
        await settled(gateway, room, alice=1, bob=1)
    finally:
        await gateway.stop()
    moved = {name: metric(name) - before[name] for name in COUNTED}
    assert moved["events:alice:platform"] == moved["events:bob:room"] == 1
    assert moved["relays:bob"] == 1 and moved["events:carol:room"] == 0
    assert moved["tokens:alice"] > 0 and moved["tokens:bob"] > 0 and moved["tokens:carol"] == 0
    assert room.sent("alice") == ["bob, what do you think?"]
    assert room.sent("bob") == ["bob says ok"]  # it heard alice through the gateway
    assert room.sent("carol") == []
    # bob's answer quotes alice's message as posted on Telegram.
    (asked,) = room.fakes["bob"].sent
    assert "reply_parameters" in asked
    relays = [row[0] for row in db_rows(tmp_path, "SELECT key FROM inbox") if row[0][:5] == "room:"]
    assert len(relays) == 1 and relays[0].endswith(":bob")


async def test_an_agent_chain_stops_at_the_guard(
    tmp_path: Path, room: TelegramRoom, model: FakeModel
) -> None:
    settings = make_settings(tmp_path, **room_config(room, model))
    gateway = Gateway(settings, build_adapters(settings))
    with structlog.testing.capture_logs() as logs:
        await gateway.start()
        try:
            room.say(PEOPLE[0], "@alice_bot start a chain")
            await settled(gateway, room, alice=1, bob=1, carol=1)
        finally:
            await gateway.stop()
    assert room.sent("alice") == ["bob, chain on please"]
    assert room.sent("bob") == ["carol, chain on please"]
    assert room.sent("carol") == ["alice, chain on please"]  # the third: nobody hears it
    (guard,) = events_named(logs, "room.guard")
    assert guard["guard"] == "max_agent_turns" and guard["addressed"] == ["alice"]
    # The pipeline's lines name the agent whose event it is.
    done = sorted((line["agent"], line["key"][:5]) for line in events_named(logs, "event.done"))
    assert done == [("alice", "tg:90"), ("bob", "room:"), ("carol", "room:")]
    assert "rooms.max_agent_turns: 3" in guard["why"]


async def test_the_rate_guard_keeps_back_what_is_over_it(
    tmp_path: Path, room: TelegramRoom, model: FakeModel
) -> None:
    """``agent_rate: 1``: the chain's second relay in a minute is kept back, with its line."""
    config = room_config(room, model, agent_rate=1, max_agent_turns=10)
    settings = make_settings(tmp_path, **config)
    gateway = Gateway(settings, build_adapters(settings))
    with structlog.testing.capture_logs() as logs:
        await gateway.start()
        try:
            room.say(PEOPLE[0], "@alice_bot start a chain")
            await settled(gateway, room, alice=1, bob=1)
        finally:
            await gateway.stop()
    assert (room.sent("alice"), room.sent("bob"), room.sent("carol")) == (
        ["bob, chain on please"],
        ["carol, chain on please"],
        [],
    )
    (guard,) = events_named(logs, "room.guard")
    assert guard["guard"] == "agent_rate"


@pytest.mark.crash
@pytest.mark.slow
async def test_sigkill_mid_exchange_loses_and_duplicates_nothing(
    tmp_path: Path, room: TelegramRoom, model: FakeModel
) -> None:
    """``tether run`` is killed while bob's answer to alice is being asked of the model;
    after a restart every message is answered exactly once."""
    config = write_config(tmp_path, **room_config(room, model))
    log = tmp_path / "run.log"
    release = asyncio.Event()
    model.hold(lambda body: "You are bob." in str(body["messages"][0]) and not release.is_set())
    proc = await spawn_run(config, log)
    try:
        room.say(PEOPLE[0], "@alice_bot ask bob about the plan")
        room.say(PEOPLE[1], "@carol_bot hello")
        await room.fakes["alice"].wait_for(lambda: len(room.fakes["alice"].sent) >= 1, 60)
        await model.wait_for_requests(3, timeout=60)  # alice, carol, and bob (held)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        release.set()
        model.heal()
        proc = await spawn_run(config, log)
        await room.fakes["bob"].wait_for(lambda: len(room.fakes["bob"].sent) >= 1, 60)
        await room.fakes["carol"].wait_for(lambda: len(room.fakes["carol"].sent) >= 1, 60)
        room.say(PEOPLE[1], "@alice_bot one more")  # still answering after the restart
        await room.fakes["alice"].wait_for(lambda: len(room.fakes["alice"].sent) >= 2, 60)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
    assert room.sent("alice") == ["bob, what do you think?", "alice says ok"]
    assert room.sent("bob") == ["bob says ok"]
    assert room.sent("carol") == ["carol says ok"]
    statuses = db_rows(tmp_path, "SELECT status, count(*) FROM inbox GROUP BY status")
    assert statuses == [("done", 4)]
    # tether status names each agent and what each account received and sent.
    status = await asyncio.create_subprocess_exec(
        TETHER, "status", "--json", "-c", str(config),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env(),
    )  # fmt: skip
    out, _ = await asyncio.wait_for(status.communicate(), 60)
    report = json.loads(out)
    assert [agent["name"] for agent in report["agents"]] == list(AGENTS)
    assert report["agents"][0]["accounts"] == ["telegram@alice"]
    # what each agent's conversations spent today, adding up to the day's spend
    per_agent = {agent["name"]: agent["spend"]["tokens"] for agent in report["agents"]}
    assert all(per_agent[name] > 0 for name in AGENTS), per_agent
    assert sum(per_agent.values()) == sum(m["tokens"] for m in report["spend_today"].values())
    assert {f"telegram@{agent}" for agent in AGENTS} <= set(report["platforms"])


# -- the same room on Discord: every bot receives every message, the others' included ----


SECOND_PERSON = user(snowflake_at(1_600_000_000_000, 40), "bea")


@pytest.fixture
async def discord_room() -> AsyncIterator[DiscordRoom]:
    server = await DiscordRoom().start()
    try:
        yield server
    finally:
        await server.stop()


async def discord_settled(gateway: Gateway, fake: DiscordRoom, expected: int) -> None:
    await fake.wait_for(lambda: len(fake.sent) >= expected, timeout=30)
    while True:
        before = len(fake.sent)
        await gateway.drain()
        await gateway.drain()
        if len(fake.sent) == before:
            return


async def test_a_discord_room_answers_each_message_once_and_stops_the_chain(
    tmp_path: Path, discord_room: DiscordRoom, model: FakeModel
) -> None:
    """Discord delivers each bot's message to the other bots too: that copy is dropped
    (relaying is the one path), so nothing is answered twice."""
    fake = discord_room
    config = {"llm": llm_section(model.url), "agents": fake.agents_section()}
    settings = make_settings(tmp_path, **config)
    gateway = Gateway(settings, build_adapters(settings))
    with structlog.testing.capture_logs() as logs:
        await gateway.start()
        try:
            await fake.wait_for(lambda: fake.connected >= 3)
            await fake.say(CHANNEL_ID, "@alice hello")
            await discord_settled(gateway, fake, 1)
            await fake.say(CHANNEL_ID, "@bob @carol hi both", author=SECOND_PERSON)
            await discord_settled(gateway, fake, 3)
            await fake.say(CHANNEL_ID, "@alice ask carol about it")
            await discord_settled(gateway, fake, 5)
            await fake.say(CHANNEL_ID, "@bob start a chain")
            await discord_settled(gateway, fake, 8)
        finally:
            await gateway.stop()
    assert fake.sent_by("alice") == [
        "alice says ok",
        "carol, what do you think?",
        "bob, chain on please",
    ]
    assert fake.sent_by("bob") == ["bob says ok", "carol, chain on please"]
    assert fake.sent_by("carol") == ["carol says ok", "carol says ok", "alice, chain on please"]
    (guard,) = events_named(logs, "room.guard")
    assert guard["guard"] == "max_agent_turns"
    keys = [row[0] for row in db_rows(tmp_path, "SELECT key FROM inbox")]
    assert all(key.startswith(("dc:", "room:")) for key in keys)
    assert not [key for key in keys if key.startswith("dc:msg:")]  # keys name the bot


# -- several instances on PostgreSQL serve every agent: one long poll per bot ----------


async def test_two_instances_on_postgresql_answer_once_and_take_over(
    tmp_path: Path, room: TelegramRoom, model: FakeModel, pg_dsn: str
) -> None:
    """Two gateways on one PostgreSQL store with the same three agents: each bot is
    long-polled by one of them, each message and relay handled once; when the first
    stops, the second takes over its bots and rooms keep working."""
    settings = make_settings(tmp_path, memory={"store": pg_dsn}, **room_config(room, model))

    async def start() -> Gateway:
        adapters = build_adapters(settings)
        for adapter in adapters.values():
            adapter.standby_interval = 0.05  # type: ignore[attr-defined]
        gateway = Gateway(settings, adapters)
        await gateway.start()
        return gateway

    first = await start()
    second = await start()
    try:
        for fake in room.fakes.values():
            await fake.wait_for(lambda f=fake: len(f.offsets) > 0)  # type: ignore[misc]
        room.say(PEOPLE[0], "@alice_bot ask bob about lunch")
        room.say(PEOPLE[1], "@carol_bot hello")
        await settled([first, second], room, alice=1, bob=1, carol=1)
        await first.stop()  # its poll locks go with its connections
        room.say(PEOPLE[1], "@bob_bot please ask carol now")
        await settled(second, room, bob=2, carol=2)
    finally:
        await first.stop()
        await second.stop()
    assert room.sent("alice") == ["bob, what do you think?"]
    assert room.sent("bob") == ["bob says ok", "carol, what do you think?"]
    assert room.sent("carol") == ["carol says ok", "carol says ok"]


@pytest.mark.crash
@pytest.mark.slow
async def test_sigkill_mid_exchange_on_discord_loses_and_duplicates_nothing(
    tmp_path: Path, discord_room: DiscordRoom, model: FakeModel
) -> None:
    """Killed while carol is being asked about alice's message; a person writes to bob
    while the gateway is down. After the restart (a new Discord session, so a backfill)
    carol answers alice once, bob answers once, nothing else is posted."""
    fake = discord_room
    config = write_config(tmp_path, llm=llm_section(model.url), agents=fake.agents_section())
    log = tmp_path / "run.log"
    release = asyncio.Event()
    model.hold(lambda body: "You are carol." in str(body["messages"][0]) and not release.is_set())
    proc = await spawn_run(config, log)
    try:
        await fake.wait_for(lambda: fake.connected >= 3, 60)
        await fake.say(CHANNEL_ID, "@alice ask carol about the plan")
        await model.wait_for_requests(2, timeout=60)  # alice, then carol (held)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        await fake.wait_for(lambda: fake.connected == 0, 60)
        fake.post(fake.message(CHANNEL_ID, f"<@{fake.by_agent['bob']['id']}> hello"))
        fake.history[CHANNEL_ID][-1]["mentions"] = [fake.by_agent["bob"]]
        release.set()
        model.heal()
        proc = await spawn_run(config, log)
        await fake.wait_for(lambda: len(fake.sent_by("carol")) >= 1, 60)
        await fake.wait_for(lambda: len(fake.sent_by("bob")) >= 1, 60)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
    assert fake.sent_by("alice") == ["carol, what do you think?"]
    assert fake.sent_by("carol") == ["carol says ok"]
    assert fake.sent_by("bob") == ["bob says ok"]
    statuses = db_rows(tmp_path, "SELECT status, count(*) FROM inbox GROUP BY status")
    assert statuses == [("done", 3)]


async def test_relays_pass_the_access_rules_and_the_flood_limit_that_people_meet(
    tmp_path: Path, room: TelegramRoom, model: FakeModel
) -> None:
    """Only the two people are allowed (by user id) and each may send one message a
    minute: alice, asked twice, is heard by bob and carol all the same. Her messages are
    the gateway's own, paced by the room guards, not by the people's limits."""
    access = {
        "allow": [f"telegram:{person}" for person in PEOPLE],
        "rate_limit": {"messages": 1, "per_seconds": 60},
    }
    settings = make_settings(tmp_path, access=access, **room_config(room, model))
    gateway = Gateway(settings, build_adapters(settings))
    await gateway.start()
    try:
        room.say(PEOPLE[0], "@alice_bot ask bob about lunch")
        room.say(PEOPLE[1], "@alice_bot ask carol about dinner")
        await settled(gateway, room, alice=2, bob=1, carol=1)
    finally:
        await gateway.stop()
    assert sorted(room.sent("alice")) == ["bob, what do you think?", "carol, what do you think?"]
    assert room.sent("bob") == ["bob says ok"]
    assert room.sent("carol") == ["carol says ok"]


async def test_respond_to_agents_all_never_and_an_agents_own_access(
    tmp_path: Path, room: TelegramRoom, model: FakeModel
) -> None:
    """bob hears every agent message (``all``), carol none (``never``) even when named;
    carol answers only the first person (her ``access.allow``), alice everyone."""
    config = room_config(room, model)
    config["agents"][1]["respond_to_agents"] = "all"
    config["agents"][2]["respond_to_agents"] = "never"
    config["agents"][2]["access"] = {"allow": [f"telegram:{PEOPLE[0]}"]}
    settings = make_settings(tmp_path, **config)
    gateway = Gateway(settings, build_adapters(settings))
    with structlog.testing.capture_logs() as logs:
        await gateway.start()
        try:
            room.say(PEOPLE[1], "@alice_bot ask carol about it")
            await settled(gateway, room, alice=1, bob=1)
            room.say(PEOPLE[1], "@carol_bot hello")  # not hers to answer
            room.say(PEOPLE[0], "@carol_bot hello")
            await settled(gateway, room, carol=1, bob=2)
        finally:
            await gateway.stop()
    assert room.sent("alice") == ["carol, what do you think?"]
    # all: bob answered alice's message to carol, and carol's answer to the person.
    assert room.sent("bob") == ["bob says ok", "bob says ok"]
    assert room.sent("carol") == ["carol says ok"]
    (denied,) = events_named(logs, "agent.access_denied")
    assert denied["agent"] == "carol" and f"telegram:{PEOPLE[1]}" in denied["places"]
