"""ctx.ask in one process: a dialog's answers, presses, commands, /cancel, expiry, and a
handler that does not retrace its steps (the crash tests are in test_dialog_crash.py)."""

from __future__ import annotations

import itertools

from tether import Context, Router
from tether.errors import WaitExpired
from tether.testing import Bot


def dialog() -> Router:
    router = Router()

    @router.command("trip")
    async def trip(ctx: Context) -> None:
        await ctx.reply("Let us plan a trip.")
        city = await ctx.ask("Which city?")
        date = await ctx.ask(f"When do you go to {city.text}?", buttons=["today", "tomorrow"])
        seats = await ctx.ask("How many seats?")
        await ctx.reply(f"Booked {seats.text} seats to {city.text}, {date.data}.")

    return router


async def test_three_questions_come_back_as_the_answers_in_order() -> None:
    async with Bot(dialog()) as bot:
        first = await bot.say("/trip")
        assert [r.text for r in first] == ["Let us plan a trip.", "Which city?"]
        [when] = await bot.say("Paris")
        assert when.text == "When do you go to Paris?"
        assert [b.text for b in when.buttons[0]] == ["today", "tomorrow"]
        [seats] = await bot.press(when.button("tomorrow"), under=when)
        assert seats.text == "How many seats?"
        [done] = await bot.say("3")
        assert done.text == "Booked 3 seats to Paris, tomorrow."
        # The answers were not new turns: nothing else was said, and no wait stays open.
        assert await bot.gateway.store.open_waits() == []
        waits = await bot.gateway.store.waits()
        assert sorted(w.status for w in waits) == ["answered"] * 3


async def test_a_message_from_someone_else_in_a_group_is_not_the_answer() -> None:
    router = Router()

    @router.command("poll")
    async def poll(ctx: Context) -> None:
        answer = await ctx.ask("Your name?")
        await ctx.reply(f"Hello {answer.text}")

    @router.fallback
    async def other(ctx: Context) -> None:
        await ctx.reply(f"heard {ctx.event.text}")

    config = {"agent": {"group_sessions": "shared"}}
    async with Bot(router, config=config) as bot:
        await bot.say("/poll", user="ana", group=True)
        [heard] = await bot.say("Bo", user="bo", group=True)
        assert heard.text == "heard Bo"
        [hello] = await bot.say("Ana", user="ana", group=True)
        assert hello.text == "Hello Ana"


async def test_commands_still_run_and_cancel_ends_the_wait() -> None:
    router = Router()

    @router.command("ask")
    async def asker(ctx: Context) -> None:
        try:
            await ctx.ask("Tell me something")
        except Exception as exc:  # the handler sees the cancellation
            await ctx.reply(f"ended: {type(exc).__name__}")

    async with Bot(router) as bot:
        await bot.say("/ask")
        [helped] = await bot.say("/help")
        assert "/help" in helped.text
        replies = await bot.say("/cancel")
        texts = [r.text for r in replies]
        assert any(t.startswith("Cancelled") for t in texts)
        assert "ended: WaitCancelled" in texts
        [nothing] = await bot.say("/cancel")
        assert nothing.text.startswith("There is no question")


async def test_a_timeout_expires_once_and_the_handler_sees_it() -> None:
    router = Router()

    @router.command("quick")
    async def quick(ctx: Context) -> None:
        try:
            await ctx.ask("Quick, a number?", timeout=0.2)
        except WaitExpired:
            await ctx.reply("Too slow.")

    async with Bot(router) as bot:
        await bot.say("/quick")
        waits = bot.gateway.waits
        assert await waits.expire(now=10**12) == 1
        assert await waits.expire(now=10**12) == 0
        await bot.gateway.drain()
        await bot.say("/help")  # settles the outbox
        assert [r.text for r in bot.replies].count("Too slow.") == 1


async def test_a_handler_that_takes_another_step_on_resume_is_dead_lettered() -> None:
    router = Router()
    counter = itertools.count()

    @router.command("flaky")
    async def flaky(ctx: Context) -> None:
        await ctx.step(f"step-{next(counter)}", lambda: 1)  # a new name every run: a bug
        await ctx.ask("Yes?")
        await ctx.reply("done")

    async with Bot(router) as bot:
        await bot.say("/flaky")
        replies = await bot.say("yes")
        assert [r.text for r in replies] == [bot.settings.pipeline.dead_notice]
        [letter] = await bot.gateway.store.dead_letters()
        assert "diverged" in letter.error and "step:step-0" in letter.error
        assert letter.snapshot["waits"][0]["status"] == "answered"


async def test_a_file_sent_as_the_answer_comes_with_it() -> None:
    router = Router()

    @router.command("photo")
    async def photo(ctx: Context) -> None:
        answer = await ctx.ask("Send me the receipt.")
        [receipt] = answer.attachments
        data = await ctx.download(receipt)
        await ctx.reply(f"got {receipt.name}: {len(data)} bytes")

    async with Bot(router) as bot:
        await bot.say("/photo")
        [got] = await bot.send_file(b"x" * 1234, name="receipt.jpg", kind="photo")
    assert got.text == "got receipt.jpg: 1234 bytes"


async def test_a_written_answer_to_a_wait_ended_meanwhile_is_an_ordinary_message() -> None:
    """Two instances, or an answer racing the deadline: the wait ends before this message
    is run. The message is then not swallowed: the router's handler answers it."""
    router = Router()

    @router.command("q")
    async def question(ctx: Context) -> None:
        try:
            await ctx.ask("Name?")
        except WaitExpired:
            await ctx.reply("expired")

    @router.fallback
    async def other(ctx: Context) -> None:
        await ctx.reply(f"heard {ctx.event.text}")

    async with Bot(router) as bot:
        await bot.say("/q")
        gateway = bot.gateway
        [wait] = await gateway.store.open_waits()
        # Ended in the store behind this process's back; the board still has it open.
        assert (await gateway.store.resolve_wait(wait.id, "expired", None, "elsewhere")).won
        assert gateway.waits.board.of(wait.conversation)
        replies = await bot.say("Ana")
    # The message is heard; the turn the store requeued ran with its expiry (swept in).
    assert sorted(r.text for r in replies) == ["expired", "heard Ana"]
