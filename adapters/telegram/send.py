"""Replies out: sendMessage, and which of its failures are safe to retry.

Telegram has no idempotency key for sends: a timed-out sendMessage may or may not have
arrived. :func:`classify` tells the outbox which failures certainly did not send (safe to
retry) and which are ambiguous (the row becomes ``unknown`` unless ``resend_unknown``).
Two failures are handled here instead, because sending again cannot duplicate: a group
that became a supergroup (the same chat under a new id), and formatted text Telegram
cannot parse (a 400, so nothing was delivered; it goes again as plain text).
"""

from __future__ import annotations

import html
import re
import warnings
from datetime import timedelta
from typing import Any

import structlog
from telegram.constants import ParseMode
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)

from tether.adapters.base import Sent
from tether.adapters.kit import describe
from tether.adapters.telegram.buttons import inline_keyboard
from tether.adapters.telegram.http import NOT_SENT, BotClient
from tether.adapters.telegram.markdown import formatted, readable
from tether.errors import SendAmbiguous, SendError, SendFatal, SendRetryable
from tether.events import OutMessage, Target
from tether.limits import Limit

log = structlog.get_logger("tether.telegram")

_PARSE_MODES = {"html": ParseMode.HTML, "markdown": ParseMode.MARKDOWN_V2}
_ENTITY_ERROR = re.compile(r"can't parse entities|can't find end of the entity", re.IGNORECASE)


async def send_message(bot: BotClient, message: OutMessage) -> Sent:
    """Deliver one message, following a migrated group; failures become ``Send*`` errors."""
    chat = chat_id(message.target.chat_id)
    try:
        try:
            sent = await _send_text(bot, chat, message)
        except ChatMigrated as exc:  # a group became a supergroup: same chat, new id
            log.warning("telegram.chat_migrated", key=message.key, chat=chat, to=exc.new_chat_id)
            sent = await _send_text(bot, exc.new_chat_id, message)
    except TelegramError as exc:
        raise classify(exc) from exc
    return Sent(platform_id=str(sent.get("message_id")))


def addressed(chat: int | str, message: OutMessage) -> dict[str, Any]:
    """The parameters every send* method shares: the chat, the forum topic, the quote."""
    params: dict[str, Any] = {"chat_id": chat}
    if message.target.thread_id:
        params["message_thread_id"] = int(message.target.thread_id)
    if message.reply_to and message.reply_to.lstrip("-").isdigit():
        # The quoted message may be gone by the time the reply goes out: send anyway.
        params["reply_parameters"] = {
            "message_id": int(message.reply_to),
            "allow_sending_without_reply": True,
        }
    return params


async def _send_text(bot: BotClient, chat: int | str, message: OutMessage) -> dict[str, Any]:
    """sendMessage; formatted text that Telegram cannot parse goes again as plain text."""
    params = addressed(chat, message)
    params["text"] = formatted(message.text, message.format)
    if message.buttons:
        params["reply_markup"] = inline_keyboard(message.buttons)
    parse_mode = _PARSE_MODES.get(message.format)
    try:
        return await bot.send_message_dict({**params, "parse_mode": parse_mode})
    except BadRequest as exc:
        if parse_mode is None or not refused_entities(exc):
            raise
        # A 400 was not delivered, so sending again cannot duplicate.
        log.warning(
            "telegram.format_fallback",
            key=message.key,
            format=message.format,
            error=describe(exc),
        )
        params["text"] = fallback_text(message.text, message.format)
        return await bot.send_message_dict(params)


def refused_entities(exc: BadRequest) -> bool:
    """Telegram refused the formatting (not the message): plain text will go through."""
    return bool(_ENTITY_ERROR.search(str(exc)))


def rate_limits(target: Target) -> list[Limit]:
    """Telegram's published limits: ~1/s per chat (short bursts tolerated), 20/min per
    group, ~30/s overall. Negative chat ids are groups, supergroups and channels."""
    limits = [Limit(f"telegram:chat:{target.chat_id}", rate=1.0, burst=3.0)]
    if target.chat_id.startswith("-"):
        limits.append(Limit(f"telegram:group:{target.chat_id}", rate=20 / 60, burst=20.0))
    limits.append(Limit("telegram:global", rate=30.0, burst=30.0))
    return limits


def classify(exc: TelegramError) -> SendError:
    """Which ``Send*`` error a failed sendMessage is, by whether it certainly did not send.

    Not sent (retry is safe): 429 flood control, connection refused or never made, pool
    exhausted. Rejected (never will send): 400/403/401. Anything after the request may
    have reached Telegram (a read timeout, a dropped connection, a 5xx) is ambiguous.
    """
    text = describe(exc)
    if isinstance(exc, RetryAfter):
        return SendRetryable(text, retry_after=retry_after_seconds(exc))
    if isinstance(exc, BadRequest | Forbidden | InvalidToken | ChatMigrated):
        return SendFatal(text)
    if isinstance(exc, NetworkError) and _not_sent(exc):
        return SendRetryable(text)
    if isinstance(exc, TimedOut):
        return SendAmbiguous(f"timed out after the request was sent: {text}")
    return SendAmbiguous(text)


def retry_after_seconds(exc: RetryAfter) -> float:
    """``RetryAfter.retry_after`` in seconds (an int, or a timedelta with PTB_TIMEDELTA)."""
    with warnings.catch_warnings():  # PTB 22 warns that the type will become timedelta
        warnings.simplefilter("ignore")
        value: int | timedelta = exc.retry_after
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    return float(seconds)


def fallback_text(text: str, fmt: str) -> str:
    """What goes out as plain text when Telegram refuses the formatted one."""
    return readable(text) if fmt == "markdown" else plain_text(text, fmt)


def plain_text(text: str, fmt: str) -> str:
    """The readable text of HTML or MarkdownV2 markup, for the plain-text fallback."""
    if fmt == "html":
        return html.unescape(re.sub(r"<[^>]*>", "", text))
    if fmt == "markdown":
        return re.sub(r"\\([_*\[\]()~`>#+\-=|{}.!\\])", r"\1", text)
    return text


def chat_id(value: str) -> int | str:
    """Numeric ids as ints; ``@channelusername`` stays a string."""
    return int(value) if value.lstrip("-").isdigit() else value


def _not_sent(exc: BaseException) -> bool:
    """True when an aiohttp failure from before the request left is in the cause chain."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, NOT_SENT):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
