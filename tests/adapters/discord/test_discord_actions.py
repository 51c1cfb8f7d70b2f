"""ctx.edit, answer, react, pin and delete on Discord: the real gateway and discord.py on
the fake REST + gateway (tests/fakes/discord_api.py), through the outbox.

The fake keeps each channel's messages as Discord shows them (content, components,
reactions, pins, deletions), takes a press's follow-up only after the press was
acknowledged and while its token is valid, and refuses a scripted call with a status.
Waiting is on the fake's conditions, never on sleeps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.discord_api import CHANNEL_ID, THREAD_ID, FakeDiscord
from tests.support.config import db_rows
from tests.support.discord import discord_running, discord_settings
from tether import Button, Context, Router
from tether.adapters.discord.edit import reaction
from tether.config import Settings


@pytest.fixture
def fake(discord_fake: FakeDiscord) -> FakeDiscord:
    return discord_fake


def settings(tmp_path: Path, fake: FakeDiscord) -> Settings:
    return discord_settings(tmp_path, fake, require_mention=False)


def actions() -> Router:
    router = Router("dc-actions")

    @router.text(r"^book$")
    async def book(ctx: Context) -> None:
        keyboard = [[Button("Yes", data="yes")], [Button("Docs", url="https://example.com/")]]
        await ctx.reply("Book the room?", buttons=keyboard)

    @router.callback("yes")
    async def yes(ctx: Context) -> None:
        await ctx.answer("Saved ✓")
        await ctx.edit("Booked ✓")
        await ctx.react("👍")

    @router.callback("later")
    async def later(ctx: Context) -> None:
        await ctx.edit(
            "When?", buttons=[[Button("10:00", data="t10"), Button("11:00", data="t11")]]
        )

    @router.text(r"^pin$")
    async def pin(ctx: Context) -> None:
        await ctx.pin()

    @router.text(r"^unpin (\d+)$")
    async def unpin(ctx: Context) -> None:
        await ctx.pin(ctx.event.text.split()[1], unpin=True)

    @router.text(r"^delete (\d+)$")
    async def delete(ctx: Context) -> None:
        await ctx.delete(ctx.event.text.split()[1])

    @router.text(r"^tidy$")
    async def tidy(ctx: Context) -> None:
        await ctx.delete()

    @router.text(r"^like$")
    async def like(ctx: Context) -> None:
        await ctx.react("👍")
        await ctx.react("<:tether:1234567890>")

    @router.text(r"^hello$")
    async def hello(ctx: Context) -> None:
        await ctx.reply("hello to you")

    return router


def outbox(tmp_path: Path) -> list[tuple[str, str, str | None]]:
    return db_rows(tmp_path, "SELECT key, status, error FROM outbox ORDER BY seq")


async def _card(fake: FakeDiscord, channel: int) -> dict[str, Any]:
    """The person says "book" in ``channel``; the bot's card with its buttons."""
    await fake.say(channel, "book")
    await fake.wait_for(lambda: len(fake.sent) >= 1)
    card = fake.sent[-1]
    assert [len(row["components"]) for row in card["components"]] == [1, 1]
    return card


