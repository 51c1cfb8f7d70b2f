"""What came while Tether was away: read after each channel's cursor, oldest first.

Discord delivers gateway events zero, one or several times: a RESUME replays (the inbox
drops the duplicate keys), and a new session — a start, or a resume that failed — loses
the gap. So every message seen commits ``discord:channel:{channel}:last`` with its event,
and after each READY the channels whose cursor moved within ``backfill_hours`` are read
with ``GET /channels/{id}/messages?after={last}``. The pages go through the same
normalize-and-commit step as live messages, so what was missed is answered once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import discord
import structlog

from tether.adapters.base import Ingress
from tether.adapters.discord.cache import channel_info
from tether.adapters.discord.normalize import Channel
from tether.adapters.kit import describe
from tether.config.schema import DiscordConfig

log = structlog.get_logger("tether.discord")

CURSOR_PREFIX = "discord:channel:"
#: Discord's largest history page.
_PAGE = 100

#: Commits one page of a channel's raw messages (oldest first) and moves its cursor; the
#: channel as fetched (a thread, else None) and its server's id come with it, since REST
#: messages carry no ``guild_id`` (the payloads stay as sent: they become ``Event.raw``).
Commit = Callable[[int, list[dict[str, Any]], Channel | None, str | None], Awaitable[None]]


def cursor_name(channel_id: int | str) -> str:
    """The store cursor holding the last message id seen in a channel (or thread)."""
    return f"{CURSOR_PREFIX}{channel_id}:last"


async def backfill(
    client: discord.Client, cursors: Ingress, config: DiscordConfig, commit: Commit
) -> None:
    """Read each recently active channel after its last seen message, oldest first."""
    since = time.time() - config.backfill_hours * 3600
    recent = await cursors.recent_cursors(CURSOR_PREFIX, since)
    channels = [
        (int(name.split(":")[2]), int(value))
        for name, value in recent.items()
        if name.endswith(":last") and value.isdigit()
    ]
    log.info("discord.backfill_started", channels=len(channels))
    found = 0
    for channel_id, last in channels:
        try:
            found += await _channel(client, channel_id, last, config.backfill_limit, commit)
        except asyncio.CancelledError:
            raise
        except (discord.Forbidden, discord.NotFound) as exc:
            # Deleted, or the bot was removed: it stops being "recent" within the window.
            log.info("discord.backfill_skipped", channel=channel_id, error=describe(exc))
        except Exception as exc:
            log.warning("discord.backfill_failed", channel=channel_id, error=describe(exc))
    log.info("discord.backfill_done", channels=len(channels), messages=found)


async def _channel(
    client: discord.Client, channel_id: int, last: int, limit: int, commit: Commit
) -> int:
    """Page through one channel after ``last``, at most ``limit`` messages."""
    channel = await client.fetch_channel(channel_id)
    if not isinstance(channel, discord.abc.Messageable):
        return 0
    # The fetched channel, not the cache: an archived thread is a thread all the same.
    here = channel_info(channel) if isinstance(channel, discord.Thread) else None
    guild = getattr(channel, "guild", None)
    guild_id = str(guild.id) if guild is not None else None
    count, after = 0, last
    while count < limit:
        page = cast(
            list[dict[str, Any]],
            await client.http.logs_from(channel_id, min(limit - count, _PAGE), after=after),
        )
        if not page:
            break
        after = int(page[0]["id"])  # Discord answers newest first
        page.reverse()
        await commit(channel_id, page, here, guild_id)
        count += len(page)
        if len(page) < _PAGE:
            break
    if count:
        log.info("discord.backfilled", channel=channel_id, messages=count)
    if count >= limit:
        log.warning("discord.backfill_truncated", channel=channel_id, limit=limit)
    return count
