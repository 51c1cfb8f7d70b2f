"""One face for the three platforms a wait is answered on by a button press (Telegram,
Discord, Feishu), so a test of approval cards and ``ctx.ask`` buttons says once what a
person does and reads what the platform shows, and runs on each platform's real client
against its fake server (tests/fakes/*_api.py) on 127.0.0.1.

Each :class:`Platform` knows: the settings that enable it, how a person's message reaches
the gateway (Telegram and Feishu by webhook post to the gateway's HTTP server, Discord
over the fake's gateway WebSocket), what the bot has sent (the text a person sees and
the buttons as the platform renders them: Telegram ``inline_keyboard`` ``callback_data``,
Discord ``components`` ``custom_id``, Feishu card button ``value``), how a press is
delivered in the platform's own shape (a ``callback_query`` update, a component
``INTERACTION_CREATE``, a ``card.action.trigger`` callback) — again, for a redelivery —
and whether the platform was told the press was received (``answerCallbackQuery``,
the interaction response, the callback's HTTP answer).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakes.discord_api import CHANNEL_ID, USER_ID, FakeDiscord, snowflake_at, user
from tests.fakes.feishu_api import FakeFeishu, card_action_event, message_event, signed_request
from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import make_settings
from tests.support.feishu import feishu_section
from tests.support.feishu import post as feishu_post
from tests.support.gateway import running
from tests.support.telegram import SECRET as TG_SECRET
from tests.support.telegram import WEBHOOK_PATH as TG_WEBHOOK_PATH
from tests.support.telegram import post_update
from tether.config import Settings
from tether.gateway.app import Gateway
from tether.gateway.handler.routing import Router


@dataclass(frozen=True)
class Shown:
    """One message the bot sent, as the platform holds it: the text a person reads, and
    its buttons as ``(label, data the press carries back)`` per row."""

    text: str
    buttons: list[list[tuple[str, str]]]
    raw: dict[str, Any]

    def data(self, label: str) -> str:
        found = [data for row in self.buttons for text, data in row if text == label]
        assert found, f"no button {label!r} on {self.text!r}: {self.buttons}"
        return found[0]


@dataclass
class Press:
    """A press as the platform delivered it (its payload, to deliver again) and what
    identifies its acknowledgement."""

    payload: dict[str, Any]
    ack_id: Any
    answers: list[Any] = field(default_factory=list)  # the HTTP answers to each delivery


class Platform:
    """What a test does on one platform; the subclasses are the three shapes."""

    name = ""
    #: ``platform:user`` of the person who writes (and may be made an approver).
    person = ""
    #: ``platform:user`` of someone else in the same chat.
    stranger = ""

    def settings(self, tmp_path: Path, **sections: Any) -> Settings:
        raise NotImplementedError

    async def ready(self, gateway: Gateway) -> None:
        """Until the adapter can take what the fake delivers."""

    async def say(self, gateway: Gateway, text: str) -> None:
        raise NotImplementedError

    def shown(self) -> list[Shown]:
        raise NotImplementedError

    async def press(self, gateway: Gateway, on: Shown, data: str, *, by_stranger: bool) -> Press:
        raise NotImplementedError

    async def again(self, gateway: Gateway, press: Press) -> None:
        """Deliver the very same press a second time (a webhook retry, a RESUME replay)."""
        raise NotImplementedError

    def acked(self, press: Press) -> int:
        """How many times the platform was told this press was received (1 per delivery
        for Telegram and Feishu; Discord takes one response per interaction and refuses a
        second, so a redelivery shows as a refused response)."""
        raise NotImplementedError

    async def until(self, predicate: Callable[[], bool], timeout: float = 15.0) -> None:
        raise NotImplementedError

    def texts(self) -> list[str]:
        return [message.text for message in self.shown()]


# -- Telegram: webhook updates; inline keyboard; answerCallbackQuery --------------------


class TelegramPlatform(Platform):
    name = "telegram"
    CHAT = -100123  # a group: the asker and someone else can both press the card
    USER = 42
    STRANGER = 99

    def __init__(self, fake: FakeTelegram) -> None:
        self.fake = fake
        self.person = f"telegram:{self.USER}"
        self.stranger = f"telegram:{self.STRANGER}"
        self._updates = itertools.count(100)
        self._queries = itertools.count(1)

    def settings(self, tmp_path: Path, **sections: Any) -> Settings:
        section = {
            "token": self.fake.token,
            "base_url": self.fake.base_url,
            "rate_limits": False,
            "answer_groups": "all",
            "mode": "webhook",
            "webhook": {
                "url": f"https://bot.example.com{TG_WEBHOOK_PATH}",
                "secret_token": TG_SECRET,
            },
        }
        return make_settings(
            tmp_path, http={"enabled": True, "port": 0}, platforms={"telegram": section}, **sections
        )

    async def ready(self, gateway: Gateway) -> None:
        await self.fake.wait_for(lambda: self.fake.webhook is not None)

    async def say(self, gateway: Gateway, text: str) -> None:
        update = {
            "update_id": next(self._updates),
            "message": self.fake.message(self.CHAT, text, user_id=self.USER),
        }
        assert await post_update(gateway, update) == 200

    def shown(self) -> list[Shown]:
        texts = self.fake.texts.in_chat(self.CHAT)  # as shown now, in message order
        assert len(texts) == len(self.fake.sent), (texts, self.fake.sent)
        out = []
        for text, params in zip(texts, self.fake.sent, strict=True):
            markup = params.get("reply_markup") or {}
            if isinstance(markup, str):
                markup = json.loads(markup)
            rows = [
                [(b["text"], b["callback_data"]) for b in row if "callback_data" in b]
                for row in markup.get("inline_keyboard", [])
            ]
            out.append(Shown(text, rows, params))
        return out

    async def press(self, gateway: Gateway, on: Shown, data: str, *, by_stranger: bool) -> Press:
        uid = self.STRANGER if by_stranger else self.USER
        query_id = f"cbq-{next(self._queries)}"
        update = {
            "update_id": next(self._updates),
            "callback_query": {
                "id": query_id,
                "from": {
                    "id": uid,
                    "is_bot": False,
                    "first_name": "Mallory" if by_stranger else "Ada",
                },
                "chat_instance": f"ci{self.CHAT}",
                "data": data,
                "message": self.fake.bot_message(self.CHAT, on.text),
            },
        }
        press = Press(update, query_id)
        await self.again(gateway, press)
        return press

    async def again(self, gateway: Gateway, press: Press) -> None:
        status = await post_update(gateway, press.payload)
        assert status == 200
        press.answers.append(status)

    def acked(self, press: Press) -> int:
        calls = self.fake.calls_to("answerCallbackQuery")
        return sum(1 for call in calls if call.params.get("callback_query_id") == press.ack_id)

    async def until(self, predicate: Callable[[], bool], timeout: float = 15.0) -> None:
        await self.fake.wait_for(predicate, timeout)


# -- Discord: gateway events over the WebSocket; components; interaction responses -----


STRANGER_ID = snowflake_at(1_600_000_000_000, 66)
STRANGER = user(STRANGER_ID, "mallory")


class DiscordPlatform(Platform):
    name = "discord"

    def __init__(self, fake: FakeDiscord) -> None:
        self.fake = fake
        self.person = f"discord:{USER_ID}"
        self.stranger = f"discord:{STRANGER_ID}"
        self._tokens = itertools.count(1)

    def settings(self, tmp_path: Path, **sections: Any) -> Settings:
        section = {
            "token": self.fake.token,
            "api_base": self.fake.api_base,
            "gateway_url": self.fake.gateway_url,
        }
        return make_settings(tmp_path, platforms={"discord": section}, **sections)

    async def ready(self, gateway: Gateway) -> None:
        await self.fake.wait_for(lambda: self.fake.connected >= 1)

    async def say(self, gateway: Gateway, text: str) -> None:
        await self.fake.say(CHANNEL_ID, text, mention_bot=True)

    def shown(self) -> list[Shown]:
        out = []
        for message in self.fake.sent:
            rows = [
                [(b["label"], b["custom_id"]) for b in row["components"] if "custom_id" in b]
                for row in message.get("components") or []
            ]
            out.append(Shown(str(message["content"]), rows, message))
        return out

    async def press(self, gateway: Gateway, on: Shown, data: str, *, by_stranger: bool) -> Press:
        payload = self.fake.press_payload(data, on=on.raw, token=f"ptoken-{next(self._tokens)}")
        if by_stranger:
            payload["member"] = {**payload["member"], "user": STRANGER}
        press = Press(payload, int(payload["id"]))
        await self.again(gateway, press)
        return press

    async def again(self, gateway: Gateway, press: Press) -> None:
        await self.fake.dispatch("INTERACTION_CREATE", press.payload)

    def acked(self, press: Press) -> int:
        answered = sum(1 for ident, _body in self.fake.callbacks if ident == press.ack_id)
        return answered + self.fake.callbacks_refused.count(press.ack_id)

    def ack_bodies(self, press: Press) -> list[dict[str, Any]]:
        return [body for ident, body in self.fake.callbacks if ident == press.ack_id]

    async def until(self, predicate: Callable[[], bool], timeout: float = 15.0) -> None:
        await self.fake.wait_for(predicate, timeout)


# -- Feishu: signed webhook posts; interactive cards; the callback's HTTP answer --------


class FeishuPlatform(Platform):
    name = "feishu"
    OPEN_ID = "ou_user_1"
    STRANGER = "ou_user_2"
    CHAT = "oc_group_1"  # a group: the asker and someone else can both press the card

    def __init__(self, fake: FakeFeishu) -> None:
        self.fake = fake
        self.person = f"feishu:{self.OPEN_ID}"
        self.stranger = f"feishu:{self.STRANGER}"
        self._ids = itertools.count(1)

    def settings(self, tmp_path: Path, **sections: Any) -> Settings:
        return make_settings(
            tmp_path,
            http={"enabled": True, "port": 0},
            platforms={"feishu": feishu_section(self.fake, answer_groups="all")},
            **sections,
        )

    async def say(self, gateway: Gateway, text: str) -> None:
        event = message_event(
            f"om_in_{next(self._ids)}", text, chat_id=self.CHAT, chat_type="group"
        )
        status, _ = await self._post(gateway, event)
        assert status == 200

    def shown(self) -> list[Shown]:
        out = []
        for message in self.fake.messages:
            content = message["content"]
            if message["msg_type"] != "interactive":
                out.append(Shown(_feishu_text(content), [], message))
                continue
            elements = content["elements"]
            rows = [
                [(b["text"]["content"], b["value"]["data"]) for b in e["actions"] if "value" in b]
                for e in elements
                if e.get("tag") == "action"
            ]
            out.append(Shown(str(elements[0]["text"]["content"]), rows, message))
        return out

    async def press(self, gateway: Gateway, on: Shown, data: str, *, by_stranger: bool) -> Press:
        event_id = f"ev_press_{next(self._ids)}"
        payload = card_action_event(
            data,
            message_id=str(on.raw["message_id"]),
            chat_id=self.CHAT,
            open_id=self.STRANGER if by_stranger else self.OPEN_ID,
            event_id=event_id,
        )
        press = Press(payload, event_id)
        await self.again(gateway, press)
        return press

    async def again(self, gateway: Gateway, press: Press) -> None:
        press.answers.append(await self._post(gateway, press.payload))

    def acked(self, press: Press) -> int:
        # The press is acknowledged by the callback's own answer: 200 with an empty
        # object (no toast, the card unchanged), sent once the press is committed.
        return sum(1 for answer in press.answers if answer == (200, {}))

    async def until(self, predicate: Callable[[], bool], timeout: float = 15.0) -> None:
        await self.fake.until(predicate, timeout)

    async def _post(self, gateway: Gateway, payload: dict[str, Any]) -> tuple[int, Any]:
        assert gateway.http is not None
        body, headers = signed_request(payload)
        return await feishu_post(gateway.http.port, body, headers)


def _feishu_text(content: dict[str, Any]) -> str:
    """A text message's text, or a post's (the agent's Markdown answer): its elements'."""
    if "text" in content:
        return str(content["text"])
    post: dict[str, Any] = next(iter(content.values()), {})
    lines = post.get("content") or []
    return "\n".join("".join(str(part.get("text", "")) for part in line) for line in lines)


@asynccontextmanager
async def gateway_on(
    platform: Platform, settings: Settings, *plugins: Router
) -> AsyncIterator[Gateway]:
    """The whole gateway with the platform's real adapter, the configured agent and the
    test's routers as plugins; yielded once the adapter takes what the fake delivers."""
    async with running(settings, None, plugins=plugins) as (gateway, _adapter):
        await platform.ready(gateway)
        yield gateway
