"""The Discord adapter: the real discord.py client against a fake REST + gateway.

Every test runs the real Gateway (SQLite store in tmp_path) with the adapter built from
config by ``build_adapters`` and pointed at a fake Discord (tests/fakes/discord_api.py)
on 127.0.0.1 through ``api_base`` / ``gateway_url``. Synchronization waits on conditions
(in the fake, or on the store), never on sleeps.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import structlog

from tests.fakes.discord_api import (
    BOT_USER,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    GUILD_ID,
    MESSAGE_CONTENT,
    OTHER_BOT,
    OTHER_BOT_ID,
    THREAD_ID,
    TOKEN,
    FakeDiscord,
    iso,
    member,
)
from tests.support.config import events_named, make_settings, write_config
from tests.support.discord import LONG_REPLY, discord_running, discord_settings, router, section
from tests.support.processes import TETHER, spawn_run, subprocess_env
from tether.adapters.discord import DiscordAdapter
from tether.adapters.discord.backfill import cursor_name
from tether.adapters.discord.send import classify, send_nonce
from tether.config import load_text
from tether.errors import ConfigError, SendFatal, SendRetryable
from tether.events import Kind
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters

# -- fixtures and helpers ----------------------------------------------------------------


@pytest.fixture
def fake(discord_fake: FakeDiscord) -> FakeDiscord:
    """The shared fake (discord_fake, tests/fixtures.py), as this module uses it."""
    return discord_fake


def replies_to(fake: FakeDiscord, message: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        sent
        for sent in fake.sent
        if str((sent.get("message_reference") or {}).get("message_id")) == message["id"]
    ]


def inbox_keys(tmp_path: Path) -> list[str]:
    with sqlite3.connect(tmp_path / "tether.db") as db:
        return [key for (key,) in db.execute("SELECT key FROM inbox ORDER BY seq")]


# -- Done when: a guild mention is answered as a reply; a DM is answered ---------------


async def test_guild_mention_is_answered_in_its_channel_as_a_reply_and_a_dm_too(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    async with discord_running(discord_settings(tmp_path, fake), fake) as (gateway, accepts):
        asked = await fake.say(CHANNEL_ID, "hello there", mention_bot=True)
        await fake.wait_for(lambda: len(fake.sent) >= 1)
        dm = await fake.say(DM_CHANNEL_ID, "hi in private")
        await fake.wait_for(lambda: len(fake.sent) >= 2)
        # Our own replies come back over the gateway too: they move the cursor, no more.
        last = fake.sent[-1]["id"]
        await accepts.wait_for(lambda: accepts.cursor(cursor_name(DM_CHANNEL_ID)) == last)
        await gateway.drain()
        assert await gateway.store.cursor(cursor_name(DM_CHANNEL_ID)) == last

    reply, dm_reply = fake.sent
    assert reply["channel_id"] == str(CHANNEL_ID)
    assert reply["content"] == "@Tether hello there"
    assert str(reply["message_reference"]["message_id"]) == asked["id"]
    post = fake.posts[0].body
    assert post["nonce"] == send_nonce(f"dc:msg:{asked['id']}#0") and len(post["nonce"]) <= 25
    assert post["enforce_nonce"] is True
    assert post["message_reference"]["fail_if_not_exists"] is False
    assert post["allowed_mentions"] == {"parse": ["users"], "replied_user": True}
    assert dm_reply["channel_id"] == str(DM_CHANNEL_ID)
    assert dm_reply["content"] == "hi in private"
    assert str(dm_reply["message_reference"]["message_id"]) == dm["id"]
    assert len(fake.sent) == 2
    assert inbox_keys(tmp_path) == [f"dc:msg:{asked['id']}", f"dc:msg:{dm['id']}"]


# -- Done when: the same MESSAGE_CREATE twice is answered once ---------------------------


async def test_the_same_message_create_dispatched_twice_is_answered_once(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    async with discord_running(discord_settings(tmp_path, fake), fake) as (gateway, accepts):
        message = fake.message(CHANNEL_ID, "only once", mention_bot=True)
        await fake.dispatch("MESSAGE_CREATE", message)
        await fake.dispatch("MESSAGE_CREATE", message)  # a replay after RESUME
        key = f"dc:msg:{message['id']}"
        await accepts.wait_for(lambda: len(accepts.of(key)) == 2)
        await fake.wait_for(lambda: len(fake.sent) >= 1)
        await gateway.drain()
    assert sorted(accepts.of(key)) == [False, True]  # both reached the inbox, one was new
    assert [sent["content"] for sent in fake.sent] == ["@Tether only once"]
    assert inbox_keys(tmp_path) == [key]


# -- Done when: a message posted while down is backfilled after a SIGKILL ---------------


@pytest.mark.crash
@pytest.mark.slow
async def test_a_message_posted_while_killed_is_backfilled_and_answered_once(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    config = write_config(tmp_path, platforms={"discord": section(fake)})
    log = tmp_path / "tether.log"
    first = await spawn_run(config, log)
    try:
        await fake.wait_for(lambda: fake.connected >= 1, timeout=30)
        before = await fake.say(CHANNEL_ID, "before the crash", mention_bot=True)
        await fake.wait_for(lambda: len(replies_to(fake, before)) >= 1, timeout=30)
    finally:
        first.send_signal(signal.SIGKILL)
        await first.wait()
    await fake.wait_for(lambda: fake.connected == 0)

    # Posted while no gateway connection was open: no event will ever carry it.
    missed = fake.post(fake.message(CHANNEL_ID, "while you were away", mention_bot=True))
    elsewhere = fake.post(fake.message(CHANNEL_ID, "chatter, not for the bot"))
    reads = len(fake.history_reads)
    second = await spawn_run(config, log)
    try:
        await fake.wait_for(lambda: len(replies_to(fake, missed)) >= 1, timeout=30)
    finally:
        second.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(second.wait(), 30) == 0

    assert [sent["content"] for sent in replies_to(fake, before)] == ["@Tether before the crash"]
    assert [sent["content"] for sent in replies_to(fake, missed)] == ["@Tether while you were away"]
    assert len(fake.sent) == 2
    # The restart read the channel after the last message it had seen, not from the start.
    (channel, after), *_ = fake.history_reads[reads:]
    assert channel == CHANNEL_ID and after >= int(before["id"])
    keys = inbox_keys(tmp_path)
    assert keys == [f"dc:msg:{before['id']}", f"dc:msg:{missed['id']}"]
    assert f"dc:msg:{elsewhere['id']}" not in keys
    text = log.read_text()
    assert '"discord.backfilled"' in text
    assert fake.token not in text


# -- Event.raw is the payload as Discord sent it ----------------------------------------


async def test_a_server_messages_raw_is_the_payload_the_gateway_sent(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    """discord.py's parser writes into a payload once Tether has read it: the author's
    ``member`` gains ``user``, a mention of someone it has not cached loses its
    ``member``. The stored event's ``raw`` is what Discord sent."""
    async with discord_running(discord_settings(tmp_path, fake), fake) as (gateway, _accepts):
        sent = fake.message(CHANNEL_ID, f"what does <@{OTHER_BOT_ID}> say?", mention_bot=True)
        sent["mentions"] = [{**person, "member": member()} for person in (BOT_USER, OTHER_BOT)]
        as_sent = json.loads(json.dumps(sent))
        await fake.dispatch("MESSAGE_CREATE", sent)
        await fake.wait_for(lambda: len(fake.sent) >= 1)
        await gateway.drain()
        row = await gateway.store.inbox_row(f"dc:msg:{sent['id']}")
    assert row is not None and "member" in as_sent and "user" not in as_sent["member"]
    assert row.event.raw == as_sent


