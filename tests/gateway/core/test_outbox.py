"""The outbox: retries only where safe, ambiguity recorded as `unknown`, order per chat;
an edit refused for good sent as a new message; a store outage said once and counted."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import asyncpg
import pytest
import structlog

from tests.fakes.discord_api import DM_CHANNEL_ID, FakeDiscord
from tests.fakes.feishu_api import APP_ID, APP_SECRET, ENCRYPT_KEY, VERIFICATION_TOKEN, FakeFeishu
from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import db_rows, events_named, make_settings
from tests.support.gateway import running
from tether import Context, Router
from tether.adapters.base import Sent
from tether.adapters.discord.send import send_nonce
from tether.adapters.feishu.send import send_uuid
from tether.adapters.loopback import LoopbackAdapter
from tether.errors import SendAmbiguous, SendFatal, SendRetryable
from tether.events import EDIT_META, Conversation, Event, OutMessage
from tether.limits import Limit
from tether.memory.sqlite import SqliteStore


def replies(*texts: str) -> Router:
    router = Router()

    @router.text()
    async def handle(ctx: Context) -> None:
        for text in texts:
            await ctx.reply(text)

    return router


def outbox(tmp_path: Path) -> list[tuple[str, str, int]]:
    with sqlite3.connect(tmp_path / "tether.db") as db:
        return list(db.execute("SELECT key, status, attempts FROM outbox ORDER BY seq"))


async def test_retryable_send_is_retried_after_retry_after_and_sent_once(tmp_path: Path) -> None:
    adapter = LoopbackAdapter(limits=[Limit("global", rate=1000, burst=10)])
    adapter.fail_next(SendRetryable("429", retry_after=0.05))
    async with running(make_settings(tmp_path), replies("one", "two"), adapter) as (gw, loop):
        event = await loop.say("go")
        sent = await loop.wait_for_sent(2)
        await gw.drain()
    assert [d.message.text for d in sent] == ["one", "two"]  # order kept across the retry
    assert [m.text for m in loop.attempts] == ["one", "one", "two"]
    assert outbox(tmp_path) == [(f"{event.key}#0", "sent", 2), (f"{event.key}#1", "sent", 1)]


async def test_ambiguous_failure_is_unknown_when_sends_are_not_idempotent(tmp_path: Path) -> None:
    adapter = LoopbackAdapter()
    adapter.fail_next(SendAmbiguous("timed out after the request went out"))
    async with running(make_settings(tmp_path), replies("maybe", "next"), adapter) as (gw, loop):
        event = await loop.say("go")
        sent = await loop.wait_for_sent(1)
        await gw.drain()
    assert [d.message.text for d in sent] == ["next"]
    assert outbox(tmp_path) == [(f"{event.key}#0", "unknown", 1), (f"{event.key}#1", "sent", 1)]


async def test_ambiguous_failure_is_retried_when_sends_are_idempotent(tmp_path: Path) -> None:
    adapter = LoopbackAdapter(idempotent=True)
    adapter.fail_next(SendAmbiguous("timeout"))
    async with running(make_settings(tmp_path), replies("safe"), adapter) as (gw, loop):
        event = await loop.say("go")
        await loop.wait_for_sent(1)
        await gw.drain()
    assert [m.key for m in loop.attempts] == [f"{event.key}#0"] * 2  # same key both times
    assert outbox(tmp_path) == [(f"{event.key}#0", "sent", 2)]


async def test_fatal_send_and_exhausted_retries_are_dead(tmp_path: Path) -> None:
    adapter = LoopbackAdapter()
    adapter.fail_next(SendFatal("chat not found"), *[SendRetryable("503")] * 3)
    settings = make_settings(tmp_path, outbox={"max_attempts": 3})
    async with running(settings, replies("a", "b"), adapter) as (gw, loop):
        event = await loop.say("go")
        await gw.drain()
        await gw.outbox.flush(5)
    assert outbox(tmp_path) == [(f"{event.key}#0", "dead", 1), (f"{event.key}#1", "dead", 3)]


async def test_rows_left_sending_by_a_crash_resume_only_where_safe(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    store = SqliteStore(str(tmp_path / "tether.db"))
    await store.open()
    chat = Conversation(platform="loopback", chat_id="1")
    for key in ("e1", "e2"):
        await store.accept([(Event(key=key, platform="loopback", conversation=chat), "c")])
        message = OutMessage(key=f"{key}#0", target=chat.target(), text=f"from {key}")
        await store.checkpoint(key, [message], [])
    await store.close()

    for idempotent, expected in ((False, "unknown"), (True, "sent")):
        with sqlite3.connect(tmp_path / "tether.db") as db:  # as a crash mid-send leaves it
            db.execute("UPDATE outbox SET status = 'sending' WHERE key = 'e1#0'")
            db.execute("UPDATE outbox SET status = 'pending' WHERE key = 'e2#0'")
        adapter = LoopbackAdapter(idempotent=idempotent)
        async with running(settings, replies("x"), adapter) as (gw, loop):
            sent = await loop.wait_for_sent(1 if expected == "unknown" else 2)
            await gw.outbox.flush(5)
        statuses = {k: s for k, s, _ in outbox(tmp_path)}
        assert statuses == {"e1#0": expected, "e2#0": "sent"}
        resent = ["from e2"] if expected == "unknown" else ["from e1", "from e2"]
        assert [d.message.text for d in sent] == resent


# -- a store outage under the send lanes: one line and a count, not one per attempt -------


async def test_a_store_refusing_the_lanes_sending_marks_is_one_error_line_and_a_count(
    tmp_path: Path, pg_dsn: str
) -> None:
    """Twenty chats' replies meet a database that refuses their ``sending`` marks (as a
    full disk would) sixty times in a row, attempt after attempt: one ``outbox.error``
    with its traceback, and once the store takes the writes again, one
    ``outbox.recovered`` with the count. One send at a time, so the order is the store's."""
    setup = await asyncpg.connect(pg_dsn)
    outbox = {"backoff_base": 0.01, "backoff_max": 0.05, "concurrency": 1}
    settings = make_settings(tmp_path, memory={"store": pg_dsn}, outbox=outbox)
    try:
        with structlog.testing.capture_logs() as logs:
            async with running(settings, replies("answer")) as (gw, loop):
                # The budget is a sequence: its increments survive the rollback they cause.
                await setup.execute(
                    """
                    CREATE SEQUENCE refusals;
                    CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN
                        IF nextval('refusals') <= 60 THEN
                            RAISE EXCEPTION 'could not extend file: No space left on device';
                        END IF;
                        RETURN NEW;
                    END $$;
                    CREATE TRIGGER disk_full BEFORE UPDATE ON outbox FOR EACH ROW
                        WHEN (NEW.status = 'sending') EXECUTE FUNCTION refuse();
                    """
                )
                for chat in range(20):
                    await loop.say("go", chat=str(chat))
                await loop.wait_for_sent(20, timeout=60)
                await gw.drain()
        assert await setup.fetchval("SELECT last_value FROM refusals") == 80
    finally:
        await setup.close()
    [failed] = events_named(logs, "outbox.error")
    assert "No space left on device" in failed["error"] and failed["exc_info"]
    [recovered] = events_named(logs, "outbox.recovered")
    # Every chat's first attempt at least (a refused batch may be tried again row by row,
    # which draws on the sixty refusals more than once).
    assert 20 <= recovered["failures"] <= 60


