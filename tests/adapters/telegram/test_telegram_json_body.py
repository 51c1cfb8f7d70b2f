"""getUpdates and sendMessage as one JSON body (adapters/telegram/http.py), against the
fake Bot API over real HTTP.

The reference for every check is the same call through PTB's own ``Bot._post`` (form
encoded): Telegram must receive the same parameters, and each failure answer (429 flood
control, 400, 403, a migrated group, a dropped connection) must raise the same PTB error
with the same message and attributes, so :func:`classify` and the outbox's ``unknown``
policy see no difference. Values JSON cannot hold still go through ``Bot._post``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from telegram import InlineKeyboardButton, InlineKeyboardMarkup
from telegram.constants import ParseMode
from telegram.error import NetworkError, RetryAfter, TelegramError
from telegram.request import BaseRequest

from tests.fakes.telegram_api import FakeTelegram
from tether.adapters.telegram.buttons import inline_keyboard
from tether.adapters.telegram.http import AiohttpRequest, BotClient
from tether.adapters.telegram.send import classify, retry_after_seconds
from tether.buttons import Button
from tether.errors import SendAmbiguous

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"


@pytest.fixture
async def bot(fake: FakeTelegram) -> AsyncIterator[BotClient]:
    client = BotClient(
        fake.token,
        base_url=fake.base_url,
        request=AiohttpRequest(),
        get_updates_request=AiohttpRequest(connection_pool_size=1),
    )
    async with client:
        yield client


def params() -> dict[str, Any]:
    """What send.py builds for a formatted reply in a topic, quoting, with buttons."""
    return {
        "chat_id": -100200,
        "message_thread_id": 7,
        "reply_parameters": {"message_id": 11, "allow_sending_without_reply": True},
        "text": '<b>héllo</b> ✓ 👋 & "quotes"\nline',
        "reply_markup": inline_keyboard([[Button(text="Yes", data="y")]]),
        "parse_mode": ParseMode.HTML,
        "disable_notification": None,
    }


async def test_send_message_goes_as_json_with_what_the_form_said(
    fake: FakeTelegram, bot: BotClient
) -> None:
    sent = await bot.send_message_dict(params())
    await bot._post("sendMessage", params())  # PTB's own encoding, the reference
    as_json, as_form = fake.calls_to("sendMessage")
    assert (as_json.content_type, as_form.content_type) == (JSON, FORM)
    assert as_json.params == as_form.params
    assert "disable_notification" not in as_json.params  # None values are dropped
    assert as_json.params["parse_mode"] == "HTML"
    assert isinstance(sent["message_id"], int) and sent["text"] == params()["text"]


async def test_get_updates_goes_as_json_and_returns_the_dicts(
    fake: FakeTelegram, bot: BotClient
) -> None:
    pushed = fake.push(message=fake.message(42, "hi"))
    got = await bot.get_update_dicts(None, 0, ["message", "callback_query"])
    assert got == [pushed]
    (call,) = fake.calls_to("getUpdates")
    assert call.content_type == JSON
    assert call.params == {
        "timeout": 0,
        "limit": 100,
        "allowed_updates": ["message", "callback_query"],
    }


async def test_a_value_json_cannot_hold_goes_through_ptbs_encoding(
    fake: FakeTelegram, bot: BotClient
) -> None:
    markup = InlineKeyboardMarkup([[InlineKeyboardButton("Yes", callback_data="y")]])
    await bot.send_message_dict({"chat_id": 42, "text": "hi", "reply_markup": markup})
    (call,) = fake.calls_to("sendMessage")
    assert call.content_type == FORM
    assert call.params["reply_markup"] == markup.to_dict()


FAILURES: list[tuple[str, int, str, dict[str, Any]]] = [
    ("flood", 429, "Too Many Requests: retry after 3", {"retry_after": 3}),
    ("bad request", 400, "Bad Request: chat not found", {}),
    ("blocked", 403, "Forbidden: bot was blocked by the user", {}),
    ("migrated", 400, "Bad Request: group chat was upgraded", {"migrate_to_chat_id": -100999}),
    ("server error", 500, "Internal Server Error", {}),
]


def _reading(exc: TelegramError) -> tuple[Any, ...]:
    """What the adapter and the outbox read from a failed send."""
    verdict = classify(exc)
    return (
        type(exc),
        str(exc),
        getattr(exc, "new_chat_id", None),
        retry_after_seconds(exc) if isinstance(exc, RetryAfter) else None,
        type(verdict),
        getattr(verdict, "retry_after", None),
    )


@pytest.mark.parametrize(
    "status, description, parameters", [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES]
)
async def test_a_failure_answer_raises_what_ptbs_encoding_raises(
    fake: FakeTelegram, bot: BotClient, status: int, description: str, parameters: dict[str, Any]
) -> None:
    readings = []
    for send in (bot.send_message_dict, lambda p: bot._post("sendMessage", p)):
        fake.fail_next("sendMessage", status, description, **parameters)
        with pytest.raises(TelegramError) as caught:
            await send(params())
        readings.append(_reading(caught.value))
    assert readings[0] == readings[1]
    assert [c.content_type for c in fake.calls_to("sendMessage")] == [JSON, FORM]
    assert fake.sent == []


async def test_a_dropped_connection_is_ambiguous_as_before(
    fake: FakeTelegram, bot: BotClient
) -> None:
    readings = []
    for send in (bot.send_message_dict, lambda p: bot._post("sendMessage", p)):
        fake.drop_next("sendMessage")
        with pytest.raises(TelegramError) as caught:
            await send(params())
        assert caught.value.__cause__ is not None  # the aiohttp error, for classify
        readings.append((_reading(caught.value), type(caught.value.__cause__)))
    assert readings[0] == readings[1]
    assert readings[0][0][4] is SendAmbiguous


async def test_a_text_with_no_utf8_form_fails_as_it_did_and_nothing_is_sent(
    fake: FakeTelegram, bot: BotClient
) -> None:
    with pytest.raises(NetworkError) as caught:
        await bot.send_message_dict({"chat_id": 42, "text": "lone \ud800 surrogate"})
    assert isinstance(caught.value.__cause__, UnicodeEncodeError)  # PTB's form encoding
    assert fake.calls_to("sendMessage") == []


#: Answers as they might come: JSON Telegram sends, and what orjson and json.loads read
#: differently (NaN, integers past 64 bits, lone surrogates, invalid UTF-8, not JSON).
ANSWERS = st.one_of(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
        max_leaves=8,
    ).map(lambda value: json.dumps({"ok": True, "result": value}).encode()),
    st.binary(max_size=40),
    st.sampled_from([b'{"ok": true, "result": "\\ud800"}', b'{"a": 1', b"\xff{}", b""]),
)


def _parsed(parse: Any, payload: bytes) -> str:
    try:
        return repr(parse(payload))
    except TelegramError as exc:
        return f"TelegramError: {exc}"


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(payload=ANSWERS)
def test_answers_read_as_ptbs_json_loads_reads_them(payload: bytes) -> None:
    ours = _parsed(AiohttpRequest.parse_json_payload, payload)
    assert ours == _parsed(BaseRequest.parse_json_payload, payload)
