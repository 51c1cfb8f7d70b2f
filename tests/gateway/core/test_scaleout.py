"""Several gateways on one PostgreSQL store: one conversation never runs in two places,
order holds, every event is handled once and every reply sent once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.config import make_settings
from tether import Context, Router
from tether.adapters.base import Sent
from tether.adapters.loopback import LoopbackAdapter
from tether.events import OutMessage
from tether.gateway.app import Gateway


async def test_two_gateways_share_lanes_without_double_handling(
    tmp_path: Path, pg_dsn: str
) -> None:
    running: dict[str, str] = {}  # conversation -> gateway now running it
    overlaps: list[str] = []
    handled: list[tuple[str, str, str]] = []

    def router(name: str) -> Router:
        r = Router()

        @r.text()
        async def handle(ctx: Context) -> None:
            chat = ctx.conversation
            if chat in running:
                overlaps.append(chat)
            running[chat] = name
            await asyncio.sleep(0.001)  # let the other gateway try the same lane
            del running[chat]
            handled.append((name, chat, ctx.event.text))
            await ctx.reply(f"re:{ctx.event.text}")

        return r

    settings = make_settings(tmp_path, memory={"store": pg_dsn}, pipeline={"sweep_interval": 0.05})
    total = 8 * 25
    all_sent = asyncio.Event()

    class Counting(LoopbackAdapter):
        """Either gateway may send a reply: together they must send every one."""

        async def send(self, message: OutMessage) -> Sent:
            sent = await super().send(message)
            if sum(len(a.sent) for a in adapters) >= total:
                all_sent.set()
            return sent

    adapters = [Counting(), Counting()]
    gateways = [
        Gateway(settings, {"loopback": adapters[i]}, router=router(f"g{i}")) for i in range(2)
    ]
    for gateway in gateways:
        await gateway.start()
    try:
        chats = [str(c) for c in range(8)]

        async def feed(chat: str) -> None:
            for n in range(25):  # alternate the gateway that accepts, as a balancer would
                adapter = adapters[n % 2]
                await adapter.deliver(adapter.event(f"{chat}-{n}", chat=chat, key=f"e:{chat}:{n}"))

        await asyncio.gather(*(feed(chat) for chat in chats))

        await asyncio.wait_for(all_sent.wait(), 60)
    finally:
        for gateway in gateways:
            await gateway.stop()

    assert overlaps == []
    assert len(handled) == total and len({h[2] for h in handled}) == total
    sent = [d.message.text for a in adapters for d in a.sent]
    assert sorted(sent) == sorted(f"re:{c}-{n}" for c in chats for n in range(25))
    for chat in chats:
        order = [int(text.split("-")[1]) for _g, c, text in handled if c == f"loopback:{chat}"]
        assert order == list(range(25))


@pytest.mark.slow
async def test_one_instance_long_polls_telegram_and_another_takes_over(
    tmp_path: Path, pg_dsn: str
) -> None:
    from tests.fakes.telegram_api import FakeTelegram
    from tether.adapters.telegram import TelegramAdapter
    from tether.gateway.assembly import build_adapters

    fake = await FakeTelegram().start()
    settings = make_settings(
        tmp_path,
        memory={"store": pg_dsn},
        platforms={
            "telegram": {
                "token": fake.token,
                "base_url": fake.base_url,
                "poll_timeout": 1,
                "rate_limits": False,
            }
        },
    )

    async def start() -> tuple[Gateway, TelegramAdapter]:
        adapters = build_adapters(settings)
        telegram = adapters["telegram"]
        assert isinstance(telegram, TelegramAdapter)
        telegram.standby_interval = 0.05
        gateway = Gateway(settings, adapters)
        await gateway.start()
        return gateway, telegram

    first, first_tg = await start()
    second: Gateway | None = None
    try:
        await fake.wait_for(lambda: len(fake.offsets) > 0)  # the first one polls
        second, second_tg = await start()
        fake.push(message=fake.message(5, "one"))
        await fake.wait_for(lambda: len(fake.sent) == 1)
        assert first_tg.polling and not second_tg.polling
        assert second_tg.connected  # standing by is ready, not down

        await first.stop()  # its lock goes with its connection
        await fake.wait_for(lambda: second_tg.polling)
        fake.push(message=fake.message(5, "two"))
        await fake.wait_for(lambda: len(fake.sent) == 2)
    finally:
        if second is not None:
            await second.stop()
        await fake.stop()
    assert [s["text"] for s in fake.sent] == ["one", "two"]
