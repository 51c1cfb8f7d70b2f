"""A bot author's tests for examples/mybot, written only with ``tether`` and
``tether.testing``: what a person does, and the replies it gets back."""

from __future__ import annotations

from datetime import timedelta

from mybot.handlers import router

from tether.testing import Bot, FakeModel, asks_for, scripted, tool_call


async def test_a_roll_is_a_number_on_the_die() -> None:
    async with Bot(router) as bot:
        [reply] = await bot.say("/roll 20")
    value = int(reply.text.split()[1])
    assert 1 <= value <= 20 and reply.text.endswith("(d20)")


async def test_a_press_on_lunch_is_answered_and_remembered() -> None:
    async with Bot(router) as bot:
        [question] = await bot.say("/lunch", user="ana")
        assert [b.text for b in question.buttons[0]] == ["Yes", "No"]
        [answer] = await bot.press(question.button("Yes"), under=question, user="ana")
        assert answer.text == "See you at noon."
        assert await bot.facts(user="ana") == ["ana said yes"]
        assert await bot.facts(user="bo") == []  # another person's memory is their own


async def test_the_agent_calls_the_tool_and_answers_with_what_it_returned(
    fake_model: FakeModel,
) -> None:
    fake_model.reply = scripted(
        asks_for(tool_call("opening_hours", {"place": "canteen"})),
        "The canteen is open 11:30-14:00.",
    )
    async with Bot(router, model=fake_model) as bot:
        [reply] = await bot.say("When can I eat?")
        history = await bot.history()
    assert reply.text == "The canteen is open 11:30-14:00."
    offered, answered = fake_model.requests
    assert "opening_hours" in offered.tools
    assert [result["content"] for result in answered.tool_results] == ["11:30-14:00"]
    assert [(turn.role, turn.text) for turn in history] == [
        ("user", "When can I eat?"),
        ("assistant", "The canteen is open 11:30-14:00."),
    ]


async def test_booking_asks_three_questions_and_answers_with_all_three() -> None:
    async with Bot(router) as bot:
        [where] = await bot.say("/book", user="ana")
        assert [b.text for b in where.buttons[0]] == ["canteen", "cafe"]
        [when] = await bot.press(where.button("cafe"), under=where, user="ana")
        assert when.text == "At what time at the cafe?"
        [people] = await bot.say("12:30", user="ana")
        assert people.text == "For how many people?"
        [booked] = await bot.say("4", user="ana")
    assert booked.text.startswith("Booked the cafe at 12:30 for 4 (#")


async def test_an_unanswered_booking_question_expires(fake_model: FakeModel) -> None:
    async with Bot(router) as bot:
        await bot.say("/book")
        await bot.say("canteen")
        await bot.say("13:00")
        expired = await bot.advance(timedelta(minutes=16))
    assert [r.text for r in expired] == ["No answer in 15 minutes; nothing was booked."]


async def test_the_cake_waits_for_an_admin(fake_model: FakeModel) -> None:
    fake_model.reply = scripted(asks_for(tool_call("order_cake", {"flavour": "lemon"})), "Ordered.")
    config = {"access": {"admins": ["loopback:boss"]}}
    async with Bot(router, model=fake_model, config=config) as bot:
        [card] = await bot.say("Get us a lemon cake", user="boss")
        assert card.text.startswith("Approval needed: the agent wants to run order_cake")
        replies = await bot.press(card.button("Approve"), under=card, user="boss")
    assert [r.text for r in replies][-1] == "Ordered."
