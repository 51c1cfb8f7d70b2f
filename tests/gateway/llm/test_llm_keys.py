"""API-key pools and the circuit breaker per model, through the real pipeline and SDK.

The fake OpenAI server (tether/testing/model.py) answers per key: a 429 with a
retry-after on one, 401 on another; every request records the key it was made with. A
refused key is tried once more before it is taken out (a refusal can pass), so a key
that always answers 401 is asked twice.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import structlog
from prometheus_client import REGISTRY

from tests.support.config import SECRETS, db, make_settings, write_config
from tests.support.gateway import running
from tests.support.llm import default_reply, llm_section, llm_settings, turn
from tests.support.processes import TETHER
from tether.adapters.loopback import LoopbackAdapter
from tether.config import load, load_text
from tether.errors import ConfigError
from tether.gateway.app import Gateway
from tether.gateway.llm.keys import KeyPool
from tether.testing.model import FakeModel

KEYS = ["sk-pool-one-aaaaaaaa1111", "sk-pool-two-bbbbbbbb2222", "sk-pool-three-cccc3333"]
SECRETS.update(KEYS)


@pytest.fixture
def fake(model: FakeModel) -> FakeModel:
    """The shared fake (model, tests/fixtures.py), as this module uses it."""
    model.reply = default_reply
    return model


def pooled(fake: FakeModel, keys: list[str], **extra: Any) -> dict[str, Any]:
    section = llm_section(fake, **extra)
    provider = section["providers"]["fake"]
    del provider["api_key"]
    provider["api_keys"] = keys
    return section


def limit_one_revoke_two(fake: FakeModel, retry_after: str) -> None:
    """Key 1 answers one 429 with ``retry_after``; key 2 answers 401 to every call."""
    fake.fail(429, key=KEYS[0], retry_after=retry_after)
    fake.fail(401, key=KEYS[1], times=None)


def key_state(key: str, provider: str = "fake") -> float | None:
    return REGISTRY.get_sample_value(
        "tether_llm_key_state", {"provider": provider, "key": "…" + key[-4:]}
    )


def by_key(fake: FakeModel) -> list[tuple[int, int]]:
    """(key number, status) of every request, in order."""
    return [(KEYS.index(r.api_key) + 1, r.status) for r in fake.requests]


async def turns_until(adapter: Any, fake: FakeModel, done: Any) -> list[str]:
    """Send messages one after another until ``done(fake)``: the cooldown is the
    provider's, so the test waits for the gateway's own use of the key, not a clock."""
    replies: list[str] = []
    async with asyncio.timeout(20):
        while not done(fake):
            replies.append(await turn(adapter, f"message {len(replies)}"))
    return replies


# -- the key pool ------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_rate_limited_and_a_revoked_key_never_leave_a_message_unanswered(
    tmp_path: Path, fake: FakeModel
) -> None:
    one, two, three = KEYS
    limit_one_revoke_two(fake, retry_after="0.5")
    settings = llm_settings(tmp_path, fake, pooled(fake, KEYS))
    with structlog.testing.capture_logs() as logs:
        async with running(settings) as (_gateway, adapter):
            replies = [await turn(adapter, f"hello {n}") for n in range(6)]
            assert key_state(two) == 2 and key_state(three) == 0

            def one_answered_again(fake: FakeModel) -> bool:
                return (1, 200) in by_key(fake)

            replies += await turns_until(adapter, fake, one_answered_again)
            assert key_state(one) == 0
    assert all(reply.startswith("answer to: ") for reply in replies)
    calls = by_key(fake)
    assert calls[:3] == [(1, 429), (2, 401), (3, 200)]  # on at once, no event retry
    assert [c for c in calls if c[0] == 2] == [(2, 401), (2, 401)]  # once more, then out
    assert calls.index((1, 200)) > calls.index((1, 429))
    # No retry storm: one call per message, plus each 429, plus the two 401s that took
    # key 2 out of the pool.
    assert len(calls) <= len(replies) + calls.count((1, 429)) + 2
    with db(tmp_path) as conn:
        assert set(conn.execute("SELECT status, attempts FROM inbox").fetchall()) == {("done", 1)}
    events = {entry["event"]: entry for entry in logs if entry["event"].startswith("llm.key")}
    assert events["llm.key_cooling"]["key"] == "…1111"
    assert events["llm.key_cooling"]["seconds"] == 0.5
    assert events["llm.key_revoked"]["key"] == "…2222"


@pytest.mark.slow
async def test_when_every_key_is_cooling_the_event_waits_for_the_earliest(
    tmp_path: Path, fake: FakeModel
) -> None:
    one, _, three = KEYS
    fake.fail(429, key=one, retry_after="30")
    fake.fail(429, key=three, retry_after="0.2")
    settings = llm_settings(tmp_path, fake, pooled(fake, [one, three]))
    with structlog.testing.capture_logs() as logs:
        async with running(settings) as (_gateway, adapter):
            assert await turn(adapter, "hello") == "answer to: hello"
    assert by_key(fake) == [(1, 429), (3, 429), (3, 200)]  # key 1 still cooling
    retries = [entry for entry in logs if entry["event"] == "event.retry"]
    assert len(retries) == 1 and 0 < retries[0]["delay_s"] <= 0.2
    assert "429" in retries[0]["error"] and "every API key" in retries[0]["error"]
    with db(tmp_path) as conn:
        assert conn.execute("SELECT status, attempts FROM inbox").fetchall() == [("done", 2)]


@pytest.mark.slow
async def test_refused_keys_stay_out_until_a_new_llm_is_built(
    tmp_path: Path, fake: FakeModel
) -> None:
    one, two, _ = KEYS
    fake.fail(401, key=one, times=None)
    fake.fail(402, key=two, times=None)
    settings = llm_settings(tmp_path, fake, pooled(fake, [one, two]))
    async with running(settings) as (gateway, adapter):
        await adapter.say("first")
        await adapter.say("second")
        await gateway.drain()
        letters = await gateway.store.dead_letters()
    # Each key refused twice in a row (the second time takes it out); the second event
    # calls nobody.
    assert sorted(by_key(fake)) == [(1, 401), (1, 401), (2, 402), (2, 402)]
    assert len(letters) == 2 and all("was refused" in letter.error for letter in letters)
    assert not any(key in letter.traceback for letter in letters for key in KEYS)

    fake.heal()  # a reload (here: a new gateway) builds a new pool: the keys are tried again
    async with running(settings) as (_gateway, adapter):
        assert await turn(adapter, "third") == "answer to: third"
    assert by_key(fake)[-1] == (1, 200)


async def test_a_fallback_on_another_provider_answers_when_every_key_is_refused(
    tmp_path: Path, fake: FakeModel
) -> None:
    one, two, three = KEYS
    fake.fail(401, key=one, times=None)
    fake.fail(403, key=two, times=None)
    llm = pooled(fake, [one, two])
    llm["providers"]["spare"] = {"base_url": fake.url, "api_key": three}
    llm["models"]["backup"]["provider"] = "spare"
    async with running(llm_settings(tmp_path, fake, llm)) as (_gateway, adapter):
        assert await turn(adapter, "hello") == "answer to: hello"
        assert await turn(adapter, "again") == "answer to: again"
    assert [(r.model, r.status) for r in fake.requests] == [
        ("main-model", 401),
        ("main-model", 403),
        ("main-model", 401),  # each refused key is tried once more, then taken out
        ("main-model", 403),
        ("backup-model", 200),
        ("backup-model", 200),  # main's keys are out: no call to it at all
    ]
    with db(tmp_path) as conn:
        assert set(conn.execute("SELECT status, attempts FROM inbox").fetchall()) == {("done", 1)}


@pytest.mark.slow
async def test_a_reload_gives_a_refused_key_another_chance(tmp_path: Path, fake: FakeModel) -> None:
    two = KEYS[1]
    fake.fail(401, key=two, times=None)
    config = write_config(tmp_path, llm=pooled(fake, KEYS[1:]))
    adapter = LoopbackAdapter()
    gateway = Gateway(load(config), {"loopback": adapter}, config_path=str(config))
    await gateway.start()
    try:
        for n in range(4):
            assert await turn(adapter, f"before {n}") == f"answer to: before {n}"
        assert await gateway.reloader.reload()  # the same file: fresh key state
        for n in range(2):
            assert await turn(adapter, f"after {n}") == f"answer to: after {n}"
    finally:
        await gateway.stop()
    refused = [i for i, r in enumerate(fake.requests) if r.api_key == two]
    # Twice before the reload (once more, then out), and asked again after it.
    assert len(refused) == 3
    assert max(refused[:2]) < 6 <= refused[2]  # before: 4 answers and 2 refusals
    assert all(fake.requests[i].status == 401 for i in refused)


def test_a_pool_closed_after_a_failed_reload_leaves_the_running_pools_states() -> None:
    running_pool = KeyPool("p", KEYS[:1])
    assert running_pool.refuse(running_pool.keys[0], 401)  # once more, then out
    assert not running_pool.refuse(running_pool.keys[0], 401)
    assert key_state(KEYS[0], "p") == 2
    attempt = KeyPool("p", KEYS[:1])  # a reload builds its pool, then fails and closes it
    assert key_state(KEYS[0], "p") == 0
    attempt.forget()
    assert key_state(KEYS[0], "p") == 2
    running_pool.forget()
    assert key_state(KEYS[0], "p") is None


def test_api_key_and_api_keys_together_are_refused_and_every_key_is_a_secret() -> None:
    provider = {"base_url": "http://127.0.0.1:1/v1", "api_key": KEYS[0], "api_keys": KEYS[1:]}
    both = {"providers": {"p": provider}, "models": {"m": {"provider": "p", "model": "m"}}}
    with pytest.raises(ConfigError) as error:
        load_text(_yaml(both))
    assert "llm.providers.p" in str(error.value) and "api_keys" in str(error.value)
    assert KEYS[0] not in str(error.value)

    del provider["api_key"]
    settings = load_text(_yaml(both))
    assert set(KEYS[1:]) <= set(settings.secrets())
    assert settings.masked()["llm"]["providers"]["p"]["api_keys"] == ["***", "***"]
    pool = KeyPool("p", KEYS)
    assert not any(key in repr(pool.keys) for key in KEYS)  # a traceback's locals
    pool.forget()


def _yaml(llm: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump({"platforms": {}, "llm": llm})


# -- the circuit breaker -----------------------------------------------------------------


def breaker_open(model: str) -> float | None:
    return REGISTRY.get_sample_value("tether_llm_breaker_open", {"model": model})


@pytest.mark.slow
async def test_a_failing_model_is_skipped_for_its_cooldown_then_probed(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.fail(503, times=None, model="main-model")
    llm = llm_section(fake, circuit_breaker={"failures": 2, "cooldown": 0.3})
    async with running(llm_settings(tmp_path, fake, llm)) as (_gateway, adapter):
        for n in range(3):
            assert await turn(adapter, f"hello {n}") == f"answer to: hello {n}"
        assert breaker_open("main") == 1
        fake.heal()

        def main_answered(fake: FakeModel) -> bool:
            return any(r.model == "main-model" and r.status == 200 for r in fake.requests)

        await turns_until(adapter, fake, main_answered)
        assert breaker_open("main") == 0
        await turn(adapter, "closed again")
    calls = [(r.model, r.status) for r in fake.requests]
    assert calls[:5] == [
        ("main-model", 503),
        ("backup-model", 200),
        ("main-model", 503),
        ("backup-model", 200),
        ("backup-model", 200),  # open: the route went straight to its fallback
    ]
    main = [c for c in calls if c[0] == "main-model"]
    assert main == [("main-model", 503)] * 2 + [("main-model", 200)] * 2  # one probe, then closed
    assert calls[-1] == ("main-model", 200)


@pytest.mark.slow
async def test_a_failed_probe_opens_the_breaker_again(tmp_path: Path, fake: FakeModel) -> None:
    fake.fail(503, times=None, model="main-model")
    # The turn after the failed probe must come before the breaker's next probe is due:
    # a cooldown a loaded machine cannot outrun between two turns (0.3 s could).
    llm = llm_section(fake, circuit_breaker={"failures": 1, "cooldown": 2.0})
    async with running(llm_settings(tmp_path, fake, llm)) as (_gateway, adapter):
        await turn(adapter, "opens it")

        def probed(fake: FakeModel) -> bool:
            return [r.model for r in fake.requests].count("main-model") == 2

        await turns_until(adapter, fake, probed)
        before = fake.calls
        assert await turn(adapter, "after the probe") == "answer to: after the probe"
    assert [r.model for r in fake.requests[before:]] == ["backup-model"]


@pytest.mark.slow
async def test_with_every_breaker_open_the_event_waits_for_the_probe(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.fail(503, times=2)
    # The pipeline's own backoff (at most 0.05 s in tests) is far shorter than the cooldown.
    llm = llm_section(fake, circuit_breaker={"failures": 1, "cooldown": 1.0})
    with structlog.testing.capture_logs() as logs:
        async with running(llm_settings(tmp_path, fake, llm)) as (_gateway, adapter):
            assert await turn(adapter, "hello") == "answer to: hello"
    first, second = [entry for entry in logs if entry["event"] == "event.retry"]
    assert "no model answered: main: HTTP 503" in first["error"]
    assert "every circuit breaker is open" in second["error"]
    assert 0.05 < second["delay_s"] <= 1.0  # the earliest probe, not the pipeline's backoff
    assert [(r.model, r.status) for r in fake.requests] == [
        ("main-model", 503),
        ("backup-model", 503),
        ("main-model", 200),  # the probe, not before the cooldown
    ]


# -- tether status -----------------------------------------------------------------------


@pytest.mark.slow
async def test_tether_status_shows_each_key_by_its_masked_id_and_state(
    tmp_path: Path, fake: FakeModel
) -> None:
    limit_one_revoke_two(fake, retry_after="600")
    llm = pooled(fake, KEYS)
    settings = make_settings(tmp_path, llm=llm, http={"enabled": True, "port": 0})
    async with running(settings) as (gateway, adapter):
        assert await turn(adapter, "hello") == "answer to: hello"
        assert await turn(adapter, "again") == "answer to: again"  # key 2's second 401
        assert gateway.http is not None
        config = write_config(tmp_path, llm=llm, http={"enabled": True, "port": gateway.http.port})

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            command = [TETHER, *args, "-c", str(config)]
            return subprocess.run(command, capture_output=True, text=True)

        report = json.loads((await asyncio.to_thread(cli, "status", "--json")).stdout)
        table = (await asyncio.to_thread(cli, "status")).stdout
    assert report["llm_keys"] == [
        {"provider": "fake", "key": "…1111", "state": "cooling"},
        {"provider": "fake", "key": "…2222", "state": "revoked"},
        {"provider": "fake", "key": "…3333", "state": "healthy"},
    ]
    lines = [line.split() for line in table.splitlines() if line.startswith("llm key")]
    assert lines[1] == ["llm", "key", "fake", "…2222", "revoked"] and len(lines) == 3
    assert not any(key in table for key in KEYS)

    stopped = json.loads((await asyncio.to_thread(cli, "status", "--json")).stdout)
    assert {entry["state"] for entry in stopped["llm_keys"]} == {"unknown"}
