"""tether.testing, as a bot author uses it: each call returns what it caused, and the
time of day is the test's to move."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from tether import Button, ConfigError, Context, File, Router, TooLarge
from tether.testing import Bot, FakeModel, asks_for, tool_call

MONDAY_0855 = datetime(2030, 1, 7, 8, 55, tzinfo=UTC)


async def test_a_daily_job_fires_once_a_day_at_its_time_as_the_clock_moves() -> None:
    config = {
        "jobs": [
            {"id": "standup", "cron": "0 9 * * *", "deliver": "loopback:team", "text": "Standup!"}
        ]
    }
    async with Bot(config=config, now=MONDAY_0855) as bot:
        assert await bot.advance(timedelta(minutes=4)) == []  # 08:59: not yet
        [first] = await bot.advance(timedelta(minutes=1))
        assert (first.text, first.chat) == ("Standup!", "team")
        more = await bot.advance(to=MONDAY_0855 + timedelta(days=2, hours=1))
        found = await bot.gateway.store.find_events(key="cron:standup")
    assert [r.text for r in more] == ["Standup!", "Standup!"]  # Tuesday, Wednesday
    assert sorted(event.key for event in found) == [
        "cron:standup:2030-01-07T09:00:00Z",
        "cron:standup:2030-01-08T09:00:00Z",
        "cron:standup:2030-01-09T09:00:00Z",
    ]


async def test_the_clock_does_not_go_back_and_moves_one_way_at_a_time() -> None:
    async with Bot(now=MONDAY_0855) as bot:
        with pytest.raises(ValueError, match="does not go back"):
            await bot.advance(to=MONDAY_0855 - timedelta(seconds=1))
        with pytest.raises(ValueError, match="one of them"):
            await bot.advance(timedelta(minutes=1), to=MONDAY_0855)


async def test_a_reminder_the_agent_schedules_fires_when_its_time_has_passed() -> None:
    async with (
        FakeModel.scripted(
            asks_for(tool_call("schedule", {"text": "Call Bo", "at": "+10m"})), "Set."
        ) as model,
        Bot(model=model, now=MONDAY_0855) as bot,
    ):
        [answer] = await bot.say("remind me in 10 minutes to call Bo")
        assert answer.text == "Set."
        assert await bot.advance(timedelta(minutes=9)) == []
        [fired] = await bot.advance(timedelta(minutes=1))
        assert await bot.advance(timedelta(days=1)) == []  # a one-off fires once
    assert fired.text.endswith("Call Bo") and fired.chat == "u1"


async def test_a_file_sent_is_downloaded_by_the_handler_and_a_file_comes_back() -> None:
    router = Router("files")

    @router.fallback
    async def checksum(ctx: Context) -> None:
        [attachment] = ctx.event.attachments
        data = await ctx.download(attachment)
        digest = hashlib.sha256(data).hexdigest()[:12]
        await ctx.reply(digest, files=[File(data[::-1], name=f"reversed-{attachment.name}")])

    async with Bot(router) as bot:
        [reply] = await bot.send_file(b"hello world", name="a.txt", caption="check this")
    assert reply.text == hashlib.sha256(b"hello world").hexdigest()[:12]
    [returned] = reply.files
    assert (returned.name, returned.data) == ("reversed-a.txt", b"dlrow olleh")


async def test_a_download_past_its_cap_is_too_large_for_the_handler_to_say_so() -> None:
    router = Router("cap")

    @router.fallback
    async def capped(ctx: Context) -> None:
        try:
            await ctx.download(ctx.event.attachments[0], max_bytes=4)
        except TooLarge as exc:
            await ctx.reply(f"too big: {exc.size} bytes")

    async with Bot(router) as bot:
        [reply] = await bot.send_file(b"0123456789")
    assert reply.text == "too big: 10 bytes"


async def test_a_press_goes_to_the_message_it_was_under_and_a_link_cannot_be_pressed() -> None:
    router = Router("press")

    @router.command("ask")
    async def ask(ctx: Context) -> None:
        await ctx.reply(
            "Sure?",
            buttons=[[Button("Yes", data="sure:yes"), Button("Docs", url="https://e.org")]],
        )

    @router.callback("sure:")
    async def sure(ctx: Context) -> None:
        await ctx.reply(f"{ctx.event.text} on {ctx.event.message_id}")

    async with Bot(router) as bot:
        [question] = await bot.say("/ask")
        [answer] = await bot.press(question.button("Yes"))  # the newest reply in the chat
        with pytest.raises(ValueError, match="URL button"):
            await bot.press(question.button("Docs"))
        with pytest.raises(KeyError, match=r"no button 'Maybe'.*'Yes', 'Docs'"):
            question.button("Maybe")
    assert answer.text == f"sure:yes on {question.platform_id}"


async def test_the_agent_asks_the_model_for_a_streamed_answer_and_replies_once() -> None:
    answer = "A long answer, written bit by bit."
    async with FakeModel.scripted(answer) as model, Bot(model=model) as bot:
        replies = await bot.say("hello")
    assert [r.text for r in replies] == [answer]
    [request] = model.requests
    assert request.body.get("stream") is True  # the loopback platform edits, as Telegram


async def test_a_wrong_config_names_its_key_and_an_unstarted_bot_says_so() -> None:
    with pytest.raises(ConfigError, match=r"agent\.handler"):
        Bot(config={"agent": {"handler": "nope"}})
    bot = Bot()
    with pytest.raises(RuntimeError, match="not started"):
        bot.gateway  # noqa: B018
    with pytest.raises(RuntimeError, match="start the model first"):
        Bot(model=FakeModel())
