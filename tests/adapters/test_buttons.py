"""Buttons (issue 17): rendered on each platform, presses deduplicated and acknowledged.

The real clients (python-telegram-bot, discord.py, Feishu's webhook route) against the
fake platform servers on 127.0.0.1, with the whole gateway (SQLite store in tmp_path).
A press the platform delivers twice runs its handler once; the press is acknowledged
while the handler is still running — proved with a handler that blocks until the test
releases it, not with a timer: if the acknowledgement waited for the handler, the test
would never see it before the release.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog

from tests.fakes.discord_api import CHANNEL_ID, FakeDiscord
from tests.fakes.feishu_api import (
    APP_ID,
    APP_SECRET,
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    FakeFeishu,
    card_action_event,
    message_event,
    signed_request,
)
from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import db_rows, events_named, inbox_rows, make_settings
from tests.support.gateway import running
from tether.adapters.discord.send import send_nonce
from tether.adapters.feishu.send import send_uuid
from tether.adapters.loopback import LoopbackAdapter
from tether.adapters.telegram.ingress import SECRET_HEADER
from tether.buttons import Button, keyboard
from tether.config import Settings
from tether.errors import ButtonError
from tether.events import Conversation, Event, Kind, Sender
from tether.gateway.agent.chat import llm_router
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters, load_router
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Router

MENU = [[Button("Yes", data="vote:yes"), Button("No", data="vote:no")]]
MENU_WITH_LINK = [*MENU, [Button("Docs", url="https://example.com/docs")]]


class Gate:
    """A press handler that holds until released, and counts its runs."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.runs: list[str] = []
        self.finished = 0

    def router(self) -> Router:
        router = Router("buttons-tests")

        @router.command("menu")
        async def menu(ctx: Context) -> None:
            await ctx.reply("Vote?", buttons=MENU_WITH_LINK)  # quoting the command

        @router.callback("vote:")
        async def voted(ctx: Context) -> None:
            self.runs.append(ctx.event.text)
            self.started.set()
            await self.release.wait()
            self.finished += 1
            await ctx.reply(f"you chose {ctx.event.text.removeprefix('vote:')}", quote=False)

        return router


@asynccontextmanager
async def gateway_for(settings: Settings, gate: Gate) -> AsyncIterator[Gateway]:
    gateway = Gateway(settings, build_adapters(settings), router=gate.router())
    await gateway.start()
    try:
        yield gateway
    finally:
        gate.release.set()  # never leave a handler blocked past the test
        await gateway.stop()


# -- the spec: one familiar shape, a clear error at ctx.reply -----------------------------


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ([Button("a", data="x" * 65)], "buttons[0][0]: data is 65 bytes; 1 to 64 allowed"),
        ([Button("a", data="é" * 33)], "buttons[0][0]: data is 66 bytes"),
        ([Button("a", data="")], "buttons[0][0]: data is 0 bytes"),
        ([Button("a")], "buttons[0][0]: give exactly one of data="),
        ([Button("a", data="1", url="https://x.org")], "give exactly one of"),
        ([Button("", data="1")], "buttons[0][0]: text is empty"),
        ([Button("a" * 81, data="1")], "text is 81 characters; at most 80"),
        ([Button("a", url="javascript:alert(1)")], "url must be http(s):// or tg://"),
        ([[Button(str(n), data=str(n)) for n in range(6)]], "buttons[0]: 6 buttons in a row"),
        ([[Button(str(n), data=str(n))] for n in range(6)], "buttons: 6 rows; at most 5"),
        ([Button("a", data="same"), Button("b", data="same")], "buttons[0][1]: data 'same'"),
        ([[Button("a", data="1")], Button("b", data="2")], "buttons[1]: mix of buttons and rows"),
        ("Yes", "buttons: expected Button"),
        ([Button("a", data="\ud800")], "data is not valid text"),
    ],
)
def test_an_invalid_keyboard_is_a_clear_error_naming_the_button(spec: Any, says: str) -> None:
    with pytest.raises(ButtonError) as raised:
        keyboard(spec)
    assert says in str(raised.value)


def test_one_button_a_row_or_rows_are_all_a_keyboard() -> None:
    yes = Button("Yes", data="y")
    assert keyboard(yes) == [[yes]]
    assert keyboard([yes]) == [[yes]]
    assert keyboard([[yes], []]) == [[yes]]
    assert keyboard(None) == keyboard([]) == []


