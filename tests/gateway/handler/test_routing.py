"""Routing: commands, text patterns, fallbacks, nested routers, middlewares in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.config import make_settings
from tests.support.gateway import running
from tether import Context, Router
from tether.events import Conversation, Event, Kind, parse_command
from tether.gateway.handler.routing import NextHandler


def test_parse_command_handles_bot_names_and_args() -> None:
    assert parse_command("/start") == ("start", "")
    assert parse_command("/Start@MyBot a  b", "mybot") == ("start", "a  b")
    assert parse_command("/start@OtherBot", "mybot") is None
    assert parse_command("hello /start") is None
    assert parse_command("/weather Berlin\nand more") == ("weather", "Berlin\nand more")


def test_resolution_order() -> None:
    root, child = Router("root"), Router("child")
    root.include(child)

    @root.command("start")
    async def start(ctx: Context) -> None: ...

    @child.text(r"^hello")
    async def hello(ctx: Context) -> None: ...

    @root.fallback
    async def fallback(ctx: Context) -> None: ...

    def ev(text: str, kind: Kind = Kind.MESSAGE, command: str | None = None) -> Event:
        chat = Conversation(platform="t", chat_id="1")
        return Event(
            key=text, platform="t", kind=kind, conversation=chat, text=text, command=command
        )

    def name(event: Event) -> str | None:
        found = root.resolve(event)
        return found[0].handler.__name__ if found else None

    assert name(ev("/start x", Kind.COMMAND, "start")) == "start"
    assert name(ev("/other", Kind.COMMAND, "other")) == "fallback"
    assert name(ev("hello there")) == "hello"
    assert name(ev("bye")) == "fallback"
    assert name(ev("edited", Kind.EDIT)) is None


async def test_middlewares_wrap_handlers_outermost_first(tmp_path: Path) -> None:
    calls: list[str] = []
    root, inner = Router(), Router()
    root.include(inner)

    @root.middleware
    async def outer_mw(handler: NextHandler, event: Event, data: dict[str, Any]) -> Any:
        calls.append("outer>")
        data["seen_by"] = "outer"
        result = await handler(event, data)
        calls.append("<outer")
        return result

    @inner.middleware
    async def inner_mw(handler: NextHandler, event: Event, data: dict[str, Any]) -> Any:
        calls.append(f"inner({data['seen_by']},{data['route'].name.split('->')[0]})")
        if event.text == "blocked":
            return None  # a middleware may stop the chain
        return await handler(event, data)

    @inner.command("ping")
    async def ping(ctx: Context) -> None:
        calls.append(f"ping:{ctx.event.args}")
        await ctx.reply("pong")

    @inner.text()
    async def text(ctx: Context) -> None:
        calls.append("text")

    async with running(make_settings(tmp_path), root) as (gateway, loop):
        await loop.say("/ping now")
        await loop.say("blocked")
        await loop.wait_for_sent(1)
        await gateway.drain()

    assert calls == [
        "outer>", "inner(outer,command:ping)", "ping:now", "<outer",
        "outer>", "inner(outer,text:*)", "<outer",
    ]  # fmt: skip
    assert [d.message.text for d in loop.sent] == ["pong"]


async def test_echo_agent_is_the_default(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path)) as (gateway, loop):
        event = await loop.say("verbatim *text*  ")
        sent = await loop.wait_for_sent(1)
        await gateway.drain()
    assert sent[0].message.text == "verbatim *text*  "
    assert sent[0].message.reply_to == event.message_id
