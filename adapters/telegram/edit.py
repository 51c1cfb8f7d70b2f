"""editMessageText: a streamed reply's preview, and the outbox row that finishes it.

Telegram allows editing a bot's own text message (about one edit a second per chat
before 429s). Setting the text it already has answers 400 "message is not modified",
which for us means done: the message shows the text. Formatted text Telegram cannot
parse is edited in again as plain text, as sends do. An ambiguous failure (a timeout)
is retryable here, unlike a send's: editing twice still leaves one message.
"""

from __future__ import annotations

import structlog
from telegram import Bot
from telegram.constants import ParseMode
from telegram.error import BadRequest, TelegramError

from tether.adapters.base import Sent
from tether.adapters.kit import describe
from tether.adapters.telegram.markdown import formatted
from tether.adapters.telegram.send import chat_id, classify, fallback_text, refused_entities
from tether.errors import SendAmbiguous, SendRetryable
from tether.events import OutMessage

log = structlog.get_logger("tether.telegram")

_PARSE_MODES = {"html": ParseMode.HTML, "markdown": ParseMode.MARKDOWN_V2}
_NOT_MODIFIED = "message is not modified"


async def edit_text(bot: Bot, message: OutMessage, message_id: str) -> Sent:
    """Set the text of the bot's message ``message_id`` to ``message``'s."""
    chat = chat_id(message.target.chat_id)
    parse_mode = _PARSE_MODES.get(message.format)
    try:
        try:
            await _edit(bot, chat, message_id, formatted(message.text, message.format), parse_mode)
        except BadRequest as exc:
            if parse_mode is None or not refused_entities(exc):
                raise
            log.warning(
                "telegram.format_fallback", key=message.key, format=message.format,
                error=describe(exc), edit=True,
            )  # fmt: skip
            await _edit(bot, chat, message_id, fallback_text(message.text, message.format), None)
    except TelegramError as exc:
        error = classify(exc)
        if isinstance(error, SendAmbiguous):  # an edit repeated is still one message
            raise SendRetryable(str(error)) from exc
        raise error from exc
    return Sent(platform_id=message_id)


async def _edit(
    bot: Bot, chat: int | str, message_id: str, text: str, parse_mode: str | None
) -> None:
    try:
        await bot.edit_message_text(
            text, chat_id=chat, message_id=int(message_id), parse_mode=parse_mode
        )
    except BadRequest as exc:
        if _NOT_MODIFIED not in str(exc).lower():
            raise