async def test_ctx_reply_refuses_a_bad_keyboard_in_the_handler_and_keeps_a_good_one(
    tmp_path: Path,
) -> None:
    router = Router()

    @router.command("bad")
    async def bad(ctx: Context) -> None:
        try:
            await ctx.reply("pick", buttons=[Button("a", data="x" * 70)])
        except ButtonError as exc:
            await ctx.reply(f"refused: {exc}")
        with pytest.raises(ButtonError, match="buttons need a message text"):
            await ctx.reply("", buttons=MENU)

    @router.command("long")
    async def long(ctx: Context) -> None:
        await ctx.reply("word " * 60, buttons=MENU)

    adapter = LoopbackAdapter(text_limit=100)
    async with running(make_settings(tmp_path), router, adapter) as (gateway, _):
        await adapter.say("/bad")
        await adapter.say("/long")
        sent = await adapter.wait_for_sent(5)
        await gateway.drain()
    refused = sent[0].message
    assert refused.text.startswith("refused: buttons[0][0]: data is 70 bytes")
    assert refused.buttons == []
    # A long text is split; the buttons sit under its last part only, from the stored row.
    chunks = [delivery.message for delivery in sent[1:]]
    assert [bool(chunk.buttons) for chunk in chunks] == [False, False, False, True]
    assert chunks[-1].buttons == MENU
    stored = [json.loads(p) for (p,) in db_rows(tmp_path, "SELECT payload FROM outbox")]
    assert [row.get("buttons") for row in stored][-1] == [
        [
            {"text": "Yes", "data": "vote:yes", "url": None},
            {"text": "No", "data": "vote:no", "url": None},
        ]
    ]


# -- routing: by data prefix; a press nothing handles is logged, never answered ------------


def _press(data: str, key: str = "loopback:press:1") -> Event:
    return Event(
        key=key,
        platform="loopback",
        kind=Kind.CALLBACK,
        conversation=Conversation(platform="loopback", chat_id="1"),
        sender=Sender(id="u1"),
        message_id="9",
        text=data,
    )


async def test_callbacks_route_by_prefix_and_an_unhandled_press_is_only_logged(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    plugin = Router("plugin")

    @plugin.callback("vote:")
    async def voted(ctx: Context) -> None:
        await ctx.reply(f"counted {ctx.event.text}")

    root = load_router(settings)  # the echo agent and the built-in commands
    root._children.insert(0, plugin)  # where a configured plugin goes: first
    adapter = LoopbackAdapter()
    with structlog.testing.capture_logs() as logs:
        async with running(settings, root, adapter) as (gateway, _):
            await adapter.deliver(_press("vote:yes"), _press("stale:42", "loopback:press:2"))
            await adapter.wait_for_sent(1)
            await gateway.drain()
    assert [d.message.text for d in adapter.sent] == ["counted vote:yes"]
    (unhandled,) = events_named(logs, "callback.unhandled")
    assert unhandled["data"] == "stale:42"
    assert sorted(inbox_rows(tmp_path)) == [
        ("loopback:press:1", "done"),
        ("loopback:press:2", "done"),
    ]


def test_the_llm_agent_never_takes_a_press(tmp_path: Path) -> None:
    assert llm_router(make_settings(tmp_path)).resolve(_press("anything")) is None


# -- Telegram: inline keyboard; answerCallbackQuery right after the commit ----------------

TG_SECRET = "buttons-webhook_secret"


def telegram_settings(tmp_path: Path, fake: FakeTelegram) -> Settings:
    section = {
        "token": fake.token,
        "base_url": fake.base_url,
        "rate_limits": False,
        "mode": "webhook",
        "webhook": {"url": "https://bot.example.com/telegram/webhook", "secret_token": TG_SECRET},
    }
    return make_settings(
        tmp_path, http={"enabled": True, "port": 0}, platforms={"telegram": section}
    )


async def post_update(gateway: Gateway, update: dict[str, Any]) -> int:
    assert gateway.http is not None
    url = f"http://127.0.0.1:{gateway.http.port}/telegram/webhook"
    headers = {"Content-Type": "application/json", SECRET_HEADER: TG_SECRET}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=json.dumps(update), headers=headers) as response,
    ):
        return response.status


