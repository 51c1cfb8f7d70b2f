"""ctx.edit, delete, react, pin and answer on Feishu: the real gateway and lark-oapi
against the fake open platform (tests/fakes/feishu_api.py).

Events are signed webhook posts to Tether's HTTP server; each test waits for the gateway
to drain (the handlers run, the outbox delivers) and asserts on what the fake recorded:
the card's content after the edit, reactions, pins, recalls, and the outbox rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.feishu_api import FakeFeishu, card_action_event, message_event
from tests.support.config import db_rows
from tests.support.feishu import feishu_settings, post_event
from tests.support.gateway import running
from tether import ActionUnsupported, Button, Context, Router
from tether.adapters.feishu.edit import reaction_type
from tether.errors import SendFatal

TEAM = "oc_team"


@pytest.fixture
def fake(feishu: FakeFeishu) -> FakeFeishu:
    feishu.admin_chats.add(TEAM)  # the bot may recall people's messages there
    return feishu


def actions() -> Router:
    router = Router("feishu-actions")

    @router.command("book")
    async def book(ctx: Context) -> None:
        await ctx.reply("Book the room?", buttons=[[Button("Yes", data="yes")]])

    @router.callback("yes")
    async def booked(ctx: Context) -> None:
        await ctx.edit("Booked ✓")
        await ctx.react("👍")

    @router.callback("toast")
    async def toast(ctx: Context) -> None:
        try:
            await ctx.answer("Saved")
        except ActionUnsupported as exc:
            await ctx.reply(str(exc), quote=False)

    @router.command("tidy")
    async def tidy(ctx: Context) -> None:
        await ctx.pin()
        await ctx.react("👍")
        await ctx.pin(message_id="om_old", unpin=True)
        await ctx.delete()

    @router.command("forget")
    async def forget(ctx: Context) -> None:
        await ctx.delete()

    @router.command("unicorn")
    async def unicorn(ctx: Context) -> None:
        await ctx.react("🦄")
        await ctx.reply("still here", quote=False)

    @router.command("close")
    async def close(ctx: Context) -> None:
        await ctx.edit(f"Closed: {ctx.event.args}", message_id=ctx.event.args)

    return router


def group(message_id: str, text: str) -> dict[str, object]:
    return message_event(message_id, text, chat_id=TEAM, chat_type="group")


def outbox(tmp_path: Path) -> list[tuple[str, str, str | None]]:
    return [
        (str(key), str(status), error)
        for key, status, error in db_rows(tmp_path, "SELECT key, status, error FROM outbox")
    ]


async def test_a_press_edits_its_card_without_buttons_and_reacts(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    async with running(feishu_settings(tmp_path, fake), actions()) as (gateway, _):
        assert await post_event(gateway, message_event("om_book", "/book")) == 200
        await gateway.drain()
        [card] = fake.messages
        assert card["content"]["config"]["update_multi"] is True  # a shared card: editable
        press = card_action_event("yes", message_id=card["message_id"], event_id="ev_yes")
        assert await post_event(gateway, press) == 200
        await gateway.drain()
    assert fake.messages == [card]  # nothing new posted: the pressed card changed
    assert card["msg_type"] == "interactive"
    shown = {"tag": "div", "text": {"tag": "plain_text", "content": "Booked ✓"}}
    assert card["content"]["elements"] == [shown]  # the buttons are gone
    changed = [c.method for c in fake.calls if c.path.endswith(card["message_id"])]
    assert changed == ["PATCH"]  # a pressed message is a card: no PUT tried first
    assert fake.reactions == [(card["message_id"], "THUMBSUP")]
    assert {status for _, status, _ in outbox(tmp_path)} == {"sent"}


async def test_a_card_this_process_never_saw_is_edited_after_puts_refusal(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    settings = feishu_settings(tmp_path, fake)
    async with running(settings, actions()) as (gateway, _):
        assert await post_event(gateway, message_event("om_book", "/book")) == 200
        await gateway.drain()
    [card] = fake.messages
    async with running(settings, actions()) as (gateway, _):  # a restart: nothing remembered
        close = message_event("om_close", f"/close {card['message_id']}")
        assert await post_event(gateway, close) == 200
        await gateway.drain()
    changed = [(c.method, c.status) for c in fake.calls if c.path.endswith(card["message_id"])]
    assert changed == [("PUT", 400), ("PATCH", 200)]  # 230054: not text or post, so a card
    text = card["content"]["elements"][0]["text"]["content"]
    assert (card["msg_type"], text) == ("interactive", f"Closed: {card['message_id']}")
    assert fake.messages == [card]


async def test_a_message_is_pinned_reacted_to_another_unpinned_and_it_is_recalled(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    fake.add_message("om_tidy", chat_id=TEAM)
    fake.add_message("om_old", chat_id=TEAM)
    fake.pins.append("om_old")
    settings = feishu_settings(tmp_path, fake, answer_groups="all")
    async with running(settings, actions()) as (gateway, _):
        assert await post_event(gateway, group("om_tidy", "/tidy")) == 200
        await gateway.drain()
    assert fake.pins == ["om_tidy"]
    assert fake.reactions == [("om_tidy", "THUMBSUP")]
    assert fake.recalled == ["om_tidy"]
    done = [(c.method, c.path.removeprefix("/open-apis/im/v1/")) for c in fake.sends()]
    assert done == [
        ("POST", "pins"),
        ("POST", "messages/om_tidy/reactions"),
        ("DELETE", "pins/om_old"),
        ("DELETE", "messages/om_tidy"),
    ]
    assert [status for _, status, _ in outbox(tmp_path)] == ["sent"] * 4


async def test_deleting_a_message_already_recalled_ends_sent_not_dead(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    fake.add_message("om_forget", chat_id=TEAM)
    fake.recalled.append("om_forget")  # the person recalled it before the bot got to it
    settings = feishu_settings(tmp_path, fake, answer_groups="all")
    async with running(settings, actions()) as (gateway, _):
        assert await post_event(gateway, group("om_forget", "/forget")) == 200
        await gateway.drain()
    [recall] = [c for c in fake.calls if c.method == "DELETE"]
    assert recall.status == 400  # Feishu's 230011, "The message is recalled."
    assert outbox(tmp_path) == [("fs:msg:om_forget#0", "sent", None)]


async def test_recalling_a_persons_message_without_admin_rights_is_dead(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    fake.add_message("om_tidy")  # a DM: the bot is no admin of it
    async with running(feishu_settings(tmp_path, fake), actions()) as (gateway, _):
        assert await post_event(gateway, message_event("om_tidy", "/forget")) == 200
        await gateway.drain()
    [(key, status, error)] = outbox(tmp_path)
    assert (key, status) == ("fs:msg:om_tidy#0", "dead")
    assert error is not None and "230026" in error
    assert fake.recalled == []


async def test_an_emoji_feishu_has_no_name_for_is_one_dead_row_and_the_reply_still_goes(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    fake.add_message("om_unicorn")
    async with running(feishu_settings(tmp_path, fake), actions()) as (gateway, _):
        assert await post_event(gateway, message_event("om_unicorn", "/unicorn")) == 200
        await gateway.drain()
    [(react_key, react_status, error), (reply_key, reply_status, _)] = outbox(tmp_path)
    assert (react_key, react_status) == ("fs:msg:om_unicorn#0", "dead")
    assert error is not None and "no reaction for '🦄'" in error and "THUMBSUP" in error
    assert (reply_key, reply_status) == ("fs:msg:om_unicorn#1", "sent")
    assert [m["content"] for m in fake.messages] == [{"text": "still here"}]
    assert fake.reactions == [] and not [c for c in fake.calls if "reactions" in c.path]


async def test_a_rate_limited_pin_is_retried_and_set_once(tmp_path: Path, fake: FakeFeishu) -> None:
    fake.add_message("om_tidy", chat_id=TEAM)
    fake.add_message("om_old", chat_id=TEAM)
    fake.fail_next_change(429, 99991400, "too many", headers={"x-ogw-ratelimit-reset": "0"})
    settings = feishu_settings(tmp_path, fake, answer_groups="all")
    async with running(settings, actions()) as (gateway, _):
        assert await post_event(gateway, group("om_tidy", "/tidy")) == 200
        await gateway.drain()
    assert [c.status for c in fake.calls if c.path == "/open-apis/im/v1/pins"] == [429, 200]
    assert fake.pins == ["om_tidy"] and fake.recalled == ["om_tidy"]
    assert [status for _, status, _ in outbox(tmp_path)] == ["sent"] * 4


async def test_ctx_answer_is_refused_at_the_call_on_feishu(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    async with running(feishu_settings(tmp_path, fake), actions()) as (gateway, _):
        press = card_action_event("toast", message_id="om_card_9", event_id="ev_toast")
        assert await post_event(gateway, press) == 200
        await gateway.drain()
    [said] = fake.messages
    assert said["content"] == {"text": "feishu cannot answer presses on messages"}
    assert [key for key, _, _ in outbox(tmp_path)] == ["fs:evt:ev_toast#0"]  # no answer row


@pytest.mark.parametrize(
    ("emoji", "name"),
    [
        ("👍", "THUMBSUP"),
        ("👍🏽", "THUMBSUP"),
        ("👎", "ThumbsDown"),
        ("❤️", "HEART"),
        ("❤", "HEART"),
        ("😂", "LAUGH"),
        ("👏", "APPLAUSE"),
        ("✅", "DONE"),
        ("🎉", "PARTY"),
        ("THUMBSUP", "THUMBSUP"),
        ("Fire", "Fire"),
    ],
)
def test_reaction_types_map_unicode_and_pass_feishus_names(emoji: str, name: str) -> None:
    assert reaction_type(emoji) == name


@pytest.mark.parametrize("emoji", ["🦄", "👍👍", "thumbs up", ""])
def test_an_emoji_without_a_feishu_name_is_fatal(emoji: str) -> None:
    with pytest.raises(SendFatal, match="no reaction for"):
        reaction_type(emoji)
