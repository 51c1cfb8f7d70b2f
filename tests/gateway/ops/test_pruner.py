"""The pruner in a running gateway: what retention deletes, what dedup still refuses
after it ran, and the config that would break dedup's promise refused at its key."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import structlog

from tests.fakes.telegram_api import BOT_ID, FakeTelegram
from tests.support.config import events_named, inbox_rows, make_settings
from tests.support.gateway import running
from tests.support.telegram import SECRET, post_update
from tether import metrics
from tether.config.loader import load_text
from tether.errors import ConfigError

HOUR = 3600.0


def later(hours: float) -> float:
    return time.time() + hours * HOUR


@pytest.mark.slow
async def test_a_telegram_redelivery_inside_its_window_is_refused_after_the_pruner_ran(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    """Telegram retries an update it got no answer for, for up to a day: with every class
    pruned after an hour, the key stays a day, so the retry 23 h on is a duplicate; past
    the window the key is gone (and its steps, reply row and payload long before)."""
    hook = {"url": "https://bot.example.com/telegram/webhook", "secret_token": SECRET}
    section = {
        "token": telegram.token,
        "base_url": telegram.base_url,
        "rate_limits": False,
        "mode": "webhook",
        "webhook": hook,
    }
    every = {name: "1h" for name in ("payloads", "steps", "outbox", "dead_letters", "audit")}
    settings = make_settings(
        tmp_path,
        http={"enabled": True, "port": 0},
        platforms={"telegram": section},
        memory={"retention": {**every, "inbox": "1d"}},
    )
    update = {"update_id": 700, "message": telegram.message(42, "remember this")}
    key = f"tg:{BOT_ID}:700"
    async with running(settings) as (gateway, _adapter):
        await telegram.wait_for(lambda: telegram.webhook is not None)
        assert await post_update(gateway, update) == 200
        await gateway.drain()
        await gateway.outbox.flush(10)
        assert [s["text"] for s in telegram.sent] == ["remember this"]

        gateway.pruner.clock = lambda: later(23)
        counts = await gateway.pruner.run_pass()
        assert counts["payloads"] == 1 and counts["outbox"] == 1 and counts["inbox"] == 0
        row = await gateway.store.inbox_row(key)
        assert row is not None and row.event.text == "" and row.status == "done"

        with structlog.testing.capture_logs() as logs:
            assert await post_update(gateway, update) == 200  # the platform's retry
            await gateway.drain()
            await gateway.outbox.flush(10)
        assert len(events_named(logs, "event.duplicate")) == 1
        assert [s["text"] for s in telegram.sent] == ["remember this"]  # not answered again

        gateway.pruner.clock = lambda: later(25)
        assert (await gateway.pruner.run_pass())["inbox"] == 1
    assert inbox_rows(tmp_path) == []


async def test_a_pass_logs_its_counts_and_adds_them_to_the_metric(tmp_path: Path) -> None:
    retention = {"inbox": "1h", "steps": "1h", "outbox": "1h", "history": "1h"}
    settings = make_settings(tmp_path, memory={"retention": retention})
    before = metrics.PRUNED.labels("inbox")._value.get()
    async with running(settings) as (gateway, loop):
        await loop.deliver(loop.event("one", key="k1"), loop.event("two", key="k2"))
        await gateway.drain()
        await gateway.outbox.flush(5)
        fresh = await gateway.pruner.run_pass()  # nothing is an hour old yet
        gateway.pruner.clock = lambda: later(2)
        with structlog.testing.capture_logs() as logs:
            counts = await gateway.pruner.run_pass()
    assert fresh == {"inbox": 0, "steps": 0, "outbox": 0, "history": 0}
    assert counts["inbox"] == 2 and counts["outbox"] == 2
    [line] = events_named(logs, "retention.pruned")
    assert line["inbox"] == 2 and line["outbox"] == 2 and "pages_freed" in line
    assert metrics.PRUNED.labels("inbox")._value.get() == before + 2


async def test_a_gateway_without_retention_starts_no_pruner(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path)) as (gateway, _loop):
        assert not gateway.pruner.wanted and gateway.pruner._task is None


@pytest.mark.parametrize(
    ("platforms", "window"),
    [
        ({"feishu": {"app_id": "cli_a1b2", "app_secret": "s"}}, "8h"),
        ({"discord": {"token": "x" * 59}}, "24h"),
    ],
)
def test_an_inbox_retention_shorter_than_a_redelivery_window_is_refused_at_its_key(
    platforms: dict[str, object], window: str
) -> None:
    import yaml

    text = yaml.safe_dump({"platforms": platforms, "memory": {"retention": {"inbox": "2h"}}})
    with pytest.raises(ConfigError) as caught:
        load_text(text)
    assert "memory.retention.inbox" in str(caught.value) and window in str(caught.value)


def test_durations_and_the_defaults() -> None:
    retention = load_text("memory: {retention: {steps: 1d12h, outbox: 90, audit: 30d}}")
    ages = retention.memory.retention.ages()
    assert ages == {"steps": 36 * HOUR, "outbox": 90.0, "audit": 30 * 24 * HOUR}
    assert load_text("{}").memory.retention.ages() == {}  # nothing pruned unless asked
    with pytest.raises(ConfigError, match=r"memory\.retention\.blobs"):
        load_text("memory: {retention: {blobs: 10m}}")  # a running handler's files
    with pytest.raises(ConfigError, match=r"memory\.retention\.history"):
        load_text("memory: {retention: {history: 3 weeks}}")


def test_tether_check_names_the_key_of_a_too_short_inbox_retention(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.config import write_config
    from tether.gateway.cli import main

    feishu = {"app_id": "cli_a1b2", "app_secret": "s"}
    config = write_config(
        tmp_path, platforms={"feishu": feishu}, memory={"retention": {"inbox": "2h"}}
    )
    assert main(["check", "-c", str(config)]) == 2
    assert "memory.retention.inbox: 2h is shorter than feishu's" in capsys.readouterr().err
