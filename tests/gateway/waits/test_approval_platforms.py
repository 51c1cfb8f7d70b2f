"""Approval cards and ``ctx.ask`` buttons on the platforms that have buttons: Telegram,
Discord and Feishu, each through its real client (python-telegram-bot, discord.py,
Feishu's signed webhook route) against its fake server on 127.0.0.1, with the whole
gateway (SQLite in tmp_path), the llm agent on the scripted FakeModel.

What each test proves on every platform: the card reaches the platform as the platform
renders buttons, carrying the ``tw:{token}:{n}`` data the waits read back; it shows the
tool, the arguments and their hash; the platform's own press (a ``callback_query``
update, a component interaction, a ``card.action.trigger`` callback) is acknowledged,
decides the approval only from an approver, and runs the tool once even when the
platform delivers it twice. (tests/gateway/waits/test_approvals.py proves the decisions
on the loopback platform; this file proves the platforms' shapes carry them.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.config import inbox_rows
from tests.support.waits import (
    DiscordPlatform,
    FeishuPlatform,
    Platform,
    Press,
    Shown,
    TelegramPlatform,
    gateway_on,
)
from tether import Context, Router
from tether.gateway.tools.approvals import arguments_hash
from tether.testing import FakeModel, asks_for, scripted, tool_call

PRESS_DATA = re.compile(r"^tw:[0-9a-f]{16}:[0-9]+$")
ARGUMENTS = {"path": "/tmp/x"}


@pytest.fixture(params=["telegram", "discord", "feishu"])
def platform(request: pytest.FixtureRequest) -> Platform:
    if request.param == "telegram":
        return TelegramPlatform(request.getfixturevalue("telegram"))
    if request.param == "discord":
        return DiscordPlatform(request.getfixturevalue("discord_fake"))
    return FeishuPlatform(request.getfixturevalue("feishu"))


def gated(calls: list[dict[str, Any]]) -> Router:
    """A tool whose side effect is counted: each run appends its arguments."""
    router = Router("approval-platforms")

    @router.tool(approval=True)
    async def wipe(ctx: Context, path: str) -> str:
        """Delete the folder at path."""
        calls.append({"path": path})
        return f"wiped {path}"

    return router


def assert_rendered(platform: Platform, card: Shown, labels: list[str]) -> None:
    """The buttons are the platform's own kind, each carrying a wait's press data."""
    assert [[label for label, _data in row] for row in card.buttons] == [labels]
    datas = [data for row in card.buttons for _label, data in row]
    assert all(PRESS_DATA.match(data) for data in datas), datas
    assert len({data.rsplit(":", 1)[0] for data in datas}) == 1  # one wait's token
    if isinstance(platform, TelegramPlatform):
        keyboard = card.raw["reply_markup"]["inline_keyboard"]
        assert [b["callback_data"] for b in keyboard[0]] == datas
    elif isinstance(platform, DiscordPlatform):
        row = card.raw["components"][0]
        assert row["type"] == 1 and [b["type"] for b in row["components"]] == [2] * len(labels)
        assert [b["custom_id"] for b in row["components"]] == datas
    else:
        assert card.raw["msg_type"] == "interactive"
        actions = card.raw["content"]["elements"][1]["actions"]
        assert [b["value"] for b in actions] == [{"data": data} for data in datas]


async def assert_acked(platform: Platform, press: Press, deliveries: int = 1) -> None:
    """The platform was told of each delivery (Discord: one response, then refused)."""
    await platform.until(lambda: platform.acked(press) >= deliveries)
    assert platform.acked(press) == deliveries
    if isinstance(platform, DiscordPlatform):
        assert platform.ack_bodies(press) == [{"type": 6}]  # a deferred update, once


async def test_an_approval_card_is_decided_by_the_platforms_press_from_an_approver_once(
    tmp_path: Path, platform: Platform, fake_model: FakeModel
) -> None:
    calls: list[dict[str, Any]] = []
    fake_model.reply = scripted(asks_for(tool_call("wipe", ARGUMENTS)), "Done.")
    settings = platform.settings(
        tmp_path,
        llm=fake_model.section(),
        agent={"handler": "llm"},
        access={"allow": ["*"], "admins": [platform.person], "rate_limit": {"messages": 0}},
    )
    hashed = arguments_hash("wipe", json.dumps(ARGUMENTS))
    async with gateway_on(platform, settings, gated(calls)) as gateway:
        await platform.say(gateway, "please wipe /tmp/x")
        await platform.until(lambda: len(platform.shown()) >= 1)
        [card] = platform.shown()
        assert card.text.startswith("Approval needed: the agent wants to run wipe")
        assert f"Arguments: {json.dumps(ARGUMENTS)}" in card.text
        assert f"Hash: {hashed}" in card.text
        assert_rendered(platform, card, ["Approve", "Deny"])
        assert calls == []

        # Someone who is not an approver presses Approve: told so, nothing runs.
        refused = await platform.press(gateway, card, card.data("Approve"), by_stranger=True)
        await platform.until(lambda: len(platform.shown()) >= 2)
        notice = platform.shown()[1].text
        assert "you may not decide this" in notice and "admins" in notice
        await assert_acked(platform, refused)
        assert calls == []

        # The approver presses Approve: the notice, the tool once, the model's answer.
        approved = await platform.press(gateway, card, card.data("Approve"), by_stranger=False)
        await platform.until(lambda: "Done." in platform.texts())
        await gateway.drain()
        after = platform.texts()
        [decided] = [text for text in after if text.startswith("Approved by ")]
        assert decided.endswith(f": wipe ({hashed}).")
        assert calls == [ARGUMENTS]
        await assert_acked(platform, approved)
        results = [r["content"] for r in fake_model.requests[-1].tool_results]
        assert results == ["wiped /tmp/x"]

        # The platform delivers the same press again: acknowledged, nothing else happens.
        await platform.again(gateway, approved)
        await assert_acked(platform, approved, deliveries=2)
        await gateway.drain()
        assert platform.texts() == after
        assert calls == [ARGUMENTS]
        [row] = await gateway.store.waits("approval")
        assert row.status == "answered" and row.answer is not None
        assert (row.answer["decision"], row.answer["sender"]) == ("approved", platform.person)
    rows = dict(inbox_rows(tmp_path))
    assert sorted(rows.values()) == ["done"] * len(rows)
    assert len(rows) == 3  # the message, the refused press and the approving one


async def test_ctx_ask_with_buttons_is_answered_by_the_platforms_press(
    tmp_path: Path, platform: Platform
) -> None:
    router = Router("ask-platforms")

    @router.command("pick")
    async def pick(ctx: Context) -> None:
        answer = await ctx.ask("Pick", buttons=["red", "blue"])
        await ctx.reply(
            f"You picked {answer.text} ({answer.data}, by {answer.sender})", quote=False
        )

    settings = platform.settings(tmp_path)
    async with gateway_on(platform, settings, router) as gateway:
        await platform.say(gateway, "/pick")
        await platform.until(lambda: len(platform.shown()) >= 1)
        [question] = platform.shown()
        assert question.text == "Pick"
        assert_rendered(platform, question, ["red", "blue"])

        # Another member's press is not the asker's answer.
        other = await platform.press(gateway, question, question.data("blue"), by_stranger=True)
        await platform.until(lambda: len(platform.shown()) >= 2)
        assert platform.texts()[1] == "This question is for someone else to answer."
        await assert_acked(platform, other)

        press = await platform.press(gateway, question, question.data("blue"), by_stranger=False)
        await platform.until(lambda: len(platform.shown()) >= 3)
        await gateway.drain()
        assert platform.texts()[2] == f"You picked blue (blue, by {platform.person})"
        await assert_acked(platform, press)
        assert await gateway.store.open_waits() == []
        await platform.again(gateway, press)  # delivered twice: the answer stays one
        await assert_acked(platform, press, deliveries=2)
        await gateway.drain()
        assert len(platform.shown()) == 3
    rows = dict(inbox_rows(tmp_path))
    assert sorted(rows.values()) == ["done"] * 3  # the /pick and the two presses
