"""The Events API half of the fake Slack: signed posts and the payloads they carry.

:func:`signed_request` / :func:`signed_form` give a body and the headers Slack sends
(``X-Slack-Signature`` = ``v0=`` HMAC-SHA256 over ``v0:{timestamp}:{body}`` with the
signing secret); the builders (:func:`message_event`, :func:`edit_event`,
:func:`slash_command`, :func:`block_actions`) are the payloads tests post with them, over
HTTP or inside a Socket Mode envelope (:mod:`tests.fakes.slack_socket`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import urlencode

from tests.fakes.slack_api import (
    APP_ID,
    BOT_ID,
    BOT_USER_ID,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    SIGNING_SECRET,
    TEAM_ID,
    USER_ID,
)


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``X-Slack-Signature`` for ``body`` sent at ``timestamp``."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def signed_headers(
    body: bytes,
    secret: str = SIGNING_SECRET,
    *,
    timestamp: float | None = None,
    retry: int | None = None,
    content_type: str = "application/json",
) -> dict[str, str]:
    stamp = str(int(time.time() if timestamp is None else timestamp))
    headers = {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": signature(secret, stamp, body),
    }
    if retry is not None:
        headers["X-Slack-Retry-Num"] = str(retry)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    return headers


def signed_request(
    payload: dict[str, Any], secret: str = SIGNING_SECRET, **kw: Any
) -> tuple[bytes, dict[str, str]]:
    """An Events API post: the JSON body and Slack's headers."""
    body = json.dumps(payload).encode()
    return body, signed_headers(body, secret, **kw)


def signed_form(
    fields: dict[str, str], secret: str = SIGNING_SECRET, **kw: Any
) -> tuple[bytes, dict[str, str]]:
    """A slash command or interaction post: form-encoded, signed the same way."""
    body = urlencode(fields).encode()
    form = "application/x-www-form-urlencoded"
    return body, signed_headers(body, secret, content_type=form, **kw)


def envelope(event: dict[str, Any], event_id: str, app: str = APP_ID) -> dict[str, Any]:
    """An ``event_callback`` as Slack posts it (the deprecated token included)."""
    return {
        "token": "verification-token-from-old-apps",
        "team_id": TEAM_ID,
        "api_app_id": app,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": int(time.time()),
        "authorizations": [{"team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": True}],
    }


def message_event(
    text: str,
    *,
    ts: str = "1712345678.000100",
    event_id: str = "Ev0001",
    channel: str = DM_CHANNEL_ID,
    channel_type: str = "im",
    user: str = USER_ID,
    app: str = APP_ID,
    kind: str = "message",
    **fields: Any,
) -> dict[str, Any]:
    """A ``message`` (or, with ``kind="app_mention"``, an ``app_mention``) event."""
    event: dict[str, Any] = {
        "type": kind,
        "user": user,
        "text": text,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
        "team": TEAM_ID,
        **fields,
    }
    if kind == "message":
        event["channel_type"] = channel_type
    return envelope(event, event_id, app)


def edit_event(
    text: str,
    *,
    ts: str = "1712345678.000100",
    edited_ts: str = "1712345699.000000",
    event_id: str = "Ev0002",
    channel: str = DM_CHANNEL_ID,
    channel_type: str = "im",
    user: str = USER_ID,
) -> dict[str, Any]:
    """``message_changed``: ``message`` is the message as it now is."""
    message = {"type": "message", "user": user, "text": text, "ts": ts}
    if edited_ts:
        message["edited"] = {"user": user, "ts": edited_ts}
    event = {
        "type": "message",
        "subtype": "message_changed",
        "channel": channel,
        "channel_type": channel_type,
        "hidden": True,
        "message": message,
        "previous_message": {"type": "message", "user": user, "text": "before", "ts": ts},
        "ts": edited_ts or ts,
        "event_ts": edited_ts or ts,
    }
    return envelope(event, event_id)


def slash_command(
    command: str, text: str = "", *, trigger_id: str = "13345224609.738474920.8088930838d88f"
) -> dict[str, str]:
    """A slash command's form fields, as Slack posts them."""
    return {
        "token": "verification-token-from-old-apps",
        "team_id": TEAM_ID,
        "team_domain": "tether-test",
        "channel_id": CHANNEL_ID,
        "channel_name": "general",
        "user_id": USER_ID,
        "user_name": "ada",
        "command": command,
        "text": text,
        "api_app_id": APP_ID,
        "response_url": "https://hooks.slack.com/commands/T0TEAM0001/1/secret",
        "trigger_id": trigger_id,
    }


def block_actions(value: str, *, trigger_id: str = "7777.8888.abcdef") -> dict[str, Any]:
    """A button press on one of the bot's messages (the ``payload`` of the form)."""
    return {
        "type": "block_actions",
        "api_app_id": APP_ID,
        "token": "verification-token-from-old-apps",
        "team": {"id": TEAM_ID, "domain": "tether-test"},
        "user": {"id": USER_ID, "username": "ada", "team_id": TEAM_ID},
        "container": {
            "type": "message",
            "message_ts": "1712345680.000200",
            "channel_id": CHANNEL_ID,
            "is_ephemeral": False,
        },
        "channel": {"id": CHANNEL_ID, "name": "general"},
        "message": {"type": "message", "ts": "1712345680.000200", "bot_id": BOT_ID, "text": "?"},
        "trigger_id": trigger_id,
        "response_url": "https://hooks.slack.com/actions/T0TEAM0001/1/secret",
        "actions": [
            {
                "type": "button",
                "action_id": "tether:0:0",
                "block_id": "buttons",
                "value": value,
                "action_ts": "1712345690.123456",
            }
        ],
    }
