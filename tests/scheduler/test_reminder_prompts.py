"""Reminders that prompt the agent: the model calls ``schedule`` with ``prompt: true``
(its ``text`` is then the prompt); at its time the fire runs one agent turn in the
conversation that made it (its memory: the model sees that conversation's history; its
lane: the fire's inbox row is that conversation's), and the agent's answer is posted
once. Also across a SIGKILL
and a restart of a real ``tether run`` in between (issue 30's done-when).

The model is the fake OpenAI-compatible server; the chat is the loopback adapter
in-process, or the console of a real ``tether run`` subprocess.
"""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog

from tests.support.config import db_rows, make_settings, write_config
from tests.support.gateway import running
from tests.support.processes import spawn, subprocess_env
from tether.config.schema import AccessConfig
from tether.events import Conversation, Kind
from tether.gateway.builtin.access import Access
from tether.gateway.tools.reminders import as_person, sender_of
from tether.memory.inmemory import MemoryStore
from tether.scheduler.reminder_jobs import MARK, as_maker, to_job
from tether.scheduler.reminders import new_reminder
from tether.testing.model import Body, FakeModel, asks_for, tool_call

PROMPT = "Look up the weather in Berlin and tell me whether to take an umbrella."
#: What the test says for the model to call ``schedule`` with (see ``agent``).
ASK = json.dumps({"text": PROMPT, "prompt": True, "at": "+2s"})
SET = "Reminder set."


def last_user(body: Body) -> str:
    return str([m for m in body["messages"] if m.get("role") == "user"][-1]["content"])


def said_before(body: Body) -> list[str]:
    """The user messages the model was shown before the last one (the history)."""
    return [str(m["content"]) for m in body["messages"] if m.get("role") == "user"][:-1]


def agent(body: Body) -> str | Body:
    """A JSON message is the ``schedule`` call's arguments; the prompt is answered with
    who the history says is asking; anything else is greeted."""
    text = last_user(body)
    results = [str(m.get("content")) for m in body["messages"] if m.get("role") == "tool"]
    if text == PROMPT:
        names = [said.split()[-1] for said in said_before(body) if said.startswith("I am ")]
        return f"Take an umbrella, {names[-1] if names else 'whoever you are'}."
    if text.startswith("{"):
        if results:
            return SET + " " + results[-1]
        return asks_for(tool_call("schedule", json.loads(text), id="call-1"))
    return "Hello."


@pytest.fixture
def fake(model: FakeModel) -> FakeModel:
    model.reply = agent
    return model


def prompted(fake: FakeModel) -> list[Body]:
    """The model calls that carry the prompt as the person's words."""
    return [r.body for r in fake.requests if last_user(r.body) == PROMPT]


def fires(tmp_path: Path) -> list[tuple[Any, ...]]:
    return db_rows(
        tmp_path,
        "SELECT key, conversation, status FROM inbox WHERE key LIKE 'cron:r-%' ORDER BY seq",
    )


# -- in-process: the turn, its conversation, once --------------------------------------


