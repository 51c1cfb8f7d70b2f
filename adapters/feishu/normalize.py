"""One decrypted Feishu event (schema 2.0) → an :class:`Event`, or why not. Pure.

The webhook route and the long connection hand over the same JSON, so both modes share
this one step, and tests and fuzzers call it with a dict: no I/O, no SDK, no adapter.
What it needs to know besides the payload is in :class:`Bot` (who we are, whom we
answer).

Keys: ``fs:msg:{message_id}`` for messages — Feishu's retries of one message carry new
event ids, and its docs say to dedup on the message — and ``fs:evt:{event_id}`` for
other events. The verification token in the header is left out of ``raw`` (what the
store keeps).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from tether.adapters.feishu import described
from tether.adapters.feishu.cards import CARD_ACTION, card_action
from tether.adapters.feishu.content import EVERYONE, At, Content, load, mention_names, parse
from tether.adapters.kit import Dropped, describe
from tether.events import REPLY_META, ChatType, Conversation, Event, Kind, Sender, parse_command

PLATFORM = "feishu"
IGNORED = "feishu.ignored"  # left out by policy: a bot, a group message not for us
SKIPPED = "feishu.skipped"  # cannot be handled: malformed, unsupported
#: ``REPLY_META`` key: a message inside the event's thread, which send replies to (with
#: ``reply_in_thread``) when a reply quotes nothing — a thread's id is not a message id.
THREAD_MESSAGE = "thread_message"


@dataclass(frozen=True, slots=True)
class Bot:
    """What normalizing needs besides the payload: the bot as Feishu names it (read
    from ``bot/v3/info`` at start) and the policy read from ``platforms.feishu``."""

    open_id: str | None = None
    #: The app's name (``app_name``): ``@Name /help`` typed as plain text is a command too,
    #: and a post's ``at`` element that carries only a name addresses the bot by it.
    name: str = ""
    #: ``mentioned``: in groups, only messages that @-mention the bot become events.
    answer_groups: Literal["mentioned", "all"] = "mentioned"
    #: Messages from other apps are dropped, so two agents in one chat cannot loop.
    ignore_bots: bool = True


def normalize(data: Mapping[str, Any], bot: Bot) -> Event | Dropped:
    """One decrypted event → an :class:`Event`, or why not. Never raises."""
    header = data.get("header")
    if not isinstance(header, dict):
        return Dropped(SKIPPED, "not a v2 event (schema 2.0 has a header)")
    event_id = header.get("event_id")
    event_type = header.get("event_type")
    event = data.get("event")
    if not event_id or not isinstance(event, dict):
        return Dropped(SKIPPED, "no event_id or event")
    raw = {**data, "header": {k: v for k, v in header.items() if k != "token"}}
    try:
        if event_type == "im.message.receive_v1":
            return _message(event, header, raw, bot)
        if event_type == CARD_ACTION:  # a button press on a card (:mod:`.cards`)
            return card_action(event, header, raw)
        chat_id = event.get("chat_id")
        if not isinstance(chat_id, str) or not chat_id:
            return Dropped(SKIPPED, f"unsupported event type {event_type}")
        return Event(
            key=f"fs:evt:{event_id}",
            platform=PLATFORM,
            kind=Kind.SYSTEM,
            conversation=Conversation(platform=PLATFORM, chat_id=chat_id, chat_type="group"),
            timestamp=_millis(header.get("create_time")),
            meta={"event_type": event_type, "event_id": event_id},
            raw=raw,
        )
    except Exception as exc:  # a shape we cannot read: skip it, never fail the request
        return Dropped(SKIPPED, f"cannot normalize: {describe(exc)}")


def event_id_of(data: Mapping[str, Any]) -> Any:
    """The id to log a dropped event by: the v2 header's, or a v1 event's ``uuid``."""
    header = data.get("header")
    return header.get("event_id") if isinstance(header, dict) else data.get("uuid")


def _message(
    event: dict[str, Any], header: Mapping[str, Any], raw: dict[str, Any], bot: Bot
) -> Event | Dropped:
    message = event.get("message")
    if not isinstance(message, dict) or not message.get("message_id"):
        return Dropped(SKIPPED, "message without message_id")
    sender = _dict(event.get("sender"))
    ids = _dict(sender.get("sender_id"))
    is_bot = sender.get("sender_type") not in (None, "", "user")
    if is_bot and bot.ignore_bots:
        return Dropped(IGNORED, "from a bot")
    mentions = [m for m in message.get("mentions") or [] if isinstance(m, dict)]
    names = mention_names(mentions)
    message_type = str(message.get("message_type") or "")
    parsed = _content(message_type, str(message.get("content") or ""), names)
    if not parsed.text and not parsed.attachments:
        return Dropped(SKIPPED, f"unsupported message type {message_type!r}")
    # Whom the message @-mentions: the ``mentions`` list, and the ``at`` elements of
    # rich text, which Feishu may send with that list empty. ``@all`` is nobody.
    people = [(str(m.get("key")), _open_id(m)) for m in mentions if not _everyone(m)]
    by_key = dict(people)
    at = [a._replace(id=a.id or by_key.get(a.key, "")) for a in parsed.at]
    mentioned = list(dict.fromkeys([*(i for _, i in people), *(a.id for a in at)]))
    bot_at = [a for a in at if _is_bot(a, bot)]
    mentions_bot = bool(bot_at) or (bool(bot.open_id) and bot.open_id in mentioned)
    chat_type: ChatType = "dm" if message.get("chat_type") == "p2p" else "group"
    if chat_type == "group" and bot.answer_groups == "mentioned" and not mentions_bot:
        return Dropped(IGNORED, "group message does not mention the bot")
    # The bot as the text shows it: its name in this mention, or its app name.
    shown = {f"@{names.get(k)}" for k, open_id in people if open_id == bot.open_id}
    shown.update(a.shown for a in bot_at)
    shown.add(f"@{bot.name}" if bot.name else "")
    command = parse_command(_without_prefix(parsed.text, shown))
    message_id = str(message["message_id"])
    # A topic is named by its thread_id, the one id every message in it carries: its
    # root_id names the message a reply quotes, which inside a topic need not be the
    # topic's first message. Send reaches a thread by replying to a message in it.
    thread = str(message["thread_id"]) if message.get("thread_id") else None
    meta: dict[str, Any] = {
        "event_id": header.get("event_id"),
        "message_type": message_type,
        "tenant_key": header.get("tenant_key") or sender.get("tenant_key"),
    }
    meta.update({k: ids[k] for k in ("open_id", "union_id", "user_id") if ids.get(k)})
    meta.update({k: message[k] for k in ("thread_id", "root_id") if message.get(k)})
    if thread:
        meta[REPLY_META] = {THREAD_MESSAGE: message_id}
    return Event(
        key=f"fs:msg:{message_id}",
        platform=PLATFORM,
        kind=Kind.COMMAND if command else Kind.MESSAGE,
        conversation=Conversation(
            platform=PLATFORM,
            chat_id=str(message.get("chat_id") or ""),
            thread_id=thread,
            chat_type=chat_type,
        ),
        sender=Sender(
            id=str(ids.get("open_id") or ids.get("union_id") or ids.get("user_id") or ""),
            is_bot=is_bot,
        ),
        message_id=message_id,
        text=parsed.text,
        command=command[0] if command else None,
        args=command[1] if command else "",
        reply_to=str(message["parent_id"]) if message.get("parent_id") else None,
        mentions=[m for m in mentioned if m],
        mentions_bot=mentions_bot,
        attachments=parsed.attachments,
        timestamp=_millis(message.get("create_time") or header.get("create_time")),
        meta={k: v for k, v in meta.items() if v},
        raw=raw,
    )


def _without_prefix(text: str, prefixes: set[str]) -> str:
    """``@Tether /help`` → ``/help``: in groups a command comes after the bot's mention."""
    stripped = text.lstrip()
    for prefix in sorted(prefixes, key=len, reverse=True):
        if len(prefix) > 1 and stripped.startswith(prefix):
            return stripped[len(prefix) :].lstrip()
    return stripped


def _content(message_type: str, content: str, names: dict[str, str]) -> Content:
    """Text and files; for the kinds that have neither, the text they carry or a
    description (cards, shared chats, forwards, polls …: see :mod:`.described`)."""
    data = load(content)
    parsed = parse(message_type, data, names)
    if parsed.text or parsed.attachments:
        return parsed
    return Content(described.describe(message_type, data, names), [])


def _everyone(mention: Mapping[str, Any]) -> bool:
    return str(mention.get("key")) in EVERYONE or _open_id(mention) in EVERYONE


def _is_bot(at: At, bot: Bot) -> bool:
    """An ``at`` element names the bot by its open_id or, when it names nobody by id,
    by the bot's name."""
    if at.id:
        return bool(bot.open_id) and at.id == bot.open_id
    return bool(bot.name) and at.name == bot.name


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _open_id(mention: Mapping[str, Any]) -> str:
    ids = mention.get("id")
    if isinstance(ids, dict):
        return str(ids.get("open_id") or ids.get("union_id") or ids.get("user_id") or "")
    return str(ids or "")


def _millis(value: Any) -> datetime:
    try:
        return datetime.fromtimestamp(int(value) / 1000, UTC)
    except (TypeError, ValueError):
        return datetime.now(UTC)
