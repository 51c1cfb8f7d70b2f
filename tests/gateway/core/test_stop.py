"""``/stop``: it cancels the conversation's running turn without waiting in its lane, the
stopped turn ends done (no retry, no dead letter) with its finished steps kept, and the
next message is answered normally."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import aiohttp
import pytest
import structlog
from aiohttp import web
from prometheus_client import REGISTRY

from tests.support.config import db_rows, make_settings
from tests.support.gateway import running
from tether import Context, Router
from tether.gateway.core.stop import NOTHING_RUNNING, STOPPED_ANSWER, STOPPED_NOTICE


class SlowService:
    """A fake HTTP service whose ``/slow`` answers only once the test releases it."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0
        self.url = ""

    async def slow(self, request: web.Request) -> web.Response:
        self.calls += 1
        self.arrived.set()
        await self.release.wait()
        return web.Response(text="slow answer")


@pytest.fixture
async def service() -> AsyncIterator[SlowService]:
    fake = SlowService()
    app = web.Application()
    app.router.add_get("/slow", fake.slow)
    runner = web.AppRunner(app, shutdown_timeout=0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    fake.url = f"http://127.0.0.1:{port}/slow"
    try:
        yield fake
    finally:
        fake.release.set()
        await runner.cleanup()


def slow_router(service: SlowService, seen: list[str]) -> Router:
    router = Router()

    @router.text()
    async def handle(ctx: Context) -> None:
        seen.append(ctx.event.text)
        if ctx.event.text != "wait":
            await ctx.reply(f"answer: {ctx.event.text}")
            return
        await ctx.step("before", lambda: "kept")

        async def fetch() -> str:
            async with aiohttp.ClientSession() as http, http.get(service.url) as response:
                return await response.text()

        await ctx.reply(await ctx.step("slow", fetch))

    return router


def stopped_total() -> float:
    return REGISTRY.get_sample_value("tether_turns_stopped_total") or 0.0


async def test_stop_cancels_a_turn_waiting_on_a_slow_call(
    tmp_path: Path, service: SlowService
) -> None:
    seen: list[str] = []
    before = stopped_total()
    async with running(make_settings(tmp_path), slow_router(service, seen)) as (gateway, loop):
        waiting = await loop.say("wait")
        await service.arrived.wait()  # the turn is inside its slow call now
        stop = await loop.say("/stop")
        sent = await loop.wait_for_sent(2)
        assert sorted(d.message.text for d in sent) == sorted([STOPPED_NOTICE, STOPPED_ANSWER])
        assert not service.release.is_set()  # it never answered: the turn was cancelled
        await loop.say("next")
        sent = await loop.wait_for_sent(3)
        assert sent[2].message.text == "answer: next"
        await gateway.drain()

    assert seen == ["wait", "next"]  # the stopped turn was not retried
    assert service.calls == 1
    assert stopped_total() - before == 1
    status = dict(db_rows(tmp_path, "SELECT key, status FROM inbox"))
    assert status[waiting.key] == "done" and status[stop.key] == "done"
    assert db_rows(tmp_path, "SELECT count(*) FROM dead_letters") == [(0,)]
    steps = db_rows(tmp_path, "SELECT name FROM steps WHERE event_key = ?", waiting.key)
    assert steps == [("before",)]  # the finished step is kept; the cancelled one never saved
    outbox = {
        json.loads(payload)["text"]: key
        for key, payload in db_rows(tmp_path, "SELECT event_key, payload FROM outbox")
    }
    assert outbox == {STOPPED_NOTICE: waiting.key, STOPPED_ANSWER: stop.key, "answer: next": ANY}


async def test_stop_with_nothing_running_says_so_once(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path), Router()) as (gateway, loop):
        event = await loop.say("/stop")
        await loop.deliver(event)  # a redelivery is a duplicate, not a second answer
        await gateway.drain()
        sent = await loop.wait_for_sent(1)
    assert [d.message.text for d in sent] == [NOTHING_RUNNING]


async def test_stop_in_another_chat_leaves_this_turn_running(
    tmp_path: Path, service: SlowService
) -> None:
    seen: list[str] = []
    async with running(make_settings(tmp_path), slow_router(service, seen)) as (gateway, loop):
        await loop.say("wait", chat="1")
        await service.arrived.wait()
        await loop.say("/stop", chat="2")
        sent = await loop.wait_for_sent(1)
        assert [d.message.text for d in sent] == [NOTHING_RUNNING]
        service.release.set()
        sent = await loop.wait_for_sent(2)
        assert sent[1].message.text == "slow answer"
        await gateway.drain()


async def test_help_lists_stop(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path)) as (_gateway, loop):
        await loop.say("/help")
        sent = await loop.wait_for_sent(1)
    assert "/stop - " in sent[0].message.text


