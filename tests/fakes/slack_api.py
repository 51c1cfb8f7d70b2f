"""A fake Slack (Web API + signed Events API posts) on 127.0.0.1, for the real slack-sdk.

Point ``slack_sdk.web.async_client.AsyncWebClient`` at it with ``base_url=fake.base_url``
(``platforms.slack.api_base``). It serves what the adapter calls, as Slack answers them
(HTTP 200 with ``{"ok": false, "error": …}`` for a refusal, 429 with ``Retry-After``):

- ``auth.test`` — who the token is (the bot's user and bot ids, the team);
- ``chat.postMessage`` — stores the message with its ``metadata`` and ``thread_ts``;
- ``chat.update`` — replaces a message's text;
- ``conversations.history`` / ``conversations.replies`` — a channel's messages newest
  first, a thread's oldest first, their metadata only with ``include_all_metadata``, as
  Slack does;
- ``apps.connections.open`` — with the app-level token, the ``ws://`` URL of the Socket
  Mode half (:mod:`tests.fakes.slack_socket`), when one is attached.

Every call must carry the bot token (``Authorization: Bearer``), else ``invalid_auth``.
``chat.postMessage`` can be told to fail (:meth:`FakeSlack.fail_posts`): an answer
before the message is stored, or after (the message exists, the caller hears an error
or, with ``status=0``, the connection drops before any answer), which is the crash
window the adapter's reconciliation is for. ``fake.log`` lists every call in order.

The Events API payloads and their signatures are in :mod:`tests.fakes.slack_events`.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

BOT_TOKEN = "xoxb-1111-2222-fakeslacktoken"
APP_TOKEN = "xapp-1-A0TETHER01-3333-fakeapptoken"
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
    a 5xx, or 0: the connection dropped unanswered), before the message is stored or,
    with ``after_store``, once it is; ``error`` is a refusal's code (HTTP 200)."""

    status: int
    after_store: bool = False
    times: int = 1
    retry_after: int = 1
    error: str = ""


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
        #: The Socket Mode URL ``apps.connections.open`` hands out (set by the socket fake).
        self.socket_url: str | None = None
        #: Channels that do not exist (``channel_not_found``).
        self.gone: set[str] = set()

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
            ("conversations.replies", self._replies),
            ("apps.connections.open", self._connections_open),
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
            token = APP_TOKEN if method == "apps.connections.open" else self.token
            if request.headers.get("Authorization") != f"Bearer {token}":
                return _answer({"ok": False, "error": "invalid_auth"})
            response: web.Response | None = await handler(args)
            async with self._changed:
                self._changed.notify_all()
            if response is None:  # created, then the connection drops before the answer
                assert request.transport is not None
                request.transport.close()
                return web.Response()  # written to a closed transport: nothing arrives
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

    async def _connections_open(self, args: dict[str, Any]) -> web.Response:
        if self.socket_url is None:
            return _answer({"ok": False, "error": "not_allowed_token_type"})
        return _answer({"ok": True, "url": self.socket_url})

    async def _post_message(self, args: dict[str, Any]) -> web.Response | None:
        channel, text = args.get("channel"), args.get("text")
        if not isinstance(channel, str) or not channel or channel in self.gone:
            return _answer({"ok": False, "error": "channel_not_found"})
        if not text and not args.get("blocks"):
            return _answer({"ok": False, "error": "no_text"})
        if len(str(text or "")) > 40_000:
            return _answer({"ok": False, "error": "msg_too_long"})
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
        if len(str(args.get("text") or "")) > 40_000:
            return _answer({"ok": False, "error": "msg_too_long"})
        for message in self.channels.get(str(channel), []):
            if message["ts"] == ts:
                message["text"] = args.get("text")
                message["edited"] = {"user": BOT_USER_ID, "ts": self._ts()}
                return _answer({"ok": True, "channel": channel, "ts": ts, "text": message["text"]})
        return _answer({"ok": False, "error": "message_not_found"})

    async def _history(self, args: dict[str, Any]) -> web.Response:
        channel = str(args.get("channel"))
        if channel in self.gone:
            return _answer({"ok": False, "error": "channel_not_found"})
        limit = int(args.get("limit") or 100)
        oldest = float(args.get("oldest") or 0)
        with_metadata = str(args.get("include_all_metadata")).lower() in ("1", "true")
        mine = self.channels.get(channel, [])
        newest_first = [m for m in reversed(mine) if float(m["ts"]) > oldest]
        shown = [
            m if with_metadata else {k: v for k, v in m.items() if k != "metadata"}
            for m in newest_first[:limit]
        ]
        return _answer({"ok": True, "messages": shown, "has_more": len(newest_first) > limit})

    async def _replies(self, args: dict[str, Any]) -> web.Response:
        """A thread: its first message, then the replies, oldest first."""
        channel, thread = str(args.get("channel")), str(args.get("ts"))
        found = [
            m
            for m in self.channels.get(channel, [])
            if m["ts"] == thread or m.get("thread_ts") == thread
        ]
        if not found:
            return _answer({"ok": False, "error": "thread_not_found"})
        limit = int(args.get("limit") or 100)
        with_metadata = str(args.get("include_all_metadata")).lower() in ("1", "true")
        shown = [
            m if with_metadata else {k: v for k, v in m.items() if k != "metadata"}
            for m in found[:limit]
        ]
        return _answer({"ok": True, "messages": shown, "has_more": len(found) > limit})

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


def _failed(failure: Failure) -> web.Response | None:
    if failure.status == 0:
        return None
    if failure.error:
        return _answer({"ok": False, "error": failure.error})
    if failure.status == 429:
        headers = {"Retry-After": str(failure.retry_after)}
        return web.json_response({"ok": False, "error": "ratelimited"}, status=429, headers=headers)
    return web.json_response({"ok": False, "error": "fatal_error"}, status=failure.status)
