"""One person across platforms, through the real pipeline: a person links their Telegram
and Discord accounts with ``/link`` and gets what they told the bot about themselves on
both, while the other person in their Telegram group never does; ``/unlink`` and
``tether who`` as the operator sees it.

PTB against the fake Bot API and discord.py against the fake Discord, both in one
gateway, the LLM agent on the real ``openai`` client against the fake model, which
records every prompt: the checks read those prompts, not our own code's state.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.discord_api import DM_CHANNEL_ID, USER_ID, FakeDiscord
from tests.fakes.telegram_api import USERNAME, FakeTelegram
from tests.support.config import make_settings, write_config
from tests.support.discord import section
from tests.support.gateway import running
from tether.gateway.app import Gateway
from tether.gateway.cli import main
from tether.testing.model import Body, FakeModel

ADA, BEN, GROUP = 501, 502, -100777
ADA_TG, ADA_DC = f"telegram:{ADA}", f"discord:{USER_ID}"


def prompt_of(body: Body) -> str:
    return json.dumps(body.get("messages", []), ensure_ascii=False)


class Both:
    """The two fakes, the model, and one message at a time with the prompt it caused."""

    def __init__(
        self, gateway: Gateway, telegram: FakeTelegram, discord: FakeDiscord, model: FakeModel
    ) -> None:
        self.gateway, self.telegram, self.discord, self.model = gateway, telegram, discord, model

    async def telegram_says(self, chat: int, text: str, user: int = ADA) -> tuple[str, str]:
        sent, asked = len(self.telegram.sent), len(self.model.requests)
        self.telegram.push(message=self.telegram.message(chat, text, user_id=user))
        await self.telegram.wait_for(lambda: len(self.telegram.sent) > sent, timeout=15)
        await self.gateway.drain()
        return str(self.telegram.sent[sent]["text"]), self._prompts(asked)

    async def discord_says(self, text: str) -> tuple[str, str]:
        sent, asked = len(self.discord.sent), len(self.model.requests)
        await self.discord.say(DM_CHANNEL_ID, text)
        await self.discord.wait_for(lambda: len(self.discord.sent) > sent, timeout=15)
        await self.gateway.drain()
        return str(self.discord.sent[sent]["content"]), self._prompts(asked)

    def _prompts(self, since: int) -> str:
        return "\n".join(
            json.dumps(r.messages, ensure_ascii=False) for r in self.model.requests[since:]
        )


def settings_for(
    tmp_path: Path,
    telegram: FakeTelegram,
    discord: FakeDiscord,
    model: FakeModel,
    store: str | None = None,
) -> Any:
    model.reply = lambda body: "Sure."
    platforms = {
        "telegram": {"token": telegram.token, "base_url": telegram.base_url, "poll_timeout": 1},
        "discord": section(discord),
    }
    memory = {"store": store} if store else {}
    return make_settings(
        tmp_path,
        platforms=platforms,
        llm=model.section(timeout=5),
        agent={"handler": "llm"},
        **({"memory": memory} if memory else {}),
    )


@asynccontextmanager
async def both_running(
    tmp_path: Path,
    telegram: FakeTelegram,
    discord: FakeDiscord,
    model: FakeModel,
    store: str | None = None,
) -> AsyncIterator[Both]:
    async with running(settings_for(tmp_path, telegram, discord, model, store)) as (gateway, _):
        await discord.wait_for(lambda: discord.connected >= 1)
        yield Both(gateway, telegram, discord, model)


async def test_a_linked_person_gets_their_facts_on_both_platforms_and_nobody_else_does(
    tmp_path: Path,
    telegram: FakeTelegram,
    discord_fake: FakeDiscord,
    model: FakeModel,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with both_running(tmp_path, telegram, discord_fake, model) as chat:
        saved, _ = await chat.telegram_says(ADA, "/remember I'm vegetarian")
        assert saved == "I'll remember: I'm vegetarian"
        _, before = await chat.discord_says("what should I cook tonight?")
        assert "vegetarian" not in before  # not linked yet: another person to the bot

        offer, _ = await chat.telegram_says(ADA, "/link")
        code = re.search(r"/link ([A-Z0-9]{4}-[A-Z0-9]{4})", offer)
        assert code, offer
        linked, _ = await chat.discord_says(f"/link {code.group(1)}")
        assert linked.startswith(f"Linked: you are also {ADA_TG}")
        spent, _ = await chat.discord_says(f"/link {code.group(1)}")
        assert spent.startswith("That code is unknown, used or expired.")
        assert ADA_TG in spent  # ...and says who they are linked with

        _, on_discord = await chat.discord_says("what should I cook tonight?")
        assert "I'm vegetarian" in on_discord
        await chat.discord_says("/remember my cat is called Miso")
        _, on_telegram = await chat.telegram_says(ADA, "any plans for the weekend?")
        assert "I'm vegetarian" in on_telegram and "Miso" in on_telegram

        # a group both people are in (a session each, the default): what a person said
        # about themselves there is in their own turns only; what they told the bot in a
        # DM stays out of every group, where others read the answers
        mention = f"@{USERNAME}"
        said, _ = await chat.telegram_says(GROUP, "/remember I take the train", user=BEN)
        assert said == "I'll remember about you: I take the train"
        await chat.telegram_says(GROUP, "/remember I'm allergic to nuts", user=ADA)
        await chat.telegram_says(GROUP, "/remember the launch is on Friday", user=BEN)
        _, bens = await chat.telegram_says(GROUP, f"{mention} where shall we eat?", user=BEN)
        _, adas = await chat.telegram_says(GROUP, f"{mention} and what about me?", user=ADA)
        assert "train" in bens and "launch is on Friday" in bens
        assert "vegetarian" not in bens and "Miso" not in bens and "nuts" not in bens
        assert "allergic to nuts" in adas and "train" not in adas
        assert "vegetarian" not in adas and "Miso" not in adas  # said in DMs

        listed, _ = await chat.telegram_says(GROUP, "/facts", user=ADA)
        assert "I'm allergic to nuts (about you)" in listed
        assert "vegetarian" not in listed and "I take the train" not in listed
        # ...and a group's person-fact follows the person to their DMs on both platforms
        _, in_dm = await chat.discord_says("snack ideas?")
        assert "allergic to nuts" in in_dm and "vegetarian" in in_dm

    config = write_config(tmp_path)
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["who", ADA_DC, "-c", str(config)]) == 0
    shown = capsys.readouterr().out
    assert ADA_TG in shown and ADA_DC in shown
    assert "vegetarian" in shown and "Miso" in shown and "nuts" in shown
    assert "train" not in shown


async def test_unlinking_ends_the_sharing(
    tmp_path: Path, telegram: FakeTelegram, discord_fake: FakeDiscord, model: FakeModel
) -> None:
    async with both_running(tmp_path, telegram, discord_fake, model) as chat:
        await chat.telegram_says(ADA, "/remember I'm vegetarian")
        offer, _ = await chat.telegram_says(ADA, "/link")
        code = re.search(r"/link (\S+)", offer)
        assert code
        await chat.discord_says(f"/link {code.group(1).lower()}")  # case and dash forgiven
        _, linked = await chat.discord_says("dinner ideas?")
        assert "vegetarian" in linked
        gone, _ = await chat.discord_says("/unlink")
        assert gone.startswith("Unlinked")
        _, after = await chat.discord_says("dinner ideas?")
        assert "vegetarian" not in after
        again, _ = await chat.discord_says("/unlink")
        assert again.startswith("This account is not linked")


async def test_codes_are_neither_issued_nor_taken_in_a_group(
    tmp_path: Path,
    telegram: FakeTelegram,
    discord_fake: FakeDiscord,
    model: FakeModel,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with both_running(tmp_path, telegram, discord_fake, model) as chat:
        refused, _ = await chat.telegram_says(GROUP, "/link")
        assert refused.startswith("Linking works in a direct message only")
        offer, _ = await chat.telegram_says(ADA, "/link")
        code = re.search(r"/link (\S+)", offer)
        assert code
        taken, _ = await chat.telegram_says(GROUP, f"/link {code.group(1)}", user=BEN)
        assert taken.startswith("Linking works in a direct message only")
        own, _ = await chat.telegram_says(ADA, f"/link {code.group(1)}")
        assert own.startswith("That code is for another account")
    config = write_config(tmp_path)
    for who in (ADA_TG, f"telegram:{BEN}"):
        capsys.readouterr()
        assert await asyncio.to_thread(main, ["who", who, "-c", str(config), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["linked"] == []