async def test_stop_ends_a_turn_waiting_on_a_slow_tool_and_the_next_is_answered(
    tmp_path: Path, service: SlowService
) -> None:
    """Through the llm agent's tool loop: the model asks for a tool that waits on the
    slow service; /stop ends the turn, the next message gets a normal answer."""
    from tether.gateway.assembly import load_router
    from tether.testing.model import Body, FakeModel, asks_for, tool_call

    def reply(body: Body) -> str | Body:
        last = [m for m in body["messages"] if m.get("role") == "user"][-1]["content"]
        if last == "look it up":
            return asks_for(tool_call("slow_lookup", {}, id="call-1"))
        return f"plain answer to {last}"

    tools = Router("slow-tools")

    @tools.tool()
    async def slow_lookup() -> str:
        """Look something up in the slow service."""
        async with aiohttp.ClientSession() as http, http.get(service.url) as response:
            return await response.text()

    fake = FakeModel(reply=reply)
    await fake.start()
    settings = make_settings(
        tmp_path,
        agent={"handler": "llm"},
        llm=fake.section(),
    )
    root = Router("root")
    root.include(tools)
    root.include(load_router(settings))
    try:
        async with running(settings, root) as (gateway, loop):
            asked = await loop.say("look it up")
            await service.arrived.wait()  # the tool is waiting on the service
            await loop.say("/stop")
            sent = await loop.wait_for_sent(2)
            assert sorted(d.message.text for d in sent) == sorted([STOPPED_NOTICE, STOPPED_ANSWER])
            await loop.say("and now?")
            sent = await loop.wait_for_sent(3)
            assert sent[2].message.text == "plain answer to and now?"
            await gateway.drain()
    finally:
        await fake.close()
    assert not service.release.is_set() and service.calls == 1
    status = dict(db_rows(tmp_path, "SELECT key, status FROM inbox"))
    assert status[asked.key] == "done"
    steps = dict(db_rows(tmp_path, "SELECT name, result FROM steps WHERE event_key = ?", asked.key))
    assert "tool:0:0:started" in steps and "tool:0:0" not in steps  # shows where it stopped


async def test_stop_with_a_shared_postgresql_store(
    tmp_path: Path, pg_dsn: str, service: SlowService
) -> None:
    """With PostgreSQL the store is the queue: /stop still runs beside the lane, not
    after the turn it stops; the stopped turn and the /stop are done, answered once."""
    seen: list[str] = []
    settings = make_settings(tmp_path, memory={"store": pg_dsn})
    async with running(settings, slow_router(service, seen)) as (gateway, loop):
        waiting = await loop.say("wait")
        await service.arrived.wait()
        stop = await loop.say("/stop")
        sent = await loop.wait_for_sent(2)
        assert sorted(d.message.text for d in sent) == sorted([STOPPED_NOTICE, STOPPED_ANSWER])
        await loop.say("next")
        sent = await loop.wait_for_sent(3)
        assert sent[2].message.text == "answer: next"
        await gateway.drain()
        for key in (waiting.key, stop.key):
            row = await gateway.store.inbox_row(key)
            assert row is not None and row.status == "done"
    assert seen == ["wait", "next"]
    assert len(loop.sent) == 3  # nothing answered twice


async def test_stop_reaches_a_turn_running_in_another_gateway_process(
    tmp_path: Path, pg_dsn: str, service: SlowService
) -> None:
    """Two gateways on one PostgreSQL store: the turn runs in one, /stop arrives at the
    other, which asks through the store; the first stops it (turn.stopped, requested)."""
    from tether.adapters.loopback import LoopbackAdapter
    from tether.gateway.app import Gateway

    seen: list[str] = []
    settings = make_settings(tmp_path, memory={"store": pg_dsn})
    adapters = [LoopbackAdapter(), LoopbackAdapter()]
    gateways = [
        Gateway(settings, {"loopback": adapter}, router=slow_router(service, seen))
        for adapter in adapters
    ]
    for gateway in gateways:
        await gateway.start()
    try:
        with structlog.testing.capture_logs() as logs:
            waiting = await adapters[0].say("wait")
            await service.arrived.wait()
            # Either gateway may have taken the lane; /stop goes to the other one.
            runs = next(i for i, g in enumerate(gateways) if waiting.key in g.pipeline.running)
            other = adapters[1 - runs]
            await other.say("/stop", key="loopback:1:stop")  # not the other adapter's counter
            sent = await asyncio.wait_for(both_sent(adapters, 2), 30)
        assert sorted(sent) == sorted([STOPPED_NOTICE, STOPPED_ANSWER])
        stopped = [e for e in logs if e["event"] == "turn.stopped"]
        assert [(e["key"], e["requested"]) for e in stopped] == [(waiting.key, True)]
        row = await gateways[runs].store.inbox_row(waiting.key)
        assert row is not None and row.status == "done"
    finally:
        for gateway in gateways:
            await gateway.stop()
    assert not service.release.is_set() and seen == ["wait"]


async def both_sent(adapters: list[Any], count: int) -> list[str]:
    """The texts the adapters delivered, once there are ``count`` of them."""
    while sum(len(a.sent) for a in adapters) < count:
        waits = [asyncio.ensure_future(a.wait_for_sent(len(a.sent) + 1, 30)) for a in adapters]
        _done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for waiter in pending:
            waiter.cancel()
    return [d.message.text for a in adapters for d in a.sent]
