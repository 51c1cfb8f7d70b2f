"""The outbox: retries only where safe, ambiguity recorded as `unknown`, order per chat."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.support.config import make_settings
from tests.support.gateway import running
from tether import Context, Router
from tether.adapters.loopback import LoopbackAdapter
from tether.errors import SendAmbiguous, SendFatal, SendRetryable
from tether.events import Conversation, Event, OutMessage
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
