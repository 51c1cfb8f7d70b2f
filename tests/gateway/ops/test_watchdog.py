"""The watchdog and its alerts (issue 20), against the fake Telegram Bot API: a blocked
event loop, a platform that stays disconnected and a reply that cannot go out are seen
in the metrics and ``/readyz``, told once to the operator's chat, and told once again
when they clear."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from prometheus_client import REGISTRY

from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import make_settings, write_config
from tests.support.gateway import running
from tests.support.processes import TETHER, subprocess_env
from tether import Context, Router
from tether.adapters.loopback import LoopbackAdapter
from tether.adapters.telegram import TelegramAdapter
from tether.errors import ConfigError, GatewayError
from tether.events import Conversation, Event, Kind
from tether.gateway.app import Gateway
from tether.gateway.builtin.echo import echo_router
from tether.gateway.ops.watchdog import Watchdog

OPS_CHAT = 999
#: Quick rounds, so a test sees a check trip and clear within a second or two.
FAST = {"interval": 0.05, "lag_interval": 0.05, "loop_lag": 1.0, "lag_window": 1.0}

handlers = Router("watchdog-tests")


@handlers.text(r"^block$")
async def _block(ctx: Context) -> None:
    time.sleep(2)  # noqa: ASYNC251 - the point: a handler that blocks the event loop
    await ctx.reply("unblocked")


#: Released by the test: the handler that ignores its timeout runs until then.
release = asyncio.Event()


@handlers.text(r"^stubborn$")
async def _stubborn(ctx: Context) -> None:
    """Swallows the cancellation of its timeout and goes on: past it, still running."""
    while not release.is_set():
        with contextlib.suppress(asyncio.CancelledError):
            await release.wait()
    await ctx.reply("finally")


def _router() -> Router:
    root = Router("root")
    root.include(handlers)
    root.include(echo_router())
    return root


def _sections(fake: FakeTelegram, deliver: str, **watchdog: float) -> dict[str, Any]:
    """Telegram on the fake, the HTTP server, and quick watchdog rounds with ``watchdog``."""
    telegram = {
        "token": fake.token,
        "base_url": fake.base_url,
        "poll_timeout": 1,
        "rate_limits": False,
    }
    return {
        "platforms": {"telegram": telegram},
        "http": {"enabled": True, "port": 0},
        "ops": {"watchdog": {**FAST, **watchdog}, "alerts": {"deliver": deliver}},
    }


@asynccontextmanager
async def alerting_to_loopback(
    tmp_path: Path, fake: FakeTelegram, **watchdog: float
) -> AsyncIterator[tuple[Gateway, TelegramAdapter, LoopbackAdapter]]:
    """A gateway on the fake Telegram, polling, whose alerts go to a loopback chat."""
    ops = LoopbackAdapter()
    settings = make_settings(tmp_path, **_sections(fake, "loopback:ops", **watchdog))
    async with running(settings, _router(), extra=[ops]) as (gateway, telegram):
        await _until(gateway, lambda: telegram.connected)
        yield gateway, telegram, ops


async def _get(port: int, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text()


def _sent_to(fake: FakeTelegram, chat: int) -> list[str]:
    return [str(sent["text"]) for sent in fake.sent if sent["chat_id"] == chat]


async def _until(gateway: Gateway, predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    """Wait on the watchdog's own rounds until one sees ``predicate`` hold."""
    assert gateway.watchdog is not None
    async with asyncio.timeout(timeout):
        await gateway.watchdog.after_round(predicate)


async def _settled(gateway: Gateway) -> Watchdog:
    """Two more rounds of checks and everything they queued sent: nothing else is owed."""
    assert gateway.watchdog is not None
    await gateway.watchdog.check()
    await gateway.watchdog.check()
    await gateway.drain()
    return gateway.watchdog


# -- Done when: a blocked loop --------------------------------------------------------


