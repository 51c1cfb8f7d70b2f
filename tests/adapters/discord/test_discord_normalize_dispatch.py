"""Payloads discord.py itself cannot read, against the fake gateway: one such dispatch is
skipped, the session it came on is kept, and reconnects are counted from the last healthy
session; ``/ask`` from a channel discord.py cannot resolve still names its chat.

The real adapter and discord.py client against tests/fakes/discord_api.py, as in
tests/adapters/discord/test_discord.py (through ``discord_running`` and the shared fake).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path

import discord
import pytest
import structlog

from tests.fakes.discord_api import BOT_ID, CHANNEL_ID, GUILD_ID, TOKEN, FakeDiscord
from tests.support.config import CORPUS as SHARED_CORPUS
from tests.support.config import events_named
from tests.support.discord import discord_running, discord_settings
from tether.adapters.discord.ingress import GatewayIngress
from tether.adapters.discord.normalize import Bot, message
from tether.config.schema import DiscordConfig
from tether.events import Event


@pytest.fixture
def fake(discord_fake: FakeDiscord) -> FakeDiscord:
    """The shared fake Discord (tests/fixtures.py), by this module's name for it."""
    return discord_fake


CORPUS = SHARED_CORPUS / "discord"


def partial_update(message_id: str) -> dict[str, object]:
    """A MESSAGE_UPDATE as Discord sends it when it only adds a link preview: no ``type``,
    no ``author``, no ``edited_timestamp``. discord.py's parser raises KeyError on it."""
    return {
        "id": message_id,
        "channel_id": str(CHANNEL_ID),
        "guild_id": str(GUILD_ID),
        "embeds": [
            {
                "type": "article",
                "url": "https://example.org/notes",
                "title": "Release notes",
                "description": "What changed this week",
            }
        ],
    }


async def test_a_dispatch_discord_py_cannot_parse_is_skipped_and_the_session_kept(
    tmp_path: Path,
    fake: FakeDiscord,
) -> None:
    with structlog.testing.capture_logs() as logs:
        async with discord_running(discord_settings(tmp_path, fake), fake) as (gateway, _accepts):
            first = await fake.say(CHANNEL_ID, "one", mention_bot=True)
            await fake.wait_for(lambda: len(fake.sent) >= 1)
            await fake.dispatch("MESSAGE_UPDATE", partial_update(first["id"]))
            await fake.say(CHANNEL_ID, "two", mention_bot=True)
            await fake.wait_for(lambda: len(fake.sent) >= 2)
            await gateway.drain()
    assert [sent["content"] for sent in fake.sent] == ["@Tether one", "@Tether two"]
    assert len(fake.identifies) == 1 and fake.resumes == 0  # the same session throughout
    assert events_named(logs, "discord.gateway_failed") == []
    (skipped,) = events_named(logs, "discord.dispatch_skipped")
    assert skipped["dispatch"] == "MESSAGE_UPDATE" and skipped["log_level"] == "warning"
    assert skipped["error"].startswith("KeyError")


def session(discord_api: FakeDiscord, number: int) -> Callable[[], bool]:
    """The ``number``-th gateway session is identified and is the one connection open."""
    return lambda: len(discord_api.identifies) == number and discord_api.connected == 1


async def test_reconnects_are_counted_from_the_last_healthy_session(
    tmp_path: Path,
    fake: FakeDiscord,
) -> None:
    """Each broken frame fails a session that had reached READY: each is failure 1."""
    with structlog.testing.capture_logs() as logs:
        async with discord_running(discord_settings(tmp_path, fake), fake):
            for sessions in range(1, 4):
                await fake.wait_for(session(fake, sessions))
                # READY handled (the counter's reset), not only sent: else the broken
                # frame may land first and rightly count as the same run of failures.
                async with asyncio.timeout(10):  # polled: the log is the client's, not the fake's
                    while len(events_named(logs, "discord.connected")) < sessions:  # noqa: ASYNC110
                        await asyncio.sleep(0.01)
                for ws in list(fake._sockets):
                    await ws.send_str("{not json")  # the read loop itself fails on it
            await fake.wait_for(session(fake, 4))
    failed = events_named(logs, "discord.gateway_failed")
    assert [line["failures"] for line in failed] == [1, 1, 1]
    assert all(line["error"].startswith("JSONDecodeError") for line in failed)


