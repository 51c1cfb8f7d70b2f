"""The common update read straight from its dict: a person's text message or its edit.

Why this exists: ``Update.de_json`` (after :func:`.content.with_legacy_defaults` copies the
payload) builds a ``Message``, ``User``, ``Chat`` and an entity object per field, ~65 µs an
update, which was 13% of the main thread on ``bench/telegram.py`` and most of
:func:`.normalize.normalize`'s cost. Most updates a bot gets are plain text in a DM or a
group, whose few fields this module reads itself.

It is not a second parser: it accepts only a shape it fully knows — an update with only
``update_id`` and ``message`` or ``edited_message``; a message with only the keys in
:data:`_MESSAGE_KEYS`, non-empty text, a sender that is a user, and entities that need no
object to read (no ``text_mention``) — with every field of the type PTB's reading relies on
(ints are ints, not bools or floats; a user has ``id``, ``is_bot`` and ``first_name``; a
chat has ``id`` and ``type``). For anything else, or any doubt, it answers None and
:func:`.normalize.normalize` hands the update to PTB unchanged, so PTB stays the parser of
everything else (replies, captions, media, forwards, channel posts, buttons...). A
differential Hypothesis test (tests/adapters/telegram/test_telegram_plain.py) pins every
answer it gives to the PTB path's answer for the same update: the same ``Event`` or the
same ``Dropped``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, TypeGuard

from tether.adapters.kit import Dropped
from tether.adapters.telegram.content import name_of
from tether.adapters.telegram.epochs import update_key
from tether.adapters.telegram.recipient import (
    CHAT_TYPES,
    PLATFORM,
    Recipient,
    read_mentions,
    unaddressed,
)
from tether.events import ChatType, Conversation, Event, Kind, Sender, parse_command

#: The update fields whose message this module reads, and what it becomes.
_KINDS = {"message": Kind.MESSAGE, "edited_message": Kind.EDIT}
#: A plain text message's keys. Anything else (a reply, a caption, media, a forward, a
#: sender chat, link preview options...) goes to PTB.
_MESSAGE_KEYS = frozenset(
    {
        "message_id",
        "from",
        "chat",
        "date",
        "text",
        "entities",
        "edit_date",
        "message_thread_id",
        "is_topic_message",
    }
)
#: A user's keys, and which type each must have (the first three are required).
_USER_FIELDS: dict[str, type] = {
    "id": int,
    "is_bot": bool,
    "first_name": str,
    "last_name": str,
    "username": str,
    "language_code": str,
    "is_premium": bool,
    "added_to_attachment_menu": bool,
}
_CHAT_FIELDS: dict[str, type] = {
    "id": int,
    "type": str,
    "title": str,
    "username": str,
    "first_name": str,
    "last_name": str,
    "is_forum": bool,
}
_ENTITY_FIELDS: dict[str, type] = {
    "type": str,
    "offset": int,
    "length": int,
    "url": str,
    "language": str,
    "custom_emoji_id": str,
}
#: A lone surrogate (PTB's UTF-16 encoding of the text fails on it), and a character of two
#: UTF-16 units: before an entity's end, its offsets are not string indexes.
_SURROGATE = re.compile("[\ud800-\udfff]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def read_plain(
    data: Any, number: int, recipient: Recipient, epoch: int = 0
) -> Event | Dropped | None:
    """The update as PTB's reading would see it, or None when it is not plain.

    ``number`` is the update's id (already checked); ``recipient`` is the
    :class:`.normalize.Recipient`; ``epoch`` goes into the key (:mod:`.epochs`). Never
    raises: an unexpected failure is a None too.
    """
    try:
        return _read(data, number, recipient, epoch)
    except Exception:  # any doubt: PTB reads it
        return None


def _read(data: Any, number: int, recipient: Recipient, epoch: int) -> Event | Dropped | None:
    if type(data) is not dict or len(data) != 2:
        return None
    field = "message" if "message" in data else "edited_message"
    kind, message = _KINDS[field], data.get(field)
    if type(message) is not dict or not message.keys() <= _MESSAGE_KEYS:
        return None
    said = message.get("text")
    user = message.get("from")
    chat = message.get("chat")
    if not (type(said) is str and said and _fits(user, _USER_FIELDS, 3)):
        return None
    if not _fits(chat, _CHAT_FIELDS, 2):
        return None
    message_id, date, edit_date = (message.get(k) for k in ("message_id", "date", "edit_date"))
    thread, topic = message.get("message_thread_id"), message.get("is_topic_message")
    if not (type(message_id) is int and type(date) is int):
        return None
    if edit_date is not None and type(edit_date) is not int:
        return None
    if (thread is not None and type(thread) is not int) or (
        topic is not None and type(topic) is not bool
    ):
        return None
    mentioned = _mentions(message.get("entities"), said)
    if mentioned is None:
        return None
    # PTB converts both times while parsing: a time it cannot convert is its "unparsable".
    posted = datetime.fromtimestamp(date, UTC)
    edited = None if edit_date is None else datetime.fromtimestamp(edit_date, UTC)
    # The rest is normalize._message's reading, step for step, on these fields.
    language = user.get("language_code") or None  # a str, checked above; as _person reads it
    sender = Sender(
        id=str(user["id"]), name=name_of(user), is_bot=user["is_bot"], language=language
    )
    if sender.is_bot and recipient.ignore_bots:
        return Dropped("telegram.ignored", "from a bot")
    chat_type: ChatType = CHAT_TYPES.get(chat["type"], "group")
    command = parse_command(said, recipient.username) if said.startswith("/") else None
    mentions, mentions_bot = read_mentions(mentioned, said, recipient)
    addressed = command is not None or mentions_bot
    ignored = unaddressed(chat_type, said, addressed, recipient)
    if ignored is not None:
        return ignored
    is_command = kind is Kind.MESSAGE and command is not None
    thread_id = thread if topic else None
    when = (edited if kind is Kind.EDIT else None) or posted
    return Event(
        key=update_key(recipient.bot_id, number, epoch),
        platform=PLATFORM,
        kind=Kind.COMMAND if is_command else kind,
        conversation=Conversation(
            platform=PLATFORM,
            chat_id=str(chat["id"]),
            thread_id=str(thread_id) if thread_id else None,
            chat_type=chat_type,
        ),
        sender=sender,
        message_id=str(message_id),
        text=said,
        command=command[0] if is_command and command else None,
        args=command[1] if is_command and command else "",
        reply_to=None,
        reply_to_bot=False,
        mentions=mentions,
        mentions_bot=mentions_bot,
        attachments=[],
        timestamp=when,
        meta={},
        raw=data,
    )


def _fits(value: Any, fields: dict[str, type], required: int) -> TypeGuard[dict[str, Any]]:
    """A dict whose keys are all in ``fields``, each of its type (exactly: a bool is no
    int), and that has the first ``required`` of them."""
    if type(value) is not dict:
        return False
    names = list(fields)
    if any(name not in value for name in names[:required]):
        return False
    return all(type(inner) is fields.get(key) for key, inner in value.items())


def _mentions(entities: Any, said: str) -> list[str] | None:
    """The ``@username`` mention entities' texts, as PTB's ``parse_entities`` slices them
    (one per distinct type/offset/length, in order), or None when an entity is not one
    this module reads."""
    if entities is None:
        return []
    if type(entities) is not list:
        return None
    found: list[str] = []
    seen: set[tuple[int, int]] = set()
    for entity in entities:
        if not _fits(entity, _ENTITY_FIELDS, 3) or entity["type"] == "text_mention":
            return None
        if entity["type"] != "mention":
            continue
        offset, length = entity["offset"], entity["length"]
        if offset < 0 or length < 0 or _ASTRAL.search(said, 0, offset + length):
            return None
        if _SURROGATE.search(said):
            return None
        if (offset, length) not in seen:
            seen.add((offset, length))
            found.append(said[offset : offset + length])
    return found