@pytest.mark.slow
async def test_a_loop_blocked_2s_shows_in_lag_and_readyz_and_alerts_once_then_recovers(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    settings = make_settings(tmp_path, **_sections(fake, f"telegram:{OPS_CHAT}"))
    async with running(settings, _router()) as (gateway, telegram):
        assert gateway.http is not None
        port = gateway.http.port
        await _until(gateway, lambda: telegram.connected)
        assert (await _get(port, "/readyz"))[0] == 200

        fake.push(message=fake.message(42, "block"))
        seen_lag, seen_not_ready = 0.0, ""
        async with asyncio.timeout(20):
            while not seen_not_ready or seen_lag < 1.5:
                await _until(gateway, lambda: True)
                lag = REGISTRY.get_sample_value("tether_loop_lag_seconds") or 0.0
                seen_lag = max(seen_lag, lag)
                status, body = await _get(port, "/readyz")
                if status == 503:
                    seen_not_ready = body
        assert "event loop lag" in seen_not_ready
        assert "ops.watchdog.loop_lag" in seen_not_ready

        await fake.wait_for(lambda: len(_sent_to(fake, OPS_CHAT)) >= 2, timeout=20)
        watchdog = gateway.watchdog
        assert watchdog is not None
        await _until(gateway, lambda: not watchdog.problems())
        assert (await _get(port, "/readyz"))[0] == 200
        await _settled(gateway)
        assert watchdog.alerts.open == []

    to_ops = _sent_to(fake, OPS_CHAT)
    assert len(to_ops) == 2, to_ops
    assert to_ops[0].startswith("Tether alert: event loop lag")
    assert to_ops[1].startswith("Tether recovered: loop_lag")
    assert _sent_to(fake, 42) == ["unblocked"]


# -- a platform that stays disconnected ----------------------------------------------


@pytest.mark.slow
async def test_a_platform_disconnected_past_its_threshold_alerts_once_and_recovers(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    # above the first long poll (poll_timeout 1 s): not connected until it returns
    watching = alerting_to_loopback(tmp_path, fake, disconnected=1.5)
    async with watching as (gateway, telegram, ops):
        for _ in range(10_000):
            fake.fail_next("getUpdates", 502, "Bad Gateway")
        await ops.wait_for_sent(1)
        assert not telegram.connected
        fake.failures["getUpdates"].clear()
        await ops.wait_for_sent(2)
        await _settled(gateway)

    texts = [delivery.message.text for delivery in ops.sent]
    assert len(texts) == 2, texts
    assert texts[0].startswith("Tether alert: telegram disconnected for")
    assert "ops.watchdog.disconnected" in texts[0]
    assert texts[1].startswith("Tether recovered: platform.telegram")


# -- a reply that cannot go out --------------------------------------------------------


@pytest.mark.slow
async def test_an_old_unsent_reply_alerts_once_and_recovers_when_it_is_sent(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    async with alerting_to_loopback(tmp_path, fake, outbox_age=0.5) as (gateway, _, ops):
        for _ in range(3):  # the reply waits out three flood limits of 1 s
            fake.fail_next("sendMessage", 429, "Too Many Requests", retry_after=1)
        fake.push(message=fake.message(42, "hello"))
        await ops.wait_for_sent(1)
        assert (REGISTRY.get_sample_value("tether_outbox_oldest_unsent_seconds") or 0) > 0.5
        await ops.wait_for_sent(2)
        await _settled(gateway)

    assert _sent_to(fake, 42) == ["hello"]
    texts = [delivery.message.text for delivery in ops.sent]
    assert len(texts) == 2, texts
    assert texts[0].startswith("Tether alert: the oldest unsent reply has waited")
    assert texts[1].startswith("Tether recovered: outbox_age")


# -- a flapping check ---------------------------------------------------------------------


async def test_a_check_that_flaps_within_one_window_sends_one_alert_and_one_recovery(
    tmp_path: Path,
) -> None:
    quiet = {**FAST, "interval": 3600, "lag_interval": 3600}  # this test drives the rounds
    settings = make_settings(
        tmp_path, ops={"watchdog": quiet, "alerts": {"deliver": "loopback:ops"}}
    )
    async with running(settings) as (gateway, ops):
        watchdog = gateway.watchdog
        assert watchdog is not None
        now = asyncio.get_running_loop().time()
        for step, lag in enumerate([5.0, 0.0, 5.0, 0.0, 5.0, 0.0]):
            watchdog.note_lag(lag, now + 100 * step)  # each sample outlives the window
            await watchdog.check()
            await gateway.drain()

    texts = [delivery.message.text for delivery in ops.sent]
    assert len(texts) == 2, texts
    assert texts[0].startswith("Tether alert: event loop lag 5.00 s")
    assert texts[1].startswith("Tether recovered: loop_lag")


# -- a handler past its timeout ---------------------------------------------------------


@pytest.mark.slow
async def test_a_handler_past_its_timeout_is_named_in_a_line_a_metric_and_an_alert(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    release.clear()
    sections = {**_sections(fake, "loopback:ops"), "pipeline": {"handler_timeout": 0.2}}
    ops = LoopbackAdapter()
    route = "text:^stubborn$->_stubborn"
    before = REGISTRY.get_sample_value("tether_handler_overruns_total", {"route": route}) or 0
    with structlog.testing.capture_logs() as logs:
        async with running(make_settings(tmp_path, **sections), _router(), extra=[ops]) as (
            gateway,
            _,
        ):
            fake.push(message=fake.message(42, "stubborn"))
            try:
                await ops.wait_for_sent(1)
            finally:
                release.set()  # else stopping the gateway waits on it forever
            await fake.wait_for(lambda: _sent_to(fake, 42) == ["finally"])
            await ops.wait_for_sent(2)
            await _settled(gateway)

    texts = [delivery.message.text for delivery in ops.sent]
    assert len(texts) == 2, texts
    assert texts[0].startswith("Tether alert: 1 handler running past")
    assert texts[1].startswith("Tether recovered: handler_overrun")
    overruns = [entry for entry in logs if entry["event"] == "watchdog.handler_overrun"]
    assert len(overruns) == 1
    assert (overruns[0]["key"], overruns[0]["route"]) == ("tg:123456:1000", route)
    after = REGISTRY.get_sample_value("tether_handler_overruns_total", {"route": route})
    assert after == before + 1


# -- durable: a restart neither forgets nor repeats; tether status lists it ----------


@pytest.mark.slow
async def test_an_open_alert_survives_a_restart_unrepeated_and_tether_status_lists_it(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    sections = _sections(fake, f"telegram:{OPS_CHAT}", interval=3600, dead_letters_per_hour=0)
    settings = make_settings(tmp_path, **sections)
    for _ in range(2):  # the second run starts with the alert open
        async with running(settings, _router()) as (gateway, _telegram):
            letter_key = "cron:ghost:manual:x"
            await _bury(gateway, letter_key)
            await _settled(gateway)
    assert len(_sent_to(fake, OPS_CHAT)) == 1
    assert _sent_to(fake, OPS_CHAT)[0].startswith("Tether alert: 1 dead letters in the last hour")

    config = write_config(tmp_path, **sections)

    def cli(*args: str) -> str:
        return subprocess.run(
            [TETHER, *args, "-c", str(config)],
            capture_output=True,
            text=True,
            env=subprocess_env(),
            timeout=60,
            check=True,
        ).stdout

    alerts = json.loads(await asyncio.to_thread(cli, "status", "--json"))["alerts"]
    assert [alert["check"] for alert in alerts] == ["dead_letters"]
    assert "ops.watchdog.dead_letters_per_hour" in alerts[0]["detail"]
    text = await asyncio.to_thread(cli, "status")
    assert "ALERT      dead_letters" in text


async def _bury(gateway: Gateway, key: str) -> None:
    """A dead letter, the way the pipeline makes one: an event whose handler is Fatal."""
    event = Event(
        key=key,
        platform="cron",
        kind=Kind.CRON,
        conversation=Conversation(platform="cron", chat_id="ghost"),
        meta={"job": "ghost", "action": "nonsense"},
    )
    await gateway.inbox.accept([event])
    await gateway.drain()


# -- a wrong ops.alerts.deliver is one line naming the key -------------------------------


def test_a_malformed_or_disabled_alert_target_is_one_line_naming_the_key(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match=r"ops\.alerts\.deliver: .*platform:chat"):
        make_settings(tmp_path, ops={"alerts": {"deliver": "telegram"}})
    settings = make_settings(tmp_path, ops={"alerts": {"deliver": "discord:123"}})
    with pytest.raises(GatewayError) as caught:
        Gateway(settings, {"loopback": LoopbackAdapter()})
    assert str(caught.value) == "ops.alerts.deliver: platform 'discord' is not enabled"
