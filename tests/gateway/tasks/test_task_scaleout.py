"""A background task on two gateways sharing one PostgreSQL store: the instance running it
is SIGKILLed mid-task and the other instance finishes it, once.

Two real ``tether run`` processes, each with its own HTTP port and log, take Telegram
webhooks and run the ``llm`` agent against the fake model, with ``bump``
(tests/plugins/tools_counter.py), whose side effect is a hit on the fake counter. A chat
message makes the model call ``start_task``; the task (event ``task:{id}``, a lane of its
own) runs on whichever instance takes its lane, found from the logs (``event.started``
with the task's key). There its first model call asks for ``bump``, the tool hits the
counter, and its next model call is held at the fake model. Once the chat's own replies
are out, that instance is SIGKILLed: its PostgreSQL session ends, the lane's advisory lock
with it, and the other instance's sweep (``pipeline.sweep_interval``, made 0.5 s here;
there is no lease to wait out, the lock goes with the connection) takes the lane over.
It runs the task again from its
memoized steps: the first model call and the tool call are replayed from the store (the
counter stays at one), only the held call is asked again, and the result is posted in
the chat once and the ledger row ends ``done``.
"""

from __future__ import annotations

import asyncio
import json
import signal
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
from tests.gateway.tasks.conftest import is_task
from tests.support.config import config_dict
from tests.support.processes import ready
from tests.support.telegram import SECRET, WEBHOOK_PATH
from tether.adapters.telegram.ingress import SECRET_HEADER
from tether.testing.model import Body, FakeModel, asks_for, tool_call

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.crash]

ASKER = 42
GOAL = "bump the counter once and say what it reads"
STARTED = "Started it in the background."
FINAL = "The counter was bumped: it reads 1."


def has_tool_result(body: Body) -> bool:
    return any(m.get("role") == "tool" for m in body.get("messages", []))


def reply(body: Body) -> str | Body:
    """Chat: start the task, then say so. Task: bump, then answer once the result is in.
    Decided by the request alone, so a run replayed on the other instance gets the same."""
    if is_task(body):
        if has_tool_result(body):
            return FINAL
        return asks_for(tool_call("bump", {"label": "task"}, id="call-bump"))
    if has_tool_result(body):
        return STARTED
    return asks_for(tool_call("start_task", {"goal": GOAL}, id="call-start"))


def held_call(body: Body) -> bool:
    """The task's model call after its tool ran: held while the test kills its instance."""
    return is_task(body) and has_tool_result(body)


