"""The Telegram adapter: the real python-telegram-bot client against a fake Bot API.

Every test runs the real Gateway (SQLite store in tmp_path) with the adapter built from
config by ``build_adapters``, and a fake Bot API server (tests/fakes/telegram_api.py) on
127.0.0.1 that the tests own. Synchronization waits on conditions in the fake or on the
gateway draining, never on sleeps.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
import yaml
from aiohttp.client_reqrep import ConnectionKey
from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter, TimedOut

from tests.fakes.telegram_api import BOT_ID, USERNAME, FakeTelegram
from tests.support.config import events_named, inbox_rows, make_settings, write_config
from tests.support.gateway import running
from tests.support.processes import TETHER, spawn_run, subprocess_env
from tests.support.telegram import SECRET, post_update, telegram_settings, webhook_settings
from tether.adapters.kit import Dropped
from tether.adapters.telegram import TelegramAdapter
from tether.adapters.telegram.send import classify, plain_text
from tether.errors import GatewayError, SendAmbiguous, SendFatal, SendRetryable
from tether.events import Event, Kind, Target
from tether.gateway.app import Gateway
from tether.gateway.assembly import build_adapters
from tether.gateway.builtin.echo import echo_router
from tether.gateway.handler.context import Context
from tether.gateway.handler.routing import Router
from tether.text import utf16_len

# -- fixtures and helpers ----------------------------------------------------------------


test_handlers = Router("telegram-tests")


@test_handlers.command("ping")
async def _ping(ctx: Context) -> None:
    await ctx.reply("pong")


@test_handlers.text(r"^long$")
async def _long(ctx: Context) -> None:
    await ctx.reply(LONG_REPLY)


@test_handlers.text(r"^html$")
async def _html(ctx: Context) -> None:
    await ctx.reply("<b>bold</b> &amp; <broken", format="html")


@test_handlers.on(Kind.CALLBACK)
async def _pressed(ctx: Context) -> None:
    await ctx.reply(f"pressed:{ctx.event.text}", quote=False)


def _long_reply() -> str:
    head = "Here is the script you asked for:\n\n```python\n"
    code = "".join(f"value_{i:04d} = compute({i}, 'some padding text here')\n" for i in range(140))
    tail = "```\n\nThat is all"
    text = head + code + tail
    return text + "." * (9000 - len(text))


LONG_REPLY = _long_reply()


def router() -> Router:
    root = Router("root")
    root.include(test_handlers)
    root.include(echo_router())
    return root


# -- Done when: updates are answered -----------------------------------------------------


async def test_updates_are_answered_with_reply_and_topic_kept(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    settings = telegram_settings(tmp_path, fake)
    with structlog.testing.capture_logs() as logs:
        async with running(settings, router()) as (gateway, _adapter):
            dm = fake.push(message=fake.message(42, "hello there"))
            topic = fake.push(
                message=fake.message(-100500, f"@{USERNAME} in a topic", thread_id=77)
            )
            await fake.wait_for(lambda: len(fake.sent) >= 2)
            await gateway.drain()

    by_chat = {sent["chat_id"]: sent for sent in fake.sent}
    assert by_chat[42]["text"] == "hello there"
    assert by_chat[42]["reply_parameters"]["message_id"] == dm["message"]["message_id"]
    assert by_chat[42]["reply_parameters"]["allow_sending_without_reply"] is True
    assert by_chat[-100500]["message_thread_id"] == 77
    assert by_chat[-100500]["reply_parameters"]["message_id"] == topic["message"]["message_id"]
    assert len(fake.sent) == 2
    # The batch was committed with its offset, and the next poll confirmed it.
    assert fake.offsets[0] is None
    assert topic["update_id"] + 1 in fake.offsets
    with sqlite3.connect(tmp_path / "tether.db") as db:
        stored = db.execute(
            "SELECT value FROM cursors WHERE name = ?", (f"telegram:{BOT_ID}:offset",)
        )
        assert stored.fetchone() == (str(topic["update_id"]),)
    # "typing…" was shown where a message for the bot arrived.
    actions = {(c.params["chat_id"], c.params["action"]) for c in fake.calls_to("sendChatAction")}
    assert {(42, "typing"), (-100500, "typing")} <= actions
    # The token is in every PTB URL; it must not be in any log line.
    assert fake.token not in json.dumps(logs, default=str)


async def test_polling_deletes_a_leftover_webhook_without_dropping_the_backlog(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    fake.webhook = {"url": "https://old.example.com/hook"}  # as a webhook-mode run leaves it
    fake.push(message=fake.message(42, "queued while down"))
    async with running(telegram_settings(tmp_path, fake), router()) as (gateway, _adapter):
        await fake.wait_for(lambda: len(fake.sent) >= 1)
        await gateway.drain()
    (delete,) = fake.calls_to("deleteWebhook")
    assert delete.params.get("drop_pending_updates") in (None, False)
    assert [s["text"] for s in fake.sent] == ["queued while down"]


async def test_a_restart_polls_without_an_offset_and_confirms_only_what_it_stored(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    """A stored offset is never sent: it could confirm updates whose ids restarted below
    it (tests/adapters/telegram/test_telegram_ids.py). The first poll confirms nothing."""
    settings = telegram_settings(tmp_path, fake)
    async with running(settings, router()) as (gateway, _adapter):
        first = fake.push(message=fake.message(42, "one"))
        await fake.wait_for(lambda: first["update_id"] + 1 in fake.offsets)
        await gateway.drain()
    seen = len(fake.offsets)
    second = fake.push(message=fake.message(42, "two"))
    async with running(settings, router()) as (gateway, _adapter):
        await fake.wait_for(lambda: second["update_id"] + 1 in fake.offsets[seen:])
        await gateway.drain()
    assert fake.offsets[seen] is None
    assert fake.offsets[seen + 1] == second["update_id"] + 1
    assert [s["text"] for s in fake.sent] == ["one", "two"]


# -- Done when: a webhook retry is answered once ----------------------------------------


async def test_same_update_twice_via_webhook_is_answered_once(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    settings = webhook_settings(tmp_path, fake)
    update = {"update_id": 9001, "message": fake.message(42, "only once please")}
    async with running(settings, router()) as (gateway, adapter):
        await fake.wait_for(lambda: fake.webhook is not None)
        assert await post_update(gateway, update) == 200
        assert await post_update(gateway, update) == 200  # Telegram's retry
        await gateway.drain()
        assert adapter.connected
    assert [s["text"] for s in fake.sent] == ["only once please"]
    assert inbox_rows(tmp_path) == [(f"tg:{BOT_ID}:9001", "done")]
    assert fake.webhook == {
        "url": "https://bot.example.com/telegram/webhook",
        "secret_token": SECRET,
        "allowed_updates": ["message", "edited_message", "callback_query"],
        "drop_pending_updates": False,
    }
    assert fake.calls_to("getUpdates") == []


# -- Done when: SIGKILL after a fetched batch, restart answers it exactly once ----------


class HandlerGate:
    """The test's end of tests/plugins/telegram_block.py: hold handlers, or let them run."""

    def __init__(self) -> None:
        self.entered: asyncio.Queue[str] = asyncio.Queue()
        self.release = False

    async def on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).decode().strip()
        await self.entered.put(line)
        if self.release:
            writer.write(b"go\n")
            await writer.drain()
        else:
            await reader.read()  # hold until the process dies
        writer.close()


