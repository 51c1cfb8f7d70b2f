"""What a Telegram message says besides its text: names, forwards, and a line for content
that has no text (a sticker, a poll, a die, a location...).

Pure helpers of :mod:`.normalize`. Handlers and the model read ``Event.text``; a message a
person meant something by must not reach them as an empty string, so content without
text gets a short bracketed description (``[poll: Tea? — yes, no]``) while the details
stay in ``Event.raw``. Payloads from older Bot API versions are read too: PTB 22 requires
fields that Telegram added later (``file_unique_id`` in 2019, a sticker's ``type`` and
``is_video``), which Tether never uses, so :func:`with_legacy_defaults` fills them in a
copy before parsing instead of skipping the update as unparsable.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from telegram import (
    Message,
    MessageOriginChannel,
    MessageOriginChat,
    MessageOriginHiddenUser,
    MessageOriginUser,
)

#: Message fields with no text or file that a person still meant something by, in the
#: order they are looked for (a venue also carries a location: it is a venue).
OTHER_CONTENT = (
    "venue",
    "location",
    "contact",
    "poll",
    "dice",
    "game",
    "story",
    "chat_shared",
    "users_shared",
)
#: Fields PTB 22 requires that older payloads lack; neutral values, never read by Tether.
_FILE_DEFAULTS = {"file_unique_id": ""}
_STICKER_DEFAULTS = {"is_animated": False, "is_video": False, "type": "regular"}


def with_legacy_defaults(value: Any, field: str | None = None) -> Any:
    """A copy of ``value`` in which every file has a ``file_unique_id`` and every sticker
    a ``type`` and ``is_video``: what PTB needs to parse an update sent before they
    existed. The caller keeps the original as ``Event.raw``."""
    if isinstance(value, list):
        return [with_legacy_defaults(item, field) for item in value]
    if not isinstance(value, Mapping):
        return value
    out = {key: with_legacy_defaults(inner, key) for key, inner in value.items()}
    if "file_id" in out:
        defaults = {**_FILE_DEFAULTS, **_STICKER_DEFAULTS} if field == "sticker" else _FILE_DEFAULTS
        out = {**defaults, **out}
    return out


def name_of(who: Any) -> str:
    """A person's or a chat's name for ``Sender.name`` and forwards: the title, else first
    and last name, else the username, else the id. Telegram sends an empty
    ``first_name`` (deleted accounts, some imports), so none of them is taken for given.
    Reads PTB objects and plain dicts (the pre-7.0 forward fields stay dicts)."""
    full = " ".join(_words(_field(who, "first_name"), _field(who, "last_name")))
    for candidate in (_text(_field(who, "title")), full, _text(_field(who, "username"))):
        if candidate:
            return candidate
    ident = _field(who, "id")
    return "" if ident is None else str(ident)


def forwarded_from(message: Message) -> str | None:
    """Who a forwarded message first came from, or None when it is not a forward."""
    origin = message.forward_origin
    if isinstance(origin, MessageOriginUser):
        return name_of(origin.sender_user)
    if isinstance(origin, MessageOriginHiddenUser):
        return _text(origin.sender_user_name) or None
    if isinstance(origin, MessageOriginChat | MessageOriginChannel):
        chat = origin.sender_chat if isinstance(origin, MessageOriginChat) else origin.chat
        signature = _text(origin.author_signature)
        return f"{name_of(chat)} ({signature})" if signature else name_of(chat)
    legacy = message.api_kwargs  # Bot API before 7.0
    for field in ("forward_from", "forward_from_chat"):
        if isinstance(legacy.get(field), Mapping):
            return name_of(legacy[field])
    return _text(legacy.get("forward_sender_name")) or None


def describe(message: Message, content: str | None) -> str:
    """One bracketed line for content without text, or "" when there is none to describe."""
    if message.sticker is not None:
        sticker = message.sticker
        said = " ".join(_words(sticker.emoji, sticker.set_name))
        return f"[sticker: {said}]" if said else "[sticker]"
    if content is None:
        return ""
    return f"[{content.replace('_', ' ')}: {_DETAILS[content](getattr(message, content))}]"


def _poll(poll: Any) -> str:
    options = ", ".join(_text(option.text) for option in poll.options)
    return f"{_text(poll.question)} — {options}" if options else _text(poll.question)


_DETAILS: dict[str, Callable[[Any], str]] = {
    "venue": lambda venue: ", ".join(_words(venue.title, venue.address)),
    "location": lambda spot: f"{spot.latitude}, {spot.longitude}",
    "contact": lambda card: ", ".join(_words(name_of(card), card.phone_number)),
    "poll": _poll,
    "dice": lambda die: f"{die.emoji} {die.value}",
    "game": lambda game: _text(game.title),
    "story": lambda story: name_of(story.chat),
    "chat_shared": lambda shared: name_of(shared) or str(shared.chat_id),
    "users_shared": lambda shared: ", ".join(
        name_of(user) or str(user.user_id) for user in shared.users
    ),
}


def mentioned_by_name(text: str, username: str | None) -> str | None:
    """``@username`` typed in ``text`` as a whole word, in any letter case, or None.

    iOS clients send formatted text (and some bridges send plain text) without a mention
    entity, so the entities alone miss a person addressing the bot. The name as typed is
    returned, for ``Event.mentions``.
    """
    if not username:
        return None
    found = _mention_pattern(username).search(text)
    return found.group(1) if found else None


@lru_cache(maxsize=8)
def _mention_pattern(username: str) -> re.Pattern[str]:
    # Not after a word character or another @ (an e-mail address, "@@name"), and not
    # followed by one (a longer username that starts with ours).
    return re.compile(rf"(?<![\w@])@({re.escape(username)})(?!\w)", re.IGNORECASE)


def _field(who: Any, name: str) -> Any:
    return who.get(name) if isinstance(who, Mapping) else getattr(who, name, None)


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _words(*values: Any) -> list[str]:
    return [word for word in map(_text, values) if word]
