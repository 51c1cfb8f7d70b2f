"""Reminders made in chat are bounded (issue 38, item 5): a recurring one may fire at
most every ``min_interval``, a chat and a person hold at most their cap of active ones,
a reminder goes into the running scheduler without a rebuild, and in a group only its
maker or one of the bot's admins cancels it from chat.

The model is the fake OpenAI-compatible server scripting ``tool_calls`` (300 of them in
one answer, where it matters); the chat is the loopback adapter in-process.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from tests.support.config import db_rows, make_settings
from tests.support.gateway import running
from tether.config import load_text
from tether.config.tools import RemindersConfig
from tether.cron import Schedule
from tether.errors import ConfigError, ToolError
from tether.events import Conversation, Event, Sender
from tether.gateway.handler.context import Context, Turn
from tether.gateway.tools.reminders import _schedule
from tether.memory.inmemory import MemoryStore
from tether.memory.store import Store
from tether.scheduler.bounds import Refused, shortest_gap
from tether.scheduler.reminders import Reminders, new_reminder
from tether.testing.model import Body, FakeModel, asks_for, tool_call

# -- the flood of one message -----------------------------------------------------------


def tool_results(body: Body) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]


def flood(body: Body) -> str | Body:
    """300 every-second reminders in one answer; then what the tools said."""
    if tool_results(body):
        return "Done."
    calls = [
        tool_call("schedule", {"text": f"ping {n}", "cron": "* * * * * *"}, id=f"c{n}")
        for n in range(300)
    ]
    return asks_for(*calls)


def stored(tmp_path: Path) -> int:
    [(count,)] = db_rows(tmp_path, "SELECT count(*) FROM reminders")
    return int(count)


@pytest.mark.slow
async def test_300_every_second_reminders_are_refused_by_the_cadence_and_then_the_cap(
    tmp_path: Path, model: FakeModel
) -> None:
    """By default an every-second line is refused outright; where an operator allows it
    (``min_interval: 1``), the chat's cap stops the flood after its fifth: the model
    reads why as each refused call's result, and at most the cap is stored."""
    model.reply = flood
    roomy = model.section(context_tokens=200_000)  # 300 calls and results, read back
    settings = make_settings(tmp_path, llm=roomy, agent={"handler": "llm"})
    async with running(settings) as (gateway, loop):
        await loop.say("remind me every second, 300 times")
        await loop.wait_for_sent(1, timeout=60)
        await gateway.drain()
    results = tool_results(model.requests[-1].body)
    assert len(results) == 300 and stored(tmp_path) == 0
    assert all("fires every 1s at its closest" in result for result in results)
    assert "at most every 60s (agent.tools.reminders.min_interval)" in results[0]

    (tmp_path / "allowed").mkdir()
    bounds = {"min_interval": 1, "per_chat": 5, "per_person": 100}
    agent = {"handler": "llm", "tools": {"reminders": bounds}}
    allowed = make_settings(tmp_path / "allowed", llm=roomy, agent=agent)
    model.requests.clear()
    async with running(allowed) as (gateway, loop):
        await loop.say("remind me every second, 300 times")
        await loop.wait_for_sent(1, timeout=60)
        made = len(await gateway.store.reminders())
    results = tool_results(model.requests[-1].body)
    assert made == 5 and stored(tmp_path / "allowed") == 5
    assert all(result.startswith("scheduled r-") for result in results[:5])
    refusal = "error: not scheduled: this chat already has 5 active reminders"
    assert all(result.startswith(refusal) for result in results[5:])
    assert "agent.tools.reminders.per_chat" in results[5]


# -- the caps, called as the tool loop calls the tool ---------------------------------


def context(store: MemoryStore, *, chat: str, user: str, n: int) -> Context:
    conversation = Conversation(platform="test", chat_id=chat)
    event = Event(
        key=f"test:{chat}:{n}",
        platform="test",
        conversation=conversation,
        sender=Sender(id=user),
        text="remind me",
    )
    return Context(event, f"test:{chat}", 1, structlog.get_logger("test"), Turn(store))


