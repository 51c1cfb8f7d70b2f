"""Settings for the fake Discord REST API and gateway (tests/fakes/discord_api.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.fakes.discord_api import (
    FakeDiscord,
)
from tests.support.config import make_settings
from tests.support.gateway import running
from tether import Context, Event, Router
from tether.config import Settings
from tether.gateway.app import Gateway
from tether.gateway.builtin.echo import echo_router


def section(fake: FakeDiscord, **discord: Any) -> dict[str, Any]:
    return {
        "token": fake.token,
        "api_base": fake.api_base,
        "gateway_url": fake.gateway_url,
        **discord,
    }


def discord_settings(tmp_path: Path, fake: FakeDiscord, **discord: Any) -> Settings:
    return make_settings(tmp_path, platforms={"discord": section(fake, **discord)})


handlers = Router("discord-tests")


@handlers.text(r"^long$")
async def _long(ctx: Context) -> None:
    await ctx.reply(LONG_REPLY)


def _long_reply() -> str:
    head = "Here is the script:\n\n```python\n"
    code = "".join(f"value_{i:03d} = compute({i}, 'padding text')\n" for i in range(90))
    text = head + code + "```\n\nThat is all"
    return text + "." * (4500 - len(text))


LONG_REPLY = _long_reply()


def router() -> Router:
    root = Router("root")
    root.include(handlers)
    root.include(echo_router())
    return root


class Accepts:
    """Every ``inbox.accept`` the adapter makes (events, cursors, which were new), to
    wait on: what the adapter did with gateway events that get no reply."""

    def __init__(self, gateway: Gateway) -> None:
        self.calls: list[tuple[list[Event], dict[str, str], list[bool]]] = []
        self._changed = asyncio.Condition()
        accept = gateway.inbox.accept

        async def recording(
            events: Sequence[Event], cursors: Mapping[str, str] | None = None
        ) -> list[bool]:
            fresh = await accept(events, cursors)
            self.calls.append((list(events), dict(cursors or {}), fresh))
            async with self._changed:
                self._changed.notify_all()
            return fresh

        gateway.inbox.accept = recording  # type: ignore[method-assign]

    def of(self, key: str) -> list[bool]:
        """For each accept of the event ``key``: whether it was new then."""
        return [
            new
            for events, _, fresh in self.calls
            for event, new in zip(events, fresh, strict=True)
            if event.key == key
        ]

    def cursor(self, name: str) -> str | None:
        values = [cursors[name] for _, cursors, _ in self.calls if name in cursors]
        return values[-1] if values else None

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)


@asynccontextmanager
async def discord_running(
    settings: Settings, fake: FakeDiscord, routes: Router | None = None
) -> AsyncIterator[tuple[Gateway, Accepts]]:
    """:func:`~tests.support.gateway.running` for a Discord test: the gateway once the
    fake's gateway connection is up, with every accept the adapter makes from then on."""
    async with running(settings, routes or router()) as (gateway, _adapter):
        accepts = Accepts(gateway)
        await fake.wait_for(lambda: fake.connected >= 1)
        yield gateway, accepts