@pytest.fixture
async def pair(
    tmp_path: Path,
    pg_dsn: str,
    telegram: FakeTelegram,
    model: FakeModel,
    counter: Counter,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[list[Instance]]:
    """Two ``tether run`` instances on one PostgreSQL schema, ready."""
    model.reply = reply
    instances = []
    for index in range(2):
        home = tmp_path / f"instance{index}"
        home.mkdir()
        port = free_port()
        config = config_dict(
            home,
            memory={"store": pg_dsn},
            http={"enabled": True, "port": port},
            plugins=["tests.plugins.tools_counter:router"],
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
            agent={"handler": "llm", "streaming": False},
            llm=model.section(),
            # How soon the survivor looks for a lane whose lock went with a dead session.
            pipeline={"sweep_interval": 0.5},
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


async def deliver(instance: Instance, update: dict[str, Any]) -> None:
    """Telegram's webhook post of ``update`` to ``instance``; it must take it (200)."""
    url = f"http://127.0.0.1:{instance.port}{WEBHOOK_PATH}"
    headers = {SECRET_HEADER: SECRET, "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=json.dumps(update), headers=headers) as response,
    ):
        assert response.status == 200


def entries(instance: Instance, event: str, **fields: Any) -> list[dict[str, Any]]:
    """The JSON log lines of ``instance`` for ``event`` with these fields."""
    found = []
    for line in instance.log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == event and all(entry.get(k) == v for k, v in fields.items()):
            found.append(entry)
    return found


async def held(model: FakeModel, timeout: float = 30) -> None:
    """Until the task's held call has reached the fake model (request by request)."""
    seen = 0
    async with asyncio.timeout(timeout):
        while not any(held_call(r.body) for r in model.requests):
            seen += 1
            await model.wait_for_requests(seen, timeout=timeout)


async def ledger(pg_dsn: str) -> list[tuple[str, str, str | None]]:
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetch("SELECT id, status, result FROM tasks")
    finally:
        await conn.close()
    return [(r["id"], r["status"], r["result"]) for r in rows]


async def inbox_status(pg_dsn: str, key: str) -> list[str]:
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetch("SELECT status FROM inbox WHERE key = $1", key)
    finally:
        await conn.close()
    return [r["status"] for r in rows]


def results(telegram: FakeTelegram) -> list[dict[str, Any]]:
    """The sendMessage calls that posted a task's result to the asker."""
    return [
        s for s in telegram.sent if s["chat_id"] == ASKER and str(s["text"]).startswith("✅ Task")
    ]


async def test_the_other_instance_finishes_a_task_whose_instance_was_killed(
    pair: list[Instance], pg_dsn: str, telegram: FakeTelegram, model: FakeModel, counter: Counter
) -> None:
    model.hold(held_call)  # no release: the killed instance's call is never answered
    message = {"update_id": 7000, "message": telegram.message(ASKER, "count it for me, later")}
    await deliver(pair[0], message)
    await held(model)
    assert counter.count == 1  # the tool ran; the task now waits on its second model call

    [(task_id, status, _)] = await ledger(pg_dsn)
    assert status == "running"
    key = f"task:{task_id}"
    [holder] = [i for i, inst in enumerate(pair) if entries(inst, "event.started", key=key)]
    killed, survivor = pair[holder], pair[1 - holder]
    assert entries(killed, "tool.done", key=key)
    assert not entries(survivor, "event.started", key=key)  # the lane was the holder's alone

    # The chat's own replies are out first: one cut off mid-send would be ``unknown`` and
    # not resent on Telegram (docs/scale-out.md), which is not what this test is about.
    await telegram.wait_for(lambda: STARTED in telegram.texts.in_chat(ASKER), 30)
    assert not results(telegram)
    assert killed.proc is not None
    killed.proc.send_signal(signal.SIGKILL)
    await killed.proc.wait()
    model.heal()  # the survivor's call is answered (the dead one's stays unanswered)

    await telegram.wait_for(lambda: len(results(telegram)) >= 1, 45)
    await telegram.wait_for(
        lambda: any(t.endswith("✅ done") for t in telegram.texts.in_chat(ASKER)), 30
    )
    assert survivor.proc is not None
    survivor.proc.terminate()
    code = await asyncio.wait_for(survivor.proc.wait(), 60)
    assert code == 0, survivor.log.read_text()[-3000:]

    # The survivor took the lane over and ran the task again, from its memoized steps.
    [started] = entries(survivor, "event.started", key=key)
    assert started["attempt"] >= 2
    assert entries(survivor, "task.resumed", task=task_id)
    assert entries(survivor, "task.done", task=task_id)
    assert not entries(killed, "task.done", task=task_id)
    assert not entries(survivor, "tool.done", key=key)  # bump was not run again:
    assert entries(survivor, "tool.cached", key=key, tool="bump")  # its result was stored
    assert counter.count == 1  # the side effect happened exactly once
    task_calls = [r for r in model.requests if is_task(r.body)]
    assert sum(not has_tool_result(r.body) for r in task_calls) == 1  # replayed, not re-asked
    assert sum(has_tool_result(r.body) for r in task_calls) == 2  # the held one, asked again

    # Delivered once: one result message in the chat, the ledger row and the event done.
    assert len(results(telegram)) == 1
    shown = telegram.texts.in_chat(ASKER)
    assert [t for t in shown if t.startswith("✅ Task")] == [
        f"✅ Task {task_id} done: {GOAL}\n\n{FINAL}"
    ]
    assert STARTED in shown
    assert await ledger(pg_dsn) == [(task_id, "done", FINAL)]
    assert await inbox_status(pg_dsn, key) == ["done"]
    assert await inbox_status(pg_dsn, f"tg:{BOT_ID}:7000") == ["done"]
    assert telegram.token not in survivor.log.read_text()