async def test_a_person_holds_their_cap_over_every_chat_and_a_rerun_is_never_refused() -> None:
    store = MemoryStore()
    await store.open()
    reminders = Reminders(store)
    limits = RemindersConfig(per_chat=10, per_person=2)

    async def schedule(chat: str, user: str, n: int) -> str:
        ctx = context(store, chat=chat, user=user, n=n)
        return await _schedule(reminders, ctx, "stretch", "+1h", None, None, limits)

    try:
        await schedule("1", "ana", 0)
        await schedule("2", "ana", 1)
        with pytest.raises(ToolError, match=r"this person already has 2 active .*per_person"):
            await schedule("3", "ana", 2)
        await schedule("3", "bo", 3)  # someone else in chat 3 is not held to Ana's cap
        # A re-run of a turn that made one (the same event and call) finds it: no refusal.
        assert (await schedule("1", "ana", 0)).startswith("scheduled r-")
        assert await store.count_reminders(sender="test:ana") == 2
        assert await store.count_reminders(target="test:3") == 1
        [first, *_] = await store.reminders()
        await reminders.cancel(first.id)  # a cancelled one frees its place
        assert await store.count_reminders(sender="test:ana") == 1
    finally:
        await store.close()


async def test_every_store_keeps_the_maker_and_counts_a_chats_and_a_persons_reminders(
    store: Store,
) -> None:
    def made(n: int, target: str, sender: str) -> Any:
        return replace(daily(n), target=target, sender=sender, created=float(n))

    for n, (target, sender) in enumerate(
        [("t:1", "t:ana"), ("t:1", "t:bo"), ("t:2", "t:ana"), ("t:2", "")]
    ):
        await store.add_reminder(made(n, target, sender))
    assert (await store.reminder("r-0")).sender == "t:ana"  # type: ignore[union-attr]
    assert [r.id for r in await store.reminders(target="t:2")] == ["r-2", "r-3"]
    assert await store.count_reminders(target="t:1") == 2
    assert await store.count_reminders(sender="t:ana") == 2
    assert await store.count_reminders(sender="t:ana", limit=1) == 1  # up to the cap
    assert await store.finish_reminder("r-0", "done")
    assert await store.count_reminders(target="t:1") == 1
    assert await store.count_reminders(sender="t:ana") == 1
    assert await store.count_reminders(target="t:9") == 0
    with pytest.raises(ValueError, match="exactly one"):
        await store.count_reminders(target="t:1", sender="t:ana")


def test_the_bounds_are_config_keys_that_name_their_path() -> None:
    settings = load_text("agent: {tools: {reminders: {per_chat: 3, min_interval: 300}}}\n")
    assert settings.agent.tools.reminders == RemindersConfig(per_chat=3, min_interval=300)
    assert settings.agent.tools.enabled("schedule") and not settings.agent.tools.enabled(
        "reminders"
    )  # a section, not a tool
    for bad in ("per_chat: 0", "per_person: -1", "min_interval: 0.5", "max: 3"):
        with pytest.raises(ConfigError, match=r"agent\.tools\.reminders\."):
            load_text(f"agent: {{tools: {{reminders: {{{bad}}}}}}}\n")


# -- added and removed without a rebuild --------------------------------------------------


