"""An approved tool call runs once, through presses, redeliveries and kill -9.

A real ``tether run`` subprocess polls the fake Telegram Bot API and runs the ``llm``
agent against the fake model, with ``charge`` (tests/plugins/waits/approval_counter.py): a
tool that needs approval and whose side effect is a request to a fake counter service,
so the counter is the proof. The asker writes in a DM (chat 42); the approval card goes
to an ops group (``agent.tools.approvals.to``), where ``access.admins`` names user 7 as
the one who may decide; a press there is a ``callback_query`` update like Telegram's,
on the card's own message, with the card's own button data.

The process is SIGKILLed (a) while the card waits for a press, (b) after the press was
accepted (its notice sent) and before the tool ran, (c) after the tool ran and before
the final answer; each time the restarted process ends with the counter at 1 and one
answer in the chat. Besides: approve and deny, the same press delivered twice, and a
press by someone who may not decide.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.counter import Counter
from tests.fakes.telegram_api import BOT_ID, FakeTelegram
from tests.plugins.waits.approval_counter import CARD, FINAL, script
from tests.support.config import db_rows, write_config
from tests.support.processes import Handlers, control_socket, spawn_run, subprocess_env
from tether.testing.model import Body, FakeModel

#: Every test here runs a real tether process; most kill it with SIGKILL.
pytestmark = [pytest.mark.crash, pytest.mark.slow]

ASKER, APPROVER, STRANGER = 42, 7, 8
OPS = -100900


def after_the_tool(body: Body) -> bool:
    return any(m.get("role") == "tool" for m in body["messages"])


@pytest.fixture
def fake(model: FakeModel) -> FakeModel:
    model.reply = script
    return model


class Tether:
    """The ``tether run`` subprocesses of one test, on one store, config and log."""

    def __init__(
        self, tmp_path: Path, telegram: FakeTelegram, model: FakeModel, counter: Counter
    ) -> None:
        self.tmp_path = tmp_path
        self.telegram = telegram
        self.log = tmp_path / "tether.log"
        self.config = write_config(
            tmp_path,
            plugins=["tests.plugins.waits.approval_counter:router"],
            platforms={
                "telegram": {
                    "token": telegram.token,
                    "base_url": telegram.base_url,
                    "poll_timeout": 1,
                    "rate_limits": False,
                }
            },
            agent={"handler": "llm", "tools": {"approvals": {"to": f"telegram:{OPS}"}}},
            access={"admins": [f"telegram:{APPROVER}"], "allow": ["*"]},
            llm=model.section(),
        )
        self.env = subprocess_env(
            TETHER_TEST_COUNTER=counter.url, TETHER_TEST_SOCKET=str(tmp_path / "ctl.sock")
        )
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await spawn_run(self.config, self.log, self.env)

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> None:
        """SIGTERM: the process drains and exits 0."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), 60)
        assert code == 0, self.log.read_text()[-3000:]
        assert self.telegram.token not in self.log.read_text()

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()

    # -- what the store says ---------------------------------------------------------

    def waits(self) -> list[tuple[str, str]]:
        """(status, decision) of each approval."""
        rows = db_rows(self.tmp_path, "SELECT status, answer FROM waits WHERE kind = 'approval'")
        return [(status, json.loads(answer or "{}").get("decision", "")) for status, answer in rows]

    def inbox(self, key: str) -> str:
        [(status,)] = db_rows(self.tmp_path, "SELECT status FROM inbox WHERE key = ?", key)
        return str(status)

    def steps(self, key: str) -> dict[str, Any]:
        rows = db_rows(self.tmp_path, "SELECT name, result FROM steps WHERE event_key = ?", key)
        return {name: json.loads(result) for name, result in rows}


@pytest.fixture
def tether(
    tmp_path: Path, telegram: FakeTelegram, fake: FakeModel, counter: Counter
) -> Iterator[Tether]:
    found = Tether(tmp_path, telegram, fake, counter)
    try:
        yield found
    finally:
        found.cleanup()


# -- the fake Telegram: the asker, the card, the presses ----------------------------------


def ask(telegram: FakeTelegram, text: str = "charge the customer 500") -> str:
    """The asker's DM; returns its event key."""
    update = telegram.push(message=telegram.message(ASKER, text))
    return f"tg:{BOT_ID}:{update['update_id']}"


