"""Editing a message the bot sent: a streamed reply's preview, and the outbox row that
finishes it (``PATCH /channels/{channel}/messages/{message}``).

Discord allows about five edits per five seconds per channel; discord.py waits out its
route buckets. Setting the same content twice leaves one message, so unlike a send
without its nonce, every failure that may have reached Discord is simply retryable.
"""

from __future__ import annotations

import asyncio

import aiohttp
import discord

from tether.adapters.base import Sent
from tether.adapters.discord.send import classify
from tether.adapters.kit import describe
from tether.errors import SendRetryable
from tether.events import OutMessage


async def edit_message(
    client: discord.Client | None, message: OutMessage, platform_id: str, timeout: float
) -> Sent:
    """Set message ``platform_id``'s content to ``message.text`` within ``timeout``."""
    if client is None:
        raise SendRetryable("discord adapter is not open")
    channel = client.get_partial_messageable(int(message.target.chat_id))
    # Only people are pinged, as in sends: a model's text may say @everyone.
    mentions = discord.AllowedMentions(everyone=False, roles=False, users=True)
    target = channel.get_partial_message(int(platform_id))
    try:
        await asyncio.wait_for(
            target.edit(content=message.text, allowed_mentions=mentions), timeout
        )
    except TimeoutError as exc:
        raise SendRetryable(f"no answer within {timeout} s") from exc
    except discord.RateLimited as exc:
        raise SendRetryable(describe(exc), retry_after=exc.retry_after) from exc
    except discord.HTTPException as exc:
        raise classify(exc) from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise SendRetryable(describe(exc)) from exc
    return Sent(platform_id=platform_id)