@pytest.mark.slow
async def test_a_prompt_reminder_runs_one_agent_turn_in_the_users_group_session(
    tmp_path: Path, fake: FakeModel
) -> None:
    """Made by u7 in a group (per-user sessions): the fire's turn is u7's session, with
    u7's history and not u8's; its answer is posted in the group once, with no ⏰ text;
    the next turn of u7 sees the prompt and the answer in its memory."""
    settings = make_settings(tmp_path, llm=fake.section(), agent={"handler": "llm"})
    group: dict[str, Any] = {"chat": "g", "chat_type": "group"}
    with structlog.testing.capture_logs() as logs:
        async with running(settings) as (gateway, loop):
            await loop.say("I am Ada", user="u7", **group)
            await loop.say("I am Bob", user="u8", **group)
            await loop.wait_for_sent(2)
            await loop.say(ASK, user="u7", **group)
            sent = await loop.wait_for_sent(3)
            assert sent[2].message.text.startswith(SET + " scheduled r-")
            assert "prompt for the agent: " + PROMPT in sent[2].message.text
            sent = await loop.wait_for_sent(4, timeout=60)  # the fire's answer
            await gateway.drain()
            await loop.say("and now?", user="u7", **group)
            await loop.wait_for_sent(5)
            await gateway.drain()
            await gateway.reminders.sync()  # type: ignore[union-attr]

    assert sent[3].message.text == "Take an umbrella, Ada."
    assert sent[3].message.target.key == "loopback:g"
    assert not any(d.message.text.startswith(MARK) for d in loop.sent)
    [turn] = prompted(fake)  # one model call for the fire
    assert said_before(turn) == ["I am Ada", ASK]
    # The turn after it, in u7's session: the prompt and its answer are in the memory.
    later = fake.requests[-1].body
    assert last_user(later) == "and now?" and PROMPT in said_before(later)
    assert any(m.get("content") == "Take an umbrella, Ada." for m in later["messages"])
    [(key, conversation, status)] = fires(tmp_path)
    assert (conversation, status) == ("loopback:g:uu7", "done")
    [(rid, stored_prompt, reminder_status)] = db_rows(
        tmp_path, "SELECT id, prompt, status FROM reminders"
    )
    assert key.startswith(f"cron:{rid}:") and (stored_prompt, reminder_status) == (1, "done")
    [line] = [e for e in logs if e["event"] == "reminder.prompted"]
    assert (line["reminder"], line["conversation"]) == (rid, "loopback:g:uu7")


async def test_a_cancelled_prompt_reminder_fires_no_turn(tmp_path: Path, fake: FakeModel) -> None:
    """Its fire already queued (a manual run, as ``tether jobs run`` inserts one) while
    it is cancelled: nothing is posted and the model is not asked."""
    settings = make_settings(tmp_path, llm=fake.section(), agent={"handler": "llm"})
    made = prompt_reminder("loopback:1", "loopback:1", "loopback:u1")
    async with running(settings) as (gateway, loop):
        await gateway.store.add_reminder(made)
        await gateway.store.finish_reminder(made.id, "cancelled")
        fire = to_job(made).event(datetime.now(UTC), manual="test")
        with structlog.testing.capture_logs() as logs:
            assert await loop.deliver(fire) == [True]
            await gateway.drain()
    assert loop.sent == [] and prompted(fake) == []
    assert [e["reason"] for e in logs if e["event"] == "reminder.skipped"] == ["cancelled"]
    assert fires(tmp_path) == [(fire.key, "loopback:1", "done")]


# -- the fire event: its conversation and its person --------------------------------------


def prompt_reminder(conversation: str, target: str, sender: str, prompt: bool = True) -> Any:
    return new_reminder(
        reminder_id="r-test",
        conversation=conversation,
        target=target,
        text=PROMPT,
        cron="0 9 * * *",
        at=None,
        timezone="UTC",
        event_key="e-1",
        sender=sender,
        prompt=prompt,
    )


def test_a_prompt_fire_runs_in_the_session_that_made_it() -> None:
    now = datetime.now(UTC)
    cases = [  # (conversation, target, sender): made in ...
        ("telegram:-100:u7", "telegram:-100", "telegram:7"),  # a group, per-user sessions
        ("telegram:-100", "telegram:-100", "telegram:7"),  # a group, shared
        ("telegram:42", "telegram:42", "telegram:42"),  # a DM
        ("telegram:42", "telegram:42", ""),  # a YAML prompt job's turn: no person
    ]
    for conversation, target, sender in cases:
        fire = to_job(prompt_reminder(conversation, target, sender)).event(now)
        assert fire.session("per_user") == conversation, conversation
        assert fire.kind is Kind.CRON and fire.platform == "cron"
        assert fire.meta["prompt"] is True and fire.meta["sender"] == sender
        assert fire.text == PROMPT
    # A text reminder's fire is as before: the chat's, no person, no prompt.
    text = to_job(prompt_reminder("telegram:-100:u7", "telegram:-100", "telegram:7", False))
    plain = text.event(now)
    assert plain.sender is None and "prompt" not in plain.meta
    assert plain.session("per_user") == "telegram:-100" and plain.text == PROMPT
    chat = Conversation(platform="telegram", chat_id="-100")
    assert as_maker(chat, "telegram:7", "telegram:-100:u9") == {
        "sender": as_maker(chat, "telegram:7", "telegram:-100")["sender"],
        "conversation": chat,  # not the maker's per-user session: the chat's
    }