async def test_ask_from_a_channel_discord_py_cannot_resolve_is_answered_there(
    tmp_path: Path,
    fake: FakeDiscord,
) -> None:
    """discord.py leaves ``interaction.channel_id`` None for a channel type it does not
    know; the payload still names the channel, and that is the chat."""
    odd_channel = fake.next_id()
    fake.channels[odd_channel] = {
        "id": str(odd_channel),
        "type": 99,  # a channel type newer than the library
        "guild_id": str(GUILD_ID),
        "name": "new-kind",
        "last_message_id": None,
        "flags": 0,
        "permissions": "0",
    }
    fake.history[odd_channel] = []
    settings = discord_settings(tmp_path, fake, ask_command=True)
    async with discord_running(settings, fake) as (gateway, _accepts):
        asked = await fake.interact("where am I?", channel_id=odd_channel)
        await fake.wait_for(lambda: len(fake.original_edits) >= 1)
        await gateway.drain()
        row = await gateway.store.inbox_row(f"dc:int:{asked['id']}")
    assert row is not None and row.event.conversation.chat_id == str(odd_channel)
    assert [content["content"] for _, content in fake.original_edits] == ["where am I?"]


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
async def test_no_corpus_payload_escapes_the_parsers_tether_wraps() -> None:
    """Every real payload through discord.py's own parsers, as the read loop calls them
    once the ingress is attached: those discord.py cannot parse are skipped and logged."""
    client = discord.Client(intents=discord.Intents.default())
    ingress = GatewayIngress(
        DiscordConfig.model_validate({"token": TOKEN, "ask_command": True}), lambda _: 0.0
    )
    ingress.attach(client, Bot(id=str(BOT_ID)))
    parsers = client._connection.parsers
    frames = [json.loads(path.read_text()) for path in sorted(CORPUS.glob("*.json"))]
    try:
        with structlog.testing.capture_logs() as logs:
            for frame in frames:
                parsers[frame["t"]](frame["d"])
    finally:
        await client.close()
    skipped = events_named(logs, "discord.dispatch_skipped")
    assert skipped, "the corpus holds payloads discord.py cannot parse"
    assert {line["dispatch"] for line in skipped} <= {frame["t"] for frame in frames}


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
async def test_every_corpus_messages_raw_stays_the_payload_as_sent_once_discord_py_parsed_it() -> (
    None
):
    """The read loop's order for each message: Tether normalizes the payload, then
    discord.py parses the same dict and writes into it (a member gains ``user``, a
    mention loses its ``member``). The event's ``raw`` keeps the payload as it came."""
    client = discord.Client(intents=discord.Intents.default())
    parsers = client._connection.parsers  # discord.py's own, not wrapped: nothing is taken
    bot = Bot(id=str(BOT_ID), require_mention=False, ignore_bots=False)
    changed: list[str] = []
    events = 0
    try:
        for path in sorted(CORPUS.glob("*.json")):
            frame = json.loads(path.read_text())
            if frame["t"] not in ("MESSAGE_CREATE", "MESSAGE_UPDATE"):
                continue
            data, as_sent = frame["d"], json.loads(json.dumps(frame["d"]))
            edited = data.get("edited_timestamp") if frame["t"] == "MESSAGE_UPDATE" else None
            outcome = message(data, bot, edited=str(edited) if edited else None)
            with contextlib.suppress(Exception):  # what discord.py cannot parse (see above)
                parsers[frame["t"]](data)
            if isinstance(outcome, Event):
                events += 1
                if outcome.raw != as_sent:
                    changed.append(path.name)
    finally:
        await client.close()
    assert events >= 40  # nearly every message in the corpus is one
    assert changed == []
