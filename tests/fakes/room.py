"""A multi-agent room on fake platforms: one fake Telegram Bot API per agent (each bot has
its own token and username, as on Telegram), a fake LLM whose answers name the agent
from its persona, and the ``agents:`` config that ties them together.

Telegram delivers a group message to every bot in the group (privacy mode off) and never
one bot's message to another: :meth:`TelegramRoom.say` pushes a person's message to each
agent's fake; what the agents say to each other only travels through the gateway.

The fake model (:func:`room_reply`) answers the last user message by rules a test can
aim at: ``chain`` makes the agent pass it on by naming the next agent (a loop only the
guards stop), ``ask NAME`` makes it address NAME, anything else gets ``NAME: ok``.
"""

from __future__ import annotations

import contextvars
import itertools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

from tests.fakes import discord_api
from tests.fakes.discord_api import CHANNEL_ID, USER, FakeDiscord, snowflake_at, user
from tests.fakes.telegram_api import FakeTelegram
from tether.testing.model import API_KEY, Body

AGENTS = ("alice", "bob", "carol")
CHAT = -100500
PEOPLE = (501, 502)
_PERSONA = re.compile(r"You are (\w+)\.")


def token(index: int) -> str:
    return f"{9000 + index}:ROOM-token_{'abcdefghij'[index]}bcdefghijklmnopqrstuvwxyz"


def username(agent: str) -> str:
    return f"{agent}_bot"


def agent_in(body: Body) -> str:
    """Which agent is asking: its persona is ``You are NAME.``"""
    system = next((m.get("content", "") for m in body["messages"] if m["role"] == "system"), "")
    found = _PERSONA.search(str(system))
    return found.group(1) if found else "nobody"


def room_reply(body: Body) -> str:
    """The scripted answers (module docstring)."""
    me = agent_in(body)
    said = str(body["messages"][-1].get("content", ""))
    if "chain" in said:
        nxt = AGENTS[(AGENTS.index(me) + 1) % len(AGENTS)] if me in AGENTS else "alice"
        return f"{nxt}, chain on please"
    asked = re.search(r"\bask (\w+)", said)
    if asked and asked.group(1) != me:
        return f"{asked.group(1)}, what do you think?"
    return f"{me} says ok"


class TelegramRoom:
    """One fake Bot API per agent; the room is the group chat :data:`CHAT` on all."""

    def __init__(self) -> None:
        self.fakes = {
            agent: FakeTelegram(token(i), username(agent)) for i, agent in enumerate(AGENTS)
        }

    async def start(self) -> TelegramRoom:
        for fake in self.fakes.values():
            await fake.start()
        return self

    async def stop(self) -> None:
        for fake in self.fakes.values():
            await fake.stop()

    def say(self, person: int, text: str) -> None:
        """A person's message in the group: every bot in it receives it."""
        for fake in self.fakes.values():
            fake.push(message=fake.message(CHAT, text, user_id=person))

    def sent(self, agent: str) -> list[str]:
        return [str(params["text"]) for params in self.fakes[agent].sent]

    def total(self) -> int:
        return sum(len(fake.sent) for fake in self.fakes.values())

    def agents_section(self, **extra: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": agent,
                "persona": f"You are {agent}.",
                "platforms": {
                    "telegram": {
                        "token": fake.token,
                        "base_url": fake.base_url,
                        "poll_timeout": 1,
                        "rate_limits": False,
                        "typing": False,
                    }
                },
                **extra,
            }
            for agent, fake in self.fakes.items()
        ]


def llm_section(url: str) -> dict[str, Any]:
    return {
        "providers": {"fake": {"base_url": url, "api_key": API_KEY, "timeout": 5}},
        "models": {"main": {"provider": "fake", "model": "main-model"}},
    }


_POSTER: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "poster", default=None
)