class Intake:
    """The gateway's inbox, as the scheduler sees it: the store's accept."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    async def accept(
        self, events: Sequence[Event], cursors: Mapping[str, str] | None = None
    ) -> list[bool]:
        rows = await self.store.accept([(e, e.conversation.key) for e in events], cursors)
        return [row is not None for row in rows]


def daily(n: int) -> Any:
    return new_reminder(
        reminder_id=f"r-{n}",
        conversation="test:1",
        target="test:1",
        text=f"daily {n}",
        cron="0 9 * * *",
        at=None,
        timezone="UTC",
        event_key=f"e-{n}",
    )


async def test_a_reminder_joins_the_running_scheduler_at_once_and_leaves_it_at_once() -> None:
    store = MemoryStore()
    await store.open()
    reminders = Reminders(store, interval=3600)  # no look at the store meanwhile
    await reminders.start(Intake(store))
    try:
        await reminders.add(daily(1))
        running = reminders.scheduler
        assert running is not None and running.next_fire("r-1") is not None
        await reminders.add(daily(2))
        assert reminders.scheduler is running  # the same scheduler: no rebuild
        assert running.next_fire("r-2") is not None
        await reminders.cancel("r-1")
        assert reminders.scheduler is running and running.next_fire("r-1") is None
        assert set(running.jobs) == {"r-2"}
        await reminders.cancel("r-2")
        assert reminders.scheduler is None  # no active reminder: no scheduler runs
    finally:
        await reminders.stop()
        await store.close()


async def test_a_change_made_elsewhere_is_applied_by_the_next_look_without_a_rebuild() -> None:
    """The CLI (another process) adds and cancels in the store; the periodic look adds
    and removes those jobs in the running scheduler."""
    store = MemoryStore()
    await store.open()
    reminders = Reminders(store, interval=3600)
    await reminders.start(Intake(store))
    try:
        await reminders.add(daily(1))
        running = reminders.scheduler
        await store.add_reminder(daily(2))
        assert await store.finish_reminder("r-1", "cancelled")
        await reminders.sync()
        assert reminders.scheduler is running and set(running.jobs) == {"r-2"}  # type: ignore[union-attr]
    finally:
        await reminders.stop()
        await store.close()


async def test_the_cap_holds_when_concurrent_turns_race_for_the_last_place() -> None:
    store = MemoryStore()
    await store.open()
    reminders = Reminders(store, interval=3600)
    limits = RemindersConfig(per_chat=3)
    try:
        made = [daily(n) for n in range(10)]
        outcomes = await asyncio.gather(
            *(reminders.add(r, limits) for r in made), return_exceptions=True
        )
        assert sum(not isinstance(o, Refused) for o in outcomes) == 3
        assert await store.count_reminders(target="test:1") == 3
    finally:
        await store.close()


# -- who cancels in a group ---------------------------------------------------------------


def member(body: Body) -> str | Body:
    """Schedules what a JSON message says, cancels on "cancel ID", lists on "list"."""
    results = tool_results(body)
    if results:
        return "OK: " + results[-1]
    text = [m for m in body["messages"] if m.get("role") == "user"][-1]["content"]
    if text.startswith("cancel "):
        return asks_for(tool_call("cancel_schedule", {"id": text.split()[1]}))
    if text == "list":
        return asks_for(tool_call("list_schedules"))
    return asks_for(tool_call("schedule", json.loads(text)))


@pytest.mark.slow
async def test_in_a_group_an_admin_cancels_another_members_reminder_and_a_member_cannot(
    tmp_path: Path, model: FakeModel
) -> None:
    model.reply = member
    settings = make_settings(
        tmp_path,
        llm=model.section(),
        agent={"handler": "llm"},
        access={"allow": ["*"], "admins": ["loopback:root"]},
    )
    group = {"chat": "g", "chat_type": "group"}
    async with running(settings) as (gateway, loop):

        async def say(user: str, text: str) -> str:
            before = len(loop.sent)
            await loop.say(text, user=user, **group)
            sent = await loop.wait_for_sent(before + 1, timeout=30)
            return str(sent[before].message.text)

        made = await say("alice", json.dumps({"text": "stand-up", "cron": "0 9 * * 1-5"}))
        found = re.search(r"(r-[0-9a-f]+)", made)
        assert found is not None
        rid = found.group(1)
        listed = await say("bob", "list")
        assert rid in listed and "(by loopback:alice)" in listed
        refused = await say("bob", f"cancel {rid}")
        assert "made by someone else (by loopback:alice)" in refused
        assert "only they or one of the bot's admins can cancel it" in refused
        assert (await gateway.store.reminder(rid)).status == "active"  # type: ignore[union-attr]
        cancelled = await say("root", f"cancel {rid}")
        assert cancelled == "OK: cancelled " + rid + ": stand-up"
        assert (await gateway.store.reminder(rid)).status == "cancelled"  # type: ignore[union-attr]

        mine = await say("alice", json.dumps({"text": "lunch", "at": "+2h"}))
        own = re.search(r"(r-[0-9a-f]+)", mine)
        assert own is not None
        assert (await say("alice", f"cancel {own.group(1)}")).startswith("OK: cancelled")
        # An admin elsewhere cannot reach into this chat from another one.
        other = json.dumps({"text": "other chat", "at": "+2h"})
        far = re.search(r"(r-[0-9a-f]+)", await say("alice", other))
        assert far is not None
        before = len(loop.sent)
        await loop.say(f"cancel {far.group(1)}", user="root", chat="dm-root")
        [*_, answer] = await loop.wait_for_sent(before + 1, timeout=30)
        assert "no active schedule" in answer.message.text


# -- how often a line fires ---------------------------------------------------------------


def test_the_shortest_gap_of_common_lines() -> None:
    gaps = {
        "* * * * * *": 1,
        "*/10 * * * * *": 10,
        "* * * * *": 60,
        "*/5 * * * *": 300,
        "0,30 * * * * *": 30,
        "0 9,17 * * *": 8 * 3600,
        "0 0,23 * * *": 3600,  # 23:00 and midnight, an hour apart
        "@hourly": 3600,
        "0 9 * * 1-5": 86_400,
        "*/60 * * * *": 3600,  # a step longer than its range: the first value alone
        "5/20 * * * *": 1200,
    }
    assert {line: shortest_gap(line) for line in gaps} == gaps


_START = datetime(2026, 1, 5, tzinfo=UTC)


def item(low: int, high: int) -> st.SearchStrategy[str]:
    number = st.integers(low, high)
    step = st.integers(1, high - low + 1)
    ranged = st.tuples(number, number).map(sorted)
    return st.one_of(
        st.just("*"),
        number.map(str),
        step.map(lambda k: f"*/{k}"),
        ranged.map(lambda r: f"{r[0]}-{r[1]}"),
        st.tuples(ranged, step).map(lambda p: f"{p[0][0]}-{p[0][1]}/{p[1]}"),
        st.tuples(number, step).map(lambda p: f"{p[0]}/{p[1]}"),
    )


def field(low: int, high: int) -> st.SearchStrategy[str]:
    return st.lists(item(low, high), min_size=1, max_size=3).map(",".join)


@pytest.mark.slow
@given(second=field(0, 59), minute=field(0, 59), hour=field(0, 23))
def test_the_shortest_gap_is_what_walking_the_real_trigger_finds(
    second: str, minute: str, hour: str
) -> None:
    """Whatever the second, minute and hour fields, the gap read from them is the closest
    two fires APScheduler's trigger gives over two whole days (walked up to 600 fires;
    a line that fires more often is checked on what was walked)."""
    line = f"{second} {minute} {hour} * * *"
    schedule = Schedule.parse(line)
    first = schedule.first_from(_START)
    assert first is not None
    fires = [first]
    while len(fires) < 600 and fires[-1] < _START + timedelta(days=2):
        upcoming = schedule.next_after(fires[-1])
        assert upcoming is not None
        fires.append(upcoming)
    walked = min((b - a).total_seconds() for a, b in pairwise(fires))
    if fires[-1] >= _START + timedelta(days=2):  # every fire of two days: the very gap
        assert shortest_gap(line) == walked
    else:  # too many to walk: never a gap wider than one seen (a refusal is never missed)
        assert shortest_gap(line) <= walked
