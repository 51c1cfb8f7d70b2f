"""What a server is to normalizing: the names and links a payload names only by id.

A message says ``<@&id>`` and ``<#id>``, not ``@Moderators`` and ``#general``; it does not
say which channel is a thread, or which role Discord made for a bot. Those come from what
the gateway told discord.py earlier (:mod:`.cache` reads its cache through these shapes);
tests and fuzzers pass a plain ``dict`` of their own :class:`Server`. Kept apart from
:mod:`.normalize` so that :mod:`.content` can read names without importing the whole step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    #: Set on the role Discord manages for a bot: people @ it instead of the bot.
    bot_id: str | None = None


@dataclass(frozen=True, slots=True)
class Channel:
    name: str
    #: The channel a thread belongs to; None for anything but a thread.
    parent_id: str | None = None


class Server(Protocol):
    """One server as the gateway's cache knows it (ids are decimal strings)."""

    def member_name(self, user_id: str) -> str | None: ...

    def role(self, role_id: str) -> Role | None: ...

    def channel(self, channel_id: str) -> Channel | None: ...


class Servers(Protocol):
    """The servers the cache knows, by id: a plain ``dict`` of :class:`Server` will do."""

    def get(self, guild_id: str, /) -> Server | None: ...


NO_SERVERS: Mapping[str, Server] = MappingProxyType({})