class DiscordRoom(FakeDiscord):
    """One fake Discord serving a bot per agent, all in the server's ``#general``.

    As on Discord, every connected bot receives every message of the channel, its own
    and the other bots' included; a person's message mentions the bots it addresses.
    """

    def __init__(self) -> None:
        ids = itertools.count(20)
        self.bots = {
            f"ROOM{agent.upper()}.GfAkE1.room-token_{agent}": user(
                snowflake_at(1_600_000_000_000, next(ids)), f"{agent}_bot", bot=True
            )
            for agent in AGENTS
        }
        self.by_agent = dict(zip(AGENTS, self.bots.values(), strict=True))
        super().__init__(next(iter(self.bots)))

    def _bot_of(self, request: web.Request) -> dict[str, Any] | None:
        return self.bots.get(request.headers.get("Authorization", "").removeprefix("Bot "))

    def _authorized(self, request: web.Request) -> bool:
        return self._bot_of(request) is not None

    async def _me(self, request: web.Request) -> web.Response:
        bot = self._bot_of(request)
        if bot is None:
            return await super()._me(request)
        with _as(bot):
            return await super()._me(request)

    async def _application(self, request: web.Request) -> web.Response:
        bot = self._bot_of(request)
        if bot is None:
            return await super()._application(request)
        with _as(bot):
            return await super()._application(request)

    async def _identify(self, ws: Any, seq: Any, data: dict[str, Any]) -> None:
        bot = self.bots.get(str(data.get("token")))
        if bot is None:
            await super()._identify(ws, seq, data)
            return
        self.token = str(data.get("token"))
        with _as(bot):  # READY is built before the first await: it carries this bot
            await super()._identify(ws, seq, data)

    async def _create_message(self, request: web.Request) -> web.Response:
        _POSTER.set(self._bot_of(request))
        return await super()._create_message(request)

    def _store_bot_message(self, channel: int, body: dict[str, Any]) -> dict[str, Any]:
        bot = _POSTER.get()
        if bot is None:
            return super()._store_bot_message(channel, body)
        with _as(bot):
            return super()._store_bot_message(channel, body)

    def sent_by(self, agent: str) -> list[str]:
        bot_id = self.by_agent[agent]["id"]
        return [str(m["content"]) for m in self.sent if m["author"]["id"] == bot_id]

    async def say(self, channel_id: int, content: str, **kwargs: Any) -> dict[str, Any]:
        """A person's message; ``@alice`` in it becomes a mention of alice's bot."""
        mentioned = [bot for agent, bot in self.by_agent.items() if f"@{agent}" in content]
        for agent, bot in self.by_agent.items():
            content = content.replace(f"@{agent}", f"<@{bot['id']}>")
        data = self.message(channel_id, content, **kwargs)
        data["mentions"] = mentioned
        await self.dispatch("MESSAGE_CREATE", data)
        return data

    def agents_section(self) -> list[dict[str, Any]]:
        return [
            {
                "name": agent,
                "persona": f"You are {agent}.",
                "platforms": {
                    "discord": {
                        "token": token,
                        "api_base": self.api_base,
                        "gateway_url": self.gateway_url,
                    }
                },
            }
            for agent, token in zip(AGENTS, self.bots, strict=True)
        ]


@contextmanager
def _as(bot: dict[str, Any]) -> Iterator[None]:
    """The fake's module-level bot identity, as ``bot``; afterwards the fake's own again
    (not the value found: two identifies may overlap)."""
    discord_api.BOT_USER = bot
    discord_api.APPLICATION_ID = discord_api.BOT_ID = int(bot["id"])
    try:
        yield
    finally:
        discord_api.BOT_USER, discord_api.APPLICATION_ID, discord_api.BOT_ID = _ORIGINAL


_ORIGINAL = (discord_api.BOT_USER, discord_api.APPLICATION_ID, discord_api.BOT_ID)


__all__ = ["CHANNEL_ID", "USER", "DiscordRoom", "TelegramRoom"]