def shown(telegram: FakeTelegram, chat: int) -> list[str]:
    return telegram.texts.in_chat(chat)


async def card_posted(telegram: FakeTelegram) -> None:
    await telegram.wait_for(lambda: any(t.startswith(CARD) for t in shown(telegram, OPS)), 60)


async def said(telegram: FakeTelegram, chat: int, prefix: str, count: int = 1) -> None:
    def enough() -> bool:
        return sum(t.startswith(prefix) for t in shown(telegram, chat)) >= count

    await telegram.wait_for(enough, 60)


def press(
    telegram: FakeTelegram, button: str, *, user: int = APPROVER, name: str = "Boss"
) -> dict[str, Any]:
    """Queue a press of ``button`` on the card, by ``user``, as Telegram sends it: the
    card's own message and its button's callback data; returns the update."""
    [(message_id, text)] = [
        (mid, text)
        for (chat, mid), text in telegram.texts.shown.items()
        if chat == OPS and text.startswith(CARD)
    ]
    [markup] = [s["reply_markup"] for s in telegram.sent if s["text"].startswith(CARD)]
    [data] = [
        b["callback_data"] for row in markup["inline_keyboard"] for b in row if b["text"] == button
    ]
    return telegram.push(
        callback_query={
            "id": f"cbq-{user}-{time.monotonic_ns()}",
            "from": {"id": user, "is_bot": False, "first_name": name},
            "chat_instance": "ci-ops",
            "data": data,
            "message": {
                "message_id": message_id,
                "date": int(time.time()),
                "chat": {"id": OPS, "type": "supergroup", "title": "Ops"},
                "from": {"id": BOT_ID, "is_bot": True, "first_name": "Tether"},
                "text": text,
            },
        }
    )


def answers(telegram: FakeTelegram) -> list[str]:
    """What the asker's chat shows."""
    return shown(telegram, ASKER)


@contextlib.asynccontextmanager
async def lane_gate(tmp_path: Path) -> AsyncIterator[Handlers]:
    async with control_socket(tmp_path / "ctl.sock") as handlers:
        yield handlers


# -- the tests ----------------------------------------------------------------------------


async def test_approve_runs_the_tool_once_and_the_answer_is_sent_once(
    tether: Tether, telegram: FakeTelegram, fake: FakeModel, counter: Counter
) -> None:
    await tether.start()
    key = ask(telegram)
    await card_posted(telegram)
    assert counter.count == 0 and tether.waits() == [("open", "")]
    assert tether.inbox(key) == "waiting"
    press(telegram, "Approve")
    await said(telegram, ASKER, FINAL)
    await tether.stop()
    assert counter.count == 1
    assert answers(telegram) == [FINAL]
    ops = shown(telegram, OPS)
    assert len(ops) == 2 and ops[0].startswith(CARD)
    assert ops[1].startswith("Approved by Boss: charge (")
    assert tether.waits() == [("answered", "approved")]
    assert tether.inbox(key) == "done"
    assert fake.calls == 2  # the first round was replayed from its step on the resumed run


async def test_deny_never_runs_the_tool_and_the_model_reads_the_denial(
    tether: Tether, telegram: FakeTelegram, fake: FakeModel, counter: Counter
) -> None:
    await tether.start()
    key = ask(telegram)
    await card_posted(telegram)
    press(telegram, "Deny")
    await said(telegram, ASKER, FINAL)
    await tether.stop()
    assert counter.count == 0
    [result] = fake.requests[-1].tool_results
    assert result["tool_call_id"] == "call-1"
    assert result["content"].startswith("denied by Boss")
    assert shown(telegram, OPS)[1].startswith("Denied by Boss: charge (")
    assert tether.steps(key)["tool:0:0"]["outcome"] == "denied"
    assert answers(telegram) == [FINAL]


async def test_killed_while_waiting_for_the_press_the_restart_takes_it(
    tether: Tether, telegram: FakeTelegram, counter: Counter
) -> None:
    await tether.start()
    key = ask(telegram)
    await card_posted(telegram)
    await tether.kill()
    assert counter.count == 0 and tether.waits() == [("open", "")]
    assert tether.inbox(key) == "waiting"  # left alone by recovery: it waits for a press

    await tether.start()
    press(telegram, "Approve")
    await said(telegram, ASKER, FINAL)
    await tether.stop()
    assert counter.count == 1
    assert answers(telegram) == [FINAL]
    ops = shown(telegram, OPS)
    assert [t.startswith(CARD) for t in ops] == [True, False]  # the card was not posted again
    assert tether.inbox(key) == "done"


