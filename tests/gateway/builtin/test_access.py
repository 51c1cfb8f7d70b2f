"""Access: pairing for unknown DM senders, allow lists, admin-only commands, flood limits."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.config import db_rows, make_settings, write_config
from tests.support.gateway import running
from tests.support.processes import TETHER
from tether import Context, Router
from tether.gateway.builtin.access import APPROVED_NOTICE


def agent() -> Router:
    router = Router()

    @router.command("reindex", admin=True)
    async def reindex(ctx: Context) -> None:
        await ctx.reply("reindexed")

    @router.text()
    async def answer(ctx: Context) -> None:
        await ctx.reply(f"agent:{ctx.event.text}")

    return router


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TETHER, *args], capture_output=True, text=True)


@pytest.mark.slow
async def test_unknown_dm_sender_gets_one_code_then_answers_once_approved(tmp_path: Path) -> None:
    access = {"allow": [], "admins": []}
    config = write_config(tmp_path, access=access)
    settings = make_settings(tmp_path, access=access)
    async with running(settings, agent()) as (gateway, loop):
        await loop.say("hello?", chat="9", user="9")
        await loop.say("anyone?", chat="9", user="9")
        await gateway.drain()
        sent = await loop.wait_for_sent(1)
        assert len(sent) == 1  # one code, no agent reply, nothing for the second message
        text = sent[0].message.text
        assert "tether pair approve" in text and "agent:" not in text
        code = text.rsplit(" ", 1)[1]

        listed = await asyncio.to_thread(cli, "pair", "list", "-c", str(config))
        assert (
            code in listed.stdout and "loopback:9" in listed.stdout and "pending" in listed.stdout
        )
        approved = await asyncio.to_thread(cli, "pair", "approve", code.lower(), "-c", str(config))
        assert approved.returncode == 0, approved.stderr
        assert "approved loopback:9" in approved.stdout
        told = await loop.wait_for_sent(2)  # the gateway notices the CLI's approval

        await loop.say("now?", chat="9", user="9")
        sent = await loop.wait_for_sent(3)
        await gateway.drain()
    assert (told[1].message.target.chat_id, told[1].message.text) == ("9", APPROVED_NOTICE)
    assert [d.message.text for d in sent[2:]] == ["agent:now?"]
    assert "approved" in (await asyncio.to_thread(cli, "pair", "list", "-c", str(config))).stdout


async def test_allow_list_admits_by_user_or_chat_and_ignores_the_rest(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path, access={"allow": ["loopback:alice", "loopback:-100*"], "pairing": False}
    )
    async with running(settings, agent()) as (gateway, loop):
        await loop.say("from alice", chat="1", user="alice")
        await loop.say("in the team group", chat="-1001", user="mallory", chat_type="group")
        await loop.say("from mallory", chat="2", user="mallory")
        await loop.say("elsewhere", chat="-5", user="mallory", chat_type="group")
        await gateway.drain()
        await gateway.outbox.flush(5)
    assert sorted(d.message.text for d in loop.sent) == [
        "agent:from alice",
        "agent:in the team group",
    ]


async def test_admin_only_commands_refuse_non_admins(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, access={"allow": ["*"], "admins": ["loopback:root"]})
    async with running(settings, agent()) as (gateway, loop):
        await loop.say("/reindex", chat="1", user="guest")
        await loop.say("/reindex", chat="2", user="root")
        await loop.say("/approve NOSUCHCODE", chat="1", user="guest")
        await gateway.drain()
        await gateway.outbox.flush(5)
    by_chat: dict[str, list[str]] = {}
    for delivery in loop.sent:
        by_chat.setdefault(delivery.message.target.chat_id, []).append(delivery.message.text)
    assert by_chat["1"] == ["Only the bot's admins can do that."] * 2
    assert by_chat["2"] == ["reindexed"]


async def test_admin_approves_pairing_from_the_chat(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, access={"allow": [], "admins": ["loopback:root"]})
    async with running(settings, agent()) as (gateway, loop):
        await loop.say("hi", chat="7", user="7")
        [code_message] = await loop.wait_for_sent(1)
        code = code_message.message.text.rsplit(" ", 1)[1]
        await loop.say(f"/approve {code}", chat="1", user="root")
        approval = await loop.wait_for_sent(3)
        await loop.say("hi again", chat="7", user="7")
        sent = await loop.wait_for_sent(4)
        await gateway.drain()
    told = {(d.message.target.chat_id, d.message.text) for d in approval[1:]}
    assert told == {("1", "Approved loopback:7 (7)."), ("7", APPROVED_NOTICE)}
    assert sent[3].message.text == "agent:hi again"


async def test_a_flood_is_handled_up_to_the_limit_with_one_notice(tmp_path: Path) -> None:
    handled: list[str] = []
    router = Router()

    @router.text()
    async def answer(ctx: Context) -> None:
        handled.append(ctx.event.text)
        await ctx.reply(f"agent:{ctx.event.text}")

    settings = make_settings(
        tmp_path, access={"allow": ["*"], "rate_limit": {"messages": 10, "per_seconds": 60}}
    )
    async with running(settings, router) as (gateway, loop):
        flood = [loop.event(f"spam {i}", chat="1", user="flooder") for i in range(100)]
        for i, event in enumerate(flood):
            await loop.deliver(event)
            if i == 50:  # another sender in the middle of the flood is served
                await loop.say("hello", chat="2", user="friend")
        await gateway.drain()
        await gateway.outbox.flush(5)

    flooder = [d.message.text for d in loop.sent if d.message.target.chat_id == "1"]
    assert flooder[:10] == [f"agent:spam {i}" for i in range(10)]
    assert flooder[10:] == ["You are sending messages faster than I can take them; I skipped some."]
    assert [d.message.text for d in loop.sent if d.message.target.chat_id == "2"] == ["agent:hello"]
    assert len([h for h in handled if h.startswith("spam")]) == 10
    with sqlite3.connect(tmp_path / "tether.db") as db:  # nothing lost: all stored, all done
        assert db.execute("SELECT status, count(*) FROM inbox GROUP BY status").fetchall() == [
            ("done", 101)
        ]


@pytest.mark.parametrize(
    "access",
    [
        {"allow": ["*"]},  # everyone: every *sender*
        {"allow": ["loopback:-100*"]},  # the team group's people
        {"allow": [], "pairing": True},  # a DM: pairing needs someone to pair
    ],
)
async def test_an_event_without_a_sender_is_served_only_on_trusted_platforms(
    tmp_path: Path, access: dict[str, Any]
) -> None:
    """Issue 14, bug 10: access failed open for an event without a sender."""
    settings = make_settings(tmp_path, access=access)
    async with running(settings, agent()) as (gateway, loop):
        for chat, chat_type in (("-1001", "group"), ("3", "dm")):
            nobody = loop.event("who am I?", chat=chat, chat_type=chat_type)
            await loop.deliver(nobody.model_copy(update={"sender": None}))
        await gateway.drain()
        await gateway.outbox.flush(5)
        console = nobody.model_copy(update={"sender": None, "platform": "console"})
        assert await gateway.access.admitted(console)
    assert loop.sent == []
    assert [status for _key, status in db_rows(tmp_path, "SELECT key, status FROM inbox")] == [
        "done",
        "done",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("pattern", ["telegram", "no-colon"])
def test_bad_access_patterns_are_config_errors(tmp_path: Path, pattern: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps({"access": {"allow": [pattern]}}))
    result = cli("check", "-c", str(path))
    assert result.returncode == 2
    assert "access.allow: Value error" in result.stderr