async def test_a_press_in_a_thread_is_answered_ephemerally_its_buttons_edited_away_and_reacted_to(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    # A slow acknowledgement: a follow-up sent before it would be refused (Unknown Webhook).
    fake.callback_delay = 0.3
    async with discord_running(settings(tmp_path, fake), fake, actions()) as (gateway, _):
        card = await _card(fake, THREAD_ID)
        press = fake.press_payload("yes", on=card, token="ptoken-yes")
        await fake.dispatch("INTERACTION_CREATE", press)
        await fake.wait_for(lambda: card["id"] in fake.reactions)  # the last of the three
        await gateway.drain()

    shown = fake.find(THREAD_ID, card["id"])
    assert shown is not None and shown["content"] == "Booked ✓"
    assert shown["components"] == []  # the edit took the buttons away
    assert fake.reactions == {card["id"]: ["👍"]}
    assert fake.followups_refused == []  # it waited for the acknowledgement
    (token, body), *more = fake.followups
    assert more == [] and token == "ptoken-yes"
    assert (body["content"], body["flags"]) == ("Saved ✓", 64)  # ephemeral: the presser only
    assert fake.callbacks == [(int(press["id"]), {"type": 6})]
    assert [m["id"] for m in fake.sent] == [card["id"]]  # nothing posted beside the card
    assert fake.find(CHANNEL_ID, card["id"]) is None  # all of it in the thread
    assert {status for _, status, _ in outbox(tmp_path)} == {"sent"}


async def test_an_edit_with_buttons_sets_them_in_place_of_the_old_ones(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    async with discord_running(settings(tmp_path, fake), fake, actions()) as (gateway, _):
        card = await _card(fake, CHANNEL_ID)
        await fake.dispatch("INTERACTION_CREATE", fake.press_payload("later", on=card))
        await fake.wait_for(lambda: any(edit[0] == card["id"] for edit in fake.message_edits))
        await gateway.drain()
    shown = fake.find(CHANNEL_ID, card["id"])
    assert shown is not None and shown["content"] == "When?"
    assert shown["components"] == [
        {
            "type": 1,
            "components": [
                {"type": 2, "style": 1, "label": "10:00", "custom_id": "t10"},
                {"type": 2, "style": 1, "label": "11:00", "custom_id": "t11"},
            ],
        }
    ]


async def test_a_toast_after_the_token_expired_is_said_in_the_channel(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    fake.expired_tokens.add("ptoken-old")
    async with discord_running(settings(tmp_path, fake), fake, actions()) as (gateway, _):
        card = await _card(fake, CHANNEL_ID)
        press = fake.press_payload("yes", on=card, token="ptoken-old")
        await fake.dispatch("INTERACTION_CREATE", press)
        await fake.wait_for(lambda: len(fake.sent) >= 2 and card["id"] in fake.reactions)
        await gateway.drain()
    assert fake.followups == [] and fake.followups_refused == [("ptoken-old", 401)]
    assert [m["content"] for m in fake.sent] == ["Booked ✓", "Saved ✓"]  # the card, edited
    assert fake.sent[1]["channel_id"] == str(CHANNEL_ID)
    assert {status for _, status, _ in outbox(tmp_path)} == {"sent"}


async def test_a_message_handler_pins_unpins_reacts_and_deletes(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    async with discord_running(settings(tmp_path, fake), fake, actions()) as (gateway, _):
        pinned = await fake.say(CHANNEL_ID, "pin")
        await fake.wait_for(lambda: pinned["id"] in fake.pins.get(CHANNEL_ID, []))
        liked = await fake.say(THREAD_ID, "like")
        await fake.wait_for(lambda: len(fake.reactions.get(liked["id"], [])) == 2)
        await fake.say(CHANNEL_ID, f"unpin {pinned['id']}")
        await fake.wait_for(lambda: len(fake.pin_calls) == 2)
        tidy = await fake.say(THREAD_ID, "tidy")
        await fake.wait_for(lambda: len(fake.deleted) == 1)
        await gateway.drain()
    assert fake.pin_calls == [
        (CHANNEL_ID, pinned["id"], True),
        (CHANNEL_ID, pinned["id"], False),
    ]
    assert fake.pins[CHANNEL_ID] == []
    # The server emoji by the name:id the route takes; the Unicode one URL-quoted and back.
    assert fake.reactions[liked["id"]] == ["👍", "tether:1234567890"]
    assert fake.deleted == [(THREAD_ID, tidy["id"])]  # in the thread it was said in
    assert fake.find(THREAD_ID, tidy["id"]) is None
    assert fake.sent == []  # acting is not answering
    assert {status for _, status, _ in outbox(tmp_path)} == {"sent"}


async def test_deleting_a_message_that_is_gone_already_is_done_not_dead(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    async with discord_running(settings(tmp_path, fake), fake, actions()) as (gateway, _):
        await fake.say(CHANNEL_ID, "hello")
        await fake.wait_for(lambda: len(fake.sent) == 1)
        reply = fake.sent[0]
        fake.history[CHANNEL_ID].remove(reply)  # a moderator deleted it first
        asked = await fake.say(CHANNEL_ID, f"delete {reply['id']}")
        await fake.wait_for(lambda: len(fake.unknown_deletes) == 1)
        await gateway.drain()
    assert fake.unknown_deletes == [(CHANNEL_ID, reply["id"])]  # Discord said 404
    assert fake.deleted == []
    assert (f"dc:msg:{asked['id']}#0", "sent", None) in outbox(tmp_path)
    assert {status for _, status, _ in outbox(tmp_path)} == {"sent"}


async def test_a_reaction_refused_for_a_missing_permission_is_one_dead_row_and_replies_still_go(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    fake.fail_next_action(403)
    async with discord_running(settings(tmp_path, fake), fake, actions()) as (gateway, _):
        liked = await fake.say(CHANNEL_ID, "like")
        await fake.wait_for(lambda: len(fake.reactions.get(liked["id"], [])) == 1)
        await fake.say(CHANNEL_ID, "hello")
        await fake.wait_for(lambda: len(fake.sent) == 1)
        await gateway.drain()
    assert fake.reactions == {liked["id"]: ["tether:1234567890"]}  # the second one went
    assert [m["content"] for m in fake.sent] == ["hello to you"]
    rows = outbox(tmp_path)
    dead = [(key, error) for key, status, error in rows if status == "dead"]
    assert len(dead) == 1
    key, error = dead[0]
    assert key == f"dc:msg:{liked['id']}#0"
    assert error is not None and "403" in error and "Missing Permissions" in error
    assert [status for _, status, _ in rows].count("sent") == len(rows) - 1


def test_a_server_emoji_is_named_for_the_route_and_a_unicode_one_is_kept() -> None:
    assert reaction("<:tether:1234567890>") == "tether:1234567890"
    assert reaction("<a:party:42>") == "party:42"
    assert reaction(" 👍 ") == "👍"
    assert reaction("tether:1234567890") == "tether:1234567890"
