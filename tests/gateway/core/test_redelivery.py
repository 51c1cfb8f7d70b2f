"""Redeliveries change nothing: only new events count toward a sender's flood limit.

Platforms redeliver: Feishu after a slow answer (with new event ids, the same message id),
Telegram after a slow or failed webhook answer, Discord after a RESUME, and a Telegram
poller after a crash re-reads its last batch. A redelivery is a duplicate at the inbox and
must not spend the sender's budget, nor take the flood notice that a real message of the
flood should carry: the fate of a message may not depend on how often the ones before it
were redelivered. The webhook tests post real HTTP requests to the gateway's routes, with
the real platform libraries against the fakes, under the default flood limit.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import structlog

from tests.fakes.feishu_api import FakeFeishu, message_event
from tests.fakes.telegram_api import BOT_ID, FakeTelegram
from tests.support.config import events_named, inbox_rows, make_settings
from tests.support.feishu import feishu_section, post_event
from tests.support.gateway import running
from tests.support.telegram import SECRET, post_update
from tether.adapters.loopback import LoopbackAdapter
from tether.config.schema import RateLimitConfig
from tether.gateway.core.throttle import THROTTLE_NOTICE, THROTTLED
from tether.memory.stores import open_store

#: The flood limit a fresh install runs with (the tests' default settings turn it off).
DEFAULT_LIMIT = {"allow": ["*"], "rate_limit": RateLimitConfig().model_dump()}
MESSAGES = 20
COPIES = 3


def test_the_webhook_tests_run_at_the_default_limit() -> None:
    """The Done-when tests are only meaningful if 20 new messages fit the default budget
    and 60 deliveries do not."""
    limit = RateLimitConfig()
    assert MESSAGES <= limit.messages < MESSAGES * COPIES


@pytest.mark.slow
async def test_feishu_pushing_every_message_three_times_throttles_nobody(
    tmp_path: Path,
    feishu: FakeFeishu,
) -> None:
    settings = make_settings(
        tmp_path,
        access=DEFAULT_LIMIT,
        http={"enabled": True, "port": 0},
        platforms={"feishu": feishu_section(feishu)},
    )
    with structlog.testing.capture_logs() as logs:
        async with running(settings) as (gateway, _adapter):
            for n in range(MESSAGES):
                copies = [
                    message_event(f"om_{n}", f"message {n}", event_id=f"ev_{n}_{copy}")
                    for copy in range(COPIES)
                ]  # Feishu's redeliveries carry new event ids and the same message id
                statuses = await asyncio.gather(*(post_event(gateway, c) for c in copies))
                assert statuses == [200] * COPIES
            await gateway.drain()
            await gateway.outbox.flush(10)

    answers = sorted(m["content"]["text"] for m in feishu.messages)
    assert answers == sorted(f"message {n}" for n in range(MESSAGES))
    assert inbox_rows(tmp_path) == [(f"fs:msg:om_{n}", "done") for n in range(MESSAGES)]
    assert events_named(logs, "event.throttled") == []
    assert len(events_named(logs, "event.duplicate")) == MESSAGES * (COPIES - 1)


@pytest.mark.slow
async def test_telegram_retrying_every_update_three_times_throttles_nobody(
    tmp_path: Path,
    telegram: FakeTelegram,
) -> None:
    hook = {"url": "https://bot.example.com/telegram/webhook", "secret_token": SECRET}
    section = {
        "token": telegram.token,
        "base_url": telegram.base_url,
        "rate_limits": False,
        "mode": "webhook",
        "webhook": hook,
    }
    settings = make_settings(
        tmp_path,
        access=DEFAULT_LIMIT,
        http={"enabled": True, "port": 0},
        platforms={"telegram": section},
    )
    with structlog.testing.capture_logs() as logs:
        async with running(settings) as (gateway, _adapter):
            await telegram.wait_for(lambda: telegram.webhook is not None)
            for n in range(MESSAGES):
                update = {"update_id": 500 + n, "message": telegram.message(42, f"message {n}")}
                for _copy in range(COPIES):  # Telegram retries one chat's updates in order
                    assert await post_update(gateway, update) == 200
            await gateway.drain()
            await gateway.outbox.flush(10)

    assert [s["text"] for s in telegram.sent] == [f"message {n}" for n in range(MESSAGES)]
    assert inbox_rows(tmp_path) == [(f"tg:{BOT_ID}:{500 + n}", "done") for n in range(MESSAGES)]
    assert events_named(logs, "event.throttled") == []


def answers(loop: LoopbackAdapter) -> list[str]:
    """What the default (echo) agent sent: each handled message's text, or the notice."""
    return [delivery.message.text for delivery in loop.sent]