@pytest.mark.crash
@pytest.mark.slow
async def test_sigkill_after_fetching_a_batch_restart_answers_it_exactly_once(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    config = write_config(
        tmp_path,
        plugins=["tests.plugins.telegram_block:router"],
        platforms={
            "telegram": {
                "token": fake.token,
                "base_url": fake.base_url,
                "poll_timeout": 1,
                "rate_limits": False,
            }
        },
    )
    sock = tmp_path / "gate.sock"
    env = subprocess_env(TETHER_TEST_SOCKET=str(sock))
    chats = [11, 12, 13, 11, 12]
    batch = [fake.push(message=fake.message(chat, f"msg{n}")) for n, chat in enumerate(chats)]
    top = batch[-1]["update_id"]
    # What the store held each time the process asked for (and so confirmed) an offset.
    stored_at_poll: dict[int | None, set[str]] = {}

    def snapshot(offset: int | None) -> None:
        rows = inbox_rows(tmp_path) if (tmp_path / "tether.db").exists() else []
        stored_at_poll.setdefault(offset, {key for key, _status in rows})

    fake.on_poll = snapshot
    gate = HandlerGate()
    server = await asyncio.start_unix_server(gate.on_connect, path=str(sock))
    log = tmp_path / "tether.log"
    try:
        first = await spawn_run(config, log, env)
        try:
            # One handler per chat lane is now held; the batch is in the store...
            entered = {
                (await asyncio.wait_for(gate.entered.get(), 30)).split()[1] for _ in range(3)
            }
            assert entered == {f"tg:{BOT_ID}:{u['update_id']}" for u in batch[:3]}
            # ...and confirmed to Telegram: it will never be delivered again from there.
            await fake.wait_for(lambda: top + 1 in fake.offsets)
        finally:
            first.send_signal(signal.SIGKILL)
            await first.wait()
        assert fake.sent == []
        assert fake.pending == []
        # Persist before acknowledging: the batch was in the inbox before Telegram was
        # told (by the next offset) that it could forget it.
        assert stored_at_poll[top + 1] >= {f"tg:{BOT_ID}:{u['update_id']}" for u in batch}
        assert {u["update_id"] for u in batch} <= set(fake.confirmed)
        assert [status for _key, status in inbox_rows(tmp_path)].count("done") == 0

        killed_at = len(fake.offsets)
        gate.release = True
        second = await spawn_run(config, log, env)
        try:
            await fake.wait_for(lambda: len(fake.sent) >= len(batch), timeout=30)
            # Recovery can answer the stored batch before the poller's first getUpdates.
            await fake.wait_for(lambda: len(fake.offsets) > killed_at, timeout=30)
        finally:
            second.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(second.wait(), 30) == 0
    finally:
        server.close()

    texts = [sent["text"] for sent in fake.sent]
    assert sorted(texts) == sorted(f"handled:msg{n}" for n in range(len(batch)))
    for chat in set(chats):  # each chat's replies in its messages' order
        mine = [s["text"] for s in fake.sent if s["chat_id"] == chat]
        assert mine == sorted(mine, key=lambda t: int(t.removeprefix("handled:msg")))
    # The restart's first poll confirmed nothing, and no later one went below the batch.
    assert fake.offsets[killed_at] is None
    assert all(offset is None or offset > top for offset in fake.offsets[killed_at:])
    assert [status for _key, status in inbox_rows(tmp_path)] == ["done"] * len(batch)
    assert fake.token not in log.read_text()


# -- Done when: wrong or missing secret → 403, nothing stored ----------------------------


@pytest.mark.parametrize("secret", [None, "", "wrong-secret", SECRET + "x"])
async def test_webhook_with_wrong_or_missing_secret_is_403_and_stores_nothing(
    tmp_path: Path, fake: FakeTelegram, secret: str | None
) -> None:
    update = {"update_id": 7, "message": fake.message(42, "forged")}
    with structlog.testing.capture_logs() as logs:
        async with running(webhook_settings(tmp_path, fake), router()) as (gateway, _adapter):
            assert await post_update(gateway, update, secret=secret) == 403
            await gateway.drain()
            assert await gateway.store.counts() == {"inbox": {}, "outbox": {}}
    assert inbox_rows(tmp_path) == []
    assert fake.sent == []
    (line,) = events_named(logs, "telegram.webhook_forbidden")
    assert line["reason"] == ("missing secret token" if not secret else "wrong secret token")


# -- Done when: a 429 is waited out and the message sent once ---------------------------


@pytest.mark.slow
async def test_429_retry_after_is_waited_out_and_the_message_sent_once(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    fake.fail_next("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1)
    async with running(telegram_settings(tmp_path, fake), router()) as (gateway, _adapter):
        update = fake.push(message=fake.message(42, "flooded"))
        await fake.wait_for(lambda: len(fake.sent) >= 1)
        await gateway.drain()
        (row,) = await gateway.store.outbox_rows(f"tg:{BOT_ID}:{update['update_id']}")
    refused, delivered = fake.calls_to("sendMessage")
    assert (refused.status, delivered.status) == (429, 200)
    assert delivered.at - refused.at >= 0.95  # retry_after=1, not the 0.01 s test backoff
    assert [s["text"] for s in fake.sent] == ["flooded"]
    assert (row.status, row.attempts) == ("sent", 2)


# -- Done when: a 9,000-character reply arrives as 3 ordered messages -------------------


async def test_long_reply_arrives_as_three_ordered_messages_with_fences_intact(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    assert len(LONG_REPLY) == 9000
    async with running(telegram_settings(tmp_path, fake), router()) as (gateway, _adapter):
        update = fake.push(message=fake.message(42, "long"))
        await fake.wait_for(lambda: len(fake.sent) >= 3)
        await gateway.drain()
    chunks = [sent["text"] for sent in fake.sent]
    assert len(chunks) == 3
    assert all(utf16_len(chunk) <= 4096 for chunk in chunks)
    for chunk in chunks:  # every message renders on its own: fences balanced
        fences = [line for line in chunk.splitlines() if line.startswith("```")]
        assert len(fences) % 2 == 0, chunk[-200:]
    assert chunks[0].startswith("Here is the script")
    assert chunks[1].startswith("```python\n") and chunks[2].endswith("." * 10)
    # In order, and nothing lost: undo the fences the splitter added at the seams.
    rebuilt = chunks[0]
    for chunk in chunks[1:]:
        if chunk.startswith("```python\n"):  # reopened: the previous chunk was closed for it
            rebuilt = rebuilt.removesuffix("\n```")
            chunk = chunk.removeprefix("```python\n")
        rebuilt += "\n" + chunk
    assert rebuilt.replace("\n", "") == LONG_REPLY.replace("\n", "")
    assert fake.sent[0]["reply_parameters"]["message_id"] == update["message"]["message_id"]
    assert "reply_parameters" not in fake.sent[1] and "reply_parameters" not in fake.sent[2]


# -- Done when: malformed updates are rejected and the gateway keeps serving ------------


async def test_malformed_webhook_json_is_rejected_and_the_gateway_keeps_serving(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    with structlog.testing.capture_logs() as logs:
        async with running(webhook_settings(tmp_path, fake), router()) as (gateway, _adapter):
            assert await post_update(gateway, None, raw=b'{"update_id": 5, "message": ') == 400
            assert await post_update(gateway, [1, 2, 3]) == 400
            assert await post_update(gateway, {"message": {"text": "no update_id"}}) == 400
            # Valid JSON that PTB cannot parse: acknowledged (or Telegram retries it forever).
            assert await post_update(gateway, {"update_id": 6, "message": {"bogus": 1}}) == 200
            good = {"update_id": 7, "message": fake.message(42, "still serving")}
            assert await post_update(gateway, good) == 200
            await fake.wait_for(lambda: len(fake.sent) >= 1)
            await gateway.drain()
    assert [s["text"] for s in fake.sent] == ["still serving"]
    reasons = [line["reason"] for line in events_named(logs, "telegram.webhook_malformed")]
    assert len(reasons) == 3 and reasons[0].startswith("invalid JSON")
    (skipped,) = events_named(logs, "telegram.skipped")
    assert skipped["update_id"] == 6
    assert inbox_rows(tmp_path) == [(f"tg:{BOT_ID}:7", "done")]


async def test_malformed_update_in_a_polled_batch_is_skipped_and_the_offset_moves_on(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    with structlog.testing.capture_logs() as logs:
        async with running(telegram_settings(tmp_path, fake), router()) as (gateway, _adapter):
            fake.push(message={"chat": "not a chat", "date": "yesterday"})
            fake.push(
                poll_answer={
                    "poll_id": "1",
                    "option_ids": [0],
                    "option_persistent_ids": ["a"],
                    "user": {"id": 42, "is_bot": False, "first_name": "Ada"},
                }
            )
            good = fake.push(message=fake.message(42, "after the junk"))
            await fake.wait_for(lambda: good["update_id"] + 1 in fake.offsets)
            await fake.wait_for(lambda: len(fake.sent) >= 1)
            await gateway.drain()
    assert [s["text"] for s in fake.sent] == ["after the junk"]
    reasons = [line["reason"] for line in events_named(logs, "telegram.skipped")]
    assert len(reasons) == 2
    assert reasons[0].startswith("unparsable")
    assert reasons[1] == "unsupported update type: poll_answer"


async def test_an_unstorable_update_in_a_polled_batch_is_skipped_not_fetched_forever(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    """A lone surrogate (``"\\ud800"`` in the JSON) can never be stored: the batch it came
    in is committed without it, with a reason, and the offset moves past it."""
    with structlog.testing.capture_logs() as logs:
        async with running(telegram_settings(tmp_path, fake), router()) as (gateway, _adapter):
            bad = fake.push(message=fake.message(42, "half \ud800 a character"))
            good = fake.push(message=fake.message(42, "after the bad one"))
            await fake.wait_for(lambda: good["update_id"] + 1 in fake.offsets)
            await fake.wait_for(lambda: len(fake.sent) >= 1)
            await gateway.drain()
    assert [s["text"] for s in fake.sent] == ["after the bad one"]
    (skipped,) = events_named(logs, "event.unstorable")
    assert skipped["key"].endswith(f":{bad['update_id']}")
    assert "surrogate" in skipped["reason"]
    assert inbox_rows(tmp_path) == [(f"tg:{BOT_ID}:{good['update_id']}", "done")]


# -- config -------------------------------------------------------------------------------


def _check(tmp_path: Path, telegram: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "check.yaml"
    config.write_text(yaml.safe_dump({"platforms": {"telegram": telegram}}))
    return subprocess.run(
        [TETHER, "check", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(),
        check=False,
    )


@pytest.mark.slow
def test_check_refuses_webhook_mode_without_a_secret(tmp_path: Path) -> None:
    token = "123456:AAH-secret-token-value"
    result = _check(
        tmp_path, {"token": token, "mode": "webhook", "webhook": {"url": "https://x.example/h"}}
    )
    assert result.returncode != 0
    assert "platforms.telegram" in result.stderr
    assert "webhook.secret_token" in result.stderr
    assert token not in result.stderr + result.stdout

    bad = _check(tmp_path, {"token": token, "mode": "webhook", "webhook": {"secret_token": "a b"}})
    assert bad.returncode != 0
    assert "platforms.telegram.webhook.secret_token" in bad.stderr

    ok = _check(
        tmp_path,
        {
            "token": token,
            "mode": "webhook",
            "webhook": {"url": "https://x.example/h", "secret_token": SECRET},
        },
    )
    assert ok.returncode == 0, ok.stderr
    assert token not in ok.stdout and SECRET not in ok.stdout


async def test_a_rejected_token_stops_the_start_with_a_clear_error(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    settings = telegram_settings(tmp_path, fake, token="999:not-the-right-token")
    gateway = Gateway(settings, build_adapters(settings), router=router())
    with pytest.raises(GatewayError, match=r"platforms\.telegram\.token was rejected"):
        await gateway.start()
    await gateway.stop()
    assert [call.method for call in fake.calls] == []  # 401 before any method ran


# -- groups, bots, commands ---------------------------------------------------------------


async def test_groups_answer_commands_mentions_and_replies_only(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    group = -100200
    with structlog.testing.capture_logs() as logs:
        async with running(telegram_settings(tmp_path, fake), router()) as (gateway, _adapter):
            fake.push(message=fake.message(group, "hello everyone"))
            fake.push(message=fake.message(group, f"/ping@{USERNAME}"))
            fake.push(message=fake.message(group, "/ping@some_other_bot"))
            fake.push(message=fake.message(group, "/ping"))
            fake.push(message=fake.message(group, f"hey @{USERNAME} how are you"))
            fake.push(message=fake.message(group, "sure thing", reply_to=fake.bot_message(group)))
            fake.push(message=fake.message(42, "beep", is_bot=True, user_id=999))
            last = fake.push(message=fake.message(group, "more chatter"))
            await fake.wait_for(lambda: last["update_id"] + 1 in fake.offsets)
            await fake.wait_for(lambda: len(fake.sent) >= 4)
            await gateway.drain()
    assert sorted(s["text"] for s in fake.sent) == sorted(
        ["pong", "pong", f"hey @{USERNAME} how are you", "sure thing"]
    )
    reasons = sorted(line["reason"] for line in events_named(logs, "telegram.ignored"))
    assert reasons == [
        "command for another bot",
        "from a bot",
        "group message not addressed to the bot",
        "group message not addressed to the bot",
    ]


async def test_answer_groups_all_answers_every_group_message(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    settings = telegram_settings(tmp_path, fake, answer_groups="all")
    async with running(settings, router()) as (gateway, _adapter):
        fake.push(message=fake.message(-100200, "hello everyone"))
        await fake.wait_for(lambda: len(fake.sent) >= 1)
        await gateway.drain()
    assert [s["text"] for s in fake.sent] == ["hello everyone"]


async def test_callback_query_is_handled_and_answered(tmp_path: Path, fake: FakeTelegram) -> None:
    async with running(telegram_settings(tmp_path, fake), router()) as (gateway, _adapter):
        fake.push(
            callback_query={
                "id": "cbq-1",
                "from": {"id": 42, "is_bot": False, "first_name": "Ada"},
                "chat_instance": "ci",
                "data": "vote:yes",
                "message": fake.bot_message(42, "Vote?"),
            }
        )
        await fake.wait_for(
            lambda: len(fake.sent) >= 1 and bool(fake.calls_to("answerCallbackQuery"))
        )
        await gateway.drain()
    assert [s["text"] for s in fake.sent] == ["pressed:vote:yes"]
    assert fake.calls_to("answerCallbackQuery")[0].params["callback_query_id"] == "cbq-1"


# -- normalization details ------------------------------------------------------------


@pytest.fixture
async def adapter(tmp_path: Path, fake: FakeTelegram) -> AsyncIterator[TelegramAdapter]:
    settings = telegram_settings(tmp_path, fake)
    assert settings.platforms.telegram is not None
    opened = TelegramAdapter(settings.platforms.telegram)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def _event(adapter: TelegramAdapter, update: dict[str, Any]) -> Event:
    outcome = adapter.normalize(update)
    assert isinstance(outcome, Event), outcome
    return outcome


async def test_normalize_media_captions_mentions_and_keys(
    adapter: TelegramAdapter, fake: FakeTelegram
) -> None:
    photo = fake.push(
        message=fake.message(
            42,
            caption=f"look @{USERNAME}",
            caption_entities=[{"type": "mention", "offset": 5, "length": 1 + len(USERNAME)}],
            photo=[
                {"file_id": "small", "file_unique_id": "s", "width": 90, "height": 90},
                {
                    "file_id": "big",
                    "file_unique_id": "b",
                    "width": 1280,
                    "height": 960,
                    "file_size": 123456,
                },
            ],
        )
    )
    event = _event(adapter, photo)
    assert event.key == f"tg:{BOT_ID}:{photo['update_id']}"
    assert (event.kind, event.text, event.mentions, event.mentions_bot) == (
        Kind.MESSAGE,
        f"look @{USERNAME}",
        [USERNAME],
        True,
    )
    (attachment,) = event.attachments
    assert (attachment.kind, attachment.file_id, attachment.size, attachment.mime) == (
        "photo",
        "big",
        123456,
        "image/jpeg",
    )

    media = fake.push(
        message=fake.message(
            42,
            document={
                "file_id": "doc",
                "file_unique_id": "d",
                "file_name": "a.pdf",
                "mime_type": "application/pdf",
                "file_size": 10,
            },
            voice={
                "file_id": "v",
                "file_unique_id": "v",
                "duration": 3,
                "mime_type": "audio/ogg",
                "file_size": 20,
            },
            sticker={
                "file_id": "st",
                "file_unique_id": "st",
                "type": "regular",
                "width": 1,
                "height": 1,
                "is_animated": False,
                "is_video": True,
            },
        )
    )
    kinds = {(a.kind, a.file_id, a.mime, a.name) for a in _event(adapter, media).attachments}
    assert kinds == {
        ("document", "doc", "application/pdf", "a.pdf"),
        ("voice", "v", "audio/ogg", None),
        ("sticker", "st", "video/webm", None),
    }

    text_mention = fake.push(
        message=fake.message(
            42,
            "hi Tether",
            entities=[
                {
                    "type": "text_mention",
                    "offset": 3,
                    "length": 6,
                    "user": {"id": BOT_ID, "is_bot": True, "first_name": "Tether"},
                }
            ],
        )
    )
    assert _event(adapter, text_mention).mentions_bot


async def test_normalize_edits_topics_callbacks_and_what_is_skipped(
    adapter: TelegramAdapter, fake: FakeTelegram
) -> None:
    edited = fake.message(42, "fixed typo", edit_date=int(time.time()))
    edit = _event(adapter, fake.push(edited_message=edited))
    assert (edit.kind, edit.text, edit.message_id) == (
        Kind.EDIT,
        "fixed typo",
        str(edited["message_id"]),
    )

    root = fake.message(-100300, None, forum_topic_created={"name": "T", "icon_color": 1})
    in_topic = fake.message(
        -100300, "/ping@" + USERNAME, thread_id=root["message_id"], reply_to=root
    )
    event = _event(adapter, fake.push(message=in_topic))
    assert (event.kind, event.command, event.reply_to) == (Kind.COMMAND, "ping", None)
    assert event.conversation.thread_id == str(root["message_id"])
    assert event.conversation.chat_type == "group"
    assert event.conversation.target() == Target(
        platform="telegram", chat_id="-100300", thread_id=str(root["message_id"])
    )

    answer = fake.bot_message(-100300)
    reply = _event(adapter, fake.push(message=fake.message(-100300, "ok", reply_to=answer)))
    assert (reply.reply_to, reply.reply_to_bot) == (str(answer["message_id"]), True)

    callback = _event(
        adapter,
        fake.push(
            callback_query={
                "id": "q9",
                "from": {"id": 42, "is_bot": False, "first_name": "Ada"},
                "chat_instance": "ci",
                "data": "page:2",
                "message": fake.bot_message(42),
            }
        ),
    )
    assert (callback.kind, callback.text, callback.meta["callback_query_id"]) == (
        Kind.CALLBACK,
        "page:2",
        "q9",
    )
    assert callback.conversation.chat_id == "42"

    service = adapter.normalize(
        fake.push(
            message=fake.message(
                -100300, None, new_chat_members=[{"id": 5, "is_bot": False, "first_name": "B"}]
            )
        )
    )
    assert isinstance(service, Dropped) and service.log_event == "telegram.skipped"
    unsupported = adapter.normalize(fake.push(my_chat_member={"whatever": 1}))
    assert isinstance(unsupported, Dropped)
    assert unsupported.reason.startswith("unparsable") or "my_chat_member" in unsupported.reason
    assert isinstance(adapter.normalize({"no": "update_id"}), Dropped)


# -- sending: errors, formats, limits -------------------------------------------------


async def test_rejected_html_is_resent_as_plain_text(tmp_path: Path, fake: FakeTelegram) -> None:
    fake.fail_next("sendMessage", 400, "Bad Request: can't parse entities: Unsupported start tag")
    async with running(telegram_settings(tmp_path, fake), router()) as (gateway, _adapter):
        fake.push(message=fake.message(42, "html"))
        await fake.wait_for(lambda: len(fake.sent) >= 1)
        await gateway.drain()
    rejected, accepted = fake.calls_to("sendMessage")
    assert rejected.params["parse_mode"] == "HTML"
    assert "parse_mode" not in accepted.params
    assert accepted.params["text"] == "bold & <broken"


async def test_a_migrated_group_is_followed_to_its_supergroup(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    fake.fail_next(
        "sendMessage",
        400,
        "Bad Request: group chat was upgraded to a supergroup chat",
        migrate_to_chat_id=-100999,
    )
    async with running(telegram_settings(tmp_path, fake), router()) as (gateway, _adapter):
        fake.push(message=fake.message(-555, "/ping", chat_type="group"))
        await fake.wait_for(lambda: len(fake.sent) >= 1)
        await gateway.drain()
    assert [(s["chat_id"], s["text"]) for s in fake.sent] == [(-100999, "pong")]
    assert [c.params["chat_id"] for c in fake.calls_to("sendMessage")] == [-555, -100999]


@pytest.mark.parametrize("resend_unknown", [False, True])
async def test_ambiguous_send_is_unknown_unless_resend_unknown(
    tmp_path: Path, fake: FakeTelegram, resend_unknown: bool
) -> None:
    fake.drop_next("sendMessage")  # the request went out; no answer came back
    settings = telegram_settings(tmp_path, fake, resend_unknown=resend_unknown)
    async with running(settings, router()) as (gateway, adapter):
        assert adapter.resend_unknown is resend_unknown
        update = fake.push(message=fake.message(42, "maybe delivered"))
        await fake.wait_for(lambda: len(fake.calls_to("sendMessage")) >= 1)
        await gateway.drain()
        (row,) = await gateway.store.outbox_rows(f"tg:{BOT_ID}:{update['update_id']}")
    if resend_unknown:
        assert row.status == "sent"
        assert len(fake.calls_to("sendMessage")) == 2 and len(fake.sent) == 1
    else:
        assert row.status == "unknown" and row.error and "ambiguous" in row.error
        assert len(fake.calls_to("sendMessage")) == 1 and fake.sent == []


async def test_blocked_by_user_is_dead_not_retried(tmp_path: Path, fake: FakeTelegram) -> None:
    fake.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user")
    async with running(telegram_settings(tmp_path, fake), router()) as (gateway, _adapter):
        update = fake.push(message=fake.message(42, "hello?"))
        await fake.wait_for(lambda: len(fake.calls_to("sendMessage")) >= 1)
        await gateway.drain()
        (row,) = await gateway.store.outbox_rows(f"tg:{BOT_ID}:{update['update_id']}")
    assert row.status == "dead" and len(fake.calls_to("sendMessage")) == 1


@pytest.mark.slow
async def test_conflict_is_logged_once_and_polling_recovers(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    for _ in range(3):
        fake.fail_next("getUpdates", 409, "Conflict: terminated by other getUpdates request")
    with structlog.testing.capture_logs() as logs:
        async with running(telegram_settings(tmp_path, fake), router()) as (gateway, adapter):
            fake.push(message=fake.message(42, "after the conflict"))
            await fake.wait_for(lambda: len(fake.sent) >= 1)
            await gateway.drain()
            assert adapter.connected
    assert [s["text"] for s in fake.sent] == ["after the conflict"]
    assert len(events_named(logs, "telegram.conflict")) == 1
    assert events_named(logs, "telegram.poll_recovered")[0]["failures"] == 3


def test_classify_separates_not_sent_from_ambiguous() -> None:
    assert isinstance(classify(RetryAfter(3)), SendRetryable)
    assert classify(RetryAfter(3)).retry_after == 3.0  # type: ignore[attr-defined]
    assert isinstance(classify(BadRequest("Bad Request: chat not found")), SendFatal)
    assert isinstance(classify(Forbidden("Forbidden: bot was kicked")), SendFatal)
    assert isinstance(classify(TimedOut()), SendAmbiguous)
    assert isinstance(classify(NetworkError("Bad Gateway")), SendAmbiguous)
    refused = aiohttp.ClientConnectorError(
        ConnectionKey("127.0.0.1", 1, False, True, None, None, None), ConnectionRefusedError()
    )
    for cause in (refused, aiohttp.ConnectionTimeoutError("no free connection")):
        try:
            try:
                raise cause
            except aiohttp.ClientError as exc:
                raise NetworkError(str(exc)) from exc
        except NetworkError as wrapped:
            assert isinstance(classify(wrapped), SendRetryable)
    try:  # the server went away after the request: maybe delivered
        try:
            raise aiohttp.ServerDisconnectedError()
        except aiohttp.ClientError as exc:
            raise NetworkError(str(exc)) from exc
    except NetworkError as wrapped:
        assert isinstance(classify(wrapped), SendAmbiguous)


def test_limits_follow_telegram_and_can_be_switched_off(tmp_path: Path) -> None:
    token = "123456:AAH-token"
    on = make_settings(tmp_path, platforms={"telegram": {"token": token}}).platforms.telegram
    off = make_settings(
        tmp_path, platforms={"telegram": {"token": token, "rate_limits": False}}
    ).platforms.telegram
    assert on is not None and off is not None
    dm = TelegramAdapter(on).limits(Target(platform="telegram", chat_id="42"))
    group = TelegramAdapter(on).limits(Target(platform="telegram", chat_id="-100200"))
    assert {(limit.bucket, limit.rate) for limit in dm} == {
        ("telegram:chat:42", 1.0),
        ("telegram:global", 30.0),
    }
    assert ("telegram:group:-100200", 20 / 60) in {(limit.bucket, limit.rate) for limit in group}
    assert TelegramAdapter(off).limits(Target(platform="telegram", chat_id="-1")) == []
    assert TelegramAdapter(on).text_length("😀") == 2  # UTF-16 units, as Telegram counts


def test_plain_text_fallback_strips_markup() -> None:
    assert plain_text("<b>a</b> &lt;3", "html") == "a <3"
    assert plain_text(r"1\. *bold* \!", "markdown") == "1. *bold* !"
    assert plain_text("<b>", "plain") == "<b>"
