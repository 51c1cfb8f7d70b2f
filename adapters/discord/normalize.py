"""A Discord payload (the JSON dict the gateway or REST sends) → an :class:`Event`, or why not.

Pure: no I/O, no adapter and no discord.py — the payload, a :class:`Bot` (who we are, whom
we answer) and, optionally, :class:`Servers` (what the gateway's cache knows that a payload
does not say). Tests and fuzzers call it with dicts; the gateway hook, the backfill and
``/ask`` call it for every message and interaction. It never raises: a payload it cannot
read is a :class:`Dropped` with the reason, and its channel's cursor still moves past it.

Keys are stable across redeliveries (a RESUME replays, a backfill re-reads):
``dc:msg:{id}`` for a message, ``dc:edit:{id}:{edited_timestamp}`` for an edit,
``dc:int:{id}`` for ``/ask``.

The text is what a person reads in the client, because a handler or a model reads it:
mentions by name (``@name``, ``@role``, ``#channel``), and what has no text of its own —
a forwarded message, a sticker, a poll, an embed — described (:mod:`.content`). Role and
channel names, a thread's parent and cached members come from :class:`Servers`: a server
missing from it reads as discord.py reads a server it has not cached (``@deleted-role``,
``#deleted-channel``, names from the payload only). A message event keeps its payload in
``Event.raw``, as sent: a deep copy, because discord.py parses the same dict right after
and writes into it (the author's ``member`` gains ``user``, a mention loses its
``member``), and a shallow one would show that in ``raw``.

A reply is a reference of type 0 into the same server; a forward (type 1) and a crosspost
(an announcement copied from another server) reference a message too, but are not
replies: where they came from is in ``meta["forwarded_from"]`` or
``meta["crossposted_from"]``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.adapters.discord import content, read
from tether.adapters.discord.servers import NO_SERVERS, Channel, Server, Servers
from tether.adapters.kit import Dropped, describe
from tether.events import (
    REPLY_META,
    ChatType,
    Conversation,
    Event,
    Kind,
    Sender,
    parse_command,
)

__all__ = [  # the server shapes are named here too: callers import normalize's vocabulary
    "IGNORED",
    "INTERACTION_TTL",
    "NO_SERVERS",
    "PLATFORM",
    "SKIPPED",
    "Bot",
    "Channel",
    "Servers",
    "interaction",
    "location",
    "message",
    "normalize",
]

PLATFORM = "discord"
IGNORED = "discord.ignored"  # left out by policy: our own, a bot, not addressed to us
SKIPPED = "discord.skipped"  # cannot be handled: a system message, malformed, unsupported
#: Interaction tokens live 15 minutes; replies after that go to the channel instead.
INTERACTION_TTL = 15 * 60

#: Message types a person writes: default and reply. The rest are system messages.
_ANSWERED = (0, 19)
#: discord.py's ``MessageType`` names, so a skip reason names the type as it does.
_MESSAGE_TYPES = {
    1: "recipient_add",
    2: "recipient_remove",
    3: "call",
    4: "channel_name_change",
    5: "channel_icon_change",
    6: "pins_add",
    7: "new_member",
    8: "premium_guild_subscription",
    9: "premium_guild_tier_1",
    10: "premium_guild_tier_2",
    11: "premium_guild_tier_3",
    12: "channel_follow_add",
    13: "guild_stream",
    14: "guild_discovery_disqualified",
    15: "guild_discovery_requalified",
    16: "guild_discovery_grace_period_initial_warning",
    17: "guild_discovery_grace_period_final_warning",
    18: "thread_created",
    20: "chat_input_command",
    21: "thread_starter_message",
    22: "guild_invite_reminder",
    23: "context_menu_command",
    24: "auto_moderation_action",
    25: "role_subscription_purchase",
    26: "interaction_premium_upsell",
    27: "stage_start",
    28: "stage_end",
    29: "stage_speaker",
    30: "stage_raise_hand",
    31: "stage_topic",
    32: "guild_application_premium_subscription",
    36: "guild_incident_alert_mode_enabled",
    37: "guild_incident_alert_mode_disabled",
    38: "guild_incident_report_raid",
    39: "guild_incident_report_false_alarm",
    44: "purchase_notification",
    46: "poll_result",
    63: "emoji_added",
}
#: ``flags`` bit: the message is a copy of another server's announcement (a crosspost).
_CROSSPOSTED = 1 << 1


@dataclass(frozen=True, slots=True)
class Bot:
    """What normalizing needs besides the payload: the bot's user id (known after login)
    and the policy read from ``platforms.discord``."""

    id: str | None = None
    #: In servers, only messages that mention the bot (or its role) or reply to it.
    require_mention: bool = True
    #: Messages from other bots and webhooks are dropped, so two agents cannot loop.
    ignore_bots: bool = True


# -- entry points ----------------------------------------------------------------------


def normalize(
    frame: Any, bot: Bot, servers: Servers = NO_SERVERS, *, deferred: bool = False
) -> Event | Dropped:
    """One gateway dispatch frame ``{op, t, s, d}`` → an :class:`Event`, or why not."""
    if not isinstance(frame, Mapping):
        return Dropped(SKIPPED, "not a gateway frame (expected an object)")
    name, data = frame.get("t"), frame.get("d")
    if name == "MESSAGE_CREATE":
        return message(data, bot, servers)
    if name == "MESSAGE_UPDATE":
        edited = data.get("edited_timestamp") if isinstance(data, Mapping) else None
        if not edited:
            return Dropped(IGNORED, "an update that is not an edit (an embed unfurl, flags)")
        return message(data, bot, servers, edited=str(edited))
    if name == "INTERACTION_CREATE":
        return interaction(data, bot, deferred=deferred)
    return Dropped(SKIPPED, f"unsupported gateway event {name!r}")


def message(
    data: Any,
    bot: Bot,
    servers: Servers = NO_SERVERS,
    *,
    edited: str | None = None,
    channel: Channel | None = None,
    guild_id: str | None = None,
) -> Event | Dropped:
    """One message (MESSAGE_CREATE's ``d`` or a REST history item) → an :class:`Event`.

    ``edited`` (the payload's ``edited_timestamp``) makes it an edit of that message.
    ``channel`` is the message's channel when the caller knows it better than the cache
    (a backfill fetched it: an archived thread is not cached), and ``guild_id`` its
    server, for a payload that does not say (REST history items never do).
    """
    try:
        return _message(read.mapping(data, "message"), bot, servers, edited, channel, guild_id)
    except read.Malformed as exc:
        return Dropped(SKIPPED, f"malformed: {exc}")
    except Exception as exc:  # a shape nobody foresaw: skip it, never fail ingress
        return Dropped(SKIPPED, f"cannot normalize: {describe(exc)}")


def interaction(data: Any, bot: Bot, *, deferred: bool) -> Event | Dropped:
    """An INTERACTION_CREATE ``d`` → the ``/ask`` (or a menu command's) event, or why not.

    ``deferred``: the ingress acknowledged it, so the reply may edit the deferred
    response through the interaction's token (kept in the event's reply meta).
    """
    try:
        return _interaction(read.mapping(data, "interaction"), deferred)
    except read.Malformed as exc:
        return Dropped(SKIPPED, f"malformed: {exc}")
    except Exception as exc:
        return Dropped(SKIPPED, f"cannot normalize: {describe(exc)}")


def location(data: Any) -> tuple[int, int] | None:
    """``(channel id, message id)`` of a message payload — what moves the channel's
    cursor — or None when either is not an id."""
    if not isinstance(data, Mapping):
        return None
    channel_id = read.id_or_none(data.get("channel_id"))
    message_id = read.id_or_none(data.get("id"))
    if channel_id is None or message_id is None:
        return None
    return int(channel_id), int(message_id)


# -- messages --------------------------------------------------------------------------


def _message(
    data: Mapping[str, Any],
    bot: Bot,
    servers: Servers,
    edited: str | None,
    channel: Channel | None,
    known_guild: str | None,
) -> Event | Dropped:
    message_id = read.snowflake(data.get("id"), "id")
    channel_id = read.snowflake(data.get("channel_id"), "channel_id")
    author = read.mapping(data.get("author"), "author")
    author_id = read.snowflake(author.get("id"), "author.id")
    if bot.id is not None and author_id == bot.id:
        return Dropped(IGNORED, "our own message")
    author_is_bot = read.flag(author.get("bot"), "author.bot")
    if (author_is_bot or data.get("webhook_id") is not None) and bot.ignore_bots:
        return Dropped(IGNORED, "from a bot or webhook")
    kind = read.integer(data.get("type"), "type")
    if kind not in _ANSWERED:
        return Dropped(SKIPPED, f"system message ({_MESSAGE_TYPES.get(kind, f'unknown_{kind}')})")
    guild_id = read.optional_snowflake(data.get("guild_id"), "guild_id") or known_guild
    server = servers.get(guild_id) if guild_id is not None else None
    chat_type: ChatType = "dm" if guild_id is None else "group"
    mentioned = content.mentioned_users(data.get("mentions"), in_server=server is not None)
    mentions = [user_id for user_id, _ in mentioned]
    # People often @ the bot's own role (same name, listed first) instead of the bot.
    role_ids = read.ids(data.get("mention_roles"))
    roles = [server.role(role_id) for role_id in role_ids] if server is not None else []
    bot_role = any(role is not None and role.bot_id == bot.id for role in roles)
    mentions_bot = bot.id is not None and (bot.id in mentions or bot_role)
    reply_to, reply_to_bot, origin = _reference(data, guild_id, bot)
    said = content.body(data, server, mentioned)
    if not said.text and not said.attachments:
        return Dropped(SKIPPED, "no text or attachments (is message_content on?)")
    if chat_type == "group" and bot.require_mention and not (mentions_bot or reply_to_bot):
        return Dropped(IGNORED, "server message not addressed to the bot")
    own_text = read.text(data.get("content"), "content")
    command = None if edited else parse_command(_without_mention(own_text, bot.id))
    meta: dict[str, Any] = {"channel_id": channel_id, **origin}
    if guild_id is not None:
        meta["guild_id"] = guild_id
    here = channel or (server.channel(channel_id) if server else None)
    if here is not None and here.parent_id is not None:
        # A thread is a channel of its own: its id is the chat, so replies land in it;
        # the parent is kept here.
        meta["parent_id"] = here.parent_id
    if edited:
        meta["edited_timestamp"] = edited
    return Event(
        key=f"dc:edit:{message_id}:{edited}" if edited else f"dc:msg:{message_id}",
        platform=PLATFORM,
        kind=Kind.EDIT if edited else Kind.COMMAND if command else Kind.MESSAGE,
        conversation=Conversation(platform=PLATFORM, chat_id=channel_id, chat_type=chat_type),
        sender=Sender(
            id=author_id, name=_author_name(data, author, author_id, server), is_bot=author_is_bot
        ),
        message_id=message_id,
        text=said.text,
        command=command[0] if command else None,
        args=command[1] if command else "",
        reply_to=reply_to,
        reply_to_bot=reply_to_bot,
        mentions=mentions,
        mentions_bot=mentions_bot,
        attachments=said.attachments,
        timestamp=read.time(edited, "edited_timestamp") if edited else read.created(message_id),
        meta=meta,
        raw=copy.deepcopy(dict(data)),
    )


def _author_name(
    data: Mapping[str, Any], author: Mapping[str, Any], author_id: str, server: Server | None
) -> str:
    """The server nickname (from the payload, else a cached member), else the user's name."""
    member = data.get("member")
    if isinstance(member, Mapping):
        return read.display_name(author, member)
    cached = server.member_name(author_id) if server is not None else None
    return cached if cached is not None else read.display_name(author, None)


def _reference(
    data: Mapping[str, Any], guild_id: str | None, bot: Bot
) -> tuple[str | None, bool, dict[str, Any]]:
    """The message replied to, whether it is the bot's, and the meta of a message that
    came from elsewhere. A forward (reference type 1) and a crosspost (another server's
    announcement, copied here: ``flags`` bit 2, a reference into that server) point at a
    message too, but answer nothing: they are not replies."""
    reference = data.get("message_reference")
    if not isinstance(reference, Mapping):
        return None, False, {}
    target = read.optional_snowflake(reference.get("message_id"), "message_reference.message_id")
    source = {
        name: found
        for name in ("guild_id", "channel_id", "message_id")
        if (found := read.id_or_none(reference.get(name))) is not None
    }
    kind = reference.get("type", 0)
    if type(kind) is not int or kind not in (0, 1):
        return None, False, {}
    if kind == 1:
        return None, False, {"forwarded_from": source}
    flags = data.get("flags")
    elsewhere = guild_id is not None and source.get("guild_id", guild_id) != guild_id
    if elsewhere or (type(flags) is int and flags & _CROSSPOSTED):
        return None, False, {"crossposted_from": source}
    resolved = data.get("referenced_message")
    author = resolved.get("author") if isinstance(resolved, Mapping) else None
    author_id = author.get("id") if isinstance(author, Mapping) else None
    to_bot = bot.id is not None and author_id is not None and str(author_id) == bot.id
    return target, to_bot, {}


def _without_mention(text: str, bot_id: str | None) -> str:
    """``<@bot> /help`` → ``/help``: in servers a command comes after the mention."""
    if bot_id is None:
        return text
    return re.sub(rf"^\s*<@!?{bot_id}>\s*", "", text)


# -- interactions ----------------------------------------------------------------------


def _interaction(data: Mapping[str, Any], deferred: bool) -> Event | Dropped:
    interaction_id = read.snowflake(data.get("id"), "id")
    if data.get("type") != 2:
        return Dropped(SKIPPED, f"unsupported interaction type {data.get('type')!r}")
    command = read.mapping(data.get("data"), "data")
    name = read.nonempty(command.get("name"), "data.name").lower()
    question = _option(command, "question") if name == "ask" else _option(command, "args", "")
    conversation, sender, meta = interaction_origin(data, interaction_id)
    created = read.created(interaction_id)
    if deferred:
        meta[REPLY_META] = {
            "interaction": {
                "application_id": read.snowflake(data.get("application_id"), "application_id"),
                "token": read.text(data.get("token"), "token"),
                "expires": created.timestamp() + INTERACTION_TTL,
            }
        }
    return Event(
        key=f"dc:int:{interaction_id}",
        platform=PLATFORM,
        kind=Kind.COMMAND,
        conversation=conversation,
        sender=sender,
        text=question if name == "ask" else f"/{name} {question}".rstrip(),
        command=name,
        args=question,
        mentions_bot=True,
        timestamp=created,
        meta=meta,
    )


def _option(command: Mapping[str, Any], name: str, default: str | None = None) -> str:
    for option in read.items(command.get("options") or [], "data.options"):
        if isinstance(option, Mapping) and option.get("name") == name:
            return read.text(option.get("value"), f"data.options.{name}")
    if default is None:
        raise read.Malformed(f"data.options: no {name!r}")
    return default


def interaction_origin(
    data: Mapping[str, Any], interaction_id: str
) -> tuple[Conversation, Sender, dict[str, Any]]:
    """The chat an interaction (a slash command, a button press) came from, who made it,
    and the meta every interaction event carries."""
    guild_id = read.optional_snowflake(data.get("guild_id"), "guild_id")
    # The channel object, else the top-level id: either names the chat, whatever
    # discord.py could make of the channel (it leaves channel_id None for a type it
    # does not know).
    channel = data.get("channel")
    channel_id = read.snowflake(
        (channel.get("id") if isinstance(channel, Mapping) else None) or data.get("channel_id"),
        "channel_id",
    )
    member = data.get("member")
    member = member if isinstance(member, Mapping) else None
    user = read.mapping(member.get("user") if member else data.get("user"), "user")
    meta: dict[str, Any] = {"interaction_id": interaction_id}
    if guild_id is not None:
        meta["guild_id"] = guild_id
    conversation = Conversation(
        platform=PLATFORM, chat_id=channel_id, chat_type="dm" if guild_id is None else "group"
    )
    sender = Sender(
        id=read.snowflake(user.get("id"), "user.id"),
        name=read.display_name(user, member),
        is_bot=read.flag(user.get("bot"), "user.bot"),
        # the invoking person's client language (``zh-CN``, ``en-US``): their fixed messages
        language=locale if isinstance(locale := data.get("locale"), str) and locale else None,
    )
    return conversation, sender, meta
