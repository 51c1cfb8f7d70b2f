"""An approval on two gateways sharing one PostgreSQL store: the card is posted by one
instance, the press lands on the other, and the approved tool runs once.

Two real ``tether run`` processes, each with its own HTTP port and log, take Telegram
webhooks (as behind a load balancer) and run the ``llm`` agent against the fake model,
with ``charge`` (tests/plugins/waits/approval_counter.py): approval-gated, its side effect a hit
on the fake counter. The asker's message is delivered to one instance; its log shows the
instance that ran the turn and posted the card; the press is delivered to the *other*
one, which looks the wait up by the press's token in the shared store (no instance holds
it in memory) and resumes the turn in its lane. The inbox sweep is made rare (60 s), so
nothing here is picked up by a sweep: each instance runs what it was handed or poked.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
import yaml

from tests.fakes.cluster import Instance, free_port
from tests.fakes.counter import Counter
from tests.fakes.telegram_api import BOT_ID, FakeTelegram
from tests.plugins.waits.approval_counter import CARD, FINAL, script
from tests.support.config import config_dict
from tests.support.processes import ready
from tests.support.telegram import SECRET, WEBHOOK_PATH
from tether.adapters.telegram.ingress import SECRET_HEADER
from tether.testing.model import FakeModel

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ASKER, APPROVER = 42, 7
OPS = -100900


@pytest.fixture
async def pair(
    tmp_path: Path,
    pg_dsn: str,
    telegram: FakeTelegram,
    model: FakeModel,
    counter: Counter,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[list[Instance]]:
    """Two ``tether run`` instances on one PostgreSQL schema, ready (a test stops them
    with :func:`stop` before its last checks)."""
    model.reply = script
    instances = []
    for index in range(2):
        home = tmp_path / f"instance{index}"
        home.mkdir()
        port = free_port()
        config = config_dict(
            home,
            memory={"store": pg_dsn},
            http={"enabled": True, "port": port},
            plugins=["tests.plugins.waits.approval_counter:router"],
            platforms={
                "telegram": {
                    "token": telegram.token,
                    "base_url": telegram.base_url,
                    "mode": "webhook",
                    "webhook": {
                        "url": f"https://bot.example.com{WEBHOOK_PATH}",
                        "secret_token": SECRET,
                    },
                    "rate_limits": False,
                    "typing": False,
                }
            },
            agent={"handler": "llm", "tools": {"approvals": {"to": f"telegram:{OPS}"}}},
            access={"admins": [f"telegram:{APPROVER}"], "allow": ["*"]},
            llm=model.section(),
            pipeline={"sweep_interval": 60},  # nothing waits for a sweep: each poke is direct
        )
        path = home / "tether.yaml"
        path.write_text(yaml.safe_dump(config))
        instances.append(Instance(path, port, home / "tether.log"))
    monkeypatch.setenv("TETHER_TEST_COUNTER", counter.url)  # Instance passes it on
    try:
        for instance in instances:
            await instance.start()
        for instance in instances:
            assert instance.proc is not None
            await ready(instance.port, instance.proc)
        yield instances
    finally:
        for instance in instances:
            if instance.alive and instance.proc is not None:
                instance.proc.kill()
                await instance.proc.wait()


async def stop(pair: list[Instance], telegram: FakeTelegram) -> None:
    """SIGTERM both: each drains (what it still had to send is sent) and exits 0."""
    for instance in pair:
        assert instance.proc is not None
        instance.proc.terminate()
    for instance in pair:
        assert instance.proc is not None
        code = await asyncio.wait_for(instance.proc.wait(), 60)
        assert code == 0, instance.log.read_text()[-3000:]
        assert telegram.token not in instance.log.read_text()


async def deliver(instance: Instance, update: dict[str, Any]) -> None:
    """Telegram's webhook post of ``update`` to ``instance``; it must take it (200)."""
    url = f"http://127.0.0.1:{instance.port}{WEBHOOK_PATH}"
    headers = {SECRET_HEADER: SECRET, "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=json.dumps(update), headers=headers) as response,
    ):
        assert response.status == 200


def logged(instance: Instance, event: str, **fields: str) -> bool:
    """Did ``instance`` log ``event`` with these fields?"""
    for line in instance.log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == event and all(entry.get(k) == v for k, v in fields.items()):
            return True
    return False


