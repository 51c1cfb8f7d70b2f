"""Acting on a message already in the chat: edits (a streamed reply's preview, the outbox
row that finishes it, ``ctx.edit`` of a pressed message), deletions, reactions, pins, and
the answer to a button press.

Telegram allows editing a bot's own text message (about one edit a second per chat
before 429s). Setting the text it already has answers 400 "message is not modified",
which for us means done: the message shows the text. Formatted text Telegram cannot
parse is edited in again as plain text, as sends do. An ambiguous failure (a timeout)
is retryable here, unlike a send's: editing twice still leaves one message.

An edit sets the buttons too: those of the row, or none (Telegram drops an inline
keyboard that ``editMessageText`` does not repeat), so a pressed message edited to
"Booked ✓" no longer offers the press. The other actions are as safe to repeat:
``deleteMessage`` of a message already gone ("message to delete not found") is done,
setting the same reaction or pin twice sets it once. A pin is silent
(``disable_notification``): a bot pinning is keeping order, not calling everyone. The
answer to a press is ``answerCallbackQuery``, once per press: :mod:`.chores` answers a
press without text after a grace unless its handler said it would (``claim_press``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

import structlog
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, ReactionTypeEmoji
from telegram.constants import ParseMode
from telegram.error import BadRequest, TelegramError

from tether.adapters.base import Sent
from tether.adapters.kit import describe
from tether.adapters.telegram.markdown import formatted
from tether.adapters.telegram.send import chat_id, classify, fallback_text, refused_entities
from tether.buttons import Keyboard
from tether.errors import SendAmbiguous, SendFatal, SendRetryable
from tether.events import OutMessage, Target

log = structlog.get_logger("tether.telegram")

_PARSE_MODES = {"html": ParseMode.HTML, "markdown": ParseMode.MARKDOWN_V2}
_NOT_MODIFIED = "message is not modified"
_GONE = "message to delete not found"


async def edit_text(bot: Bot, message: OutMessage, message_id: str) -> Sent:
    """Set the text of the bot's message ``message_id`` to ``message``'s."""
    chat = chat_id(message.target.chat_id)
    parse_mode = _PARSE_MODES.get(message.format)
    try:
        try:
            shown = formatted(message.text, message.format)
            await _edit(bot, chat, message_id, shown, parse_mode, message.buttons)
        except BadRequest as exc:
            if parse_mode is None or not refused_entities(exc):
                raise
            log.warning(
                "telegram.format_fallback", key=message.key, format=message.format,
                error=describe(exc), edit=True,
            )  # fmt: skip
            plain = fallback_text(message.text, message.format)
            await _edit(bot, chat, message_id, plain, None, message.buttons)
    except TelegramError as exc:
        error = classify(exc)
        if isinstance(error, SendAmbiguous):  # an edit repeated is still one message
            raise SendRetryable(str(error)) from exc
        raise error from exc
    return Sent(platform_id=message_id)


async def delete_message(bot: Bot, target: Target, message_id: str) -> None:
    """deleteMessage; a message already gone counts as deleted."""
    try:
        await _acting(bot.delete_message(chat_id(target.chat_id), int(message_id)))
    except SendFatal as exc:
        if _GONE not in str(exc).lower():
            raise


async def react(bot: Bot, target: Target, message_id: str, emoji: str) -> None:
    """setMessageReaction with one emoji (Telegram takes only its own set of them)."""
    reaction = [ReactionTypeEmoji(emoji)]
    await _acting(bot.set_message_reaction(chat_id(target.chat_id), int(message_id), reaction))


async def pin(bot: Bot, target: Target, message_id: str, *, pinned: bool) -> None:
    """pinChatMessage (silently) or unpinChatMessage."""
    chat = chat_id(target.chat_id)
    if pinned:
        call = bot.pin_chat_message(chat, int(message_id), disable_notification=True)
    else:
        call = bot.unpin_chat_message(chat, int(message_id))
    await _acting(call)


async def answer(bot: Bot, message: OutMessage, press: Mapping[str, Any], alert: bool) -> Sent:
    """answerCallbackQuery with the toast (or, ``alert``, the dialog); a press answered
    already or too old is :class:`SendFatal`, which the outbox turns into a message."""
    query_id = str(press.get("callback_query_id") or "")
    if not query_id:
        raise SendFatal("the press names no callback query to answer")
    text = message.text or None
    await _acting(bot.answer_callback_query(query_id, text=text, show_alert=alert))
    return Sent()


async def _acting(call: Awaitable[Any]) -> None:
    """One idempotent Bot API call, its failure as the ``Send*`` error the outbox wants:
    a timeout is worth retrying, since doing it twice does it once."""
    try:
        await call
    except TelegramError as exc:
        error = classify(exc)
        if isinstance(error, SendAmbiguous):
            raise SendRetryable(str(error)) from exc
        raise error from exc


def markup(rows: Keyboard) -> InlineKeyboardMarkup | None:
    """The inline keyboard an edit sets (None: none, the old one goes)."""
    if not rows:
        return None
    return InlineKeyboardMarkup(
        [
            [
                InlineKeyboardButton(button.text, url=button.url)
                if button.url is not None
                else InlineKeyboardButton(button.text, callback_data=button.data)
                for button in row
            ]
            for row in rows
        ]
    )


async def _edit(
    bot: Bot,
    chat: int | str,
    message_id: str,
    text: str,
    parse_mode: str | None,
    rows: Keyboard,
) -> None:
    try:
        await bot.edit_message_text(
            text,
            chat_id=chat,
            message_id=int(message_id),
            parse_mode=parse_mode,
            reply_markup=markup(rows),
        )
    except BadRequest as exc:
        if _NOT_MODIFIED not in str(exc).lower():
            raise
