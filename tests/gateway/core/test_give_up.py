"""No silence on give-up: an event that is dead-lettered tells its person, once.

Before, a model that stayed unreachable took an event through its five attempts into
``dead_letters`` and the person got nothing (on Telegram: "typing…", then nothing). Now
the dead letter is committed with one short notice (``pipeline.dead_notice``) as an
outbox row in the same transaction: not once per attempt, not twice when the same event
dies again after ``tether dead retry``, and never for a cron fire that has no chat.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.fakes.telegram_api import BOT_ID, FakeTelegram
from tests.support.config import db_rows, make_settings
from tests.support.config import event as contract_event
from tests.support.gateway import running
from tests.support.telegram import SECRET, post_update
from tether import Context, Fatal, Retryable, Router
from tether.config.schema import PipelineConfig
from tether.events import Conversation, Event, Kind, OutMessage, Target
from tether.memory.records import DeadLetter
from tether.memory.store import Store
from tether.testing.model import API_KEY, FakeModel

NOTICE = PipelineConfig().dead_notice


@pytest.fixture
def model(model: FakeModel) -> FakeModel:
    """The shared fake (model, tests/fixtures.py), as this module uses it."""
    model.fail(503, times=None)  # a model that is down: every call answers 503
    return model


async def test_an_unreachable_model_ends_in_one_notice_after_the_last_attempt(
    tmp_path: Path,
    telegram: FakeTelegram,
    model: FakeModel,
) -> None:
    hook = {"url": "https://bot.example.com/telegram/webhook", "secret_token": SECRET}
    section = {"token": telegram.token, "base_url": telegram.base_url, "rate_limits": False}
    settings = make_settings(
        tmp_path,
        http={"enabled": True, "port": 0},
        platforms={"telegram": {**section, "mode": "webhook", "webhook": hook}},
        llm={
            "providers": {"down": {"base_url": model.url, "api_key": API_KEY, "timeout": 5}},
            "models": {"main": {"provider": "down", "model": "main-model"}},
            "default": "main",
        },
    )
    message = telegram.message(42, "what is the weather like?")
    async with running(settings) as (gateway, _):
        await telegram.wait_for(lambda: telegram.webhook is not None)
        assert await post_update(gateway, {"update_id": 70, "message": message}) == 200
        await telegram.wait_for(lambda: bool(telegram.sent))
        calls_when_told = model.calls
        await gateway.drain()
        await gateway.outbox.flush(5)

    key = f"tg:{BOT_ID}:70"
    [notice] = telegram.sent
    assert (notice["chat_id"], notice["text"]) == (42, NOTICE)
    assert notice["reply_parameters"]["message_id"] == message["message_id"]
    # One model call per attempt, all five of them before the notice and none after.
    assert calls_when_told == model.calls == settings.pipeline.max_attempts == 5
    assert db_rows(tmp_path, "SELECT status, attempts FROM inbox WHERE key = ?", key) == [
        ("dead", 5)
    ]
    [(error, snapshot)] = db_rows(
        tmp_path, "SELECT error, snapshot FROM dead_letters WHERE key = ?", key
    )
    assert error.startswith("Retryable: no model answered")
    assert json.loads(snapshot)["attempts"] == 5
    assert json.loads(snapshot)["conversation"] == "telegram:42"
    assert db_rows(tmp_path, "SELECT key, status FROM outbox") == [(f"{key}#dead#0", "sent")]


def failing(exc: Exception) -> Router:
    router = Router()

    @router.text()
    async def fail(ctx: Context) -> None:
        raise exc

    return router


@pytest.mark.parametrize("configured", ["The bot gave up on this one.", ""])
async def test_the_notice_is_configurable_and_empty_turns_it_off(
    tmp_path: Path, configured: str
) -> None:
    settings = make_settings(tmp_path, pipeline={"max_attempts": 2, "dead_notice": configured})
    async with running(settings, failing(Retryable("upstream down"))) as (gateway, loop):
        event = await loop.say("hello?")
        await gateway.drain()
        await gateway.outbox.flush(5)
    assert [d.message.text for d in loop.sent] == ([configured] if configured else [])
    assert db_rows(tmp_path, "SELECT status FROM inbox WHERE key = ?", event.key) == [("dead",)]


def cron_fire(conversation: Conversation) -> Event:
    """A fire of a job whose handler cannot be imported: it dies at once (Fatal)."""
    return Event(
        key="cron:nightly:2026-01-01T00:00:00+00:00",
        platform="cron",
        kind=Kind.CRON,
        conversation=conversation,
        meta={"job": "nightly", "action": "handler", "handler": "tests.nowhere:job"},
    )


@pytest.mark.parametrize(
    ("conversation", "told"),
    [
        (Conversation(platform="cron", chat_id="nightly"), False),  # no deliver: nobody
        (Conversation(platform="loopback", chat_id="7"), True),  # deliver: the chat
    ],
)
async def test_a_dead_cron_fire_tells_its_chat_and_only_if_it_has_one(
    tmp_path: Path, conversation: Conversation, told: bool
) -> None:
    async with running(make_settings(tmp_path)) as (gateway, loop):
        fire = cron_fire(conversation)
        assert await loop.deliver(fire) == [True]
        await gateway.drain()
        await gateway.outbox.flush(5)
        letter = await gateway.store.dead_letter(fire.key)
    assert letter is not None and letter.error.startswith("Fatal: job 'nightly'")
    assert [(d.message.target.chat_id, d.message.text) for d in loop.sent] == (
        [("7", NOTICE)] if told else []
    )
    assert db_rows(tmp_path, "SELECT count(*) FROM outbox") == [(1 if told else 0,)]


@pytest.mark.slow
async def test_an_event_that_dies_again_after_dead_retry_is_not_noticed_twice(
    tmp_path: Path,
) -> None:
    runs: list[int] = []
    second = asyncio.Event()
    router = Router()

    @router.text()
    async def hopeless(ctx: Context) -> None:
        runs.append(ctx.attempt)
        if len(runs) == 2:
            second.set()
        raise Fatal("cannot answer this")

    async with running(make_settings(tmp_path), router) as (gateway, loop):
        event = await loop.say("question")
        await loop.wait_for_sent(1)
        await gateway.drain()
        assert await gateway.store.requeue(event.key)  # what `tether dead retry` does
        async with asyncio.timeout(10):
            await second.wait()  # the sweep picked it up again
        await gateway.drain()
        await gateway.outbox.flush(5)
        letter = await gateway.store.dead_letter(event.key)
    assert runs == [1, 1] and letter is not None
    assert [d.message.text for d in loop.sent] == [NOTICE]
    assert db_rows(tmp_path, "SELECT key FROM outbox") == [(f"{event.key}#dead#0",)]


async def test_bury_commits_the_notice_with_the_dead_letter(
    store: Store,
) -> None:
    """One transaction in every store; the notice's key makes a second death add nothing."""
    original = contract_event("k")
    await store.accept([(original, "c1")])
    letter = DeadLetter(
        key="k", conversation="c1", event=original, error="Fatal: no", traceback="", snapshot={}
    )
    notice = OutMessage(key="k#dead#0", target=Target(platform="test", chat_id="c1"), text="x")
    [row] = await store.bury(letter, [notice])
    assert (row.key, row.event_key, row.message.text) == ("k#dead#0", "k", "x")
    assert [(r.key, r.status) for r in await store.outbox_rows("k")] == [("k#dead#0", "pending")]
    assert [r.key for r in await store.unsent()] == ["k#dead#0"]
    assert (await store.inbox_row("k")).status == "dead"  # type: ignore[union-attr]
    assert await store.dead_letter("k") is not None

    assert await store.requeue("k")
    await store.bury(letter, [notice])
    assert [r.key for r in await store.outbox_rows("k")] == ["k#dead#0"]
