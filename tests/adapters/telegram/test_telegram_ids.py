"""Update ids that restart: a bot idle for a week, a reused id, a restored older store.

Telegram numbers a bot's updates in sequence, but after a week without updates it picks
the next ``update_id`` at random: below every id before it, or equal to one answered long
ago. The fake Bot API (tests/fakes/telegram_api.py) does that on ``restart_ids`` and
confirms by the Bot API's rule (a getUpdates offset above an id confirms it, also for an
update arriving while that call waits), so an offset carried over from before the restart
confirms every new update away unseen, and a key of ``update_id`` alone takes a reused id
for a duplicate. A week passes on the ingress's clock (``adapter.ingress.clock``), or, for
a store the next process opens, by moving the store's clocks back (:func:`age_store`).

Real PTB against the fake over HTTP, the real gateway on a SQLite store in tmp_path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog

from tests.fakes.telegram_api import BOT_ID, FakeTelegram
from tests.support.config import db, db_rows, events_named, inbox_rows, write_config
from tests.support.gateway import running
from tests.support.processes import Handlers, control_socket, spawn_run, subprocess_env
from tests.support.telegram import post_update, telegram_settings, webhook_settings
from tether.gateway.builtin.echo import echo_router

DAY = 24 * 3600.0
EPOCH_CURSOR = f"telegram:{BOT_ID}:epoch"


def ahead(days: float) -> Callable[[], float]:
    """A clock ``days`` ahead of this one: the ingress's view of a week gone by."""
    return lambda: time.time() + days * DAY


def age_store(tmp_path: Path, days: float) -> None:
    """The store as ``days`` without an update leave it: every cursor moved back, and the
    epoch's ``seen`` with them (the cursor docs/telegram.md describes)."""
    with db(tmp_path) as conn:
        conn.execute("UPDATE cursors SET updated = updated - ?", (days * DAY,))
        for name, value in conn.execute(
            "SELECT name, value FROM cursors WHERE name = ?", (EPOCH_CURSOR,)
        ).fetchall():
            record = json.loads(value)
            record["seen"] -= days * DAY
            conn.execute("UPDATE cursors SET value = ? WHERE name = ?", (json.dumps(record), name))


def copy_store(source: Path, target: Path) -> Path:
    """The SQLite store's files (its WAL too) from ``source`` into ``target``, in place of
    those there: a backup taken, or restored."""
    target.mkdir(exist_ok=True)
    for part in target.glob("tether.db*"):
        part.unlink()
    for part in source.glob("tether.db*"):
        shutil.copy2(part, target / part.name)
    return target


def texts(fake: FakeTelegram) -> list[str]:
    return [sent["text"] for sent in fake.sent]


async def quiet_poll(fake: FakeTelegram, confirming: int, since: int = 0) -> None:
    """The poller confirmed the last batch (with ``confirming``, in a call from the
    ``since``-th on) and waits with no offset: what it does through a week without
    updates (its calls' offsets confirm nothing)."""
    await fake.wait_for(lambda: confirming in fake.offsets[since:] and fake.offsets[-1] is None)


# -- a running bot, idle for a week ------------------------------------------------------


