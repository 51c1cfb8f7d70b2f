"""The upgrade to ``agents:``: keys name the receiving account, and a store written with
the one-agent keys keeps deduplicating.

With several agents, two of our bots in one Discord channel (or two Feishu apps in one
group) receive the same message id, so the keys become ``dc:{bot_id}:msg:{id}`` and
``fs:{app_id}:msg:{id}``. A store written by a one-agent Tether holds ``dc:msg:{id}``:
a redelivery of that message after the upgrade must still be a duplicate. Checked end
to end on the real discord.py against the fake Discord, on SQLite and PostgreSQL: the
one-agent gateway answers a message, the same store and bot then run as an agent of
``agents:``, Discord delivers the message again (a RESUME replay), and it is not
answered twice; a new message is answered and stored under the new key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.discord_api import BOT_ID, CHANNEL_ID, FakeDiscord
from tests.support.config import make_settings
from tether.adapters.feishu import FeishuAdapter
from tether.config import Settings
from tether.config.platforms import FeishuConfig
from tether.events import Conversation, Event, Sender
from tether.gateway.agent.accounts import AccountInbox
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters
from tether.memory.inmemory import MemoryStore


@pytest.fixture
def fake(discord_fake: FakeDiscord) -> FakeDiscord:
    """The shared fake (discord_fake, tests/fixtures.py), as this module uses it."""
    return discord_fake


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        dsn: str = request.getfixturevalue("pg_dsn")
        return dsn
    return f"sqlite:///{tmp_path / 'tether.db'}"


def discord(fake: FakeDiscord) -> dict[str, Any]:
    return {"token": fake.token, "api_base": fake.api_base, "gateway_url": fake.gateway_url}


class Accepts:
    """Every accept that reached the gateway's inbox, to wait on."""

    def __init__(self, gateway: Gateway) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []
        self.changed = asyncio.Condition()
        accept = gateway.inbox.accept

        async def recording(
            events: Sequence[Event], cursors: Mapping[str, str] | None = None
        ) -> list[bool]:
            fresh = await accept(events, cursors)
            async with self.changed:
                self.calls.append(([e.key for e in events], dict(cursors or {})))
                self.changed.notify_all()
            return fresh

        gateway.inbox.accept = recording  # type: ignore[method-assign]

    async def wait_for(self, predicate: Any) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), 20)


async def run(settings: Settings, fake: FakeDiscord, script: Any) -> None:
    adapters = build_adapters(settings)
    gateway = Gateway(settings, adapters)
    accepts = Accepts(gateway)
    await gateway.start()
    try:
        await fake.wait_for(lambda: fake.connected >= 1)
        await script(gateway, accepts)
        await gateway.drain()
    finally:
        await gateway.stop()


async def test_a_one_agent_store_keeps_deduplicating_after_the_upgrade(
    tmp_path: Path, fake: FakeDiscord, store_url: str
) -> None:
    memory = {"store": store_url}
    before = make_settings(tmp_path, memory=memory, platforms={"discord": discord(fake)})
    asked: dict[str, Any] = {}

    async def one_agent(gateway: Gateway, accepts: Accepts) -> None:
        asked.update(await fake.say(CHANNEL_ID, "before the upgrade", mention_bot=True))
        await fake.wait_for(lambda: len(fake.sent) >= 1)

    await run(before, fake, one_agent)
    agent = {"name": "alice", "handler": "echo", "platforms": {"discord": discord(fake)}}
    after = make_settings(tmp_path, memory=memory, agents=[agent])
    new: dict[str, Any] = {}

    async def agents(gateway: Gateway, accepts: Accepts) -> None:
        assert await gateway.store.inbox_row(f"dc:msg:{asked['id']}") is not None
        await fake.dispatch("MESSAGE_CREATE", asked)  # a replay after a RESUME
        # Left out as a duplicate: its cursor still reaches the inbox, with no event.
        await accepts.wait_for(lambda: any(not k and c for k, c in accepts.calls))
        new.update(await fake.say(CHANNEL_ID, "after the upgrade", mention_bot=True))
        await fake.wait_for(lambda: len(fake.sent) >= 2)

    await run(after, fake, agents)
    answers = [m for m in fake.sent if m["author"]["id"] == str(BOT_ID)]
    assert [m["content"] for m in answers] == [
        "@Tether before the upgrade",
        "@Tether after the upgrade",
    ]
    check = Gateway(after, {}, http=False, scheduler=False)
    await check.store.open()
    try:
        assert await check.store.inbox_row(f"dc:{BOT_ID}:msg:{asked['id']}") is None
        assert await check.store.inbox_row(f"dc:{BOT_ID}:msg:{new['id']}") is not None
        assert await check.store.inbox_row(f"dc:msg:{new['id']}") is None
    finally:
        await check.store.close()


async def test_feishu_keys_name_the_app_and_honour_the_old_key() -> None:
    """Stamping alone: ``fs:msg:{id}`` becomes ``fs:{app_id}:msg:{id}``; a row under the
    old key makes the message a duplicate; ``fs:evt:`` keys are per app already."""
    store = MemoryStore()
    settings = make_settings(Path("/nonexistent"), memory={"store": "memory://"})
    gateway = Gateway(settings, {}, store=store, http=False, scheduler=False)
    await store.open()
    try:
        adapter = FeishuAdapter(FeishuConfig(app_id="cli_app_b", app_secret="s3cret-for-tests"))
        inbox = AccountInbox(gateway.inbox, "feishu@bob", adapter, lambda _e: False)

        def message(key: str) -> Event:
            return Event(
                key=key,
                platform="feishu",
                conversation=Conversation(platform="feishu", chat_id="oc_1", chat_type="group"),
                sender=Sender(id="ou_1"),
                text="hi",
            )

        stamped, legacy = inbox.stamp(message("fs:msg:om_1"))
        assert (stamped.key, legacy) == ("fs:cli_app_b:msg:om_1", "fs:msg:om_1")
        assert stamped.conversation.platform == "feishu@bob" and stamped.meta["agent"] == "bob"
        assert inbox.stamp(message("fs:evt:e_1"))[0].key == "fs:evt:e_1"
        assert await gateway.inbox.accept([message("fs:msg:om_old")]) == [True]  # pre-upgrade
        assert await inbox.accept([message("fs:msg:om_old"), message("fs:msg:om_new")]) == [
            False,
            True,
        ]
        assert await inbox.accept([message("fs:msg:om_new")]) == [False]
        assert await store.inbox_row("fs:cli_app_b:msg:om_new") is not None
    finally:
        await gateway.dispatcher.stop(0)
        await store.close()
