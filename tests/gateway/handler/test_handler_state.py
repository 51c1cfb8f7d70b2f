"""Handler state through the real pipeline: ``ctx.chat_data()`` and ``ctx.user_data()``
hold what a handler keeps between turns, committed with the turn or not at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.config import db_rows, make_settings
from tests.support.gateway import running
from tether import Context, Retryable, Router


async def test_state_is_kept_per_chat_and_per_person_across_turns_and_a_restart(
    tmp_path: Path,
) -> None:
    router = Router()

    @router.command("count")
    async def count(ctx: Context) -> None:
        chat, user = await ctx.chat_data(), await ctx.user_data()
        chat["n"] = chat.get("n", 0) + 1
        user["everywhere"] = user.get("everywhere", 0) + 1
        await ctx.reply(f"chat {chat['n']}, you {user['everywhere']}")

    said = [("g1", "ann"), ("g1", "bob"), ("g2", "ann")]
    settings = make_settings(tmp_path)
    async with running(settings, router) as (gateway, loop):
        for n, (chat, user) in enumerate(said, start=1):  # one at a time: see the docs
            await loop.say("/count", chat=chat, user=user, chat_type="group")
            await loop.wait_for_sent(n)
        await gateway.drain()
        first = [d.message.text for d in loop.sent]
    async with running(settings, router) as (gateway, loop):
        await loop.say("/count", chat="g1", user="ann", chat_type="group", key="loopback:after")
        await loop.wait_for_sent(1)
        await gateway.drain()
        after = loop.sent[0].message.text
    # a group's conversation is each person's session in it (agent.group_sessions)
    assert first == ["chat 1, you 1", "chat 1, you 1", "chat 1, you 2"]
    assert after == "chat 2, you 3"  # committed, and read again by a new process


async def test_a_turn_that_fails_changes_nothing_and_its_retry_starts_from_the_commit(
    tmp_path: Path,
) -> None:
    seen: list[Any] = []
    router = Router()

    @router.text()
    async def flaky(ctx: Context) -> None:
        chat = await ctx.chat_data()
        seen.append(chat.get("tries"))
        chat["tries"] = chat.get("tries", 0) + 1
        if ctx.attempt < 3:
            raise Retryable("upstream 503")
        await ctx.reply(f"tries {chat['tries']}")

    async with running(make_settings(tmp_path), router) as (gateway, loop):
        await loop.say("hi")
        await loop.wait_for_sent(1)
        await gateway.drain()
    assert seen == [None, None, None]  # no failed attempt's change was committed
    assert loop.sent[0].message.text == "tries 1"
    assert db_rows(tmp_path, "SELECT name, value FROM handler_state") == [("tries", "1")]


async def test_a_value_that_is_not_json_ends_the_event_naming_the_key(tmp_path: Path) -> None:
    attempts: list[int] = []
    router = Router()

    @router.text()
    async def careless(ctx: Context) -> None:
        attempts.append(ctx.attempt)
        (await ctx.user_data())["when"] = object()
        await ctx.reply("saved?")

    settings = make_settings(tmp_path, pipeline={"max_attempts": 3})
    async with running(settings, router) as (gateway, loop):
        event = await loop.say("hi")
        await gateway.drain()
        await gateway.outbox.flush(5)
    assert attempts == [1]  # a handler's bug: not retried
    assert db_rows(tmp_path, "SELECT status FROM inbox WHERE key = ?", event.key) == [("dead",)]
    (error,) = db_rows(tmp_path, "SELECT error FROM dead_letters")[0]
    assert "['when']: not a JSON value" in error
    assert [d.message.text for d in loop.sent] == [settings.pipeline.dead_notice]  # not silence
    assert db_rows(tmp_path, "SELECT count(*) FROM handler_state") == [(0,)]