# -- edit rows whose edit is refused for good (issue 38, item 6) ---------------------------
# The message they edit is gone (a streamed answer's preview the person deleted), so the
# text goes out as a new message under the row's own key, once, and from then on the row
# keeps a send's rules: Telegram's ``unknown`` after a crash, a retry under the same nonce
# where the platform deduplicates. PTB against the fake Bot API, discord.py against the
# fake REST, and the loopback adapter for the outbox's own paths.

GONE = SendFatal("Bad Request: message to edit not found")


def edits(message_id: str, text: str = "the whole answer") -> Router:
    """A handler whose reply edits message ``message_id``, as a streamed answer's does."""
    router = Router()

    @router.text()
    async def handle(ctx: Context) -> None:
        target = ctx.event.conversation.target()
        meta = {EDIT_META: message_id}
        await ctx.send(target, text, reply_to=ctx.event.message_id, meta=meta)

    return router


def edit_rows(tmp_path: Path) -> list[tuple[str, str, int, str | None]]:
    return db_rows(tmp_path, "SELECT key, status, attempts, platform_id FROM outbox ORDER BY seq")


async def test_a_refused_edit_is_sent_as_a_new_message_once_under_the_rows_key(
    tmp_path: Path,
) -> None:
    adapter = LoopbackAdapter(edits=True)
    adapter.fail_next(GONE)
    with structlog.testing.capture_logs() as logs:
        async with running(make_settings(tmp_path), edits("77"), adapter) as (gw, loop):
            event = await loop.say("hello")
            [delivery] = await loop.wait_for_sent(1)
            await gw.drain()
    # One edit tried, then one new message: the same key, the question quoted, no edit.
    assert [m.key for m in adapter.attempts] == [f"{event.key}#0"] * 2
    assert adapter.edited == []
    message = delivery.message
    assert message.text == "the whole answer" and message.reply_to == event.message_id
    assert EDIT_META not in message.meta
    assert edit_rows(tmp_path) == [(f"{event.key}#0", "sent", 1, delivery.platform_id)]
    [refused] = events_named(logs, "outbox.edit_refused")
    assert refused["edit_of"] == "77" and "message to edit not found" in refused["error"]


