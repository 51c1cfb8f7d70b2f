"""kill -9 around ``ctx.ask``: a dialog survives a SIGKILL after each question.

A real ``tether run`` subprocess on SQLite polls the fake Telegram Bot API
(tests/fakes/telegram_api.py) with the dialog plugin (tests/plugins/waits/dialog.py): ``/trip``
asks three questions (the second answered by a press on its buttons) and replies a
summary of the three answers; ``/quick`` asks with a 2 s deadline and replies its own
text when it expires; anything else is answered ``new turn: TEXT``, so an answer taken
for a new turn shows. The process is killed with SIGKILL after each question was sent
(and recorded as sent), the answer is queued at the fake while it is down, and a fresh
process picks the dialog up from the store. What the fake was sent is the proof: each
question once, no extra reply, the right summary; the ``waits`` rows say who answered.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.telegram_api import BOT_ID, FakeTelegram
from tests.plugins.waits.dialog import CITY, EXPIRED, INTRO, QUICK, SEATS, summary, when_question
from tests.support.config import db_rows, inbox_rows, write_config
from tests.support.processes import control_socket, spawn_run, subprocess_env

#: Every test here kills a real tether process with SIGKILL.
pytestmark = [pytest.mark.crash, pytest.mark.slow]

CHAT = 42  # a private chat: the person's id is the chat's
#: Long enough for a cold start of the subprocess on a loaded CI machine.
TIMEOUT = 60.0


class Tether:
    """One ``tether run`` after another on the same config and store."""

    def __init__(self, tmp_path: Path, fake: FakeTelegram) -> None:
        self.tmp_path = tmp_path
        self.fake = fake
        self.log = tmp_path / "tether.log"
        self.config = write_config(
            tmp_path,
            plugins=["tests.plugins.waits.dialog:router"],
            platforms={
                "telegram": {
                    "token": fake.token,
                    "base_url": fake.base_url,
                    "poll_timeout": 1,
                    "rate_limits": False,
                }
            },
        )
        self.proc: asyncio.subprocess.Process | None = None
        self.runs = 0

    async def start(self, **env: str) -> None:
        assert self.proc is None
        self.proc = await spawn_run(self.config, self.log, subprocess_env(**env))
        self.runs += 1

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()
        self.proc = None

    async def stop(self) -> None:
        """SIGTERM, and a clean exit."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(self.proc.wait(), TIMEOUT) == 0, self.log.read_text()[-3000:]
        self.proc = None

    async def close(self) -> None:
        if self.proc is not None:
            await self.kill()

    async def sent(self, text: str) -> None:
        """Until ``text`` was sent to the fake AND its outbox row is marked ``sent`` (so a
        kill now is after the send was recorded, not in the middle of it)."""
        await self.fake.wait_for(lambda: text in texts(self.fake), TIMEOUT)
        await until(lambda: text in self.recorded(), f"{text!r} recorded as sent")

    def recorded(self) -> list[str]:
        rows = db_rows(self.tmp_path, "SELECT payload FROM outbox WHERE status = 'sent'")
        return [json.loads(payload)["text"] for (payload,) in rows]

    async def settled(self) -> None:
        """Until every event is done and every reply sent: nothing left to happen."""

        def quiet() -> bool:
            inbox = {status for _key, status in inbox_rows(self.tmp_path)}
            outbox = db_rows(self.tmp_path, "SELECT status FROM outbox")
            return inbox <= {"done"} and all(status == "sent" for (status,) in outbox)

        await until(quiet, "every event done and every reply sent")

    def waits(self) -> list[dict[str, Any]]:
        rows = db_rows(
            self.tmp_path,
            "SELECT position, question, status, answer, answered_by FROM waits"
            " ORDER BY event_key, position",
        )
        return [
            {
                "position": position,
                "question": question,
                "status": status,
                "answer": json.loads(answer) if answer else None,
                "answered_by": answered_by,
            }
            for position, question, status, answer, answered_by in rows
        ]