async def test_a_bot_idle_for_a_week_answers_updates_whose_ids_restarted_lower(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    with structlog.testing.capture_logs() as logs:
        async with running(telegram_settings(tmp_path, fake), echo_router()) as (gateway, adapter):
            before = [fake.push(message=fake.message(42, f"before {n}")) for n in range(10)]
            await fake.wait_for(lambda: len(fake.sent) >= 10)
            await quiet_poll(fake, before[-1]["update_id"] + 1)
            await gateway.drain()
            # A week later Telegram restarts the ids: five below the first id seen, then
            # five that were answered a week ago.
            adapter.ingress.clock = ahead(8)
            fake.restart_ids(before[0]["update_id"] - 5)
            after = [fake.push(message=fake.message(42, f"after {n}")) for n in range(10)]
            await fake.wait_for(lambda: len(fake.sent) >= 20)
            await gateway.drain()
    assert texts(fake) == [f"before {n}" for n in range(10)] + [f"after {n}" for n in range(10)]
    reused = {u["update_id"] for u in after} & {u["update_id"] for u in before}
    assert len(reused) == 5
    rows = dict(inbox_rows(tmp_path))
    assert [rows.get(f"tg:{BOT_ID}:e1:{u['update_id']}") for u in after] == ["done"] * 10
    assert [rows.get(f"tg:{BOT_ID}:{u['update_id']}") for u in before] == ["done"] * 10
    (started,) = events_named(logs, "telegram.epoch_started")
    assert started["epoch"] == 1 and started["quiet_s"] >= 7 * DAY


# -- a store restored from a backup ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("written_by", ["this version", "a version before epochs"])
async def test_a_restored_older_store_loses_nothing(
    tmp_path: Path, fake: FakeTelegram, written_by: str
) -> None:
    settings = telegram_settings(tmp_path, fake)
    async with running(settings, echo_router()) as (gateway, _adapter):
        first = [fake.push(message=fake.message(40 + n % 3, f"first {n}")) for n in range(100)]
        await fake.wait_for(lambda: len(fake.sent) >= 100)
        await fake.wait_for(lambda: first[-1]["update_id"] + 1 in fake.offsets)
        await gateway.drain()
    backup = copy_store(tmp_path, tmp_path / "backup")
    async with running(settings, echo_router()) as (gateway, _adapter):
        later = [fake.push(message=fake.message(41, f"later {n}")) for n in range(10)]
        await fake.wait_for(lambda: len(fake.sent) >= 110)
        await fake.wait_for(lambda: later[-1]["update_id"] + 1 in fake.offsets)
        await gateway.drain()
    copy_store(backup, tmp_path)  # the store is lost; the backup comes back
    if written_by != "this version":  # an older Tether kept no epoch
        with db(tmp_path) as conn:
            conn.execute("DELETE FROM cursors WHERE name = ?", (EPOCH_CURSOR,))
    async with running(settings, echo_router()) as (gateway, adapter):
        adapter.ingress.clock = ahead(8)  # a week without updates since the backup
        fake.restart_ids(first[0]["update_id"])  # the backup's ids, all of them again
        again = [fake.push(message=fake.message(40 + n % 3, f"again {n}")) for n in range(100)]
        await fake.wait_for(lambda: len(fake.sent) >= 210)
        await gateway.drain()
    assert texts(fake)[110:] == [f"again {n}" for n in range(100)]
    rows = dict(inbox_rows(tmp_path))
    assert [rows.get(f"tg:{BOT_ID}:e1:{u['update_id']}") for u in again] == ["done"] * 100


async def test_a_store_from_before_epochs_still_drops_a_redelivery_then_answers_a_reused_id(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    """Rows an older Tether keyed ``tg:{bot}:{update_id}`` make their redelivery a
    duplicate; a week on, the same id is a new update and answered."""
    settings = telegram_settings(tmp_path, fake)
    fake.refuse_confirmations = True  # committed before the upgrade, never confirmed
    async with running(settings, echo_router()) as (gateway, _adapter):
        update = fake.push(message=fake.message(42, "before the upgrade"))
        await fake.wait_for(lambda: update["update_id"] + 1 in fake.offsets)
        await fake.wait_for(lambda: len(fake.sent) >= 1)
        await gateway.drain()
    with db(tmp_path) as conn:  # as a Tether before epochs leaves its store
        conn.execute("DELETE FROM cursors WHERE name = ?", (EPOCH_CURSOR,))
    fake.refuse_confirmations = False
    restarted = len(fake.offsets)
    async with running(settings, echo_router()) as (gateway, adapter):
        # Telegram hands the update over again, and this time hears it confirmed.
        await quiet_poll(fake, update["update_id"] + 1, since=restarted)
        await gateway.drain()
        assert texts(fake) == ["before the upgrade"]
        adapter.ingress.clock = ahead(8)
        fake.restart_ids(update["update_id"])
        fake.push(message=fake.message(42, "a week after"))
        await fake.wait_for(lambda: len(fake.sent) >= 2)
        await gateway.drain()
    assert texts(fake) == ["before the upgrade", "a week after"]
    number = update["update_id"]
    assert inbox_rows(tmp_path) == [
        (f"tg:{BOT_ID}:{number}", "done"),
        (f"tg:{BOT_ID}:e1:{number}", "done"),
    ]


# -- webhook ------------------------------------------------------------------------------


async def test_a_webhook_update_reusing_a_week_old_id_is_answered_and_its_retry_is_not(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    old = {"update_id": 9001, "message": fake.message(42, "a week ago")}
    new = {"update_id": 9001, "message": fake.message(42, "today")}
    async with running(webhook_settings(tmp_path, fake), echo_router()) as (gateway, adapter):
        await fake.wait_for(lambda: fake.webhook is not None)
        assert await post_update(gateway, old) == 200
        assert await post_update(gateway, old) == 200  # Telegram's retry, the same day
        await gateway.drain()
        adapter.ingress.clock = ahead(8)
        assert await post_update(gateway, new) == 200
        assert await post_update(gateway, new) == 200
        await gateway.drain()
    assert texts(fake) == ["a week ago", "today"]
    assert inbox_rows(tmp_path) == [(f"tg:{BOT_ID}:9001", "done"), (f"tg:{BOT_ID}:e1:9001", "done")]


async def test_an_unreadable_epoch_starts_a_new_one_rather_than_reuse_old_keys(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    """A cursor value Tether never writes (edited by hand) says nothing about which keys
    are taken: the next update starts an epoch no earlier one had, and is answered."""
    settings = webhook_settings(tmp_path, fake)
    old = {"update_id": 9001, "message": fake.message(42, "before the edit")}
    async with running(settings, echo_router()) as (gateway, _adapter):
        await fake.wait_for(lambda: fake.webhook is not None)
        assert await post_update(gateway, old) == 200
        await gateway.drain()
    with db(tmp_path) as conn:
        conn.execute("UPDATE cursors SET value = 'not json' WHERE name = ?", (EPOCH_CURSOR,))
    new = {"update_id": 9001, "message": fake.message(42, "after the edit")}
    with structlog.testing.capture_logs() as logs:
        async with running(settings, echo_router()) as (gateway, _adapter):
            assert await post_update(gateway, new) == 200
            await gateway.drain()
    assert texts(fake) == ["before the edit", "after the edit"]
    (unreadable,) = events_named(logs, "telegram.epoch_unreadable")
    assert unreadable["log_level"] == "error" and unreadable["value"] == "not json"
    (_, status), (key, status2) = inbox_rows(tmp_path)
    assert status == status2 == "done" and key.endswith(":9001") and key != f"tg:{BOT_ID}:9001"
    ((value,),) = db_rows(tmp_path, "SELECT value FROM cursors WHERE name = ?", EPOCH_CURSOR)
    assert key == f"tg:{BOT_ID}:e{json.loads(value)['epoch']}:9001"


# -- SIGKILL between the commit and the confirmation --------------------------------------


async def release_all(handlers: Handlers) -> None:
    """Let every held handler of tests/plugins/telegram_block.py go on, as it enters."""
    while True:
        _line, writer = await handlers.entered.get()
        writer.write(b"go\n")
        await writer.drain()


@pytest.mark.crash
@pytest.mark.slow
async def test_sigkill_before_a_quiet_weeks_first_batch_is_confirmed_answers_it_once(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    """The epoch a batch starts is committed with the batch: the restart, handed the same
    batch again (it was never confirmed), keys it the same and answers each update once."""
    chats = [11, 12, 13, 11, 12]
    async with running(telegram_settings(tmp_path, fake), echo_router()) as (gateway, _adapter):
        old = [fake.push(message=fake.message(chat, f"old{n}")) for n, chat in enumerate(chats)]
        await fake.wait_for(lambda: old[-1]["update_id"] + 1 in fake.offsets)
        await fake.wait_for(lambda: len(fake.sent) >= len(old))
        await gateway.drain()
    age_store(tmp_path, days=8)
    fake.restart_ids(old[0]["update_id"])  # a week later: the same ids again
    batch = [fake.push(message=fake.message(chat, f"msg{n}")) for n, chat in enumerate(chats)]
    top = batch[-1]["update_id"]
    new_keys = {f"tg:{BOT_ID}:e1:{u['update_id']}" for u in batch}
    unstored: list[tuple[int | None, int]] = []  # (offset, id) confirmed before it was stored

    def check(offset: int | None) -> None:
        stored = {key for key, _status in inbox_rows(tmp_path)}
        for update in fake.pending:
            number = update["update_id"]
            confirmed = offset is not None and number < offset
            if confirmed and f"tg:{BOT_ID}:e1:{number}" not in stored:
                unstored.append((offset, number))

    fake.on_poll = check
    fake.refuse_confirmations = True  # Telegram out of reach once the batch is fetched
    telegram = {"token": fake.token, "base_url": fake.base_url, "poll_timeout": 1}
    config = write_config(
        tmp_path,
        plugins=["tests.plugins.telegram_block:router"],
        platforms={"telegram": {**telegram, "rate_limits": False}},
    )
    sock = tmp_path / "gate.sock"
    env = subprocess_env(TETHER_TEST_SOCKET=str(sock))
    log = tmp_path / "tether.log"
    sent_before = len(fake.sent)
    async with control_socket(sock) as handlers:
        polled = len(fake.offsets)
        first = await spawn_run(config, log, env)
        try:  # one handler per chat lane holds its update: the batch is in the store
            lines = [(await asyncio.wait_for(handlers.entered.get(), 30))[0] for _ in range(3)]
            assert {line.split()[1] for line in lines} <= new_keys
            # It asked to confirm the batch, and Telegram never heard it.
            await fake.wait_for(lambda: top + 1 in fake.offsets[polled:], timeout=30)
        finally:
            first.send_signal(signal.SIGKILL)
            await first.wait()
        assert [u["update_id"] for u in fake.pending] == [u["update_id"] for u in batch]
        ((value,),) = db_rows(tmp_path, "SELECT value FROM cursors WHERE name = ?", EPOCH_CURSOR)
        record = json.loads(value)
        assert record["epoch"] == 1 and record["seen"] > time.time() - 600

        fake.refuse_confirmations = False
        polled = len(fake.offsets)
        releasing = asyncio.create_task(release_all(handlers))
        second = await spawn_run(config, log, env)
        try:
            await fake.wait_for(lambda: len(fake.sent) >= sent_before + len(batch), timeout=30)
            await fake.wait_for(lambda: top + 1 in fake.offsets[polled:], timeout=30)
        finally:
            second.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(second.wait(), 30) == 0
            releasing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await releasing
    assert fake.offsets[polled] is None  # the restart's first poll confirms nothing
    assert sorted(texts(fake)[sent_before:]) == [f"handled:msg{n}" for n in range(len(batch))]
    for chat in set(chats):  # each chat's replies in its messages' order
        mine = [s["text"] for s in fake.sent[sent_before:] if s["chat_id"] == chat]
        assert mine == sorted(mine)
    rows: dict[str, Any] = dict(inbox_rows(tmp_path))
    assert {key for key in rows if ":e" in key} == new_keys  # no second epoch
    assert set(rows.values()) == {"done"} and len(rows) == 2 * len(batch)
    assert fake.pending == [] and unstored == []
    assert fake.token not in log.read_text()
