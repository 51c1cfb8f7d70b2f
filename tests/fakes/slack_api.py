"""A fake Slack (Web API + signed Events API posts) on 127.0.0.1, for the real slack-sdk.

Point ``slack_sdk.web.async_client.AsyncWebClient`` at it with ``base_url=fake.base_url``
(``platforms.slack.api_base``). It serves what the adapter calls, as Slack answers them
(HTTP 200 with ``{"ok": false, "error": …}`` for a refusal, 429 with ``Retry-After``):

- ``auth.test`` — who the token is (the bot's user and bot ids, the team);
- ``chat.postMessage`` — stores the message with its ``metadata`` and ``thread_ts``;
- ``chat.update`` — replaces a message's text;
- ``conversations.history`` — a channel's messages newest first, their metadata only
  with ``include_all_metadata``, as Slack does.

Every call must carry the bot token (``Authorization: Bearer``), else ``invalid_auth``.
``chat.postMessage`` can be told to fail (:meth:`FakeSlack.fail_posts`): an answer
before the message is stored, or after (the message exists, the caller hears an error),
which is the crash window the outbox's reconciliation is for. ``fake.log`` lists every
call in order.

The Events API half is :func:`signed_request` / :func:`signed_form`: a body and the
headers Slack sends (``X-Slack-Signature`` = ``v0=`` HMAC-SHA256 over
``v0:{timestamp}:{body}`` with the signing secret), and the payload builders
(:func:`message_event`, :func:`edit_event`, :func:`slash_command`,
:func:`block_actions`) that tests post with them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

BOT_TOKEN = "xoxb-1111-2222-fakeslacktoken"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
APP_ID = "A0TETHER01"
TEAM_ID = "T0TEAM0001"
BOT_USER_ID = "U0TETHERBOT"
BOT_ID = "B0TETHERBOT"
USER_ID = "U0ADA00001"
OTHER_BOT_ID = "B0OTHERBOT1"
CHANNEL_ID = "C0GENERAL01"
DM_CHANNEL_ID = "D0ADADM0001"


@dataclass
class Failure:
    """How the next ``chat.postMessage`` calls fail: ``status`` (429 with ``Retry-After``,
    or a 5xx), before the message is stored or, with ``after_store``, once it is."""

    status: int
    after_store: bool = False
    times: int = 1
    retry_after: int = 1


class FakeSlack:
    """The Web API on an ephemeral port; messages per channel, oldest first."""

    def __init__(self, token: str = BOT_TOKEN) -> None:
        self.token = token
        self.port = 0
        self.channels: dict[str, list[dict[str, Any]]] = {}
        self.log: list[tuple[str, dict[str, Any]]] = []
        self._failures: list[Failure] = []
        self._clock = itertools.count(1)
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        """slack-sdk's ``base_url``: methods are appended to it (``…/api/auth.test``)."""
        return f"http://127.0.0.1:{self.port}/api/"

    @property
    def posted(self) -> list[dict[str, Any]]:
        """Every message the bot posted, in order, across channels."""
        return sorted(
            (m for messages in self.channels.values() for m in messages if m.get("bot_id")),
            key=lambda m: float(m["ts"]),
        )

    async def start(self) -> FakeSlack:
        app = web.Application()
        for method, handler in (
            ("auth.test", self._auth_test),
            ("chat.postMessage", self._post_message),
            ("chat.update", self._update),
            ("conversations.history", self._history),
        ):
            app.router.add_route("*", f"/api/{method}", self._authorized(method, handler))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    def fail_posts(self, failure: Failure) -> None:
        self._failures.append(failure)

    def add_message(self, channel: str, text: str, **fields: Any) -> dict[str, Any]:
        """A message someone else posted (or one the bot posted before a crash)."""
        message = {"type": "message", "ts": self._ts(), "text": text, **fields}
        self.channels.setdefault(channel, []).append(message)
        return message

    async def wait_for(self, condition: Callable[[], bool], timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(condition)

    # -- the Web API ---------------------------------------------------------------------

    def _authorized(
        self, method: str, handler: Callable[[dict[str, Any]], Any]
    ) -> Callable[[web.Request], Any]:
        async def route(request: web.Request) -> web.Response:
            args = await _arguments(request)
            self.log.append((method, args))
            if request.headers.get("Authorization") != f"Bearer {self.token}":
                return _answer({"ok": False, "error": "invalid_auth"})
            response: web.Response = await handler(args)
            async with self._changed:
                self._changed.notify_all()
            return response

        return route

    async def _auth_test(self, args: dict[str, Any]) -> web.Response:
        return _answer(
            {
                "ok": True,
                "url": "https://tether-test.slack.com/",
                "team": "Tether Test",
                "user": "tether",
                "team_id": TEAM_ID,
                "user_id": BOT_USER_ID,
                "bot_id": BOT_ID,
                "is_enterprise_install": False,
            }
        )

    async def _post_message(self, args: dict[str, Any]) -> web.Response:
        channel, text = args.get("channel"), args.get("text")
        if not isinstance(channel, str) or not channel:
            return _answer({"ok": False, "error": "channel_not_found"})
        if not text and not args.get("blocks"):
            return _answer({"ok": False, "error": "no_text"})
        failure = self._failures[0] if self._failures else None
        if failure is not None:
            failure.times -= 1
            if failure.times <= 0:
                self._failures.pop(0)
            if not failure.after_store:
                return _failed(failure)
        message: dict[str, Any] = {
            "type": "message",
            "ts": self._ts(),
            "user": BOT_USER_ID,
            "bot_id": BOT_ID,
            "app_id": APP_ID,
            "text": text,
        }
        for field in ("thread_ts", "metadata", "blocks"):
            if args.get(field):
                message[field] = args[field]
        self.channels.setdefault(channel, []).append(message)
        if failure is not None:
            return _failed(failure)
        shown = {k: v for k, v in message.items() if k != "metadata"}
        return _answer({"ok": True, "channel": channel, "ts": message["ts"], "message": shown})

    async def _update(self, args: dict[str, Any]) -> web.Response:
        channel, ts = args.get("channel"), args.get("ts")
        for message in self.channels.get(str(channel), []):
            if message["ts"] == ts:
                message["text"] = args.get("text")
                message["edited"] = {"user": BOT_USER_ID, "ts": self._ts()}
                return _answer({"ok": True, "channel": channel, "ts": ts, "text": message["text"]})
        return _answer({"ok": False, "error": "message_not_found"})

    async def _history(self, args: dict[str, Any]) -> web.Response:
        channel = str(args.get("channel"))
        if channel not in self.channels:
            return _answer({"ok": False, "error": "channel_not_found"})
        limit = int(args.get("limit") or 100)
        oldest = float(args.get("oldest") or 0)
        with_metadata = str(args.get("include_all_metadata")).lower() in ("1", "true")
        newest_first = [m for m in reversed(self.channels[channel]) if float(m["ts"]) > oldest]
        shown = [
            m if with_metadata else {k: v for k, v in m.items() if k != "metadata"}
            for m in newest_first[:limit]
        ]
        return _answer({"ok": True, "messages": shown, "has_more": len(newest_first) > limit})

    def _ts(self) -> str:
        """Slack's message ids: epoch seconds with six digits, unique per channel."""
        return f"{int(time.time())}.{next(self._clock):06d}"


async def _arguments(request: web.Request) -> dict[str, Any]:
    """A call's arguments, however slack-sdk sent them: JSON, a form, or the query."""
    args: dict[str, Any] = dict(request.query)
    if request.method == "POST":
        if request.content_type == "application/json":
            body = await request.json()
            args.update(body if isinstance(body, dict) else {})
        else:
            args.update(dict(await request.post()))
    return args


def _answer(body: dict[str, Any]) -> web.Response:
    return web.json_response(body)


def _failed(failure: Failure) -> web.Response:
    if failure.status == 429:
        headers = {"Retry-After": str(failure.retry_after)}
        return web.json_response({"ok": False, "error": "ratelimited"}, status=429, headers=headers)
    return web.json_response({"ok": False, "error": "fatal_error"}, status=failure.status)


# -- the Events API: signed posts, and the payloads they carry ------------------------------


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