async def test_killed_after_the_press_before_the_tool_runs_it_once_on_restart(
    tether: Tether, telegram: FakeTelegram, counter: Counter
) -> None:
    """The asker's lane is held by another of their messages, so the turn the press
    resumed waits behind it: the press is done (its notice sent), the tool not run."""
    async with lane_gate(tether.tmp_path) as gate:
        await tether.start()
        key = ask(telegram)
        await card_posted(telegram)
        ask(telegram, "hold the lane please")
        line, _writer = await asyncio.wait_for(gate.entered.get(), 60)
        assert line == "entered 1"
        press(telegram, "Approve")
        await said(telegram, OPS, "Approved by Boss")
        await tether.kill()
        assert counter.count == 0
        assert tether.waits() == [("answered", "approved")]
        assert tether.inbox(key) == "received"  # requeued with the decision, in the store
        assert "tool:0:0:started" not in tether.steps(key)

        await tether.start()
        line, writer = await asyncio.wait_for(gate.entered.get(), 60)
        assert line == "entered 2"  # the held message, recovered
        writer.write(b"go\n")
        await writer.drain()
        await said(telegram, ASKER, FINAL)
        await said(telegram, ASKER, "lane released")
        await tether.stop()
    assert counter.count == 1
    assert sorted(answers(telegram)) == sorted([FINAL, "lane released"])
    assert sum(t.startswith("Approved by") for t in shown(telegram, OPS)) == 1
    assert tether.steps(key)["tool:0:0"]["outcome"] == "done"


async def test_killed_after_the_tool_before_the_answer_is_not_run_again(
    tether: Tether, telegram: FakeTelegram, fake: FakeModel, counter: Counter
) -> None:
    fake.hold(after_the_tool)
    await tether.start()
    key = ask(telegram)
    await card_posted(telegram)
    press(telegram, "Approve")
    await fake.wait_for_requests(2, timeout=60)  # the tool ran; the answer is held
    await tether.kill()
    assert counter.count == 1
    assert tether.steps(key)["tool:0:0"]["outcome"] == "done"
    assert answers(telegram) == []

    fake.heal()
    await tether.start()
    await said(telegram, ASKER, FINAL)
    await tether.stop()
    assert counter.count == 1  # the stored result went to the model; no second charge
    assert answers(telegram) == [FINAL]
    assert fake.requests[-1].tool_results[0]["content"] == "charged 500: counter is 1"
    assert sum(t.startswith("Approved by") for t in shown(telegram, OPS)) == 1


async def test_the_same_press_delivered_twice_counts_once(
    tether: Tether, telegram: FakeTelegram, counter: Counter
) -> None:
    await tether.start()
    key = ask(telegram)
    await card_posted(telegram)
    update = press(telegram, "Approve")
    telegram.push_raw(dict(update))  # Telegram delivers it again: the same update_id
    await said(telegram, ASKER, FINAL)
    # both copies were fetched (and confirmed) by the gateway, not left in the fake
    await telegram.wait_for(lambda: telegram.confirmed.count(update["update_id"]) == 2, 60)
    await tether.stop()
    assert counter.count == 1
    assert answers(telegram) == [FINAL]
    assert sum(t.startswith("Approved by") for t in shown(telegram, OPS)) == 1
    press_key = f"tg:{BOT_ID}:{update['update_id']}"
    assert tether.inbox(press_key) == "done" and tether.inbox(key) == "done"


async def test_a_press_by_someone_who_may_not_decide_is_refused(
    tether: Tether, telegram: FakeTelegram, counter: Counter
) -> None:
    await tether.start()
    key = ask(telegram)
    await card_posted(telegram)
    press(telegram, "Approve", user=STRANGER, name="Mallory")
    await said(telegram, OPS, "Mallory, you may not decide this")
    assert counter.count == 0
    assert tether.waits() == [("open", "")] and tether.inbox(key) == "waiting"

    press(telegram, "Approve")  # the card still waits: its approver can still decide
    await said(telegram, ASKER, FINAL)
    await tether.stop()
    assert counter.count == 1
    assert answers(telegram) == [FINAL]
    ops = shown(telegram, OPS)
    assert len(ops) == 3 and ops[2].startswith("Approved by Boss")
