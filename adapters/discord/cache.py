"""discord.py's gateway cache, seen as normalize's :class:`~.normalize.Servers`.

A message payload names roles, channels and members by id only; the names a reader sees
(``@Moderators``, ``#general``, a nickname), which channel is a thread, and which role is
the bot's own come from what GUILD_CREATE and later events told discord.py. Lookups only:
nothing here waits or calls Discord.
"""

from __future__ import annotations

import discord

from tether.adapters.discord.servers import Channel, Role


class CachedServers:
    """The servers the client has cached, by id (``get`` is all normalize asks)."""

    def __init__(self, client: discord.Client) -> None:
        self._client = client

    def get(self, guild_id: str, /) -> CachedServer | None:
        guild = self._client.get_guild(int(guild_id))
        return None if guild is None else CachedServer(guild)


class CachedServer:
    """One cached server: its members, roles, channels and threads."""

    __slots__ = ("_guild",)

    def __init__(self, guild: discord.Guild) -> None:
        self._guild = guild

    def member_name(self, user_id: str) -> str | None:
        member = self._guild.get_member(int(user_id))
        return None if member is None else member.display_name

    def role(self, role_id: str) -> Role | None:
        role = self._guild.get_role(int(role_id))
        if role is None:
            return None
        bot_id = role.tags.bot_id if role.tags is not None else None
        return Role(name=role.name, bot_id=None if bot_id is None else str(bot_id))

    def channel(self, channel_id: str) -> Channel | None:
        found = self._guild.get_channel_or_thread(int(channel_id))
        return None if found is None else channel_info(found)


def channel_info(channel: object) -> Channel:
    """What normalize needs of a channel object: its name, and its parent if a thread."""
    parent = str(channel.parent_id) if isinstance(channel, discord.Thread) else None
    name = getattr(channel, "name", None)
    return Channel(name=name if isinstance(name, str) else "", parent_id=parent)
