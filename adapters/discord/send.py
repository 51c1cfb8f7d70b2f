"""Outbound: one message to a channel (or into ``/ask``'s deferred response), and which
``Send*`` error a failure is.

Sends pass a ``nonce`` derived from the outbox key with ``enforce_nonce``: Discord returns
the existing message for a repeated nonce, so a retry after a timeout or a 5xx cannot post
twice and the adapter declares ``idempotent_send``. discord.py's own rate-limit waits are
per-route ``asyncio.sleep``s; a send that waits longer than ``send_timeout`` is abandoned
as ambiguous (the outbox then retries it, same nonce).

The first chunk of an ``/ask`` answer edits the deferred response while the interaction's
token is valid (an edit is idempotent too); later, or when the token is refused, it goes
to the channel like any message.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import discord
import structlog
from discord.http import Route

from tether.adapters.base import Sent
from tether.adapters.discord.buttons import components, send_with_buttons
from tether.adapters.kit import describe
from tether.errors import SendAmbiguous, SendError, SendFatal, SendRetryable
from tether.events import OutMessage
from tether.keys import first_of_answer

log = structlog.get_logger("tether.discord")

#: Answer by channel message a little before the interaction token expires.
INTERACTION_MARGIN = 30.0
#: Errors of an edit that mean the token is gone: 401/404, Unknown Webhook, Invalid Token.
_TOKEN_GONE_STATUS = (401, 404)
_TOKEN_GONE_CODES = (10015, 50027)


def send_nonce(key: str) -> str:
    """Discord's idempotency nonce (≤ 25 chars) for an outbox key: stable across retries."""
    return hashlib.sha256(key.encode()).hexdigest()[:25]


async def send(
    client: discord.Client | None,
    message: OutMessage,
    timeout: float,
    work: Callable[[discord.Client], Awaitable[Sent]] | None = None,
) -> Sent:
    """Deliver one message within ``timeout`` seconds, or raise the ``Send*`` error that
    tells the outbox whether (and when) trying again is safe. ``work`` replaces the
    plain send (files: :mod:`.media`), with the same timeout and error mapping."""
    if client is None:
        raise SendRetryable("discord adapter is not open")
    try:
        job = work(client) if work is not None else _deliver(client, message)
        return await asyncio.wait_for(job, timeout)
    except TimeoutError as exc:
        raise SendAmbiguous(f"no answer within {timeout} s") from exc
    except discord.RateLimited as exc:
        raise SendRetryable(describe(exc), retry_after=exc.retry_after) from exc
    except discord.HTTPException as exc:
        raise classify(exc) from exc
    except (aiohttp.ClientConnectorError, ConnectionRefusedError) as exc:
        raise SendRetryable(describe(exc)) from exc  # never connected: not sent
    except (aiohttp.ClientError, OSError) as exc:
        raise SendAmbiguous(describe(exc)) from exc


def classify(exc: discord.HTTPException) -> SendError:
    """Which ``Send*`` error a refused send is. Sends are idempotent (nonce), so only
    "never will work" (4xx) stops the retries; 429 and 5xx wait and try again."""
    text = describe(exc)
    if exc.status == 429:
        return SendRetryable(text, retry_after=_retry_after(exc))
    if exc.status >= 500:
        return SendRetryable(text)
    return SendFatal(text)  # 403 Forbidden, 404 Unknown Channel, 400 invalid, 401 token


async def _deliver(client: discord.Client, message: OutMessage) -> Sent:
    interaction = message.meta.get("interaction")
    if isinstance(interaction, dict) and first_of_answer(message.key):
        if float(interaction.get("expires", 0)) - INTERACTION_MARGIN > time.time():
            try:
                return await _edit_original(client, interaction, message)
            except discord.HTTPException as exc:
                if exc.status not in _TOKEN_GONE_STATUS and exc.code not in _TOKEN_GONE_CODES:
                    raise
                log.warning("discord.interaction_expired", key=message.key)
        else:
            log.info("discord.interaction_expired", key=message.key)
    channel = client.get_partial_messageable(int(message.target.chat_id))
    nonce = send_nonce(message.key)  # discord.py adds enforce_nonce=true
    mentions = _allowed_mentions()
    if message.buttons:
        return await send_with_buttons(client, message, nonce, mentions)
    if not (message.reply_to and message.reply_to.isdigit()):
        sent = await channel.send(message.text, nonce=nonce, allowed_mentions=mentions)
        return Sent(platform_id=str(sent.id))
    reference = discord.MessageReference(
        message_id=int(message.reply_to),
        channel_id=channel.id,
        fail_if_not_exists=False,  # the quoted message may be gone: send anyway
    )
    sent = await channel.send(
        message.text, nonce=nonce, allowed_mentions=mentions, reference=reference
    )
    return Sent(platform_id=str(sent.id))


async def _edit_original(
    client: discord.Client, interaction: dict[str, Any], message: OutMessage
) -> Sent:
    """Edit the deferred response: idempotent, so a retry cannot post a second answer."""
    route = Route(
        "PATCH",
        "/webhooks/{webhook_id}/{webhook_token}/messages/@original",
        webhook_id=int(interaction["application_id"]),
        webhook_token=str(interaction["token"]),
    )
    payload: dict[str, Any] = {
        "content": message.text,
        "allowed_mentions": _allowed_mentions().to_dict(),
    }
    if message.buttons:
        payload["components"] = components(message.buttons)
    data = await client.http.request(route, json=payload)
    return Sent(platform_id=str(data.get("id")) if isinstance(data, dict) else None)


def _retry_after(exc: discord.HTTPException) -> float | None:
    with contextlib.suppress(Exception):
        return float(exc.response.headers.get("Retry-After", ""))
    return None


def _allowed_mentions() -> discord.AllowedMentions:
    """An agent's text may say @everyone or name a role; only people are pinged."""
    return discord.AllowedMentions(everyone=False, roles=False, users=True, replied_user=True)
