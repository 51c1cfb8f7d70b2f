"""Written answers on a shared store: two gateways on one PostgreSQL schema, each answer
accepted by the other instance than the one that asked. The lane read tells an instance
that the conversation waits (InboxRow.waits_open), with no read per message."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.config import make_settings
from tether import Context, Router
from tether.adapters.base import Sent
from tether.adapters.loopback import LoopbackAdapter
from tether.events import OutMessage
from tether.gateway.app import Gateway


def dialog() -> Router:
    router = Router()

    @router.command("trip")
    async def trip(ctx: Context) -> None:
        city = await ctx.ask("Which city?")
        when = await ctx.ask(f"When to {city.text}?")
        await ctx.reply(f"{city.text} {when.text}")

    @router.fallback
    async def other(ctx: Context) -> None:
        await ctx.reply(f"new turn: {ctx.event.text}")

    return router


async def test_answers_landing_on_the_other_instance_resume_the_dialog(
    tmp_path: Path, pg_dsn: str
) -> None:
    sent: list[str] = []
    arrived = asyncio.Condition()

    class Recording(LoopbackAdapter):
        async def send(self, message: OutMessage) -> Sent:
            out = await super().send(message)
            async with arrived:
                sent.append(message.text)
                arrived.notify_all()
            return out

    async def reply(count: int) -> None:
        async with arrived:
            await asyncio.wait_for(arrived.wait_for(lambda: len(sent) >= count), 30)

    settings = make_settings(tmp_path, memory={"store": pg_dsn}, pipeline={"sweep_interval": 30})
    adapters = [Recording(), Recording()]
    gateways = [Gateway(settings, {"loopback": a}, router=dialog()) for a in adapters]
    for gateway in gateways:
        await gateway.start()
    try:
        a, b = adapters
        await a.deliver(a.event("/trip", chat="7", key="e1"))
        await reply(1)
        await b.deliver(b.event("Rome", chat="7", key="e2"))  # the other instance
        await reply(2)
        await a.deliver(a.event("May", chat="7", key="e3"))
        await reply(3)
        await b.deliver(b.event("hello", chat="7", key="e4"))  # no wait now: a new turn
        await reply(4)
    finally:
        for gateway in gateways:
            await gateway.stop()
    assert sent == ["Which city?", "When to Rome?", "Rome May", "new turn: hello"]
