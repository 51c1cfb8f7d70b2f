"""What the Slack adapter tests share: a fake Slack, the adapter pointed at it, and an
inbox that is the real SQLite store's accept (the gateway is not wired for Slack yet)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.fakes.slack_events import SIGNING_SECRET
from tether.adapters.slack.adapter import SlackAdapter
from tether.adapters.slack.config import SlackConfig
from tether.events import Event
from tether.memory.sqlite import SqliteStore


class StoreInbox:
    """:class:`~tether.adapters.base.Ingress` over a real store: what the gateway's inbox
    commits (insert-or-ignore by key), without its dispatcher."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store

    async def accept(
        self, events: Sequence[Event], cursors: Mapping[str, str] | None = None
    ) -> list[bool]:
        rows = await self.store.accept([(e, e.conversation.key) for e in events], cursors)
        return [row is not None for row in rows]

    async def cursor(self, name: str) -> str | None:
        return await self.store.cursor(name)

    async def recent_cursors(self, prefix: str, since: float) -> dict[str, str]:
        return await self.store.recent_cursors(prefix, since)

    async def try_lock(self, name: str) -> bool:
        return await self.store.try_lock(name)

    async def keys(self) -> list[str]:
        return [row.event.key for row in await self.store.recover()]


def config(fake: FakeSlack, **fields: Any) -> SlackConfig:
    base: dict[str, Any] = {
        "bot_token": BOT_TOKEN,
        "app_token": APP_TOKEN,
        "signing_secret": SIGNING_SECRET,
        "api_base": fake.base_url,
        "timeout": 5.0,
        "rate_limits": False,
    }
    return SlackConfig.model_validate({**base, **fields})


@asynccontextmanager
async def opened(fake: FakeSlack, **fields: Any) -> AsyncIterator[SlackAdapter]:
    adapter = SlackAdapter(config(fake, **fields))
    adapter.open_attempts = 1
    await adapter.open()
    try:
        yield adapter
    finally:
        await adapter.stop()
        await adapter.close()


@asynccontextmanager
async def store_inbox(tmp_path: Path) -> AsyncIterator[StoreInbox]:
    store = SqliteStore(str(tmp_path / "slack.db"))
    await store.open()
    try:
        yield StoreInbox(store)
    finally:
        await store.close()