async def test_a_backfilled_messages_raw_is_the_history_item_rest_sent(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    """History items carry no ``guild_id``; the backfill knows the server from the channel
    and tells normalize so, without writing it into the payload."""
    settings = discord_settings(tmp_path, fake)
    async with discord_running(settings, fake) as (gateway, _accepts):
        before = await fake.say(CHANNEL_ID, "before", mention_bot=True)
        await fake.wait_for(lambda: len(replies_to(fake, before)) >= 1)
        await gateway.drain()
    await fake.wait_for(lambda: fake.connected == 0)
    missed = fake.post(fake.message(CHANNEL_ID, "while you were away", mention_bot=True))
    async with discord_running(settings, fake) as (gateway, _accepts):
        await fake.wait_for(lambda: len(replies_to(fake, missed)) >= 1)
        await gateway.drain()
        row = await gateway.store.inbox_row(f"dc:msg:{missed['id']}")
    as_rest_sent = {k: v for k, v in missed.items() if k not in ("guild_id", "member")}
    assert row is not None and row.event.raw == as_rest_sent
    assert row.event.meta["guild_id"] == str(GUILD_ID)
    assert row.event.conversation.chat_type == "group"


# -- Done when: a send failed with 500 is retried with the identical nonce --------------


@pytest.mark.slow
@pytest.mark.parametrize("commit", [False, True], ids=["refused", "stored-then-500"])
async def test_a_send_failing_with_500_is_retried_with_the_same_nonce(
    tmp_path: Path, fake: FakeDiscord, commit: bool
) -> None:
    fake.fail_next_post(500, commit=commit)
    async with discord_running(discord_settings(tmp_path, fake), fake) as (gateway, _accepts):
        asked = await fake.say(DM_CHANNEL_ID, "flaky")
        await fake.wait_for(lambda: len(fake.posts) >= 2)
        await gateway.drain()
    first, second = fake.posts
    assert (first.status, second.status) == (500, 200)
    assert first.body["nonce"] == second.body["nonce"] == send_nonce(f"dc:msg:{asked['id']}#0")
    assert [sent["content"] for sent in fake.sent] == ["flaky"]  # one message, either way


@pytest.mark.slow
async def test_a_send_that_times_out_is_retried_by_the_outbox_with_the_same_nonce(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    fake.fail_next_post(200, commit=True, delay=5.0)  # stored, but the answer is late
    settings = discord_settings(tmp_path, fake, send_timeout=0.5)
    async with discord_running(settings, fake) as (gateway, _accepts):
        asked = await fake.say(DM_CHANNEL_ID, "slow")
        await fake.wait_for(lambda: len(fake.posts) >= 2)
        await gateway.drain()
        (row,) = await gateway.store.outbox_rows(f"dc:msg:{asked['id']}")
    assert fake.posts[0].body["nonce"] == fake.posts[1].body["nonce"]
    assert [sent["content"] for sent in fake.sent] == ["slow"]
    assert (row.status, row.attempts) == ("sent", 2)


# -- Done when: a 4,500-character reply arrives as 3 ordered messages -------------------


async def test_long_reply_arrives_as_three_ordered_messages_with_fences_intact(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    assert len(LONG_REPLY) == 4500
    async with discord_running(discord_settings(tmp_path, fake), fake) as (gateway, _accepts):
        asked = await fake.say(DM_CHANNEL_ID, "long")
        await fake.wait_for(lambda: len(fake.sent) >= 3)
        await gateway.drain()
    chunks = [sent["content"] for sent in fake.sent]
    assert len(chunks) == 3
    assert all(len(chunk) <= 2000 for chunk in chunks)
    for chunk in chunks:
        fences = [line for line in chunk.splitlines() if line.startswith("```")]
        assert len(fences) % 2 == 0, chunk[-200:]
    assert chunks[0].startswith("Here is the script")
    assert chunks[1].startswith("```python\n") and chunks[2].endswith("." * 10)
    rebuilt = chunks[0]
    for chunk in chunks[1:]:
        if chunk.startswith("```python\n"):
            rebuilt = rebuilt.removesuffix("\n```")
            chunk = chunk.removeprefix("```python\n")
        rebuilt += "\n" + chunk
    assert rebuilt.replace("\n", "") == LONG_REPLY.replace("\n", "")
    assert str(fake.sent[0]["message_reference"]["message_id"]) == asked["id"]
    assert "message_reference" not in fake.sent[1] and "message_reference" not in fake.sent[2]
    assert len({post.body["nonce"] for post in fake.posts}) == 3


# -- Done when: an unaddressed server message is ignored with require_mention ----------


async def test_server_messages_need_a_mention_or_a_reply_to_the_bot(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    earlier = fake.post(fake.message(CHANNEL_ID, "an earlier answer", author=BOT_USER))
    with structlog.testing.capture_logs() as logs:
        async with discord_running(discord_settings(tmp_path, fake), fake) as (gateway, _accepts):
            ignored = await fake.say(CHANNEL_ID, "just chatting")
            from_bot = await fake.say(CHANNEL_ID, "hi", author=OTHER_BOT, mention_bot=True)
            reply = await fake.say(CHANNEL_ID, "and a follow-up", reply_to=earlier)
            by_role = await fake.say(CHANNEL_ID, "via the role", mention_bot_role=True)
            await fake.wait_for(lambda: len(fake.sent) >= 2)
            await gateway.drain()
            # The ignored message still moved the channel's cursor past itself.
            assert int(await gateway.store.cursor(cursor_name(CHANNEL_ID)) or 0) >= int(
                ignored["id"]
            )
    assert [sent["content"] for sent in fake.sent] == ["and a follow-up", "@Tether via the role"]
    assert inbox_keys(tmp_path) == [f"dc:msg:{reply['id']}", f"dc:msg:{by_role['id']}"]
    reasons = {e["message_id"]: e["reason"] for e in events_named(logs, "discord.ignored")}
    assert reasons[int(ignored["id"])] == "server message not addressed to the bot"
    assert reasons[int(from_bot["id"])] == "from a bot or webhook"


async def test_require_mention_off_answers_every_server_message(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    async with discord_running(discord_settings(tmp_path, fake, require_mention=False), fake) as (
        gw,
        _,
    ):
        await fake.say(CHANNEL_ID, "just chatting")
        await fake.wait_for(lambda: len(fake.sent) >= 1)
        await gw.drain()
    assert [sent["content"] for sent in fake.sent] == ["just chatting"]


# -- normalization: threads, attachments, edits, commands ------------------------------


async def test_threads_attachments_edits_and_commands_are_normalized(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    image = {
        "id": "4242",
        "filename": "cat.png",
        "size": 2048,
        "url": "https://cdn.example/cat.png",
        "proxy_url": "https://media.example/cat.png",
        "content_type": "image/png",
    }
    async with discord_running(discord_settings(tmp_path, fake), fake) as (gateway, accepts):
        in_thread = await fake.say(THREAD_ID, "/help me", mention_bot=True)
        await fake.wait_for(lambda: len(fake.sent) >= 1)
        picture = await fake.say(DM_CHANNEL_ID, "look", attachments=[image])
        edited = dict(picture, content="look again", edited_timestamp=iso(time.time() + 1))
        await fake.dispatch("MESSAGE_UPDATE", edited)
        await fake.dispatch("MESSAGE_UPDATE", dict(picture, embeds=[]))  # an unfurl: no edit
        edit_key = f"dc:edit:{picture['id']}:{edited['edited_timestamp']}"
        await accepts.wait_for(lambda: accepts.of(edit_key) == [True])
        await gateway.drain()
        store = gateway.store
        edit = await store.inbox_row(edit_key)
        thread_row = await store.inbox_row(f"dc:msg:{in_thread['id']}")
        picture_row = await store.inbox_row(f"dc:msg:{picture['id']}")

    assert thread_row is not None and picture_row is not None and edit is not None
    event = thread_row.event
    # A thread is its own chat, so the reply goes into the thread.
    assert (event.conversation.chat_id, event.conversation.chat_type) == (str(THREAD_ID), "group")
    assert event.meta["parent_id"] == str(CHANNEL_ID)
    assert (event.kind, event.command, event.args) == (Kind.COMMAND, "help", "me")
    assert event.mentions_bot and event.text == "@Tether /help me"
    assert fake.sent[0]["channel_id"] == str(THREAD_ID)
    (attachment,) = picture_row.event.attachments
    assert (attachment.kind, attachment.mime, attachment.size, attachment.name) == (
        "image",
        "image/png",
        2048,
        "cat.png",
    )
    assert attachment.url == image["url"] and attachment.file_id == "4242"
    assert picture_row.event.conversation.chat_type == "dm"
    assert edit.event.kind is Kind.EDIT and edit.event.text == "look again"
    assert [key for key in inbox_keys(tmp_path) if key.startswith("dc:edit:")] == [edit_key]


# -- /ask: defer within 3 s, answer by editing the deferred response --------------------


async def test_ask_is_deferred_then_answered_and_falls_back_to_the_channel_when_expired(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    async with discord_running(discord_settings(tmp_path, fake, ask_command=True), fake) as (
        gateway,
        _accepts,
    ):
        (command,) = [command for command in fake.commands if command["name"] == "ask"]
        assert command["options"][0]["name"] == "question"  # beside the menu's commands
        fresh = await fake.interact("what is tether?")
        await fake.wait_for(lambda: len(fake.original_edits) >= 1)
        fake.expired_tokens.add("itoken-late")
        late = await fake.interact("and now?", token="itoken-late")
        await fake.wait_for(lambda: len(fake.sent) >= 1)
        await gateway.drain()
    assert fake.callbacks[0] == (int(fresh["id"]), {"type": 5})  # deferred channel message
    assert fake.original_edits == [("itoken-1", _edit_body("what is tether?"))]
    # The token no longer works (15 minutes are up): the answer goes to the channel.
    assert fake.callbacks[1][0] == int(late["id"])
    assert [(s["channel_id"], s["content"]) for s in fake.sent] == [(str(CHANNEL_ID), "and now?")]
    assert fake.posts[0].body["nonce"] == send_nonce(f"dc:int:{late['id']}#0")
    assert fake.followups == []
    assert inbox_keys(tmp_path) == [f"dc:int:{fresh['id']}", f"dc:int:{late['id']}"]


def _edit_body(content: str) -> dict[str, Any]:
    return {"content": content, "allowed_mentions": {"parse": ["users"], "replied_user": True}}


# -- a refused privileged intent: one clear line, readiness says why, no retry loop -----


async def test_a_refused_privileged_intent_is_one_clear_line_and_in_readiness(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    fake.refuse_intents = MESSAGE_CONTENT
    settings = discord_settings(tmp_path, fake)
    adapters = build_adapters(settings)
    adapter = adapters["discord"]
    assert isinstance(adapter, DiscordAdapter)
    gateway = Gateway(settings, adapters, router=router())
    with structlog.testing.capture_logs() as logs:
        await gateway.start()
        try:
            assert adapter._task is not None
            await asyncio.wait_for(asyncio.shield(adapter._task), 10)  # it gave up
            problems = await gateway.readiness()
        finally:
            await gateway.stop()
    assert fake.identifies and len(fake.identifies) == 1  # no reconnect loop
    assert fake.identifies[0]["intents"] & MESSAGE_CONTENT
    (line,) = events_named(logs, "discord.intents_refused")
    assert line["log_level"] == "error" and line["intents"] == ["message_content"]
    assert "Privileged Gateway Intents" in line["reason"]
    assert [e for e in logs if e["log_level"] == "error"] == [line]
    (problem,) = problems
    assert problem.startswith("discord not connected: Discord refused the privileged intent")
    assert "4014" in problem


async def test_a_rejected_token_stops_the_start_with_a_clear_error(
    tmp_path: Path, fake: FakeDiscord
) -> None:
    from tether.errors import GatewayError

    settings = make_settings(
        tmp_path, platforms={"discord": section(fake, token="not.the.right-token")}
    )
    gateway = Gateway(settings, build_adapters(settings), router=router())
    with pytest.raises(GatewayError, match=r"platforms\.discord\.token was rejected"):
        await gateway.start()
    await gateway.stop()


# -- config and error mapping ------------------------------------------------------------


def test_config_rejects_unknown_intents_and_a_bot_prefixed_token(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"platforms\.discord\.intents.*'guild_mesages'"):
        load_text(
            json.dumps({"platforms": {"discord": {"token": TOKEN, "intents": ["guild_mesages"]}}})
        )
    with pytest.raises(ConfigError, match=r"platforms\.discord\.token.*'Bot ' prefix"):
        load_text(json.dumps({"platforms": {"discord": {"token": f"Bot {TOKEN}"}}}))
    with pytest.raises(ConfigError, match=r"platforms\.discord\.gateway_url"):
        load_text(json.dumps({"platforms": {"discord": {"token": TOKEN, "gateway_url": "x"}}}))


@pytest.mark.slow
def test_check_masks_the_token(tmp_path: Path) -> None:
    config = write_config(tmp_path, platforms={"discord": {"token": TOKEN}})
    result = subprocess.run(
        [TETHER, "check", "-c", str(config)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert TOKEN not in result.stdout + result.stderr
    assert "discord" in result.stdout


def test_classify_maps_http_errors_by_whether_a_retry_can_help() -> None:
    import discord

    def error(status: int, headers: dict[str, str] | None = None) -> discord.HTTPException:
        response = type("R", (), {"status": status, "reason": "x", "headers": headers or {}})()
        return discord.HTTPException(response, {"message": "m", "code": 0})  # type: ignore[arg-type]

    assert isinstance(classify(error(500)), SendRetryable)
    assert isinstance(classify(error(503)), SendRetryable)
    limited = classify(error(429, {"Retry-After": "2.5"}))
    assert isinstance(limited, SendRetryable) and limited.retry_after == 2.5
    for status in (400, 401, 403, 404):
        assert isinstance(classify(error(status)), SendFatal)
    assert len(send_nonce("dc:msg:1#0")) == 25
    assert send_nonce("dc:msg:1#0") == send_nonce("dc:msg:1#0") != send_nonce("dc:msg:1#1")
