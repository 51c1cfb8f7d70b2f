"""An event waiting in ``retry_wait`` holds its conversation's lane, so it must never wait
unseen: the operator can run it now (``tether dead retry``, the console's retry), the
person can ``/stop`` it, and one the model cannot answer within ``llm.max_retry_after``
is answered with a notice instead of waiting (or dying) in silence."""

from __future__ import annotations

import asyncio
import math
import subprocess
from pathlib import Path

import pytest

from tests.support.config import db_rows, make_settings, write_config
from tests.support.gateway import running
from tests.support.llm import turn
from tests.support.logs import watched
from tests.support.processes import TETHER
from tether import Context, Retryable, Router
from tether.config.llm import LLMConfig
from tether.events import Conversation, Event, Kind
from tether.gateway.core.stop import STOPPED_WAITING
from tether.gateway.web.api import retry
from tether.testing.model import API_KEY, FakeModel

BUSY = LLMConfig.model_fields["busy_notice"].default


def waiting_router(seen: list[tuple[str, int]]) -> Router:
    """``later`` asks to be tried again in an hour, ``forever`` in an infinity, the first
    time each is seen; everything else is answered."""
    router = Router()

    @router.text()
    async def handle(ctx: Context) -> None:
        text = ctx.event.text
        seen.append((text, ctx.attempt))
        first = [t for t, _ in seen].count(text) == 1
        if first and text == "later":
            raise Retryable("the service asked for an hour", retry_after=3600)
        if first and text == "forever":
            raise Retryable("the service asked for ever", retry_after=math.inf)
        await ctx.reply(f"answer: {text} (run {len(seen)})")

    return router


def status(tmp_path: Path, key: str) -> str:
    [(found,)] = db_rows(tmp_path, "SELECT status FROM inbox WHERE key = ?", key)
    return str(found)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["cli", "console"])
async def test_dead_retry_runs_an_event_waiting_in_retry_wait_now(tmp_path: Path, how: str) -> None:
    seen: list[tuple[str, int]] = []
    config = write_config(tmp_path)  # the store the gateway below uses, for the CLI
    with watched() as lines:
        async with running(make_settings(tmp_path), waiting_router(seen)) as (gateway, adapter):
            event = await adapter.say("later")
            await lines.wait_for("event.retry")
            assert status(tmp_path, event.key) == "retry_wait"
            if how == "console":
                assert await retry(gateway, event.key)
            else:
                command = [TETHER, "dead", "retry", event.key, "-c", str(config)]
                done = await asyncio.to_thread(
                    subprocess.run, command, capture_output=True, text=True
                )
                assert done.returncode == 0, done.stderr
                assert done.stdout.startswith(f"requeued {event.key}")
            [reply] = await adapter.wait_for_sent(1)  # not an hour later
    assert reply.message.text == "answer: later (run 2)"
    assert status(tmp_path, event.key) == "done"
    assert seen == [("later", 1), ("later", 1)]  # requeued: its attempts start again


async def test_stop_ends_a_turn_waiting_to_be_retried_and_the_lane_moves_on(
    tmp_path: Path,
) -> None:
    seen: list[tuple[str, int]] = []
    with watched() as lines:
        async with running(make_settings(tmp_path), waiting_router(seen)) as (_gateway, adapter):
            waiting = await adapter.say("later")
            await lines.wait_for("event.retry")
            await adapter.say("/stop")
            [answer] = await adapter.wait_for_sent(1)
            await adapter.say("next")
            sent = await adapter.wait_for_sent(2)
    assert answer.message.text == STOPPED_WAITING
    assert sent[1].message.text == "answer: next (run 2)"
    assert seen == [("later", 1), ("next", 1)]  # the stopped turn never ran again
    assert status(tmp_path, waiting.key) == "done"
    [stopped] = lines.named("turn.stopped")
    assert (stopped["key"], stopped["waiting"]) == (waiting.key, True)


async def test_a_retry_after_of_infinity_is_not_a_wait_for_ever(tmp_path: Path) -> None:
    seen: list[tuple[str, int]] = []
    async with running(make_settings(tmp_path), waiting_router(seen)) as (_gateway, adapter):
        assert await turn(adapter, "forever") == "answer: forever (run 2)"
    assert seen == [("forever", 1), ("forever", 2)]


@pytest.mark.slow
async def test_an_event_the_model_cannot_answer_within_the_bound_is_told_not_dead(
    tmp_path: Path, model: FakeModel
) -> None:
    model.fail(503, times=None)
    llm = {
        "providers": {"fake": {"base_url": model.url, "api_key": API_KEY, "timeout": 5}},
        "models": {"main": {"provider": "fake", "model": "main-model"}},
        # The breaker stays open longer than an event may wait for the model.
        "circuit_breaker": {"failures": 1, "cooldown": 30},
        "max_retry_after": 1,
    }
    with watched() as lines:
        async with running(make_settings(tmp_path, llm=llm)) as (gateway, adapter):
            assert await turn(adapter, "hello") == BUSY
            assert await turn(adapter, "again") == BUSY
            assert await gateway.store.dead_letters() == []
    assert model.calls == 1  # the open breaker: no call until its probe is due
    assert sorted(db_rows(tmp_path, "SELECT status, attempts FROM inbox")) == [
        ("done", 1),
        ("done", 2),
    ]
    told = lines.named("event.unanswered")
    assert len(told) == 2 and all("circuit breaker" in line["error"] for line in told)


@pytest.mark.slow
async def test_a_busy_model_keeps_a_fire_without_a_chat_waiting_as_any_retry(
    tmp_path: Path, model: FakeModel
) -> None:
    """A cron fire with no ``deliver`` has nobody to tell: it is not 'answered' with the
    notice (which would have nowhere to go), it waits in ``retry_wait`` for the model."""
    model.fail(429, retry_after="86400", times=None)
    llm = model.section(timeout=5) | {"max_retry_after": 30}
    fire = Event(  # what a job {id: nightly, cron: ..., prompt: ...} without deliver fires
        key="cron:nightly:2026-12-01T02:00:00+00:00",
        platform="cron",
        kind=Kind.CRON,
        conversation=Conversation(platform="cron", chat_id="nightly"),
        text="Summarize the day.",
        meta={"job": "nightly", "action": "prompt", "deliver": []},
    )
    with watched() as lines:
        async with running(make_settings(tmp_path, llm=llm)) as (_gateway, adapter):
            await adapter.deliver(fire)
            retry = await lines.wait_for("event.retry")
    assert retry["error"].startswith("ModelBusy: no model answered")
    assert 29 <= retry["delay_s"] <= 30  # the bound, not the day the provider asked for
    assert lines.named("event.unanswered") == [] and lines.named("event.dead") == []
    assert status(tmp_path, fire.key) == "retry_wait"
