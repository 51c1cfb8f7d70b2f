"""ctx.edit, delete, react, pin and answer through the real pipeline and outbox (loopback).

Each platform's own calls are tested against its fake (tests/adapters/*/test_*_actions.py);
here: what is queued, that a re-run queues nothing twice, what is refused at the call, and
that an action left ``sending`` by a crash is done after the restart where a send is not.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.support.config import make_settings
from tests.support.gateway import running
from tether import ActionUnsupported, Button, Context, Retryable, Router
from tether.adapters.loopback import Acted, LoopbackAdapter
from tether.errors import SendFatal
from tether.events import ACTION_META, Conversation, Event, OutMessage
from tether.memory.sqlite import SqliteStore
from tether.testing import Bot


def booking() -> Router:
    router = Router()

    @router.command("book")
    async def book(ctx: Context) -> None:
        await ctx.reply("Book the room?", buttons=[[Button("Yes", data="yes")]])

    @router.callback()
    async def pressed(ctx: Context) -> None:
        await ctx.answer("Saved", alert=ctx.event.text == "alert")
        await ctx.edit("Booked ✓")
        await ctx.react("👍")

    @router.command("tidy")
    async def tidy(ctx: Context) -> None:
        await ctx.pin()
        await ctx.delete()
        await ctx.pin(message_id="9", unpin=True)

    return router


async def test_a_press_edits_its_message_answers_and_reacts_once_each() -> None:
    async with Bot(booking()) as bot:
        [question] = await bot.say("/book")
        replies = await bot.press(question.button("Yes"), under=question)
        edited, acted = list(bot.adapter.edited), list(bot.adapter.acted)
    assert replies == []  # nothing new posted: the pressed message changed
    [(platform_id, edit)] = edited
    assert platform_id == question.platform_id and edit.text == "Booked ✓"
    assert edit.buttons == []  # the keyboard goes unless the edit gives one
    assert acted == [Acted("answer", "", "Saved"), Acted("react", question.platform_id, "👍")]


async def test_a_message_is_pinned_deleted_and_another_unpinned_in_order() -> None:
    async with Bot(booking()) as bot:
        await bot.say("/tidy")
        acted = list(bot.adapter.acted)
    own = acted[0].message_id
    assert own and acted == [Acted("pin", own), Acted("delete", own), Acted("unpin", "9")]


async def test_a_turn_run_again_after_a_retry_acts_once() -> None:
    router = Router()
    runs: list[int] = []

    @router.command("go")
    async def go(ctx: Context) -> None:
        await ctx.react("👀")
        await ctx.delete(message_id="5")
        runs.append(ctx.attempt)
        if ctx.attempt == 1:
            raise Retryable("the first run fails after queuing its actions")

    async with Bot(router) as bot:
        await bot.say("/go")
        acted = list(bot.adapter.acted)
    assert runs == [1, 2]
    assert [a.do for a in acted] == ["react", "delete"]


async def test_what_a_platform_cannot_do_is_refused_at_the_call_and_nothing_is_queued() -> None:
    router = Router()
    said: list[str] = []

    @router.command("go")
    async def go(ctx: Context) -> None:
        for attempt in (ctx.react, ctx.delete, ctx.pin, ctx.answer, ctx.edit):
            try:
                await (attempt("👍") if attempt in (ctx.react, ctx.edit) else attempt())
            except ActionUnsupported as exc:
                said.append(str(exc))
        await ctx.reply("done")

    async with Bot(router) as bot:
        bot.adapter.actions = frozenset()
        bot.adapter.can_edit = False
        [reply] = await bot.say("/go")
        acted = list(bot.adapter.acted)
    assert reply.text == "done" and acted == [] and bot.adapter.edited == []
    assert said == [
        "loopback cannot react to messages",
        "loopback cannot delete messages",
        "loopback cannot pin messages",
        "ctx.answer answers a button press; this event is a command",
        "loopback cannot edit messages",
    ]


async def test_edit_outside_a_press_needs_the_message_it_edits() -> None:
    router = Router()
    said: list[str] = []

    @router.command("go")
    async def go(ctx: Context) -> None:
        with pytest.raises(ActionUnsupported) as refused:
            await ctx.edit("new text")
        said.append(str(refused.value))
        await ctx.edit("new text", message_id="41")

    async with Bot(router) as bot:
        await bot.say("/go")
        edited = list(bot.adapter.edited)
    assert "pass message_id=" in said[0]
    assert [(at, m.text) for at, m in edited] == [("41", "new text")]


async def test_an_answer_the_platform_no_longer_takes_is_said_as_a_message() -> None:
    async with Bot(booking()) as bot:
        [question] = await bot.say("/book")
        bot.adapter.fail_next(SendFatal("Bad Request: query is too old"))
        replies = await bot.press(question.button("Yes"), under=question)
        acted = list(bot.adapter.acted)
    assert [r.text for r in replies] == ["Saved"]
    assert ACTION_META not in replies[0].message.meta
    assert [a.do for a in acted] == ["react"]  # the answer was refused, the rest went


async def test_an_action_left_sending_by_a_crash_is_done_after_the_restart(
    tmp_path: Path,
) -> None:
    """A send cut off on a platform without idempotent sends becomes ``unknown``; a
    deletion cut off the same way is done again, since deleting twice deletes once."""
    settings = make_settings(tmp_path)
    store = SqliteStore(str(tmp_path / "tether.db"))
    await store.open()
    chat = Conversation(platform="loopback", chat_id="1")
    await store.accept([(Event(key="e1", platform="loopback", conversation=chat), "c")])
    action = {ACTION_META: {"do": "delete", "message_id": "7"}}
    rows = [
        OutMessage(key="e1#0", target=chat.target(), text="a reply"),
        OutMessage(key="e1#1", target=chat.target(), text="", meta=action),
    ]
    await store.checkpoint("e1", rows, [])
    await store.close()
    with sqlite3.connect(tmp_path / "tether.db") as db:  # as a crash mid-send leaves them
        db.execute("UPDATE outbox SET status = 'sending'")
    adapter = LoopbackAdapter()
    async with running(settings, Router(), adapter) as (gw, loop):
        await loop.wait_for_acted(1)
        await gw.outbox.flush(5)
    with sqlite3.connect(tmp_path / "tether.db") as db:
        statuses = dict(db.execute("SELECT key, status FROM outbox"))
    assert statuses == {"e1#0": "unknown", "e1#1": "sent"}
    assert adapter.acted == [Acted("delete", "7")] and adapter.sent == []


def test_the_console_and_the_web_chat_offer_no_actions() -> None:
    """docs/handlers.md says so: the web chat edits its streamed previews only (can_edit),
    which must not let ctx.edit queue an edit the page would never show."""
    from tether.adapters.console import ConsoleAdapter
    from tether.adapters.web import WebAdapter

    assert WebAdapter.can_edit and "edit" not in WebAdapter.actions
    assert ConsoleAdapter.actions == WebAdapter.actions == frozenset()
