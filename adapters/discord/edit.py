"""Acting on a message already in the channel: editing it (a streamed reply's preview, the
outbox row that finishes it, ``ctx.edit`` of a pressed message), deleting it, reacting to
it and pinning it; and answering a button press with a toast (:func:`answer`).

Discord allows about five edits per five seconds per channel; discord.py waits out its
route buckets. Edits, deletions, reactions and pins are safe to repeat, so unlike a send
without its nonce, every failure of theirs that may have reached Discord is simply
retryable: setting the same content twice leaves one message, a reaction or a pin set
twice is set once, and deleting a message that is gone already (404 Unknown Message)
counts as deleted.

An edit sets the message's components too: the row's buttons, or none (``components:
[]``), so a pressed message edited to "Booked ✓" no longer offers the press. A preview
has no buttons, so its edits change nothing there. Each call goes to the channel the
message is in: the conversation's chat, which for a thread is the thread itself
(:mod:`.normalize`).

A press was acknowledged when it was committed (:mod:`.buttons`), so its toast is an
ephemeral follow-up message (``POST /webhooks/{application}/{token}``, flags 64: only
the person who pressed sees it); Discord has no dialog, so ``alert`` is the same message.
A follow-up is a new message each time: a timeout may have posted it, and is ambiguous
(retried all the same, as Discord sends are: a second toast only that person sees is
better than none). Past the token's 15 minutes, or refused (401/404 Unknown Webhook), it
is :class:`SendFatal`, and the outbox says the text in the channel instead. It lives
here, not in :mod:`.buttons`, because :mod:`.send` imports that one, and this one needs
``classify``.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import discord
from discord.http import Route, handle_message_parameters

from tether.adapters.base import Sent
from tether.adapters.discord import read
from tether.adapters.discord.buttons import EPHEMERAL, TOKEN_META, components
from tether.adapters.discord.normalize import INTERACTION_TTL
from tether.adapters.discord.send import classify
from tether.adapters.kit import describe
from tether.errors import SendAmbiguous, SendFatal, SendRetryable
from tether.events import OutMessage, Target

#: Discord's JSON error code for a message that does not exist (any more).
UNKNOWN_MESSAGE = 10008
#: A server emoji as a message writes it (``<:name:id>``, ``<a:name:id>`` if animated).
_CUSTOM_EMOJI = re.compile(r"<a?:(\w{2,32}):(\d{1,20})>")


async def edit_message(
    client: discord.Client | None, message: OutMessage, platform_id: str, timeout: float
) -> Sent:
    """Set message ``platform_id``'s content to ``message.text``, and its buttons to
    ``message.buttons`` (none: they go), within ``timeout``."""
    # Only people are pinged, as in sends: a model's text may say @everyone.
    mentions = discord.AllowedMentions(everyone=False, roles=False, users=True)
    params = handle_message_parameters(content=message.text, allowed_mentions=mentions)
    payload = params.payload
    assert payload is not None  # JSON, not multipart: no files
    payload["components"] = components(message.buttons)
    channel, ident = channel_of(message.target), message_id(platform_id)

    async def call(http: discord.http.HTTPClient) -> None:
        with params:
            await http.edit_message(channel, ident, params=params)

    await _acting(client, timeout, call)
    return Sent(platform_id=platform_id)


async def delete_message(
    client: discord.Client | None, target: Target, platform_id: str, timeout: float
) -> None:
    """DELETE the message; one already gone (404 Unknown Message) counts as deleted."""
    channel, ident = channel_of(target), message_id(platform_id)
    try:
        await _acting(client, timeout, lambda http: http.delete_message(channel, ident))
    except SendFatal as exc:
        if not isinstance(exc.__cause__, discord.NotFound) or exc.__cause__.code != UNKNOWN_MESSAGE:
            raise


async def react(
    client: discord.Client | None, target: Target, platform_id: str, emoji: str, timeout: float
) -> None:
    """The bot's reaction: a Unicode emoji as it is, a server's ``<:name:id>`` as the
    ``name:id`` the route takes (discord.py URL-quotes either)."""
    channel, ident = channel_of(target), message_id(platform_id)
    said = reaction(emoji)
    await _acting(client, timeout, lambda http: http.add_reaction(channel, ident, said))


async def pin(
    client: discord.Client | None, target: Target, platform_id: str, *, pinned: bool, timeout: float
) -> None:
    """Pin the message in its channel (Discord posts its own "pinned a message" line,
    which normalize skips as a system message), or unpin it."""
    channel, ident = channel_of(target), message_id(platform_id)
    if pinned:
        await _acting(client, timeout, lambda http: http.pin_message(channel, ident))
    else:
        await _acting(client, timeout, lambda http: http.unpin_message(channel, ident))


async def answer(
    client: discord.Client | None,
    application_id: int | None,
    message: OutMessage,
    press: Mapping[str, Any],
    timeout: float,
) -> Sent:
    """The toast ``message.text`` as an ephemeral follow-up to the press whose event
    ``meta`` is ``press``; no text, no call (the press was acknowledged already)."""
    if not message.text:
        return Sent()
    token, interaction_id = press.get(TOKEN_META), str(press.get("interaction_id") or "")
    if not isinstance(token, str) or not token or not interaction_id.isdigit():
        raise SendFatal("the press names no interaction token to answer it with")
    if read.created(interaction_id).timestamp() + INTERACTION_TTL <= time.time():
        raise SendFatal("the press is older than the 15 minutes its token lasts")
    if application_id is None:
        raise SendRetryable("discord adapter is not open")
    route = Route(
        "POST",
        "/webhooks/{webhook_id}/{webhook_token}",
        webhook_id=application_id,
        webhook_token=token,
    )
    mentions = discord.AllowedMentions(everyone=False, roles=False, users=True)
    payload = {"content": message.text, "flags": EPHEMERAL, "allowed_mentions": mentions.to_dict()}
    post = lambda http: http.request(route, json=payload)  # noqa: E731 - the call, timed
    await _acting(client, timeout, post, repeatable=False)
    return Sent()


def reaction(emoji: str) -> str:
    """What the reactions route names ``emoji`` by: ``name:id`` for a server emoji."""
    found = _CUSTOM_EMOJI.fullmatch(emoji.strip())
    return f"{found.group(1)}:{found.group(2)}" if found else emoji.strip()


def channel_of(target: Target) -> int:
    """The channel a message of ``target`` is in: the chat (a thread is a channel)."""
    return message_id(target.chat_id, "channel")


def message_id(value: str, what: str = "message") -> int:
    """A Discord id as the int discord.py routes take; anything else can never work."""
    if not (value.isascii() and value.isdigit() and 0 < len(value) <= 20):
        raise SendFatal(f"not a Discord {what} id: {value!r}")
    return int(value)


async def _acting(
    client: discord.Client | None,
    timeout: float,
    call: Callable[[discord.http.HTTPClient], Awaitable[Any]],
    *,
    repeatable: bool = True,
) -> None:
    """One REST call within ``timeout``, its failure as the ``Send*`` error the outbox
    wants. A call Discord may have done (a timeout, a connection cut mid-request) is
    retryable when doing it twice does it once (``repeatable``), else ambiguous."""
    if client is None:
        raise SendRetryable("discord adapter is not open")
    maybe_done = SendRetryable if repeatable else SendAmbiguous
    try:
        await asyncio.wait_for(call(client.http), timeout)
    except TimeoutError as exc:
        raise maybe_done(f"no answer within {timeout} s") from exc
    except discord.RateLimited as exc:
        raise SendRetryable(describe(exc), retry_after=exc.retry_after) from exc
    except discord.HTTPException as exc:
        raise classify(exc) from exc
    except (aiohttp.ClientConnectorError, ConnectionRefusedError) as exc:
        raise SendRetryable(describe(exc)) from exc  # never connected: not done
    except (aiohttp.ClientError, OSError) as exc:
        raise maybe_done(describe(exc)) from exc