async def test_telegram_renders_an_inline_keyboard(tmp_path: Path, telegram: FakeTelegram) -> None:
    gate = Gate()
    async with gateway_for(telegram_settings(tmp_path, telegram), gate) as gateway:
        await telegram.wait_for(lambda: telegram.webhook is not None)
        assert (
            await post_update(gateway, {"update_id": 5, "message": telegram.message(42, "/menu")})
            == 200
        )
        await telegram.wait_for(lambda: len(telegram.sent) >= 1)
        await gateway.drain()
    (sent,) = telegram.sent
    assert sent["text"] == "Vote?"
    assert sent["reply_parameters"]["message_id"] == 1  # the /menu message, quoted
    assert sent["reply_markup"] == {
        "inline_keyboard": [
            [
                {"text": "Yes", "callback_data": "vote:yes"},
                {"text": "No", "callback_data": "vote:no"},
            ],
            [{"text": "Docs", "url": "https://example.com/docs"}],
        ]
    }


async def test_telegram_press_delivered_twice_runs_once_and_is_answered_before_the_handler_ends(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    gate = Gate()
    async with gateway_for(telegram_settings(tmp_path, telegram), gate) as gateway:
        await telegram.wait_for(lambda: telegram.webhook is not None)
        update = {
            "update_id": 7,
            "callback_query": {
                "id": "cbq-twice",
                "from": {"id": 42, "is_bot": False, "first_name": "Ada"},
                "chat_instance": "ci42",
                "data": "vote:yes",
                "message": telegram.bot_message(42, "Vote?"),
            },
        }
        assert await post_update(gateway, update) == 200
        # Answered while the handler is still held: the answer never waits for it.
        await telegram.wait_for(lambda: "cbq-twice" in telegram.answered)
        await asyncio.wait_for(gate.started.wait(), 10)
        assert gate.finished == 0
        # Telegram retries a webhook it thinks failed: the same update again.
        assert await post_update(gateway, update) == 200
        await telegram.wait_for(lambda: len(telegram.calls_to("answerCallbackQuery")) >= 2)
        gate.release.set()
        await telegram.wait_for(lambda: len(telegram.sent) >= 1)
        await gateway.drain()
    assert gate.runs == ["vote:yes"]
    assert [s["text"] for s in telegram.sent] == ["you chose yes"]
    assert inbox_rows(tmp_path) == [(f"tg:{telegram.bot_id}:7", "done")]


# -- Discord: components; a deferred update (type 6) right after the commit ---------------


def discord_settings(tmp_path: Path, fake: FakeDiscord) -> Settings:
    section = {"token": fake.token, "api_base": fake.api_base, "gateway_url": fake.gateway_url}
    return make_settings(tmp_path, platforms={"discord": section})


async def test_discord_renders_components_and_a_press_twice_runs_once_acked_in_time(
    tmp_path: Path, discord_fake: FakeDiscord
) -> None:
    fake = discord_fake
    gate = Gate()
    async with gateway_for(discord_settings(tmp_path, fake), gate) as gateway:
        await fake.wait_for(lambda: fake.connected >= 1)
        asked = await fake.say(CHANNEL_ID, "/menu", mention_bot=True)
        await fake.wait_for(lambda: len(fake.sent) >= 1)
        card = fake.sent[0]
        assert card["content"] == "Vote?"
        assert card["components"] == [
            {
                "type": 1,
                "components": [
                    {"type": 2, "style": 1, "label": "Yes", "custom_id": "vote:yes"},
                    {"type": 2, "style": 1, "label": "No", "custom_id": "vote:no"},
                ],
            },
            {
                "type": 1,
                "components": [
                    {"type": 2, "style": 5, "label": "Docs", "url": "https://example.com/docs"}
                ],
            },
        ]
        assert fake.posts[0].body["nonce"] == send_nonce(f"dc:msg:{asked['id']}#0")
        assert fake.posts[0].body["message_reference"]["message_id"] == int(asked["id"])

        press = fake.press_payload("vote:no", on=card)
        await fake.dispatch("INTERACTION_CREATE", press)
        interaction_id = int(press["id"])
        await fake.wait_for(lambda: interaction_id in fake.callback_at)
        await asyncio.wait_for(gate.started.wait(), 10)
        assert gate.finished == 0  # acknowledged while the handler is held
        await fake.dispatch("INTERACTION_CREATE", press)  # a RESUME replays it
        # Committed as a duplicate, then acknowledged again (and refused: answered already).
        await fake.wait_for(lambda: interaction_id in fake.callbacks_refused)
        gate.release.set()
        await fake.wait_for(lambda: len(fake.sent) >= 2)
        await gateway.drain()
    assert gate.runs == ["vote:no"]
    assert [s["content"] for s in fake.sent] == ["Vote?", "you chose no"]
    assert fake.callbacks == [(interaction_id, {"type": 6})]
    assert (f"dc:int:{interaction_id}", "done") in inbox_rows(tmp_path)


# -- Feishu: an interactive card; the card callback answered after the commit -------------


def feishu_settings(tmp_path: Path, fake: FakeFeishu) -> Settings:
    section = {
        "app_id": APP_ID,
        "app_secret": APP_SECRET,
        "domain": fake.domain,
        "mode": "webhook",
        "verification_token": VERIFICATION_TOKEN,
        "encrypt_key": ENCRYPT_KEY,
        "rate_limits": False,
    }
    return make_settings(tmp_path, http={"enabled": True, "port": 0}, platforms={"feishu": section})


async def post_feishu(gateway: Gateway, payload: dict[str, Any]) -> tuple[int, Any]:
    assert gateway.http is not None
    body, headers = signed_request(payload)
    url = f"http://127.0.0.1:{gateway.http.port}/feishu/webhook"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as response,
    ):
        return response.status, await response.json(content_type=None)


