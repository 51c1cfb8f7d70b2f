"""A chat whose language is Chinese gets the Chinese fixed messages (issue 33): the real
Telegram client against the fake Bot API, the language read from ``from.language_code``,
an English user in the same gateway getting today's English word for word."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import make_settings
from tests.support.gateway import running
from tests.support.llm import llm_section
from tether.errors import Fatal
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Router
from tether.messages import SHIPPED
from tether.testing.model import FakeModel

failing = Router("failing")


@failing.command("boom")
async def boom(ctx: Context) -> None:
    raise Fatal("this turn fails")


def settings_for(tmp_path: Path, fake: FakeTelegram, model: FakeModel, **more: Any) -> Any:
    telegram = {"token": fake.token, "base_url": fake.base_url, "poll_timeout": 1}
    return make_settings(
        tmp_path,
        platforms={"telegram": {**telegram, "rate_limits": False}},
        llm=llm_section(model),
        access={"allow": ["*"], "admins": []},
        agent={"handler": "llm"},
        **more,
    )


def said(chat: int, text: str, language: str | None, fake: FakeTelegram) -> None:
    message = fake.message(chat, text)
    if language is not None:
        message["from"]["language_code"] = language
    fake.push(message=message)


async def answers(fake: FakeTelegram, chat: int, count: int) -> list[str]:
    """The first ``count`` texts sent to ``chat``, in order."""

    def to_chat() -> list[str]:
        return [str(p["text"]) for p in fake.sent if str(p["chat_id"]) == str(chat)]

    await fake.wait_for(lambda: len(to_chat()) >= count, timeout=20)
    return to_chat()[:count]


COMMANDS = ["/nosuch", "/help", "/approve ABCD1234", "/boom"]


async def test_a_chinese_chat_gets_chinese_fixed_messages_and_an_english_one_english(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel
) -> None:
    zh = SHIPPED["zh"]
    async with running(settings_for(tmp_path, telegram, model), plugins=[failing]):
        for text in COMMANDS:
            said(501, text, "zh-hans", telegram)
            said(502, text, "en", telegram)
            said(503, text, "zh", telegram)
        chinese = await answers(telegram, 501, len(COMMANDS))
        english = await answers(telegram, 502, len(COMMANDS))
        plain_zh = await answers(telegram, 503, len(COMMANDS))
    assert chinese[0] == zh["unknown_command"].format(command="nosuch")
    assert chinese[1].startswith(f"{zh['help_llm']}\n/whoami - {zh['command_whoami']}\n")
    assert f"\n/help - {zh['command_help']}\n" in chinese[1]
    assert chinese[2] == zh["admins_only"]
    assert chinese[3] == zh["dead_notice"]
    assert plain_zh == chinese
    assert english == [
        "Unknown command /nosuch. /help lists what I can do.",
        *[english[1]],
        "Only the bot's admins can do that.",
        "Sorry, something went wrong and I could not answer this. Try again later.",
    ]
    assert english[1].startswith("Just write to chat with me. Commands:\n/whoami - your user")
    assert "\n/help - this list\n" in english[1]
    assert model.requests == []  # all fixed messages: the model was never asked


async def test_messages_language_wins_over_the_hint_and_overrides_replace_the_text(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel
) -> None:
    messages = {"language": "zh", "zh": {"unknown_command": "没有 /{command} 这个命令。"}}
    settings = settings_for(tmp_path, telegram, model, messages=messages)
    async with running(settings, plugins=[failing]):
        said(601, "/nosuch", "en", telegram)
        said(602, "/boom", None, telegram)
        (unknown,) = await answers(telegram, 601, 1)
        (failed,) = await answers(telegram, 602, 1)
    assert unknown == "没有 /nosuch 这个命令。"
    assert failed == SHIPPED["zh"]["dead_notice"]


async def test_a_configured_dead_notice_is_said_in_every_language(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel
) -> None:
    settings = settings_for(tmp_path, telegram, model, pipeline={"dead_notice": "Oops."})
    async with running(settings, plugins=[failing]):
        said(701, "/boom", "zh-CN", telegram)
        assert await answers(telegram, 701, 1) == ["Oops."]