async def test_in_a_prompts_turn_the_reminder_tools_act_for_its_maker() -> None:
    """The fire is on the trusted ``cron`` platform; the tools read its maker: who made
    a reminder from it, and whether they may cancel others' (not an admin: no)."""
    made = prompt_reminder("telegram:-100:u7", "telegram:-100", "telegram:7")
    fire = to_job(made).event(datetime.now(UTC))
    assert sender_of(fire) == "telegram:7"
    person = as_person(fire)
    assert person.platform == "telegram" and person.sender is not None
    store = MemoryStore()
    await store.open()
    access = Access(AccessConfig(admins=["telegram:1"]), store)
    assert await access.is_admin(fire)  # what the cron platform alone would be
    assert not await access.is_admin(person)
    admin = to_job(prompt_reminder("telegram:-100:u1", "telegram:-100", "telegram:1")).event(
        datetime.now(UTC)
    )
    assert await access.is_admin(as_person(admin))
    await store.close()


# -- across a SIGKILL before the fire --------------------------------------------------------


@pytest.mark.crash
@pytest.mark.slow
async def test_a_prompt_reminder_fires_one_agent_turn_across_a_restart_in_between(
    tmp_path: Path, fake: FakeModel
) -> None:
    """Made in a real ``tether run`` (console), which is SIGKILLed before its time and
    started again: one model call carries the prompt, with the history from before the
    kill, and its answer is the one line printed; a graceful stop prints nothing more."""
    config = write_config(
        tmp_path,
        platforms={"console": {"enabled": True}},
        agent={"handler": "llm"},
        llm=fake.section(),
    )
    env = subprocess_env()
    first = await spawn("run", config, env)
    assert first.stdin is not None and first.stdout is not None
    try:
        for line in ("I am Ada", json.dumps({"text": PROMPT, "prompt": True, "at": "+6s"})):
            first.stdin.write(line.encode() + b"\n")
            await first.stdin.drain()
            answer = await asyncio.wait_for(first.stdout.readline(), 60)
    finally:
        first.send_signal(signal.SIGKILL)
        await first.wait()
    assert answer.decode().startswith(SET + " scheduled r-")
    [(rid, status, stored_prompt)] = db_rows(tmp_path, "SELECT id, status, prompt FROM reminders")
    assert (status, stored_prompt) == ("active", 1)
    assert fires(tmp_path) == [] and prompted(fake) == []  # killed before its time

    second = await spawn("run", config, env)
    assert second.stdout is not None
    try:
        reply = await asyncio.wait_for(second.stdout.readline(), 60)
    except TimeoutError:  # say what the restarted gateway did instead
        second.kill()
        _out, err = await second.communicate()
        raise AssertionError(err.decode()[-4000:]) from None
    second.send_signal(signal.SIGTERM)
    out, err = await asyncio.wait_for(second.communicate(), 60)
    assert second.returncode == 0, err.decode()[-2000:]
    assert reply.decode().strip() == "Take an umbrella, Ada."  # Ada: from before the kill
    assert out == b""  # one answer: no second turn, no ⏰ text
    [turn] = prompted(fake)
    assert said_before(turn)[0] == "I am Ada"
    [(key, _conversation, fire_status)] = fires(tmp_path)
    assert key.startswith(f"cron:{rid}:") and fire_status == "done"
    assert db_rows(tmp_path, "SELECT status FROM reminders") == [("done",)]
    assert err.count(b'"event":"reminder.prompted"') == 1