async def test_feishu_renders_a_card_and_a_press_twice_runs_once_answered_in_time(
    tmp_path: Path, feishu: FakeFeishu
) -> None:
    gate = Gate()
    async with gateway_for(feishu_settings(tmp_path, feishu), gate) as gateway:
        assert (await post_feishu(gateway, message_event("om_menu", "/menu")))[0] == 200
        await feishu.until(lambda: len(feishu.messages) >= 1)
        card = feishu.messages[0]
        assert (card["msg_type"], card["parent_id"]) == ("interactive", "om_menu")
        assert card["uuid"] == send_uuid("fs:msg:om_menu#0")
        elements = card["content"]["elements"]
        assert elements[0] == {"tag": "div", "text": {"tag": "plain_text", "content": "Vote?"}}
        assert [[b["value"] for b in elements[1]["actions"]]] == [
            [{"data": "vote:yes"}, {"data": "vote:no"}]
        ]
        assert elements[2]["actions"][0]["url"] == "https://example.com/docs"

        press = card_action_event("vote:yes", message_id=card["message_id"], event_id="ev_press")
        # The HTTP answer is the acknowledgement (3 s): it comes while the handler is held.
        assert await post_feishu(gateway, press) == (200, {})
        await asyncio.wait_for(gate.started.wait(), 10)
        assert gate.finished == 0
        assert await post_feishu(gateway, press) == (200, {})  # delivered again
        gate.release.set()
        await feishu.until(lambda: len(feishu.messages) >= 2)
        await gateway.drain()
    assert gate.runs == ["vote:yes"]
    reply = feishu.messages[1]
    assert reply["content"] == {"text": "you chose yes"}
    assert ("fs:evt:ev_press", "done") in inbox_rows(tmp_path)


async def test_feishu_card_press_over_the_long_connection_is_acked_after_commit_once(
    tmp_path: Path, feishu: FakeFeishu
) -> None:
    settings = feishu_settings(tmp_path, feishu)
    section = settings.platforms.feishu
    assert section is not None
    mode = {"mode": "websocket", "verification_token": None, "encrypt_key": None}
    settings = settings.model_copy(
        update={
            "platforms": settings.platforms.model_copy(
                update={"feishu": section.model_copy(update=mode)}
            )
        }
    )
    gate = Gate()
    async with gateway_for(settings, gate) as gateway:
        adapter = gateway.adapters["feishu"]
        await feishu.until(lambda: adapter.connected)
        feishu.ack_probe = lambda _frame: inbox_rows(tmp_path)
        press = card_action_event("vote:no", event_id="ev_ws_press", token="")
        frame = await asyncio.to_thread(feishu.push_event, press)
        await feishu.until(lambda: len(feishu.acks) >= 1)
        await asyncio.wait_for(gate.started.wait(), 10)
        assert gate.finished == 0  # acked while the handler is held
        (ack,) = feishu.acks
        assert (ack.message_id, ack.code) == (frame, 200)
        assert "fs:evt:ev_ws_press" in [key for key, _status in ack.probe]  # committed first
        await asyncio.to_thread(feishu.push_event, press)  # delivered again
        await feishu.until(lambda: len(feishu.acks) >= 2)
        gate.release.set()
        await feishu.until(lambda: len(feishu.messages) >= 1)
        await gateway.drain()
    assert gate.runs == ["vote:no"]
    assert [m["content"] for m in feishu.messages] == [{"text": "you chose no"}]


