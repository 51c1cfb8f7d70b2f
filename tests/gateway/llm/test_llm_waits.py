"""Bounded waits on the model: a provider's Retry-After, a breaker's probe, a refused key.

A model that is rate limited, probing or refusing must never wedge a conversation nor
dead-letter a message for a fault that passes: every wait is bounded by
``llm.max_retry_after``, a provider asking for more is said out loud (a log line, a
metric, an alert, a ``/readyz`` reason), the person is told instead of left in silence,
and the next messages go to another key or a fallback. Everything runs through the real
pipeline and the ``openai`` SDK against the scripted model (``tether.testing``).
"""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from tests.support.config import db
from tests.support.gateway import running
from tests.support.llm import default_reply, llm_section, llm_settings, turn
from tests.support.logs import watched
from tether.adapters.loopback import LoopbackAdapter
from tether.config.llm import LLMConfig
from tether.config.schema import PipelineConfig
from tether.gateway.llm.waits import bounded, retry_after
from tether.gateway.ops.alerts import open_alerts
from tether.testing.model import API_KEY, FakeModel

BUSY = LLMConfig.model_fields["busy_notice"].default
DEAD = PipelineConfig().dead_notice
SPARE_KEY = "sk-spare-provider-key-4321"


@pytest.fixture
def fake(model: FakeModel) -> FakeModel:
    """The shared fake (model, tests/fixtures.py), as this module uses it."""
    model.reply = default_reply
    return model


def capped(provider: str = "fake") -> float:
    value = REGISTRY.get_sample_value("tether_llm_retry_after_capped_total", {"provider": provider})
    return value or 0.0


def inbox(tmp_path: Path) -> set[tuple[str, int]]:
    with db(tmp_path) as conn:
        return set(conn.execute("SELECT status, attempts FROM inbox").fetchall())


# -- Retry-After: bounded, loud, and the person told ------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("asked", ["86400", "inf"])
async def test_a_provider_asking_to_wait_a_day_is_capped_and_the_person_told_at_once(
    tmp_path: Path, fake: FakeModel, asked: str
) -> None:
    fake.fail(429, retry_after=asked, times=None)
    # One key; the fallback is on the same provider, so its key is the same one.
    settings = llm_settings(tmp_path, fake, llm_section(fake, max_retry_after=0.5))
    before = capped()
    with watched() as lines:
        async with running(settings) as (gateway, adapter):
            assert await turn(adapter, "hello") == BUSY
            assert await turn(adapter, "and now?") == BUSY  # told at once, again
            assert fake.calls == 1  # the key cools for the bound: no call before it ends
            [reason] = await gateway.readiness()
            assert gateway.watchdog is not None
            await gateway.watchdog.check()
            [alert] = await open_alerts(gateway.store)

            fake.heal()  # the provider healed: the key is tried again after the bound
            async with asyncio.timeout(20):
                while not fake.answered():
                    assert await turn(adapter, "still there?") in (BUSY, "answer to: still there?")
            assert await gateway.readiness() == []
            await gateway.watchdog.check()
            assert await open_alerts(gateway.store) == []
    assert capped() == before + 1
    [line] = lines.named("llm.retry_after_capped")
    assert (line["provider"], line["key"], line["bound_s"]) == ("fake", "…cdef", 0.5)
    assert line["asked_s"] == float(asked)
    assert "llm.max_retry_after" in reason and "fake" in reason
    assert alert.check == "llm.fake" and "llm.max_retry_after" in alert.detail
    assert inbox(tmp_path) == {("done", 1)}  # nothing waits a day, nothing is dead
    assert len(lines.named("event.unanswered")) >= 2


