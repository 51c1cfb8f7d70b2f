"""A Bot API update (the JSON dict Telegram sends) → an :class:`Event`, or why not.

Pure: no I/O and no adapter, only the payload and a :class:`Recipient` (who the bot is,
what it answers). Tests and fuzzers call :func:`normalize` directly; the poll loop and
the webhook route call it for every update. It never raises: an update it cannot read
is a :class:`Dropped` with the reason, so one bad update never pins the poll offset.

python-telegram-bot's ``Update.de_json`` is the parser, so a payload means here what it
means to PTB, except that fields PTB 22 requires and older Bot API versions did not send
are filled in first (:mod:`.content`), and names, forwards and content without text are
read there too. Keys are ``tg:{bot_id}:{update_id}``, or ``tg:{bot_id}:e{epoch}:{update_id}``
in an epoch after the first (one begins when the bot was quiet for days, :mod:`.epochs`):
a webhook retry or an overlapping poll yields the same key, which the inbox drops as a
duplicate, and an id Telegram picks again after a quiet week does not. A plain text
message is read without PTB (:mod:`.plain`, for speed), to the same result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from telegram import CallbackQuery, Message, MessageEntity, Update, User

from tether.adapters.kit import Dropped
from tether.adapters.telegram.content import (
    OTHER_CONTENT,
    describe,
    forwarded_from,
    name_of,
    with_legacy_defaults,
)
from tether.adapters.telegram.epochs import update_key
from tether.adapters.telegram.plain import read_plain
from tether.adapters.telegram.recipient import (
    CHAT_TYPES,
    PLATFORM,
    Recipient,
    read_mentions,
    unaddressed,
)
from tether.events import (
    Attachment,
    Conversation,
    Event,
    Kind,
    Sender,
    parse_command,
)

#: Content without text or a file that handlers may still want (read it from ``raw``).
_MEDIA = ("animation", "document", "voice", "video", "audio", "video_note", "sticker")
_DEFAULT_MIME = {"video_note": "video/mp4", "voice": "audio/ogg"}


def update_id(data: Any) -> int | None:
    """The update's integer ``update_id``, or None when ``data`` is not an update."""
    if not isinstance(data, Mapping):
        return None
    value = data.get("update_id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def normalize(data: Any, recipient: Recipient, epoch: int = 0) -> Event | Dropped:
    """One raw update, arrived in ``epoch`` → an :class:`Event`, or why not. Never raises."""
    number = update_id(data)
    if number is None:
        return Dropped("telegram.skipped", "not an update (no integer update_id)")
    plain = read_plain(data, number, recipient, epoch)  # the common shape, without PTB
    return plain if plain is not None else read_with_ptb(data, number, recipient, epoch)


def read_with_ptb(data: Any, number: int, recipient: Recipient, epoch: int = 0) -> Event | Dropped:
    """The update read by PTB's ``Update.de_json``: every shape, and the reference that
    :mod:`.plain`'s answers are tested against. Never raises."""
    try:
        update = Update.de_json(with_legacy_defaults(data), None)
    except Exception as exc:
        return Dropped("telegram.skipped", f"unparsable: {type(exc).__name__}: {exc}")
    key = update_key(recipient.bot_id, number, epoch)
    try:
        if update.callback_query is not None:
            return _callback(key, update.callback_query, data)
        for kind, message in (
            (Kind.MESSAGE, update.message),
            (Kind.EDIT, update.edited_message),
            (Kind.MESSAGE, update.channel_post),
            (Kind.EDIT, update.edited_channel_post),
        ):
            if message is not None:
                return _message(key, kind, message, data, recipient)
    except Exception as exc:  # a shape PTB accepted but we cannot read
        return Dropped("telegram.skipped", f"cannot normalize: {type(exc).__name__}: {exc}")
    kinds = ", ".join(sorted(str(k) for k in data if k != "update_id")) or "empty"
    return Dropped("telegram.skipped", f"unsupported update type: {kinds}")


def _message(
    key: str, kind: Kind, message: Message, raw: dict[str, Any], recipient: Recipient
) -> Event | Dropped:
    chat_type = CHAT_TYPES.get(message.chat.type, "group")
    sender = _sender(message)
    if sender is not None and sender.is_bot and recipient.ignore_bots:
        return Dropped("telegram.ignored", "from a bot")
    said = message.text or message.caption or ""
    command = parse_command(said, recipient.username) if said.startswith("/") else None
    mentions, mentions_bot = _mentions(message, said, recipient)
    reply = message.reply_to_message
    # In a forum topic every message "replies" to the topic's first message.
    if reply is not None and message.is_topic_message:
        reply = None if reply.message_id == message.message_thread_id else reply
    reply_to_bot = bool(reply and reply.from_user and reply.from_user.id == recipient.bot_id)
    attachments = _attachments(message)
    meta: dict[str, Any] = {}
    content = next((name for name in OTHER_CONTENT if getattr(message, name, None)), None)
    if content:
        meta["content"] = content
    origin = forwarded_from(message)
    if origin:
        meta["forwarded_from"] = origin
    text = said or describe(message, content)
    if not text and not attachments:
        return Dropped("telegram.skipped", "service message or unsupported content")
    addressed = command is not None or mentions_bot or reply_to_bot
    ignored = unaddressed(chat_type, said, addressed, recipient)
    if ignored is not None:
        return ignored
    is_command = kind is Kind.MESSAGE and command is not None
    thread_id = message.message_thread_id if message.is_topic_message else None
    when = (message.edit_date if kind is Kind.EDIT else None) or message.date
    return Event(
        key=key,
        platform=PLATFORM,
        kind=Kind.COMMAND if is_command else kind,
        conversation=Conversation(
            platform=PLATFORM,
            chat_id=str(message.chat.id),
            thread_id=str(thread_id) if thread_id else None,
            chat_type=chat_type,
        ),
        sender=sender,
        message_id=str(message.message_id),
        text=text,
        command=command[0] if is_command and command else None,
        args=command[1] if is_command and command else "",
        reply_to=str(reply.message_id) if reply is not None else None,
        reply_to_bot=reply_to_bot,
        mentions=mentions,
        mentions_bot=mentions_bot,
        attachments=attachments,
        timestamp=when,
        meta=meta,
        raw=raw,
    )


def _callback(key: str, query: CallbackQuery, raw: dict[str, Any]) -> Event:
    """An inline-button press: ``text`` is the button's callback data."""
    user = query.from_user
    message = query.message
    if message is not None:
        chat_id, chat_type = str(message.chat.id), CHAT_TYPES.get(message.chat.type, "group")
        topic = isinstance(message, Message) and message.is_topic_message
        thread_id = message.message_thread_id if isinstance(message, Message) and topic else None
        message_id: str | None = str(message.message_id)
    else:  # a button on an inline-mode message: no chat, answer the user privately
        chat_id, chat_type, thread_id, message_id = str(user.id), "dm", None, None
    meta: dict[str, Any] = {"callback_query_id": query.id}
    if query.inline_message_id:
        meta["inline_message_id"] = query.inline_message_id
    return Event(
        key=key,
        platform=PLATFORM,
        kind=Kind.CALLBACK,
        conversation=Conversation(
            platform=PLATFORM,
            chat_id=chat_id,
            thread_id=str(thread_id) if thread_id else None,
            chat_type=chat_type,
        ),
        sender=_person(user),
        message_id=message_id,
        text=query.data or query.game_short_name or "",
        meta=meta,
        raw=raw,
    )


def _mentions(message: Message, said: str, recipient: Recipient) -> tuple[list[str], bool]:
    """``@username`` mentions (without the @) and text mentions (as user ids), and whether
    one is us. A ``@us`` typed without a mention entity counts too (iOS formatted text)."""
    types: list[str | None] = [MessageEntity.MENTION, MessageEntity.TEXT_MENTION]
    if message.text:
        found = message.parse_entities(types)
    elif message.caption:
        found = message.parse_caption_entities(types)
    else:
        return [], False
    return read_mentions(
        (
            entity.user.id
            if entity.type == MessageEntity.TEXT_MENTION and entity.user is not None
            else value
            for entity, value in found.items()
        ),
        said,
        recipient,
    )


def _sender(message: Message) -> Sender | None:
    """Who sent it. Anonymous admins and linked channels post as a chat, not as a user."""
    if message.sender_chat is not None:
        chat = message.sender_chat
        return Sender(id=str(chat.id), name=name_of(chat), is_bot=False)
    user = message.from_user
    if user is None:
        return None
    return _person(user)


def _person(user: User) -> Sender:
    """A user as a sender, with the language their app is set to (``language_code``,
    an IETF tag such as ``zh-hans``): which fixed messages they get."""
    code = user.language_code
    language = code if isinstance(code, str) and code else None
    return Sender(id=str(user.id), name=name_of(user), is_bot=user.is_bot, language=language)


def _attachments(message: Message) -> list[Attachment]:
    """Files by Telegram file_id: the largest photo size, and one entry per other media."""
    out: list[Attachment] = []
    if message.photo:  # sizes come smallest first
        photo = message.photo[-1]
        out.append(
            Attachment(kind="photo", file_id=photo.file_id, mime="image/jpeg", size=photo.file_size)
        )
    for kind in _MEDIA:
        media = getattr(message, kind, None)
        if media is None or (kind == "document" and message.animation):
            continue  # a GIF arrives as both `animation` and `document`: report it once
        mime = getattr(media, "mime_type", None)
        if kind == "sticker":
            mime = (
                "video/webm"
                if media.is_video
                else "application/x-tgsticker"
                if media.is_animated
                else "image/webp"
            )
        out.append(
            Attachment(
                kind=kind,
                file_id=media.file_id,
                mime=mime or _DEFAULT_MIME.get(kind),
                size=media.file_size,
                name=getattr(media, "file_name", None),
            )
        )
    return out
