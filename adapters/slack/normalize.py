"""One Slack payload → an :class:`Event`, or why not. Pure.

The Events API (over HTTP, and later Socket Mode's ``events_api`` envelopes) hands over
an ``event_callback``; interactivity a ``block_actions`` payload; a slash command its
form fields as a dict. All three come here, so tests and fuzzers call one function with
a dict: no I/O, no SDK, no adapter. What it needs besides the payload is in :class:`Bot`.

Keys name the receiving app (``api_app_id``, else the team), so two agents with their
own Slack apps in one channel each keep their own copy of a message:

- ``sl:{app}:msg:{channel}:{ts}`` for a message. Not the envelope's ``event_id``: an app
  subscribed to ``message.channels`` and ``app_mention`` receives one message that
  mentions it as two events with two event ids, and must answer it once. A redelivery
  (``X-Slack-Retry-Num``) carries the same message, so it dedups too.
- ``sl:{app}:edit:{channel}:{ts}:{edited_ts}`` for an edit (``message_changed``).
- ``sl:{app}:cmd:{trigger_id}`` / ``sl:{app}:act:{trigger_id}`` for a slash command and a
  button press (:mod:`.interactions`), which have no event id.
- ``sl:{app}:evt:{event_id}`` for any other event with a channel (a system event).

The verification token and a slash command's ``response_url`` stay out of ``raw`` (what
the store keeps): both let whoever holds them act as the app.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tether.adapters.kit import Dropped, describe
from tether.adapters.slack.fields import (
    IGNORED,
    PLATFORM,
    SKIPPED,
    app_of,
    as_dict,
    chat_type_of,
    conversation,
    files_of,
    is_text,
    slack_time,
    string,
    without_secrets,
)
from tether.adapters.slack.interactions import block_actions, slash_command
from tether.events import Event, Kind, Sender, parse_command

#: ``<@U123>`` or ``<@U123|name>``: how Slack writes a mention of a user in text.
MENTION = re.compile(r"<@([UWB][A-Z0-9]+)(?:\|[^>]*)?>")
#: Message subtypes that are someone saying something; the rest (joins, topic changes,
#: deletions, …) are not messages for the bot.
_SAID = frozenset({"", "file_share", "thread_broadcast", "me_message"})


@dataclass(frozen=True, slots=True)
class Bot:
    """Who we are (from ``auth.test`` at start) and the policy of ``platforms.slack``."""

    user_id: str | None = None
    bot_id: str | None = None
    #: ``mentioned``: in channels, only messages that mention the bot become events.
    answer_channels: Literal["mentioned", "all"] = "mentioned"
    #: Messages from other bots are dropped, so two agents in one channel cannot loop.
    ignore_bots: bool = True


def normalize(data: Mapping[str, Any], bot: Bot) -> Event | Dropped:
    """One payload → an :class:`Event`, or why not. Never raises."""
    try:
        return _normalize(data, bot)
    except Exception as exc:  # a shape we cannot read: skip it, never fail the request
        return Dropped(SKIPPED, f"cannot normalize: {describe(exc)}")


def _normalize(data: Mapping[str, Any], bot: Bot) -> Event | Dropped:
    if not isinstance(data, Mapping):
        return Dropped(SKIPPED, "not a JSON object")
    kind = data.get("type")
    if kind == "event_callback":
        return _event_callback(data, bot)
    if kind == "block_actions":
        return block_actions(data)
    if isinstance(data.get("command"), str):
        return slash_command(data)
    return Dropped(SKIPPED, f"unsupported payload type {_shown(kind)}")


def id_of(data: Mapping[str, Any]) -> Any:
    """What to log a dropped payload by: its event id, or an interaction's trigger id."""
    return data.get("event_id") or data.get("trigger_id")


def _event_callback(data: Mapping[str, Any], bot: Bot) -> Event | Dropped:
    event = data.get("event")
    event_id = string(data.get("event_id"))
    app = app_of(data)
    if not isinstance(event, dict) or not event_id or not app:
        return Dropped(SKIPPED, "event_callback without event, event_id or app id")
    raw = without_secrets(data)
    kind = event.get("type")
    if kind in ("message", "app_mention"):
        subtype = event.get("subtype") or ""
        if subtype == "message_changed":
            return _edit(event, app, raw, bot)
        if subtype not in _SAID:
            return _from_a_bot(event, bot) or Dropped(IGNORED, f"message subtype {subtype!r}")
        return _message(event, app, raw, bot, mention=kind == "app_mention")
    channel = string(event.get("channel"))
    if not channel:
        return Dropped(SKIPPED, f"unsupported event type {_shown(kind)}")
    return Event(
        key=f"sl:{app}:evt:{event_id}",
        platform=PLATFORM,
        kind=Kind.SYSTEM,
        conversation=conversation(channel, None, "group"),
        timestamp=slack_time(data.get("event_time")),
        meta={"event_type": str(kind), "event_id": event_id},
        raw=raw,
    )