async def test_a_refused_edit_whose_send_is_ambiguous_is_unknown_where_sends_are_not_idempotent(
    tmp_path: Path,
) -> None:
    """Once the edit is refused the row is a send: a timeout is not retried (it would be,
    as an edit), so the answer can never arrive twice."""
    adapter = LoopbackAdapter(edits=True)
    adapter.fail_next(GONE, SendAmbiguous("timed out after the request went out"))
    async with running(make_settings(tmp_path), edits("77"), adapter) as (gw, loop):
        event = await loop.say("hello")
        await gw.drain()
        await gw.outbox.flush(5)
    assert len(adapter.attempts) == 2 and adapter.sent == []
    assert edit_rows(tmp_path) == [(f"{event.key}#0", "unknown", 1, None)]


async def test_a_refused_edit_whose_send_is_ambiguous_is_resent_not_edited_where_sends_dedup(
    tmp_path: Path,
) -> None:
    adapter = LoopbackAdapter(edits=True, idempotent=True)
    adapter.fail_next(GONE, SendAmbiguous("timeout"))
    settings = make_settings(tmp_path, outbox={"backoff_base": 0.01, "backoff_max": 0.02})
    async with running(settings, edits("77"), adapter) as (gw, loop):
        event = await loop.say("hello")
        [delivery] = await loop.wait_for_sent(1)
        await gw.drain()
    # The edit once, then the send, then the same send again (the refused edit is not
    # asked again on the retry).
    assert [m.key for m in adapter.attempts] == [f"{event.key}#0"] * 3
    assert [EDIT_META in m.meta for m in adapter.attempts] == [True, False, False]
    assert edit_rows(tmp_path) == [(f"{event.key}#0", "sent", 2, delivery.platform_id)]


class Hanging(LoopbackAdapter):
    """Refuses every edit; its sends hang until the gateway stops (cut off mid-send)."""

    can_edit = True

    def __init__(self, *, idempotent: bool) -> None:
        super().__init__(idempotent=idempotent)
        self.sending = asyncio.Event()

    async def edit(self, message: OutMessage, platform_id: str) -> Sent:
        self.attempts.append(message)
        raise GONE

    async def send(self, message: OutMessage) -> Sent:
        self.attempts.append(message)
        self.sending.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_fallback_send_cut_off_by_a_stop_is_unknown_after_the_restart_on_telegrams_rules(
    tmp_path: Path,
) -> None:
    """The row was ``sending`` as a new message when the process stopped: the restart must
    not take it for an edit (safe to repeat) and send the answer a second time."""
    settings = make_settings(tmp_path, pipeline={"drain_timeout": 0.1})
    first = Hanging(idempotent=False)
    async with running(settings, edits("77"), first) as (_gw, loop):
        event = await loop.say("hello")
        await asyncio.wait_for(first.sending.wait(), 10)
    assert edit_rows(tmp_path) == [(f"{event.key}#0", "sending", 1, None)]

    second = LoopbackAdapter(edits=True)
    async with running(settings, edits("77"), second) as (gw, _loop):
        await gw.outbox.flush(5)
    assert second.attempts == [] and second.edited == []
    assert edit_rows(tmp_path) == [(f"{event.key}#0", "unknown", 1, None)]