@pytest.mark.slow
async def test_the_next_messages_go_to_a_fallback_on_another_provider(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.fail(429, retry_after="86400", times=None, key=API_KEY)
    llm = llm_section(fake)
    llm["providers"]["spare"] = {"base_url": fake.url, "api_key": SPARE_KEY}
    llm["models"]["backup"]["provider"] = "spare"
    async with running(llm_settings(tmp_path, fake, llm)) as (_gateway, adapter):
        assert await turn(adapter, "hello") == "answer to: hello"
        assert await turn(adapter, "again") == "answer to: again"
    assert [(r.model, r.status) for r in fake.requests] == [
        ("main-model", 429),
        ("backup-model", 200),  # the same call, at once: no event retry
        ("backup-model", 200),  # main's key cools: no call to it
    ]
    assert inbox(tmp_path) == {("done", 1)}


# -- the breaker's probe -------------------------------------------------------------


@pytest.mark.slow
async def test_messages_arriving_during_a_probe_wait_for_it_and_are_answered(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.fail(503, times=1)  # opens the breaker; the model is back for the probe
    probe_may_answer = asyncio.Event()
    fake.hold(lambda body: len(fake.requests) == 2, until=probe_may_answer)
    breaker = {"failures": 1, "cooldown": 0.2}
    llm = llm_section(fake, fallbacks=[], circuit_breaker=breaker)
    with watched() as lines:
        async with running(llm_settings(tmp_path, fake, llm)) as (_gateway, adapter):
            await adapter.say("first", chat="1")
            await fake.wait_for_requests(2)  # the 503, then the probe (held)
            await adapter.say("second", chat="2")
            await adapter.say("third", chat="3")
            for chat in ("2", "3"):
                await lines.wait_for("llm.breaker_wait", lambda e, c=chat: c in e["conversation"])
            probe_may_answer.set()
            sent = await adapter.wait_for_sent(3)
    replies = {d.message.target.chat_id: d.message.text for d in sent}
    assert replies == {"1": "answer to: first", "2": "answer to: second", "3": "answer to: third"}
    assert lines.named("event.dead") == []
    assert [r.status for r in fake.requests] == [503, 200, 200, 200]


# -- a refused key ---------------------------------------------------------------------


@pytest.mark.slow
async def test_a_sole_keys_transient_401_is_retried_and_nothing_is_dead_lettered(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.fail(401, times=1)
    llm = llm_section(fake, fallbacks=[])
    async with running(llm_settings(tmp_path, fake, llm)) as (gateway, adapter):
        assert await turn(adapter, "hello") == "answer to: hello"
        assert await turn(adapter, "again") == "answer to: again"
        assert await gateway.store.dead_letters() == []
        assert await gateway.readiness() == []
    assert [r.status for r in fake.requests] == [401, 200, 200]
    assert inbox(tmp_path) == {("done", 1)}


@pytest.mark.slow
async def test_a_sole_key_refused_twice_is_benched_loudly(tmp_path: Path, fake: FakeModel) -> None:
    fake.fail(401, times=None)
    llm = llm_section(fake, fallbacks=[])
    with watched() as lines:
        async with running(llm_settings(tmp_path, fake, llm)) as (gateway, adapter):
            assert await turn(adapter, "hello") == DEAD  # told, and kept for `dead retry`
            [reason] = await gateway.readiness()
            assert gateway.watchdog is not None
            await gateway.watchdog.check()
            [alert] = await open_alerts(gateway.store)
    assert [r.status for r in fake.requests] == [401, 401]  # retried once, then benched
    assert "every API key" in reason and "llm.providers.fake" in reason
    assert alert.check == "llm.fake" and "refused" in alert.detail
    assert API_KEY not in reason + alert.detail
    [benched] = lines.named("llm.key_revoked")
    assert (benched["key"], benched["status"], benched["last"]) == ("…cdef", 401, True)


# -- a streaming request answered with JSON ----------------------------------------------


@pytest.mark.slow
async def test_a_json_completion_returned_to_a_streaming_request_is_answered(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.streams = False  # a local server or proxy that does not stream
    adapter = LoopbackAdapter(edits=True)  # the agent streams where it can edit a preview
    settings = llm_settings(tmp_path, fake)
    async with running(settings, adapter=adapter):
        assert await turn(adapter, "hello") == "answer to: hello"
    assert fake.requests[0].body["stream"] is True
    with db(tmp_path) as conn:
        [(prompt, completion)] = conn.execute(
            "SELECT prompt_tokens, completion_tokens FROM usage"
        ).fetchall()
    assert prompt > 0 and completion > 0  # the JSON body's usage, not an estimate


# -- parsing the provider's wait ---------------------------------------------------------


def response(**headers: str) -> httpx.Response:
    return httpx.Response(429, headers=headers)


def test_retry_after_reads_seconds_milliseconds_and_http_dates() -> None:
    assert retry_after(response(**{"retry-after": "30"})) == 30.0
    assert retry_after(response(**{"retry-after-ms": "1500", "retry-after": "9"})) == 1.5
    assert retry_after(response(**{"retry-after": "inf"})) == math.inf
    assert retry_after(response(**{"retry-after": "-5"})) == 0.0
    assert retry_after(response(**{"retry-after": "nan"})) is None
    assert retry_after(response()) is None
    soon = datetime.now(UTC) + timedelta(seconds=120)
    seconds = retry_after(response(**{"retry-after": format_datetime(soon, usegmt=True)}))
    assert seconds is not None and 100 < seconds <= 120
    past = format_datetime(datetime.now(UTC) - timedelta(days=1), usegmt=True)
    assert retry_after(response(**{"retry-after": past})) == 0.0
    assert bounded(86400.0, 120.0) == (120.0, True)
    assert bounded(math.inf, 120.0) == (120.0, True)
    assert bounded(30.0, 120.0) == (30.0, False)


header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)


@pytest.mark.slow
@given(seconds=header_text, millis=st.one_of(st.none(), header_text))
def test_any_retry_after_header_gives_a_wait_within_the_bound(
    seconds: str, millis: str | None
) -> None:
    headers: dict[str, Any] = {"retry-after": seconds}
    if millis is not None:
        headers["retry-after-ms"] = millis
    asked = retry_after(response(**headers))
    assert asked is None or (asked >= 0 and not math.isnan(asked))
    if asked is not None:
        wait, over = bounded(asked, 60.0)
        assert 0 <= wait <= 60.0 and over == (asked > 60.0)