def _message(
    event: Mapping[str, Any], app: str, raw: dict[str, Any], bot: Bot, *, mention: bool
) -> Event | Dropped:
    ts, channel = string(event.get("ts")), string(event.get("channel"))
    if not ts or not channel:
        return Dropped(SKIPPED, "message without ts or channel")
    if dropped := _from_a_bot(event, bot):
        return dropped
    user = string(event.get("user")) or string(event.get("bot_id"))  # a bot let in
    if not user:
        return Dropped(SKIPPED, "message without a user")
    text = string(event.get("text"))
    attachments = files_of(event.get("files"))
    if not text and not attachments:
        return Dropped(SKIPPED, "message without text or files")
    mentions = list(dict.fromkeys(MENTION.findall(text)))
    mentions_bot = mention or (bool(bot.user_id) and bot.user_id in mentions)
    chat_type = chat_type_of(event.get("channel_type"), channel)
    if chat_type != "dm" and bot.answer_channels == "mentioned" and not mentions_bot:
        return Dropped(IGNORED, "channel message does not mention the bot")
    command = parse_command(_without_mention(text, bot.user_id))
    thread = thread_of(event)
    meta = {"event_id": raw.get("event_id"), "team": event.get("team") or raw.get("team_id")}
    if thread:
        meta["thread_ts"] = thread
    return Event(
        key=f"sl:{app}:msg:{channel}:{ts}",
        platform=PLATFORM,
        kind=Kind.COMMAND if command else Kind.MESSAGE,
        conversation=conversation(channel, thread, chat_type),
        sender=Sender(id=user),
        message_id=ts,
        text=text,
        command=command[0] if command else None,
        args=command[1] if command else "",
        mentions=mentions,
        mentions_bot=mentions_bot,
        attachments=attachments,
        timestamp=slack_time(ts),
        meta={k: v for k, v in meta.items() if is_text(v)},
        raw=raw,
    )


def _edit(event: Mapping[str, Any], app: str, raw: dict[str, Any], bot: Bot) -> Event | Dropped:
    """``message_changed``: an edit, when ``message.edited`` says someone edited it;
    Slack also sends it when it adds a link's unfurl, which is no edit."""
    message = as_dict(event.get("message"))
    channel = string(event.get("channel"))
    edited = as_dict(message.get("edited"))
    ts, edited_ts = string(message.get("ts")), string(edited.get("ts"))
    if not channel or not ts:
        return Dropped(SKIPPED, "message_changed without channel or message.ts")
    if dropped := _from_a_bot(message, bot):
        return dropped
    if not edited_ts:
        return Dropped(IGNORED, "message_changed without an edit (an unfurl or a reaction)")
    user = string(message.get("user")) or string(message.get("bot_id"))
    text = string(message.get("text"))
    if not user:
        return Dropped(SKIPPED, "edited message without a user")
    mentions = list(dict.fromkeys(MENTION.findall(text)))
    mentions_bot = bool(bot.user_id) and bot.user_id in mentions
    chat_type = chat_type_of(event.get("channel_type"), channel)
    if chat_type != "dm" and bot.answer_channels == "mentioned" and not mentions_bot:
        return Dropped(IGNORED, "edited channel message does not mention the bot")
    thread = thread_of(message)
    return Event(
        key=f"sl:{app}:edit:{channel}:{ts}:{edited_ts}",
        platform=PLATFORM,
        kind=Kind.EDIT,
        conversation=conversation(channel, thread, chat_type),
        sender=Sender(id=user),
        message_id=ts,
        text=text,
        mentions=mentions,
        mentions_bot=mentions_bot,
        attachments=files_of(message.get("files")),
        timestamp=slack_time(edited_ts),
        meta={"event_id": raw.get("event_id"), "edited_ts": edited_ts},
        raw=raw,
    )


def thread_of(message: Mapping[str, Any]) -> str | None:
    """The thread a message is in: its ``thread_ts``, unless that is its own ``ts`` (the
    thread's first message, which was said in the channel, so it stays the channel's)."""
    thread = string(message.get("thread_ts"))
    return thread if thread and thread != string(message.get("ts")) else None


def _from_a_bot(message: Mapping[str, Any], bot: Bot) -> Dropped | None:
    """Our own messages always, other bots' unless ``ignore_bots`` is off."""
    bot_id, user = message.get("bot_id"), message.get("user")
    ours = (bool(bot.bot_id) and bot_id == bot.bot_id) or (
        bool(bot.user_id) and user == bot.user_id
    )
    if ours:
        return Dropped(IGNORED, "the bot's own message")
    if (bot_id or message.get("subtype") == "bot_message") and bot.ignore_bots:
        return Dropped(IGNORED, "from another bot")
    return None


def _without_mention(text: str, user_id: str | None) -> str:
    """``<@UBOT> /help`` → ``/help``: in channels a command comes after the mention."""
    stripped = text.lstrip()
    found = MENTION.match(stripped)
    if found and user_id and found.group(1) == user_id:
        return stripped[found.end() :].lstrip()
    return stripped


def _shown(value: Any) -> str:
    return repr(value)[:60]
