"""The ``/ask`` slash command: registered at open, deferred at once, committed as an event.

Discord wants an interaction answered within 3 s, so it is deferred before anything else;
the reply then edits the deferred response through the interaction's webhook while its
token is valid (15 minutes), and later replies go to the channel (see :mod:`.send`).

discord.py's command tree parses the interaction and calls the command with a
``discord.Interaction``, not the payload, and what it could not resolve is lost there: in
a channel of a type it does not know, ``interaction.channel_id`` is None although the
payload names the channel. So :class:`RawInteractions` keeps each INTERACTION_CREATE as
the gateway sent it until the command runs, and ``/ask`` is normalized from that dict —
the shape a fuzzer sends; :func:`payload` rebuilds one only if it was not kept.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import discord
import structlog
from discord import app_commands

from tether.adapters.discord import read
from tether.adapters.kit import describe

log = structlog.get_logger("tether.discord")

Tree = app_commands.CommandTree[discord.Client]


def command_tree(
    client: discord.Client, on_ask: Callable[[discord.Interaction], Awaitable[None]]
) -> Tree:
    """The client's command tree with ``/ask question``, handed to ``on_ask``."""
    tree: Tree = _AskTree(client)

    @tree.command(name="ask", description="Ask the agent")
    @app_commands.describe(question="What you want to ask")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        await on_ask(interaction)  # normalize reads the question from the payload

    return tree


class _AskTree(app_commands.CommandTree[discord.Client]):
    """Only ``/ask`` is the tree's: the menu's commands (:mod:`.commands`) are the
    ingress's, and without this check the tree logs each one as not found."""

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        return is_ask(interaction.data)


def is_ask(data: Any) -> bool:
    """An INTERACTION_CREATE ``data`` naming ``/ask``."""
    return isinstance(data, Mapping) and data.get("name") == "ask"


async def defer(interaction: discord.Interaction) -> bool:
    """Acknowledge within Discord's 3 s; False when that failed (too late, or a replay
    that was answered already), so the reply goes to the channel."""
    try:
        await interaction.response.defer()
    except discord.HTTPException as exc:
        log.warning("discord.defer_failed", interaction_id=interaction.id, error=describe(exc))
        return False
    return True


class RawInteractions:
    """INTERACTION_CREATE payloads as the gateway sent them, by id, until ``/ask`` takes
    its own. Interactions that are not ``/ask`` (buttons, other apps' commands) are never
    taken: past ``limit`` the oldest are forgotten."""

    def __init__(self, limit: int = 64) -> None:
        self._limit = limit
        self._kept: OrderedDict[str, Mapping[str, Any]] = OrderedDict()

    def keep(self, data: Any) -> None:
        """The read loop's hook, before discord.py parses the payload."""
        ident = read.id_or_none(data.get("id")) if isinstance(data, Mapping) else None
        if ident is None:
            return
        self._kept[ident] = data
        while len(self._kept) > self._limit:
            self._kept.popitem(last=False)

    def take(self, interaction: discord.Interaction) -> Mapping[str, Any]:
        """The payload of ``interaction``, as sent if it was kept, else rebuilt."""
        kept = self._kept.pop(str(interaction.id), None)
        return kept if kept is not None else payload(interaction)


def payload(interaction: discord.Interaction) -> dict[str, Any]:
    """The INTERACTION_CREATE fields normalize reads, from discord.py's interaction."""
    user = interaction.user
    person = {
        "id": str(user.id),
        "username": user.name,
        "global_name": user.global_name,
        "bot": user.bot,
    }
    data: dict[str, Any] = {
        "id": str(interaction.id),
        "type": interaction.type.value,
        "application_id": str(interaction.application_id),
        "token": interaction.token,
        "channel_id": None if interaction.channel_id is None else str(interaction.channel_id),
        "data": interaction.data,
    }
    if interaction.guild_id is not None:
        data["guild_id"] = str(interaction.guild_id)
    if isinstance(user, discord.Member):
        data["member"] = {"user": person, "nick": user.nick}
    else:
        data["user"] = person
    return data
