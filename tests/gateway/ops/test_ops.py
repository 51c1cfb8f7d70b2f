"""Operations: /healthz, /readyz, /metrics over real HTTP, and `tether status`."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.config import make_settings, write_config
from tests.support.gateway import running
from tests.support.processes import TETHER
from tether import Context, Fatal, Router
from tether.adapters.loopback import LoopbackAdapter
from tether.errors import SendRetryable


async def get(port: int, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_move_as_events_flow(tmp_path: Path) -> None:
    router = Router()

    @router.text(r"^boom$")
    async def boom(ctx: Context) -> None:
        raise Fatal("no")

    @router.text()
    async def answer(ctx: Context) -> None:
        await ctx.reply("ok")

    settings = make_settings(tmp_path, http={"enabled": True, "port": 0})
    adapter = LoopbackAdapter()
    adapter.fail_next(SendRetryable("429", retry_after=0.01))
    async with running(settings, router, adapter) as (gateway, loop):
        assert gateway.http is not None
        port = gateway.http.port
        before = samples((await get(port, "/metrics"))[1])
        event = await loop.say("hi")
        await loop.deliver(event)  # a duplicate
        await loop.say("boom")
        await loop.wait_for_sent(2)  # the answer, and the notice of the dead "boom"
        await gateway.drain()
        status, text = await get(port, "/metrics")
    assert status == 200
    after = samples(text)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("tether_events_total", platform="loopback", status="received") == 2
    assert moved("tether_events_total", platform="loopback", status="done") == 1
    assert moved("tether_events_total", platform="loopback", status="dead") == 1
    assert moved("tether_duplicates_total", platform="loopback") == 1
    assert moved("tether_dead_letters_total", platform="loopback") == 1
    assert moved("tether_outbox_total", platform="loopback", status="retry") == 1
    assert moved("tether_outbox_total", platform="loopback", status="sent") == 2
    assert moved("tether_handler_seconds_count") == 1
    assert value(after, "tether_platform_connected", platform="loopback") == 1
    assert ("tether_lane_queue_depth", ()) in after


async def test_readyz_turns_503_and_names_the_store_when_it_is_gone(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, http={"enabled": True, "port": 0})
    async with running(settings) as (gateway, _loop):
        assert gateway.http is not None
        port = gateway.http.port
        assert await get(port, "/healthz") == (200, json.dumps({"status": "alive"}))
        status, body = await get(port, "/readyz")
        assert (status, json.loads(body)["status"]) == (200, "ready")
        await gateway.store.close()
        status, body = await get(port, "/readyz")
        await gateway.store.open()  # so the gateway can stop cleanly
    assert status == 503
    assert json.loads(body)["reasons"] == ["store unreachable: RuntimeError: store is closed"]


@pytest.mark.slow
async def test_status_shows_counts_and_activity(tmp_path: Path) -> None:
    router = Router()

    @router.text()
    async def answer(ctx: Context) -> None:
        if ctx.event.text == "bad":
            raise Fatal("no")
        await ctx.reply("ok")

    job = {"id": "brief", "cron": "0 8 * * *", "deliver": "loopback:1", "text": "morning"}
    config = write_config(tmp_path, jobs=[job])
    async with running(make_settings(tmp_path), router) as (gateway, loop):
        await loop.say("one")
        await loop.say("bad")
        await loop.wait_for_sent(2)  # the answer, and the notice of the dead "bad"
        await gateway.drain()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([TETHER, *args], capture_output=True, text=True)

    result = await asyncio.to_thread(cli, "status", "--json", "-c", str(config))
    report = json.loads(result.stdout)
    assert report["events"] == {
        "received": 0,
        "running": 0,
        "retry_wait": 0,
        "waiting": 0,
        "dead": 1,
        "done": 1,
    }
    assert report["outbox"] == {"backlog": 0, "sent": 2, "unknown": 0, "dead": 0}
    assert set(report["platforms"]["loopback"]) == {"received", "sent"}
    assert [entry["job"] for entry in report["cron"]] == ["brief"]
    assert report["cron"][0]["next_fire"].endswith("08:00:00+00:00")
    assert report["spend_today"] == {}
    table = (await asyncio.to_thread(cli, "status", "-c", str(config))).stdout
    assert "dead 1" in table and "sent 2" in table and "loopback" in table
    assert "next fire  brief" in table and "today      0 tokens" in table


async def test_llm_tokens_and_cost_are_metrics(tmp_path: Path) -> None:
    from tests.support.llm import llm_section, turn
    from tether.testing.model import FakeModel

    fake = FakeModel(reply=lambda body: "fine")
    await fake.start()
    fake.usage = (100, 10)
    before = samples(generate_latest().decode())
    try:
        # The budget leaves room for the built-in tools' schemas, which count as prompt.
        settings = make_settings(
            tmp_path, llm=llm_section(fake), memory={"task_token_budget": 3000}
        )
        async with running(settings) as (_gateway, loop):
            await turn(loop, "hello")  # the fake reports 110 tokens spent
            await turn(loop, "/usage")
    finally:
        await fake.close()
    after = samples(generate_latest().decode())

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("tether_llm_tokens_total", model="main", kind="prompt") == 100
    assert moved("tether_llm_tokens_total", model="main", kind="completion") == 10
    assert moved("tether_llm_cost_total", model="main") == pytest.approx(0.12)


async def test_budget_stops_are_counted(tmp_path: Path) -> None:
    from tests.support.llm import llm_section, turn
    from tether.testing.model import FakeModel

    fake = FakeModel(reply=lambda body: "fine")
    await fake.start()
    before = samples(generate_latest().decode())
    try:
        settings = make_settings(tmp_path, llm=llm_section(fake), memory={"task_token_budget": 20})
        async with running(settings) as (_gateway, loop):
            reply = await turn(loop, "a question far too long for a twenty token budget " * 3)
    finally:
        await fake.close()
    after = samples(generate_latest().decode())
    assert fake.requests == []
    assert "budget" in reply.lower()
    assert (
        value(after, "tether_budget_exceeded_total", budget="task")
        - value(before, "tether_budget_exceeded_total", budget="task")
        == 1
    )