async def until(condition: Any, what: str, timeout: float = TIMEOUT) -> None:
    """Poll a condition on the store (a file another process writes) with a deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"never: {what}")
        await asyncio.sleep(0.02)


def texts(fake: FakeTelegram) -> list[str]:
    return [str(sent["text"]) for sent in fake.sent]


def press_data(fake: FakeTelegram, text: str, label: str) -> str:
    """The callback data of button ``label`` under the message ``text`` the bot sent."""
    [message] = [sent for sent in fake.sent if sent["text"] == text]
    markup = message["reply_markup"]
    if isinstance(markup, str):
        markup = json.loads(markup)
    for row in markup["inline_keyboard"]:
        for button in row:
            if button["text"] == label:
                return str(button["callback_data"])
    raise AssertionError(f"no button {label!r} under {text!r}")


def key_of(update: dict[str, Any]) -> str:
    return f"tg:{BOT_ID}:{update['update_id']}"


def no_dead_letters(tmp_path: Path) -> None:
    assert db_rows(tmp_path, "SELECT key, error FROM dead_letters") == []


@pytest.fixture
async def tether(tmp_path: Path, fake: FakeTelegram) -> Any:
    runs = Tether(tmp_path, fake)
    try:
        yield runs
    finally:
        await runs.close()


async def test_a_dialog_killed_after_each_question_completes_with_the_right_answers(
    tether: Tether, fake: FakeTelegram, tmp_path: Path
) -> None:
    when = when_question("Paris")
    await tether.start()
    trip = fake.push(message=fake.message(CHAT, "/trip"))
    await tether.sent(CITY)
    await tether.kill()

    city = fake.push(message=fake.message(CHAT, "Paris"))  # while the gateway is down
    await tether.start()
    await tether.sent(when)
    await tether.kill()

    data = press_data(fake, when, "tomorrow")
    pressed = fake.press(data, chat_id=CHAT, query_id="cbq-tomorrow")
    await tether.start()
    await tether.sent(SEATS)
    # a press its handler does not answer is answered bare after PRESS_GRACE (1 s)
    await fake.wait_for(lambda: "cbq-tomorrow" in fake.answered)
    await tether.kill()

    seats = fake.push(message=fake.message(CHAT, "3"))
    await tether.start()
    done = summary("Paris", "tomorrow", "3")
    await tether.sent(done)
    await tether.settled()
    await tether.stop()

    # Each question once, the summary right, and nothing else: no answer became a turn.
    assert texts(fake) == [INTRO, CITY, when, SEATS, done]
    assert data.startswith("tw:")
    assert "cbq-tomorrow" in fake.answered  # the press was acknowledged to Telegram
    # Each wait was answered once, by its own answering event.
    waits = tether.waits()
    assert [(w["position"], w["status"]) for w in waits] == [
        (0, "answered"),
        (1, "answered"),
        (2, "answered"),
    ]
    assert [w["answered_by"] for w in waits] == [key_of(city), key_of(pressed), key_of(seats)]
    assert [w["question"] for w in waits] == [CITY, when, SEATS]
    assert waits[1]["answer"]["data"] == "tomorrow"
    # Four events (the command, two messages and a press), all done; replies all sent.
    events = [trip, city, pressed, seats]
    assert inbox_rows(tmp_path) == [(key_of(update), "done") for update in events]
    no_dead_letters(tmp_path)
    assert tether.runs == 4


async def test_killed_after_each_answer_was_accepted_before_the_turn_resumed(
    tether: Tether, fake: FakeTelegram, tmp_path: Path
) -> None:
    """Each time, the wait is ended (the answer stored, the turn put back to run) but the
    answering event is not yet checkpointed when the process dies: after the restart
    that event runs again and must not answer anything again — not the next question,
    not as a new turn, and a press not with "answered already"."""
    sock = tmp_path / "answers.sock"
    when = when_question("Paris")
    async with control_socket(sock) as held:

        async def killed_once_accepted(update: dict[str, Any]) -> None:
            line, _writer = await asyncio.wait_for(held.entered.get(), TIMEOUT)
            assert line == f"answered {key_of(update)}"
            await tether.kill()

        await tether.start(TETHER_TEST_SOCKET=str(sock))
        trip = fake.push(message=fake.message(CHAT, "/trip"))
        await tether.sent(CITY)
        city = fake.push(message=fake.message(CHAT, "Paris"))
        await killed_once_accepted(city)

        [first] = tether.waits()
        assert (first["status"], first["answered_by"]) == ("answered", key_of(city))
        statuses = dict(inbox_rows(tmp_path))
        assert statuses[key_of(trip)] == "received"  # ready to resume, not yet resumed
        assert statuses[key_of(city)] == "running"  # the answer: not checkpointed
        assert when not in texts(fake)

        await tether.start(TETHER_TEST_SOCKET=str(sock))
        await tether.sent(when)
        pressed = fake.press(press_data(fake, when, "today"), chat_id=CHAT, query_id="cbq-1")
        await killed_once_accepted(pressed)

        await tether.start(TETHER_TEST_SOCKET=str(sock))
        await tether.sent(SEATS)
        seats = fake.push(message=fake.message(CHAT, "2"))
        await killed_once_accepted(seats)

        await tether.start(TETHER_TEST_SOCKET=str(sock))
        done = summary("Paris", "today", "2")
        await tether.sent(done)
        await tether.settled()
        await tether.stop()

    assert texts(fake) == [INTRO, CITY, when, SEATS, done]
    waits = tether.waits()
    assert [w["status"] for w in waits] == ["answered"] * 3
    assert [w["answered_by"] for w in waits] == [key_of(city), key_of(pressed), key_of(seats)]
    events = [trip, city, pressed, seats]
    assert inbox_rows(tmp_path) == [(key_of(update), "done") for update in events]
    # Each answer ran twice (held, then after the restart); the turn resumed three times.
    attempts = dict(db_rows(tmp_path, "SELECT key, attempts FROM inbox"))
    assert [attempts[key_of(update)] for update in events[1:]] == [2, 2, 2]
    no_dead_letters(tmp_path)


async def test_a_deadline_that_passed_while_down_expires_once_after_the_restart(
    tether: Tether, fake: FakeTelegram, tmp_path: Path
) -> None:
    await tether.start()
    fake.push(message=fake.message(CHAT, "/quick"))
    await tether.sent(QUICK)
    await tether.kill()
    [(deadline,)] = db_rows(tmp_path, "SELECT deadline FROM waits")
    [wait] = tether.waits()
    assert wait["status"] == "open"  # killed before the deadline: nothing expired it

    # The deadline passes while no gateway runs (waiting for the clock is the event).
    await asyncio.sleep(max(0.0, deadline - time.time()) + 0.05)
    await tether.start()
    await tether.sent(EXPIRED)
    await tether.settled()
    await tether.stop()
    [wait] = tether.waits()
    assert (wait["status"], wait["answered_by"], wait["answer"]) == ("expired", "expiry", None)

    # A second restart finds nothing due: its first look at the deadlines ran before its
    # poller started, so once a new message is answered nothing more can come of it.
    await tether.start()
    fake.push(message=fake.message(CHAT, "ping"))
    await tether.sent("new turn: ping")
    await tether.settled()
    await tether.stop()

    assert texts(fake) == [QUICK, EXPIRED, "new turn: ping"]
    [wait] = tether.waits()
    assert (wait["status"], wait["answered_by"]) == ("expired", "expiry")
    no_dead_letters(tmp_path)
