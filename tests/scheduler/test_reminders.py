"""Reminders made in chat: the model calls ``schedule``; the reminder fires at its time
through the scheduler's ledger and the pipeline, once (also across a SIGKILL and a
restart); ``cancel_schedule`` and ``tether jobs cancel`` stop a recurring one.

The model is the fake OpenAI-compatible server scripting ``tool_calls``; the chat is
the loopback adapter in-process, or the console of a real ``tether run`` subprocess.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.config import db_rows, make_settings, write_config
from tests.support.gateway import running
from tests.support.processes import TETHER, spawn, subprocess_env
from tether.adapters.loopback import LoopbackAdapter
from tether.errors import ToolError
from tether.events import Conversation, Event
from tether.gateway.app import Gateway
from tether.gateway.handler.context import Context, Turn
from tether.gateway.tools.reminders import _schedule, parse_at
from tether.memory.inmemory import MemoryStore
from tether.scheduler.reminders import MARK, Reminders, one_off_cron, reminder_id
from tether.testing.model import Body, FakeModel, asks_for, tool_call

SET = "Reminder set."
CANCELLED = "Cancelled it."


def tool_results(body: Body) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]


def last_user(body: Body) -> str:
    return [m for m in body["messages"] if m.get("role") == "user"][-1]["content"]


def agent(body: Body) -> str | Body:
    """Schedules or cancels as the last message asks, then confirms."""
    results = tool_results(body)
    text = last_user(body)
    if text.startswith("cancel "):
        if results and "cancelled" in results[-1]:
            return CANCELLED
        return asks_for(tool_call("cancel_schedule", {"id": text.split()[1]}))
    if results:
        return SET + " " + results[-1]
    arguments = json.loads(text)  # the test writes the tool's arguments as the message
    return asks_for(tool_call("schedule", arguments, id="call-1"))


@pytest.fixture
def fake(model: FakeModel) -> FakeModel:
    """The shared fake (model, tests/fixtures.py), as this module uses it."""
    model.reply = agent
    return model


def llm(fake: FakeModel) -> dict[str, Any]:
    return fake.section()


async def said(loop: LoopbackAdapter, text: str) -> None:
    """Until a message with ``text`` was delivered (fires keep arriving meanwhile)."""
    changed = loop._changed
    async with asyncio.timeout(30), changed:
        await changed.wait_for(lambda: any(d.message.text == text for d in loop.sent))


def reminder_rows(tmp_path: Path) -> list[tuple[Any, ...]]:
    return db_rows(tmp_path, "SELECT id, status, cron, at FROM reminders ORDER BY created")


def fires(tmp_path: Path, rid: str) -> list[tuple[Any, ...]]:
    return db_rows(
        tmp_path, "SELECT key, status FROM inbox WHERE key LIKE ? ORDER BY seq", f"cron:{rid}:%"
    )


@pytest.mark.slow
async def test_a_reminder_made_in_chat_fires_once_at_its_time(
    tmp_path: Path, fake: FakeModel
) -> None:
    settings = make_settings(tmp_path, llm=llm(fake), agent={"handler": "llm"})
    async with running(settings) as (gateway, loop):
        asked = await loop.say(json.dumps({"text": "stretch", "at": "+2s"}))
        sent = await loop.wait_for_sent(1)
        assert sent[0].message.text.startswith(SET + " scheduled r-")
        sent = await loop.wait_for_sent(2, timeout=60)
        assert sent[1].message.text == MARK + "stretch"
        assert sent[1].message.target.key == "loopback:1"
        await gateway.drain()
        await gateway.reminders.sync()  # type: ignore[union-attr]
        assert gateway.reminders.scheduler is None  # type: ignore[union-attr]

    [(rid, status, cron, at)] = reminder_rows(tmp_path)
    assert rid == reminder_id(asked.key, "tool:0:0")  # the event and the call's position
    assert (status, cron) == ("done", None) and at.endswith("Z")
    assert fires(tmp_path, rid) == [(f"cron:{rid}:{at}", "done")]
    # The tool offered the three schedule tools beside the memory ones.
    assert {"schedule", "list_schedules", "cancel_schedule"} <= set(fake.requests[0].tools)


@pytest.mark.slow
async def test_cancel_schedule_stops_a_recurring_one(tmp_path: Path, fake: FakeModel) -> None:
    every_second = {"handler": "llm", "tools": {"reminders": {"min_interval": 1}}}
    settings = make_settings(tmp_path, llm=llm(fake), agent=every_second)
    async with running(settings) as (gateway, loop):
        await loop.say(json.dumps({"text": "tick", "cron": "* * * * * *"}))  # every second
        sent = await loop.wait_for_sent(3, timeout=60)  # the answer, then two fires
        rid = re.search(r"(r-[0-9a-f]+)", sent[0].message.text)
        assert rid is not None
        assert [d.message.text for d in sent[1:3]] == [MARK + "tick"] * 2
        await loop.say(f"cancel {rid.group(1)}")
        await said(loop, CANCELLED)
        await gateway.reminders.sync()  # type: ignore[union-attr]
        assert gateway.reminders.scheduler is None  # type: ignore[union-attr]
        await gateway.drain()
        fired = len(fires(tmp_path, rid.group(1)))
    assert reminder_rows(tmp_path)[0][:2] == (rid.group(1), "cancelled")
    assert len(fires(tmp_path, rid.group(1))) == fired


async def test_another_chat_can_neither_list_nor_cancel_it(tmp_path: Path, fake: FakeModel) -> None:
    settings = make_settings(tmp_path, llm=llm(fake), agent={"handler": "llm"})
    async with running(settings) as (gateway, loop):
        await loop.say(json.dumps({"text": "mine", "cron": "0 9 * * 1-5"}), chat="1")
        sent = await loop.wait_for_sent(1)
        rid = re.search(r"(r-[0-9a-f]+)", sent[0].message.text)
        assert rid is not None
        await loop.say(f"cancel {rid.group(1)}", chat="2")
        await gateway.drain()
    results = tool_results(fake.requests[-1].body)
    assert results and "no active schedule" in results[-1]
    assert reminder_rows(tmp_path)[0][:2] == (rid.group(1), "active")


@pytest.mark.slow
async def test_tether_jobs_lists_and_cancels_a_chat_made_job(
    tmp_path: Path, fake: FakeModel
) -> None:
    config = write_config(tmp_path, llm=llm(fake), agent={"handler": "llm"})
    settings = make_settings(tmp_path, llm=llm(fake), agent={"handler": "llm"})
    async with running(settings) as (gateway, loop):
        await loop.say(json.dumps({"text": "water the plants", "cron": "0 9 * * 1-5"}))
        await loop.wait_for_sent(1)
        await gateway.drain()
        [(rid, *_)] = reminder_rows(tmp_path)
        listed = await asyncio.to_thread(
            subprocess.run, [TETHER, "jobs", "list", "-c", str(config)], capture_output=True
        )
        assert listed.returncode == 0, listed.stderr.decode()
        assert rid in listed.stdout.decode() and "0 9 * * 1-5" in listed.stdout.decode()
        ran = await asyncio.to_thread(
            subprocess.run, [TETHER, "jobs", "run", rid, "-c", str(config)], capture_output=True
        )
        assert ran.returncode == 0 and f"fired cron:{rid}:manual:" in ran.stdout.decode()
        sent = await loop.wait_for_sent(2, timeout=60)  # the sweep picks the fire up
        assert sent[1].message.text == MARK + "water the plants"
        # Beside the running gateway, as an operator would.
        done = await asyncio.to_thread(
            subprocess.run, [TETHER, "jobs", "cancel", rid, "-c", str(config)], capture_output=True
        )
        assert done.returncode == 0, done.stderr.decode()
        assert "cancelled" in done.stdout.decode()
        await gateway.reminders.sync()  # type: ignore[union-attr]  # its next look at the store
        assert gateway.reminders.scheduler is None  # type: ignore[union-attr]
    assert reminder_rows(tmp_path)[0][:2] == (rid, "cancelled")
    again = await asyncio.to_thread(
        subprocess.run, [TETHER, "jobs", "cancel", rid, "-c", str(config)], capture_output=True
    )
    assert again.returncode == 1 and b"no active job" in again.stderr


# -- across a SIGKILL -------------------------------------------------------------------


def after_the_tool(body: Body) -> bool:
    return bool(tool_results(body))


@pytest.mark.crash
@pytest.mark.slow
async def test_made_then_killed_then_restarted_it_fires_exactly_once(
    tmp_path: Path, fake: FakeModel
) -> None:
    config = write_config(
        tmp_path,
        platforms={"console": {"enabled": True}},
        agent={"handler": "llm"},
        llm=llm(fake),
    )
    env = subprocess_env()
    fake.hold(after_the_tool)  # the tool ran (the reminder is stored); the answer waits
    first = await spawn("run", config, env)
    assert first.stdin is not None
    first.stdin.write(json.dumps({"text": "stretch", "at": "+6s"}).encode() + b"\n")
    await first.stdin.drain()
    await fake.wait_for_requests(2, timeout=60)
    first.send_signal(signal.SIGKILL)
    await first.wait()
    [(rid, status, _cron, at)] = reminder_rows(tmp_path)
    assert status == "active" and fires(tmp_path, rid) == []

    fake.heal()
    second = await spawn("run", config, env)
    assert second.stdout is not None
    try:
        answer = await asyncio.wait_for(second.stdout.readline(), 60)
        reminded = await asyncio.wait_for(second.stdout.readline(), 60)
    except TimeoutError:  # say what the restarted gateway did instead
        second.kill()
        _out, err = await second.communicate()
        raise AssertionError(err.decode()[-4000:]) from None
    second.send_signal(signal.SIGTERM)
    out, err = await asyncio.wait_for(second.communicate(), 60)
    assert second.returncode == 0, err.decode()[-2000:]
    assert answer.decode().startswith(SET + f" scheduled {rid}")  # the stored tool result
    assert reminded.decode().strip() == MARK + "stretch"
    assert out == b""  # nothing more: no second fire, no second answer
    assert reminder_rows(tmp_path)[0][1] == "done"
    assert fires(tmp_path, rid) == [(f"cron:{rid}:{at}", "done")]
    assert db_rows(tmp_path, "SELECT count(*) FROM reminders") == [(1,)]


# -- what the model may write -------------------------------------------------------------

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_times_the_model_may_give() -> None:
    assert parse_at("+10m", "UTC", NOW) == NOW + timedelta(minutes=10)
    assert parse_at("+1h30m", "UTC", NOW) == NOW + timedelta(hours=1, minutes=30)
    assert parse_at("2026-12-01T09:00", "Europe/Berlin", NOW) == datetime(
        2026, 12, 1, 8, 0, tzinfo=UTC
    )
    assert parse_at("2026-12-01T09:00:00Z", "Europe/Berlin", NOW).hour == 9
    for bad, says in [
        ("2026-11-30T11:00Z", "in the past"),
        ("+400d", "days ahead"),
        ("tomorrow", "ISO-8601"),
        ("+", "ISO-8601"),
    ]:
        with pytest.raises(ToolError, match=says):
            parse_at(bad, "UTC", NOW)


def test_a_one_off_is_a_crontab_line_for_its_utc_time() -> None:
    assert one_off_cron(datetime(2026, 12, 1, 9, 5, 7, tzinfo=UTC)) == "7 5 9 1 12 *"


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    at=st.one_of(
        st.none(), st.text(max_size=40), st.from_regex(r"\+\d{1,9}[dhms]", fullmatch=True)
    ),
    cron=st.one_of(
        st.none(),
        st.text(max_size=40),
        st.lists(st.sampled_from(["*", "*/5", "1-5", "0", "60", "7", "mon", ","]), max_size=7).map(
            " ".join
        ),
    ),
    timezone=st.one_of(st.none(), st.sampled_from(["UTC", "Europe/Berlin", "Mars/Olympus", ""])),
    text=st.text(max_size=30),
)
def test_schedule_arguments_never_crash(
    at: str | None, cron: str | None, timezone: str | None, text: str
) -> None:
    """Whatever the model writes, ``schedule`` answers with a reminder or a ToolError."""
    outcome = asyncio.run(try_schedule(text=text, at=at, cron=cron, timezone=timezone))
    assert outcome in ("scheduled", "refused")


async def try_schedule(**arguments: Any) -> str:
    store = MemoryStore()
    await store.open()
    chat = Conversation(platform="test", chat_id="1")
    event = Event(key="test:1:1", platform="test", conversation=chat, text="hi")
    ctx = Context(event, "test:1", 1, structlog.get_logger("test"), Turn(store))
    try:
        await _schedule(Reminders(store), ctx, **arguments)
    except ToolError:
        return "refused"
    finally:
        await store.close()
    [made] = await store.reminders()
    assert (made.cron is None) != (made.at is None)
    return "scheduled"


def test_a_gateway_without_its_scheduler_offers_no_schedule_tools(
    tmp_path: Path, fake: FakeModel
) -> None:
    settings = make_settings(tmp_path, llm=llm(fake), agent={"handler": "llm"})
    gateway = Gateway(settings, {}, scheduler=False)
    names = [n for s in gateway.toolbox.sources if hasattr(s, "names") for n in s.names()]
    assert gateway.reminders is None and "schedule" not in names
    assert "remember" in names


async def test_after_downtime_a_late_one_off_fires_once_and_a_too_late_one_is_missed(
    tmp_path: Path,
) -> None:
    """Made before a stop, due while down: within grace (12 h) it fires at the start,
    once; past grace it is marked done without a fire (``reminder.missed``)."""
    import structlog

    from tether.memory.sqlite import SqliteStore
    from tether.scheduler.jobs import decided_cursor
    from tether.scheduler.reminders import new_reminder

    now = datetime.now(UTC)
    store = SqliteStore(str(tmp_path / "tether.db"))
    await store.open()
    for name, due in (("late", now - timedelta(hours=1)), ("lost", now - timedelta(hours=13))):
        made = new_reminder(
            reminder_id=f"r-{name}",
            conversation="loopback:1",
            target="loopback:1",
            text=name,
            cron=None,
            at=due,
            timezone="UTC",
            event_key=f"e-{name}",
        )
        await store.add_reminder(made)
        await store.set_cursor(decided_cursor(made.id), (due - timedelta(hours=1)).isoformat())
    await store.close()

    with structlog.testing.capture_logs() as logs:
        async with running(make_settings(tmp_path)) as (gateway, loop):
            sent = await loop.wait_for_sent(1, timeout=60)
            await gateway.drain()
            await gateway.reminders.sync()  # type: ignore[union-attr]
    assert [d.message.text for d in sent] == [MARK + "late"]
    assert len(fires(tmp_path, "r-late")) == 1 and fires(tmp_path, "r-lost") == []
    assert [row[:2] for row in reminder_rows(tmp_path)] == [("r-late", "done"), ("r-lost", "done")]
    assert [e["reminder"] for e in logs if e["event"] == "reminder.missed"] == ["r-lost"]