# -- persisted before acknowledged: a press the store refused is not acknowledged ----------


async def test_a_press_the_store_refused_is_not_acknowledged(
    tmp_path: Path, telegram: FakeTelegram, discord_fake: FakeDiscord
) -> None:
    async def refusing(*_args: Any, **_kwargs: Any) -> list[bool]:
        refused.set()
        raise RuntimeError("disk full")

    for sub in ("tg", "dc"):
        (tmp_path / sub).mkdir()
    gate = Gate()
    gate.release.set()
    # Telegram (webhook): 503, so Telegram delivers it again; no answerCallbackQuery.
    refused = asyncio.Event()
    async with gateway_for(telegram_settings(tmp_path / "tg", telegram), gate) as gateway:
        await telegram.wait_for(lambda: telegram.webhook is not None)
        real = gateway.inbox.accept
        gateway.inbox.accept = refusing  # type: ignore[method-assign]
        update = {
            "update_id": 9,
            "callback_query": {
                "id": "cbq-refused",
                "from": {"id": 42, "is_bot": False, "first_name": "Ada"},
                "chat_instance": "ci42",
                "data": "vote:yes",
                "message": telegram.bot_message(42, "Vote?"),
            },
        }
        assert await post_update(gateway, update) == 503
        gateway.inbox.accept = real  # type: ignore[method-assign]
        assert await post_update(gateway, update) == 200  # the redelivery is stored
        await telegram.wait_for(lambda: len(telegram.sent) >= 1)
        await gateway.drain()
    assert [c.params["callback_query_id"] for c in telegram.calls_to("answerCallbackQuery")] == [
        "cbq-refused"
    ]  # once: after the commit that worked
    # Discord: an unacknowledged interaction, which the person sees fail.
    refused = asyncio.Event()
    async with gateway_for(discord_settings(tmp_path / "dc", discord_fake), Gate()) as gateway:
        fake = discord_fake
        await fake.wait_for(lambda: fake.connected >= 1)
        on = fake.message(CHANNEL_ID, "Vote?")
        real = gateway.inbox.accept
        gateway.inbox.accept = refusing  # type: ignore[method-assign]
        lost = fake.press_payload("vote:yes", on=on, token="lost")
        await fake.dispatch("INTERACTION_CREATE", lost)
        await asyncio.wait_for(refused.wait(), 10)
        gateway.inbox.accept = real  # type: ignore[method-assign]
        kept = fake.press_payload("vote:no", on=on, token="kept")
        await fake.dispatch("INTERACTION_CREATE", kept)
        await fake.wait_for(lambda: int(kept["id"]) in fake.callback_at)
    assert list(fake.callback_at) == [int(kept["id"])]


async def test_access_rules_apply_to_presses(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, access={"allow": ["loopback:u1"], "pairing": False})
    gate = Gate()
    gate.release.set()
    adapter = LoopbackAdapter()
    root = Router("root")
    root.include(gate.router())
    with structlog.testing.capture_logs() as logs:
        async with running(settings, root, adapter) as (gateway, _):
            stranger = _press("vote:yes", "loopback:press:stranger")
            stranger = stranger.model_copy(update={"sender": Sender(id="u2")})
            await adapter.deliver(stranger, _press("vote:no", "loopback:press:allowed"))
            await adapter.wait_for_sent(1)
            await gateway.drain()
    assert gate.runs == ["vote:no"]
    (denied,) = events_named(logs, "access.denied")
    assert denied["sender"] == "loopback:u2"
