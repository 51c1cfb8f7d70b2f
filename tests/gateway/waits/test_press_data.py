"""A press's data comes from outside (any client can send any callback data): reading it
never raises, and only a question's own buttons parse."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tether.buttons import MAX_DATA_BYTES
from tether.gateway.handler.asking import PRESS_PREFIX, parse_press, press_data, token_of


@given(st.text(max_size=200))
def test_any_data_parses_or_is_none(data: str) -> None:
    parsed = parse_press(data)
    if parsed is not None:
        token, choice = parsed
        assert data == press_data(token, choice)
        assert len(token) == 16 and choice


@given(st.text(min_size=1, max_size=100), st.integers(min_value=0, max_value=24))
def test_a_questions_button_round_trips_within_telegrams_limit(wait: str, choice: int) -> None:
    token = token_of(wait)
    data = press_data(token, choice)
    assert parse_press(data) == (token, str(choice))
    assert len(data.encode()) <= MAX_DATA_BYTES and data.startswith(PRESS_PREFIX)


def test_other_presses_are_not_answers() -> None:
    for data in ["lunch:yes", "tw:", "tw:short:1", "tw:" + "a" * 16, "tw:" + "a" * 16 + ":"]:
        assert parse_press(data) is None


async def test_a_forged_press_is_told_and_answers_nothing() -> None:
    from tether import Context, Router
    from tether.testing import Bot

    router = Router()

    @router.command("pick")
    async def pick(ctx: Context) -> None:
        answer = await ctx.ask("Pick", buttons=["a", "b"])
        await ctx.reply(f"picked {answer.data}")

    async with Bot(router) as bot:
        [question] = await bot.say("/pick")
        token = question.buttons[0][0].data.split(":")[1]  # type: ignore[union-attr]
        [unknown] = await bot.press(f"tw:{'0' * 16}:0", under=question)
        [beyond] = await bot.press(f"tw:{token}:7", under=question)
        assert unknown.text == beyond.text == "This question is no longer open."
        [picked] = await bot.press(question.button("b"), under=question)
        assert picked.text == "picked b"
        [late] = await bot.press(question.button("a"), under=question)
        assert late.text == "This was answered already by u1."