async def test_a_batch_that_mixes_old_and_new_events_spends_only_on_the_new(
    tmp_path: Path,
) -> None:
    """A poller re-reading its last batch after a crash: the known events in front of the
    new ones must not use up the budget the new ones need."""
    limit = {"allow": ["*"], "rate_limit": {"messages": 5, "per_seconds": 3600}}
    async with running(make_settings(tmp_path, access=limit)) as (gateway, loop):
        old = [loop.event(f"old {i}", key=f"k{i}") for i in range(2)]
        assert await loop.deliver(*old) == [True, True]
        new = [loop.event(f"new {i}", key=f"k{i}") for i in range(2, 5)]
        assert await loop.deliver(*old, *new) == [False, False, True, True, True]
        await gateway.drain()
        await gateway.outbox.flush(5)
    assert sorted(answers(loop)) == ["new 2", "new 3", "new 4", "old 0", "old 1"]


async def test_one_event_twice_in_one_batch_is_counted_once(tmp_path: Path) -> None:
    limit = {"allow": ["*"], "rate_limit": {"messages": 2, "per_seconds": 3600}}
    async with running(make_settings(tmp_path, access=limit)) as (gateway, loop):
        first = loop.event("first", key="k1")
        second = loop.event("second", key="k2")
        assert await loop.deliver(first, first, second) == [True, False, True]
        await gateway.drain()
        await gateway.outbox.flush(5)
    assert answers(loop) == ["first", "second"]


async def test_the_flood_notice_is_never_spent_on_a_duplicate(tmp_path: Path) -> None:
    """The budget is gone; a redelivery of an answered message arrives, then a new one:
    the new one is the flood's first throttled message, so it carries the notice."""
    limit = {"allow": ["*"], "rate_limit": {"messages": 1, "per_seconds": 3600}}
    async with running(make_settings(tmp_path, access=limit)) as (gateway, loop):
        answered = loop.event("answered", key="k1")
        assert await loop.deliver(answered) == [True]
        assert await loop.deliver(answered) == [False]  # the platform's retry
        assert await loop.deliver(loop.event("too fast", key="k2")) == [True]
        await gateway.drain()
        await gateway.outbox.flush(5)
        stored = await gateway.store.inbox_row("k2")
    assert answers(loop) == ["answered", THROTTLE_NOTICE]
    assert stored is not None and stored.event.meta[THROTTLED] == "notice"


async def test_the_decision_is_stored_with_the_row_and_survives_a_restart(tmp_path: Path) -> None:
    """A throttled event that is redelivered after a restart (fresh buckets) is still the
    one stored decision: a duplicate, not a second chance."""
    limit = {"allow": ["*"], "rate_limit": {"messages": 1, "per_seconds": 3600}}
    settings = make_settings(tmp_path, access=limit)
    async with running(settings) as (gateway, loop):
        await loop.deliver(loop.event("one", key="k1"), loop.event("two", key="k2"))
        await gateway.drain()
        await gateway.outbox.flush(5)
        before = answers(loop)
    async with running(settings) as (gateway, loop):
        assert await loop.deliver(loop.event("two", key="k2")) == [False]
        await gateway.drain()
        await gateway.outbox.flush(5)
        after = answers(loop)
    store = open_store(settings.memory.store)
    await store.open()
    try:
        row = await store.inbox_row("k2")
    finally:
        await store.close()
    assert (before, after) == (["one", THROTTLE_NOTICE], [])
    assert row is not None and row.status == "done" and row.event.meta[THROTTLED] == "notice"
