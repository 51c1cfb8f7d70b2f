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


def test_a_childs_fallback_comes_after_every_route_of_the_tree() -> None:
    root, plugin, builtin = Router("root"), Router("plugin"), Router("builtin")
    root.include(plugin)
    root.include(builtin)

    @plugin.command("mine")
    async def mine(ctx: Context) -> None: ...

    @plugin.fallback
    async def everything(ctx: Context) -> None: ...

    @builtin.command("help")
    async def help_(ctx: Context) -> None: ...

    @builtin.fallback
    async def agent(ctx: Context) -> None: ...

    def name(text: str, command: str | None = None) -> str | None:
        kind = Kind.COMMAND if command else Kind.MESSAGE
        chat = Conversation(platform="t", chat_id="1")
        event = Event(key=text, platform="t", kind=kind, conversation=chat, text=text,
                      command=command)  # fmt: skip
        found = root.resolve(event)
        return found[0].handler.__name__ if found else None

    assert name("/help", "help") == "help_"  # the later router's route beats the fallback
    assert name("/mine", "mine") == "mine"
    assert name("/unknown", "unknown") == "everything"  # the first fallback included
    assert name("anything") == "everything"


async def test_help_lists_the_built_ins_when_a_plugin_has_a_fallback(tmp_path: Path) -> None:
    plugin = Router("plugin")

    @plugin.fallback
    async def parrot(ctx: Context) -> None:
        await ctx.reply(f"parrot: {ctx.event.text}")

    async with running(make_settings(tmp_path), plugins=[plugin]) as (gateway, loop):
        await loop.say("/help")
        await loop.say("squawk")
        sent = await loop.wait_for_sent(2)
        await gateway.drain()
    help_text, parroted = (d.message.text for d in sent)
    assert "/help" in help_text and "/remember" in help_text and "/link" in help_text
    assert parroted == "parrot: squawk"
