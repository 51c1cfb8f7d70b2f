"""A bot author's tests for examples/mybot, written only with ``tether`` and
``tether.testing``: what a person does, and the replies it gets back."""

from __future__ import annotations

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