async def test_a_fallback_send_cut_off_by_a_stop_is_sent_again_where_sends_dedup(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, pipeline={"drain_timeout": 0.1})
    first = Hanging(idempotent=True)
    async with running(settings, edits("77"), first) as (_gw, loop):
        event = await loop.say("hello")
        await asyncio.wait_for(first.sending.wait(), 10)

    second = LoopbackAdapter(edits=True, idempotent=True)
    async with running(settings, edits("77"), second) as (_gw, loop):
        [delivery] = await loop.wait_for_sent(1)
    # Straight to the send under the same key (its nonce): the edit is not asked again.
    assert [m.key for m in second.attempts] == [f"{event.key}#0"]
    assert EDIT_META not in delivery.message.meta
    assert edit_rows(tmp_path) == [(f"{event.key}#0", "sent", 2, delivery.platform_id)]


# -- the real libraries: PTB against the fake Bot API, discord.py against the fake REST ---


@pytest.mark.slow
async def test_telegram_an_edit_of_a_deleted_message_arrives_as_a_new_message(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    platform = {"token": telegram.token, "base_url": telegram.base_url, "poll_timeout": 1,
                "rate_limits": False, "typing": False}  # fmt: skip
    settings = make_settings(tmp_path, platforms={"telegram": platform})
    # A message the bot sent once, which the person has deleted since.
    async with running(settings, edits("777")) as (gw, _adapter):
        telegram.push(message=telegram.message(42, "hello"))
        await telegram.wait_for(lambda: telegram.texts.in_chat(42) != [], timeout=10)
        await gw.drain()
    [refused] = telegram.calls_to("editMessageText")
    assert refused.status == 400
    [sent] = telegram.sent
    assert telegram.texts.in_chat(42) == ["the whole answer"]
    assert "reply_parameters" in sent  # still quotes the question
    [(key, status, attempts, platform_id)] = edit_rows(tmp_path)
    assert (status, attempts) == ("sent", 1) and key.endswith("#0")
    assert [(42, int(platform_id))] == list(telegram.texts.shown)


@pytest.mark.slow
async def test_discord_an_edit_of_an_unknown_message_arrives_once_under_the_rows_nonce(
    tmp_path: Path, discord_fake: FakeDiscord
) -> None:
    fake = discord_fake
    platform = {"token": fake.token, "api_base": fake.api_base, "gateway_url": fake.gateway_url}
    settings = make_settings(tmp_path, platforms={"discord": platform})
    # The fallback send reaches Discord but its answer is a 500: retried with the same
    # nonce, Discord returns the message it has, and the chat still shows one.
    async with running(settings, edits("1234567890123")) as (gw, _adapter):
        await fake.wait_for(lambda: fake.connected >= 1)
        fake.fail_next_post(500, commit=True)
        await fake.say(DM_CHANNEL_ID, "hello")
        await fake.wait_for(lambda: len(fake.posts) == 2, timeout=10)
        await gw.drain()
    [(key, status, _attempts, platform_id)] = edit_rows(tmp_path)
    [message] = fake.sent
    assert [post.status for post in fake.posts] == [500, 200]
    assert status == "sent" and platform_id == message["id"]
    assert message["content"] == "the whole answer"
    assert message["nonce"] == send_nonce(key)


@pytest.mark.slow
async def test_feishu_an_edit_of_a_missing_message_arrives_once_under_the_rows_uuid(
    tmp_path: Path, feishu: FakeFeishu
) -> None:
    """The handler answers a loopback message into a Feishu chat, editing a message that is
    not there (Feishu: 400, code 230001): a new message, with the row's uuid."""
    platform = {"app_id": APP_ID, "app_secret": APP_SECRET, "domain": feishu.domain,
                "mode": "webhook", "verification_token": VERIFICATION_TOKEN,
                "encrypt_key": ENCRYPT_KEY, "rate_limits": False}  # fmt: skip
    settings = make_settings(
        tmp_path, http={"enabled": True, "port": 0}, platforms={"feishu": platform}
    )
    router = Router()

    @router.text()
    async def handle(ctx: Context) -> None:
        await ctx.send("feishu:oc_team", "the whole answer", meta={EDIT_META: "om_gone"})

    async with running(settings, router, LoopbackAdapter()) as (gw, loop):
        await loop.say("hello")
        await gw.drain()
    [(key, status, _attempts, platform_id)] = edit_rows(tmp_path)
    [message] = feishu.messages
    assert status == "sent" and platform_id == message["message_id"]
    assert message["chat_id"] == "oc_team" and message["uuid"] == send_uuid(key)
    [refused] = [call for call in feishu.calls if call.path.endswith("/messages/om_gone")]
    assert refused.status == 400
