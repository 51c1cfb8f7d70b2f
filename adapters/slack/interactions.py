"""Slash commands and Block Kit button presses → events. Pure.

Neither has an event id: each interaction has a ``trigger_id`` of its own, which is what
the key names (with the receiving app, as every Slack key does). It is stable across
redeliveries because a redelivery is the same payload sent again, not a new
interaction: Socket Mode resends an unacknowledged envelope with its payload unchanged
(only ``retry_attempt`` grows), and over HTTP Slack does not retry an interaction at all
(the person sees an error and presses again, which is a new interaction with a new
``trigger_id``: a second press, which button handling must treat as one). A
``trigger_id`` is minted per interaction by Slack, so two presses never share one.

Both need an answer within 3 s; ingress gives it after the commit, so the handler's
reply goes out through the outbox like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.adapters.kit import Dropped
from tether.adapters.slack.fields import (
    PLATFORM,
    SKIPPED,
    app_of,
    as_dict,
    chat_type_of,
    conversation,
    slack_time,
    string,
    without_secrets,
)
from tether.events import Event, Kind, Sender


def slash_command(data: Mapping[str, Any]) -> Event | Dropped:
    """A slash command's form fields (``command``, ``text``, ``user_id``, ``channel_id``,
    ``trigger_id``, …) → a ``command`` event: ``/ask what now`` is ``ask`` with args."""
    name = string(data.get("command")).lstrip("/")
    user, channel = string(data.get("user_id")), string(data.get("channel_id"))
    trigger, app = string(data.get("trigger_id")), app_of(data)
    if not (name and user and channel and trigger and app):
        return Dropped(SKIPPED, "slash command without command, user, channel, trigger or app")
    args = string(data.get("text")).strip()
    direct = data.get("channel_name") == "directmessage"
    return Event(
        key=f"sl:{app}:cmd:{trigger}",
        platform=PLATFORM,
        kind=Kind.COMMAND,
        conversation=conversation(channel, None, "dm" if direct else chat_type_of(None, channel)),
        sender=Sender(id=user, name=string(data.get("user_name"))),
        text=f"/{name} {args}".rstrip(),
        command=name,
        args=args,
        meta={"trigger_id": trigger, "slash_command": True},
        raw=without_secrets(data),
    )


def block_actions(data: Mapping[str, Any]) -> Event | Dropped:
    """A ``block_actions`` payload → a ``callback`` event whose text is the pressed
    button's ``value`` (its ``action_id`` when it has none)."""
    actions = data.get("actions")
    action = actions[0] if isinstance(actions, list) and actions else None
    if not isinstance(action, dict):
        return Dropped(SKIPPED, "block_actions without an action")
    value = string(action.get("value")) or string(action.get("action_id"))
    container = as_dict(data.get("container"))
    user = string(as_dict(data.get("user")).get("id"))
    channel = string(as_dict(data.get("channel")).get("id")) or string(container.get("channel_id"))
    trigger, app = string(data.get("trigger_id")), app_of(data)
    if not (value and user and channel and trigger and app):
        return Dropped(SKIPPED, "block_actions without value, user, channel, trigger or app")
    message = as_dict(data.get("message"))
    message_ts = string(container.get("message_ts")) or string(message.get("ts"))
    thread = string(container.get("thread_ts")) or string(message.get("thread_ts"))
    return Event(
        key=f"sl:{app}:act:{trigger}",
        platform=PLATFORM,
        kind=Kind.CALLBACK,
        conversation=conversation(channel, thread or None, chat_type_of(None, channel)),
        sender=Sender(id=user),
        message_id=message_ts or None,
        text=value,
        timestamp=slack_time(action.get("action_ts")),
        meta={"trigger_id": trigger, "action_id": string(action.get("action_id"))},
        raw=without_secrets(data),
    )