def press(telegram: FakeTelegram, update_id: int, button: str) -> dict[str, Any]:
    """The approver's press of ``button`` on the card, as Telegram sends it."""
    [(message_id, text)] = [
        (mid, text)
        for (chat, mid), text in telegram.texts.shown.items()
        if chat == OPS and text.startswith(CARD)
    ]
    [markup] = [s["reply_markup"] for s in telegram.sent if s["text"].startswith(CARD)]
    [data] = [
        b["callback_data"] for row in markup["inline_keyboard"] for b in row if b["text"] == button
    ]
    return {
        "update_id": update_id,
        "callback_query": {
            "id": f"cbq-{update_id}",
            "from": {"id": APPROVER, "is_bot": False, "first_name": "Boss"},
            "chat_instance": "ci-ops",
            "data": data,
            "message": {
                "message_id": message_id,
                "date": int(time.time()),
                "chat": {"id": OPS, "type": "supergroup", "title": "Ops"},
                "from": {"id": BOT_ID, "is_bot": True, "first_name": "Tether"},
                "text": text,
            },
        },
    }


async def card_from(pair: list[Instance], telegram: FakeTelegram, key: str) -> int:
    """Wait for the card; the index of the instance that ran the turn and posted it."""
    await telegram.wait_for(
        lambda: any(t.startswith(CARD) for t in telegram.texts.in_chat(OPS)), 60
    )
    [poster] = [i for i, inst in enumerate(pair) if logged(inst, "wait.opened", key=key)]
    return poster


async def wait_rows(pg_dsn: str) -> list[tuple[str, str]]:
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetch("SELECT status, answer FROM waits WHERE kind = 'approval'")
    finally:
        await conn.close()
    return [(r["status"], json.loads(r["answer"] or "{}").get("decision", "")) for r in rows]


def finals(telegram: FakeTelegram) -> list[dict[str, Any]]:
    return [s for s in telegram.sent if s["chat_id"] == ASKER]


async def test_the_press_on_the_other_instance_runs_the_tool_once(
    pair: list[Instance], pg_dsn: str, telegram: FakeTelegram, model: FakeModel, counter: Counter
) -> None:
    message = {"update_id": 5000, "message": telegram.message(ASKER, "charge the customer 500")}
    await deliver(pair[0], message)
    key = f"tg:{BOT_ID}:5000"
    poster = await card_from(pair, telegram, key)
    other = pair[1 - poster]
    assert counter.count == 0 and await wait_rows(pg_dsn) == [("open", "")]

    await deliver(other, press(telegram, 5001, "Approve"))
    await telegram.wait_for(lambda: FINAL in telegram.texts.in_chat(ASKER), 60)
    await telegram.wait_for(
        lambda: any(t.startswith("Approved by Boss") for t in telegram.texts.in_chat(OPS)), 60
    )
    await stop(pair, telegram)
    assert logged(other, "event.received", key=f"tg:{BOT_ID}:5001")
    assert counter.count == 1
    assert await wait_rows(pg_dsn) == [("answered", "approved")]
    assert telegram.texts.in_chat(ASKER) == [FINAL]
    assert len(finals(telegram)) == 1  # one sendMessage to the asker: the answer, once
    assert [t[:20] for t in telegram.texts.in_chat(OPS)] == [CARD[:20], "Approved by Boss: ch"]
    # The instance the press landed on decided it and ran the resumed turn: the wait was
    # found by its token in the store, and the turn poked into its lane there.
    assert logged(other, "wait.resolved", key=key) and logged(other, "tool.done", key=key)
    assert not logged(pair[poster], "tool.done", key=key)
    assert model.calls == 2


async def test_the_same_press_delivered_to_both_instances_counts_once(
    pair: list[Instance], pg_dsn: str, telegram: FakeTelegram, counter: Counter
) -> None:
    """Telegram retried the press's webhook and the balancer sent the retry to the other
    instance: both take the same update at once."""
    message = {"update_id": 6000, "message": telegram.message(ASKER, "charge the customer 500")}
    await deliver(pair[0], message)
    await card_from(pair, telegram, f"tg:{BOT_ID}:6000")
    update = press(telegram, 6001, "Approve")
    await asyncio.gather(deliver(pair[0], update), deliver(pair[1], update))
    await telegram.wait_for(lambda: FINAL in telegram.texts.in_chat(ASKER), 60)
    await telegram.wait_for(
        lambda: any(t.startswith("Approved by Boss") for t in telegram.texts.in_chat(OPS)), 60
    )
    await stop(pair, telegram)
    assert counter.count == 1
    assert await wait_rows(pg_dsn) == [("answered", "approved")]
    assert telegram.texts.in_chat(ASKER) == [FINAL]
    assert len(finals(telegram)) == 1
    assert sum(t.startswith("Approved by") for t in telegram.texts.in_chat(OPS)) == 1
