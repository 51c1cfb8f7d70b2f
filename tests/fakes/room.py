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

import re
from collections.abc import Callable
from typing import Any

from tests.fakes.openai_api import API_KEY, Body
from tests.fakes.telegram_api import FakeTelegram

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


def until(predicate: Callable[[], bool]) -> Callable[[], bool]:
    return predicate
