"""ctx.edit, answer, react, pin and delete on the Telegram fake, through PTB and the outbox.

The fake keeps each message as the chat shows it (text, keyboard, reactions, pins,
deletions) and takes one answer per press, as Telegram does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog

from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import db_rows, events_named
from tests.support.gateway import running
from tests.support.telegram import telegram_settings
from tether import Button, Context, Router
from tether.adapters.telegram import TelegramAdapter


def _user() -> dict[str, Any]:
    return {"id": 42, "is_bot": False, "first_name": "Ada"}


def _press(fake: FakeTelegram, query_id: str, message_id: int, data: str = "yes") -> None:
    message = fake.bot_message(42, "Book the room?")
    message["message_id"] = message_id
    fake.push(
        callback_query={
            "id": query_id,
            "from": _user(),
            "chat_instance": "ci",
            "data": data,
            "message": message,
        }
    )


def _sent_id(fake: FakeTelegram) -> int:
    [(_, message_id)] = list(fake.texts.shown)
    return message_id


def booking(fake: FakeTelegram) -> Router:
    router = Router()

    @router.command("book")
    async def book(ctx: Context) -> None:
        await ctx.reply("Book the room?", buttons=[[Button("Yes", data="yes")]])

    @router.callback("yes")
    async def yes(ctx: Context) -> None:
        await ctx.answer("Saved ✓")
        await ctx.edit("Booked ✓")
        await ctx.react("👍")

    @router.callback("late")
    async def late(ctx: Context) -> None:
        query_id = str(ctx.event.meta["callback_query_id"])
        await fake.wait_for(lambda: query_id in fake.answered)  # the grace answer came first
        await ctx.answer("Saved ✓")

    @router.callback("quiet")
    async def quiet(ctx: Context) -> None:
        await ctx.reply("noted", quote=False)

    return router


async def _settle(gateway: Any, adapter: TelegramAdapter) -> None:
    await gateway.drain()
    await adapter.chores.drain(timeout=10)  # every grace answer has run (or skipped)


async def test_a_press_answers_with_its_toast_edits_its_message_and_reacts(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    settings = telegram_settings(tmp_path, fake)
    async with running(settings, booking(fake)) as (gateway, adapter):
        fake.push(message=fake.message(42, "/book"))
        await fake.wait_for(lambda: len(fake.sent) == 1)
        message_id = _sent_id(fake)
        assert fake.texts.markup[42, message_id] is not None  # the keyboard is there
        _press(fake, "cbq-1", message_id)
        await fake.wait_for(lambda: (42, message_id) in fake.texts.reactions)
        await _settle(gateway, adapter)
    assert fake.answers == {"cbq-1": ("Saved ✓", False)}
    assert len(fake.calls_to("answerCallbackQuery")) == 1  # the grace answer stood aside
    assert fake.texts.shown[42, message_id] == "Booked ✓"
    assert fake.texts.markup[42, message_id] is None  # the edit took the keyboard away
    assert fake.texts.reactions[42, message_id] == ["👍"]
    assert len(fake.sent) == 1  # nothing posted beside the edited question


async def test_a_press_its_handler_does_not_answer_is_answered_bare_after_the_grace(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    async with running(telegram_settings(tmp_path, fake), booking(fake)) as (gateway, adapter):
        _press(fake, "cbq-2", 7, data="quiet")
        await fake.wait_for(lambda: "cbq-2" in fake.answers and len(fake.sent) == 1)
        await _settle(gateway, adapter)
    assert fake.answers == {"cbq-2": ("", False)}
    assert [s["text"] for s in fake.sent] == ["noted"]


async def test_a_toast_too_late_for_telegram_is_said_as_a_message(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    with structlog.testing.capture_logs() as logs:
        async with running(telegram_settings(tmp_path, fake), booking(fake)) as (gw, adapter):
            adapter.chores.grace = 0.0
            _press(fake, "cbq-3", 7, data="late")
            await fake.wait_for(lambda: len(fake.sent) == 1)
            await _settle(gw, adapter)
    assert fake.answers == {"cbq-3": ("", False)}  # Telegram kept the first answer
    assert [s["text"] for s in fake.sent] == ["Saved ✓"]
    assert db_rows(tmp_path, "SELECT status FROM outbox") == [("sent",)]
    [refused] = events_named(logs, "outbox.edit_refused")
    assert refused["action"] == "answer" and "too old" in refused["error"]


async def test_pin_and_delete_a_message_once_each_and_a_gone_message_counts_deleted(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    router = Router()

    @router.command("tidy")
    async def tidy(ctx: Context) -> None:
        assert ctx.event.reply_to is not None
        await ctx.pin(message_id=ctx.event.reply_to)
        await ctx.delete(message_id=ctx.event.reply_to)
        await ctx.delete(message_id=ctx.event.reply_to)  # gone by then: done, not dead
        await ctx.reply("tidied", quote=False)

    earlier = fake.bot_message(42, "old news")
    fake.texts.posted(42, earlier["message_id"], "old news")
    async with running(telegram_settings(tmp_path, fake), router) as (gateway, adapter):
        fake.push(message=fake.message(42, "/tidy", reply_to=earlier))
        await fake.wait_for(lambda: len(fake.sent) == 1)
        await _settle(gateway, adapter)
    assert fake.texts.pinned[42] == [earlier["message_id"]]
    assert fake.texts.deleted == [(42, earlier["message_id"])]
    assert [c.params["disable_notification"] for c in fake.calls_to("pinChatMessage")] == [True]
    statuses = [status for (status,) in db_rows(tmp_path, "SELECT status FROM outbox")]
    assert statuses == ["sent"] * 4


async def test_a_reaction_telegram_refuses_is_one_dead_row_and_the_reply_still_goes(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    router = Router()

    @router.command("parrot")
    async def parrot(ctx: Context) -> None:
        await ctx.react("🦜")
        await ctx.reply("squawk", quote=False)

    async with running(telegram_settings(tmp_path, fake), router) as (gateway, adapter):
        fake.push(message=fake.message(42, "/parrot"))
        await fake.wait_for(lambda: len(fake.sent) == 1)
        await _settle(gateway, adapter)
    rows = db_rows(tmp_path, "SELECT status, error FROM outbox ORDER BY seq")
    assert [status for status, _ in rows] == ["dead", "sent"]
    assert "reaction_invalid" in rows[0][1].lower()
    assert len(fake.calls_to("setMessageReaction")) == 1  # refused for good: not retried
