"""A fake Discord (REST + gateway) on 127.0.0.1, for driving the real discord.py client.

Point discord.py at it with ``platforms.discord.api_base = fake.api_base`` and
``gateway_url = fake.gateway_url``. The gateway speaks plain-text JSON frames (discord.py
asks for zlib but accepts text): HELLO → IDENTIFY → READY + GUILD_CREATE, heartbeats
acknowledged, RESUME answered with INVALID_SESSION (so every connect is a new session,
as after a restart), and a 4014 close when told to refuse privileged intents. REST
answers with exactly ``Content-Type: application/json`` (discord.py reads anything else
as text) and serves what the adapter calls: who am I, the application, channels, history
(``?after=``, newest first like Discord), Create Message with nonce dedup
(``enforce_nonce``), slash-command registration, interaction callbacks and edits of the
original response. Create Message can be told to fail: a status before or after the
message is stored, or a slow answer.

What handlers do to messages (``ctx.edit``/``delete``/``react``/``pin``/``answer``) is
kept as the channel shows it: an edit's content and components, deletions (404 Unknown
Message for a message not in the channel, as Discord), the bot's reactions, pins, and
follow-up messages by interaction token with their ``flags``. A follow-up is refused as
Discord refuses it: before its interaction was acknowledged (404 Unknown Webhook) and
after its token expired (401). :meth:`fail_next_action` makes the next of these calls
fail with a status, and ``callback_delay`` holds acknowledgements back.

The fake keeps each channel's history, so a message "posted while the bot was away"
(:meth:`post`) is found by a later backfill; :meth:`dispatch` sends a gateway event to
every connected client. Waiting is on conditions, never on sleeps:
``await fake.wait_for(lambda: len(fake.sent) >= 3)``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.discord_media import attachments, message_body

TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAx.GfAkE1.discord-test-token_0123456789abcdef"
DISCORD_EPOCH = 1420070400000
MESSAGE_CONTENT = 1 << 15  # the privileged intent's bit
PRIVILEGED = MESSAGE_CONTENT | (1 << 1) | (1 << 8)  # message content, members, presences


def snowflake_at(ms: int, counter: int = 0) -> int:
    return ((ms - DISCORD_EPOCH) << 22) | (counter & 0xFFF)


BOT_ID = snowflake_at(1_600_000_000_000, 1)
APPLICATION_ID = BOT_ID
GUILD_ID = snowflake_at(1_600_000_000_000, 2)
CHANNEL_ID = snowflake_at(1_600_000_000_000, 3)
THREAD_ID = snowflake_at(1_600_000_000_000, 4)
DM_CHANNEL_ID = snowflake_at(1_600_000_000_000, 5)
USER_ID = snowflake_at(1_600_000_000_000, 6)
OTHER_BOT_ID = snowflake_at(1_600_000_000_000, 7)
BOT_ROLE_ID = snowflake_at(1_600_000_000_000, 8)  # the role Discord gives the bot in a server


def user(uid: int, name: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": str(uid),
        "username": name,
        "discriminator": "0",
        "global_name": name.title(),
        "avatar": None,
        "bot": bot,
        "public_flags": 0,
        "flags": 0,
    }


BOT_USER = user(BOT_ID, "tether", bot=True)
USER = user(USER_ID, "ada")
OTHER_BOT = user(OTHER_BOT_ID, "otherbot", bot=True)


def iso(when: float | None = None) -> str:
    return datetime.fromtimestamp(when if when is not None else time.time(), UTC).isoformat()


def member() -> dict[str, Any]:
    """The ``member`` part of a server message or interaction (the user is beside it)."""
    return {
        "roles": [],
        "joined_at": iso(),
        "deaf": False,
        "mute": False,
        "flags": 0,
        "nick": None,
        "avatar": None,
        "pending": False,
        "premium_since": None,
    }


@dataclass
class Post:
    """One Create Message request, as the fake received it."""

    channel_id: int
    body: dict[str, Any]
    status: int = 200
    at: float = field(default_factory=time.monotonic)


@dataclass
class Failure:
    """How the next Create Message goes wrong."""

    status: int = 500
    #: Store the message first, then answer ``status`` (or answer late): the client
    #: cannot tell that it went through.
    commit: bool = False
    delay: float = 0.0


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


def _components_problem(rows: Any) -> str | None:
    """What Discord would refuse in a message's ``components`` (action rows of buttons)."""
    if rows is None:
        return None
    if not isinstance(rows, list) or len(rows) > 5:
        return "at most 5 action rows"
    seen: set[str] = set()
    for row in rows:
        buttons = row.get("components") if isinstance(row, dict) else None
        if row.get("type") != 1 or not isinstance(buttons, list) or not 1 <= len(buttons) <= 5:
            return "an action row (type 1) holds 1 to 5 buttons"
        for button in buttons:
            if not isinstance(button, dict) or button.get("type") != 2 or not button.get("label"):
                return "a button (type 2) needs a label"
            if button.get("style") == 5:
                if not button.get("url") or "custom_id" in button:
                    return "a link button has a url and no custom_id"
                continue
            custom_id = button.get("custom_id")
            if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= 100:
                return "custom_id: 1 to 100 characters"
            if custom_id in seen:
                return "custom_id: must be unique"
            seen.add(custom_id)
    return None


def _commands_problem(commands: Any) -> str | None:
    """What Discord refuses in a bulk overwrite: names 1-32 lowercase letters, digits,
    '-' or '_'; descriptions 1-100 characters; a name twice."""
    if not isinstance(commands, list):
        return "expected a list"
    names = [c.get("name") for c in commands if isinstance(c, dict)]
    if len(names) != len(commands) or len(set(names)) != len(names):
        return "duplicate or missing command names"
    for command in commands:
        name, about = command.get("name"), command.get("description")
        if not isinstance(name, str) or not re.fullmatch(r"[-_\w]{1,32}", name):
            return f"name {name!r}: invalid"
        if name != name.lower():
            return f"name {name!r}: not lowercase"
        if not isinstance(about, str) or not 1 <= len(about) <= 100:
            return f"{name}.description: must be 1-100 characters"
    return None


def _error(status: int, message: str, code: int = 0) -> web.Response:
    return _json({"message": message, "code": code}, status)


class FakeDiscord:
    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.port = 0
        self.channels: dict[int, dict[str, Any]] = {}
        self.history: dict[int, list[dict[str, Any]]] = {}
        self.posts: list[Post] = []
        self.history_reads: list[tuple[int, int]] = []  # (channel, after) of each GET
        self.sent: list[dict[str, Any]] = []  # messages the bot created, deduped by nonce
        self.nonces: dict[tuple[int, str], dict[str, Any]] = {}
        self.post_failures: deque[Failure] = deque()
        self.identifies: list[dict[str, Any]] = []
        self.resumes = 0
        self.closes: list[int] = []
        self.commands: list[dict[str, Any]] = []
        #: Each bulk overwrite's body, in order (Discord rate-limits these).
        self.command_puts: list[list[dict[str, Any]]] = []
        self.callbacks: list[tuple[int, dict[str, Any]]] = []
        #: Interaction id → when it was answered (time.monotonic()); answering again is 400.
        self.callback_at: dict[int, float] = {}
        self.callbacks_refused: list[int] = []
        self.original_edits: list[tuple[str, dict[str, Any]]] = []
        #: Follow-up messages by interaction token: (token, body), ``flags`` 64 = ephemeral.
        self.followups: list[tuple[str, dict[str, Any]]] = []
        #: Follow-ups refused, as (token, status): before the acknowledgement, or expired.
        self.followups_refused: list[tuple[str, int]] = []
        #: Tokens of acknowledged interactions: follow-ups are taken from then on.
        self.acked_tokens: set[str] = set()
        #: Seconds an interaction callback takes before it counts (a slow acknowledgement).
        self.callback_delay = 0.0
        #: Messages deleted, as (channel id, message id), in order.
        self.deleted: list[tuple[int, str]] = []
        #: Deletions of a message not (or no longer) in the channel: answered 404.
        self.unknown_deletes: list[tuple[int, str]] = []
        #: The bot's reactions by message id, each emoji once, in order.
        self.reactions: dict[str, list[str]] = {}
        #: Pinned message ids by channel; each pin or unpin call as (channel, id, pinned).
        self.pins: dict[int, list[str]] = {}
        self.pin_calls: list[tuple[int, str, bool]] = []
        #: Statuses the next action calls (delete, react, pin, follow-up) answer with.
        self.action_failures: deque[int] = deque()
        #: Edits of the bot's channel messages: (message id, content after, monotonic time).
        self.message_edits: list[tuple[str, str, float]] = []
        self.expired_tokens: set[str] = set()
        #: Close IDENTIFYs asking for these intent bits with 4014 (not enabled in the portal).
        self.refuse_intents = 0
        self._sockets: dict[web.WebSocketResponse, itertools.count[int]] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._echoes: set[asyncio.Task[None]] = set()
        self._last_id = 0
        self._runner: web.AppRunner | None = None
        self._add_channel(
            {
                "id": str(CHANNEL_ID),
                "type": 0,
                "guild_id": str(GUILD_ID),
                "name": "general",
                "position": 0,
                "permission_overwrites": [],
                "nsfw": False,
                "parent_id": None,
                "topic": None,
                "last_message_id": None,
                "rate_limit_per_user": 0,
                "flags": 0,
            }
        )
        self._add_channel(
            {
                "id": str(THREAD_ID),
                "type": 11,
                "guild_id": str(GUILD_ID),
                "parent_id": str(CHANNEL_ID),
                "owner_id": str(USER_ID),
                "name": "a thread",
                "last_message_id": None,
                "rate_limit_per_user": 0,
                "message_count": 0,
                "member_count": 1,
                "total_message_sent": 0,
                "flags": 0,
                "thread_metadata": {
                    "archived": False,
                    "auto_archive_duration": 1440,
                    "archive_timestamp": iso(),
                    "locked": False,
                },
            }
        )
        self._add_channel(
            {
                "id": str(DM_CHANNEL_ID),
                "type": 1,
                "last_message_id": None,
                "recipients": [USER],
                "flags": 0,
            }
        )

    def _add_channel(self, data: dict[str, Any]) -> None:
        self.channels[int(data["id"])] = data
        self.history[int(data["id"])] = []

    # -- lifecycle ------------------------------------------------------------------

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    async def start(self) -> FakeDiscord:
        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        api = "/api/v10"
        app.router.add_get(api + "/users/@me", self._me)
        app.router.add_get(api + "/oauth2/applications/@me", self._application)
        app.router.add_get(api + "/channels/{channel}", self._channel)
        app.router.add_get(api + "/channels/{channel}/messages", self._messages)
        app.router.add_post(api + "/channels/{channel}/messages", self._create_message)
        app.router.add_patch(api + "/channels/{channel}/messages/{message}", self._edit_message)
        app.router.add_delete(api + "/channels/{channel}/messages/{message}", self._delete)
        reactions = "/channels/{channel}/messages/{message}/reactions/{emoji}/@me"
        app.router.add_put(api + reactions, self._react)
        # discord.py 2.7 pins at messages/pins/{id}; the older route is served as well.
        for pins in (
            "/channels/{channel}/messages/pins/{message}",
            "/channels/{channel}/pins/{message}",
        ):
            app.router.add_put(api + pins, self._pin)
            app.router.add_delete(api + pins, self._pin)
        app.router.add_put(api + "/applications/{app}/commands", self._put_commands)
        app.router.add_get(api + "/applications/{app}/commands", self._get_commands)
        app.router.add_post(api + "/interactions/{id}/{token}/callback", self._callback)
        app.router.add_patch(api + "/webhooks/{app}/{token}/messages/@original", self._edit)
        app.router.add_post(api + "/webhooks/{app}/{token}", self._followup)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        for task in list(self._echoes):
            task.cancel()
        for ws in list(self._sockets):
            await ws.close()
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    # -- feeding --------------------------------------------------------------------

    def next_id(self) -> int:
        """A fresh snowflake: time-ordered, strictly increasing."""
        self._last_id = max(self._last_id + 1, snowflake_at(int(time.time() * 1000)))
        return self._last_id

    def message(
        self,
        channel_id: int,
        content: str,
        *,
        author: dict[str, Any] = USER,
        mention_bot: bool = False,
        mention_bot_role: bool = False,
        reply_to: dict[str, Any] | None = None,
        attachments: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE payload as Discord sends it (``guild_id`` in server channels)."""
        mentions = []
        if mention_bot_role:
            content = f"<@&{BOT_ROLE_ID}> {content}"
        if mention_bot:
            content = f"<@{BOT_ID}> {content}"
            mentions.append(BOT_USER)
        data: dict[str, Any] = {
            "id": str(self.next_id()),
            "channel_id": str(channel_id),
            "author": author,
            "content": content,
            "timestamp": iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": mentions,
            "mention_roles": [str(BOT_ROLE_ID)] if mention_bot_role else [],
            "attachments": attachments or [],
            "embeds": [],
            "components": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        }
        guild_id = self.channels.get(channel_id, {}).get("guild_id")
        if guild_id:
            data["guild_id"] = guild_id
            data["member"] = member()
        if reply_to is not None:
            data["type"] = 19
            data["message_reference"] = {
                "type": 0,
                "message_id": reply_to["id"],
                "channel_id": reply_to["channel_id"],
            }
            data["referenced_message"] = {k: v for k, v in reply_to.items() if k != "member"}
        return data

    def post(self, data: dict[str, Any]) -> dict[str, Any]:
        """Store a message in its channel's history only (posted while nobody listens)."""
        self.history[int(data["channel_id"])].append(data)
        self._changed()
        return data

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send a gateway event to every connected client (stored first if a message)."""
        if event == "MESSAGE_CREATE" and data not in self.history[int(data["channel_id"])]:
            self.post(data)
        for ws, seq in list(self._sockets.items()):
            if not ws.closed:
                await ws.send_str(json.dumps({"op": 0, "t": event, "s": next(seq), "d": data}))

    async def say(self, channel_id: int, content: str, **kwargs: Any) -> dict[str, Any]:
        data = self.message(channel_id, content, **kwargs)
        await self.dispatch("MESSAGE_CREATE", data)
        return data

    async def interact(
        self,
        question: str,
        *,
        channel_id: int = CHANNEL_ID,
        token: str = "itoken-1",
        name: str = "ask",
        option: str = "question",
    ) -> dict[str, Any]:
        """A user runs ``/ask question`` (or ``/name`` with ``option`` set to
        ``question``, left out when empty, as Discord does): INTERACTION_CREATE."""
        named = [c for c in self.commands if c["name"] == name]
        guild_id = self.channels[channel_id].get("guild_id")
        data: dict[str, Any] = {
            "id": str(self.next_id()),
            "application_id": str(APPLICATION_ID),
            "type": 2,
            "token": token,
            "version": 1,
            "channel_id": str(channel_id),
            "channel": self.channels[channel_id],
            "locale": "en-US",
            "app_permissions": "0",
            "attachment_size_limit": 10 * 1024 * 1024,
            "entitlements": [],
            "authorizing_integration_owners": {},
            "data": {
                "id": str(named[0]["id"]) if named else "1",
                "name": name,
                "type": 1,
                "options": [{"name": option, "type": 3, "value": question}] if question else [],
            },
        }
        if guild_id:
            data["guild_id"] = guild_id
            data["guild_locale"] = "en-US"
            data["member"] = {**member(), "user": USER, "permissions": "0"}
        else:
            data["user"] = USER
        await self.dispatch("INTERACTION_CREATE", data)
        return data

    def press_payload(
        self, custom_id: str, on: dict[str, Any], *, token: str = "ptoken-1"
    ) -> dict[str, Any]:
        """The INTERACTION_CREATE of a person pressing the button ``custom_id`` on the
        message ``on``; ``dispatch`` it (twice, for a redelivery)."""
        channel_id = int(on["channel_id"])
        guild_id = self.channels[channel_id].get("guild_id")
        data: dict[str, Any] = {
            "id": str(self.next_id()),
            "application_id": str(APPLICATION_ID),
            "type": 3,
            "token": token,
            "version": 1,
            "channel_id": str(channel_id),
            "channel": self.channels[channel_id],
            "message": on,
            "locale": "en-US",
            "app_permissions": "0",
            "attachment_size_limit": 10 * 1024 * 1024,
            "entitlements": [],
            "authorizing_integration_owners": {},
            "data": {"custom_id": custom_id, "component_type": 2},
        }
        if guild_id:
            data["guild_id"] = guild_id
            data["member"] = {**member(), "user": USER, "permissions": "0"}
        else:
            data["user"] = USER
        return data

    def fail_next_post(self, status: int = 500, *, commit: bool = False, delay: float = 0) -> None:
        self.post_failures.append(Failure(status, commit, delay))

    def fail_next_action(self, status: int = 403) -> None:
        """The next delete, reaction, pin or follow-up answers ``status`` (403: Missing
        Permissions, 429 with a retry_after, 5xx) and does nothing."""
        self.action_failures.append(status)

    def find(self, channel_id: int, message_id: str) -> dict[str, Any] | None:
        """The message ``message_id`` as channel ``channel_id`` holds it now, if it does."""
        found = [m for m in self.history.get(channel_id, []) if m["id"] == message_id]
        return found[0] if found else None

    # -- observing ------------------------------------------------------------------

    @property
    def connected(self) -> int:
        return sum(1 for ws in self._sockets if not ws.closed)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` holds, re-checked after every change the fake sees."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):
            while not predicate():
                waiter: asyncio.Future[None] = loop.create_future()
                self._waiters.append(waiter)
                await waiter

    def _changed(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- gateway --------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        seq = itertools.count(1)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}}))
        try:
            async for frame in ws:
                if frame.type is not WSMsgType.TEXT:
                    continue
                payload = json.loads(frame.data)
                op, data = payload.get("op"), payload.get("d")
                if op == 1:
                    await ws.send_str(json.dumps({"op": 11}))
                elif op == 2:
                    await self._identify(ws, seq, data)
                elif op == 6:  # the fake keeps no sessions: resume fails, identify again
                    self.resumes += 1
                    await ws.send_str(json.dumps({"op": 9, "d": False}))
        finally:
            self._sockets.pop(ws, None)
            if ws.close_code is not None:
                self.closes.append(ws.close_code)
            self._changed()
        return ws

    async def _identify(
        self, ws: web.WebSocketResponse, seq: itertools.count[int], data: dict[str, Any]
    ) -> None:
        self.identifies.append(data)
        self._changed()
        if data.get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return
        if int(data.get("intents") or 0) & self.refuse_intents:
            await ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        ready = {
            "v": 10,
            "user": BOT_USER,
            "guilds": [{"id": str(GUILD_ID), "unavailable": True}],
            "session_id": f"session-{len(self.identifies)}",
            "resume_gateway_url": self.gateway_url,
            "application": {"id": str(APPLICATION_ID), "flags": 0},
            "shard": [0, 1],
            "private_channels": [],
            "relationships": [],
            "presences": [],
        }
        await ws.send_str(json.dumps({"op": 0, "t": "READY", "s": next(seq), "d": ready}))
        guild = {
            "id": str(GUILD_ID),
            "name": "Test server",
            "unavailable": False,
            "member_count": 2,
            "large": False,
            "owner_id": str(USER_ID),
            "roles": [
                {
                    "id": str(GUILD_ID),
                    "name": "@everyone",
                    "permissions": "0",
                    "position": 0,
                    "color": 0,
                    "hoist": False,
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                },
                {
                    "id": str(BOT_ROLE_ID),
                    "name": "Tether",
                    "permissions": "0",
                    "position": 1,
                    "color": 0,
                    "hoist": False,
                    "managed": True,
                    "mentionable": False,
                    "flags": 0,
                    "tags": {"bot_id": str(BOT_ID)},
                },
            ],
            "emojis": [],
            "stickers": [],
            "features": [],
            "channels": [self.channels[CHANNEL_ID]],
            "threads": [self.channels[THREAD_ID]],
            "members": [],
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "joined_at": iso(),
        }
        await ws.send_str(json.dumps({"op": 0, "t": "GUILD_CREATE", "s": next(seq), "d": guild}))
        self._sockets[ws] = seq
        self._changed()

    # -- REST -----------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bot {self.token}"

    async def _me(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        return _json(BOT_USER)

    async def _application(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        return _json(
            {
                "id": str(APPLICATION_ID),
                "name": "Tether",
                "icon": None,
                "description": "",
                "rpc_origins": [],
                "bot_public": True,
                "bot_require_code_grant": False,
                "bot": BOT_USER,
                "owner": USER,
                "summary": "",
                "verify_key": "0" * 64,
                "team": None,
                "flags": 0,
            }
        )

    async def _channel(self, request: web.Request) -> web.Response:
        channel = self.channels.get(int(request.match_info["channel"]))
        if channel is None:
            return _error(404, "Unknown Channel", 10003)
        return _json(channel)

    async def _messages(self, request: web.Request) -> web.Response:
        """``?after=ID&limit=N``: the N messages right after ID, newest first (as Discord)."""
        channel = int(request.match_info["channel"])
        if channel not in self.channels:
            return _error(404, "Unknown Channel", 10003)
        after = int(request.query.get("after", 0))
        limit = int(request.query.get("limit", 50))
        self.history_reads.append((channel, after))
        self._changed()
        found = sorted(
            (m for m in self.history[channel] if int(m["id"]) > after), key=lambda m: int(m["id"])
        )[:limit]
        # REST messages carry neither guild_id nor member, unlike gateway events.
        page = [{k: v for k, v in m.items() if k not in ("guild_id", "member")} for m in found]
        return _json(list(reversed(page)))

    async def _create_message(self, request: web.Request) -> web.Response:
        channel = int(request.match_info["channel"])
        body = await message_body(request)  # JSON, or multipart with files (discord_media)
        problem = _components_problem(body.get("components"))
        if problem:
            return _error(400, f"Invalid Form Body: components: {problem}", 50035)
        post = Post(channel, body)
        self.posts.append(post)
        failure = self.post_failures.popleft() if self.post_failures else None
        if failure is not None and not failure.commit:
            post.status = failure.status
            self._changed()
            return self._failure(failure.status)
        message = self._store_bot_message(channel, body)
        if failure is not None:
            if failure.delay:
                self._changed()  # the message exists: a test may act before the answer
                await asyncio.sleep(failure.delay)  # the fake is slow; the client gives up
            else:
                post.status = failure.status
                self._changed()
                return self._failure(failure.status)
        self._changed()
        return _json(message)

    def _store_bot_message(self, channel: int, body: dict[str, Any]) -> dict[str, Any]:
        nonce = body.get("nonce")
        if body.get("enforce_nonce") and nonce is not None:
            existing = self.nonces.get((channel, str(nonce)))
            if existing is not None:
                return existing  # what Discord does for a repeated nonce: no second message
        message = self.message(channel, str(body.get("content") or ""), author=BOT_USER)
        message["nonce"] = nonce
        message["components"] = body.get("components") or []
        message["attachments"] = attachments(body, self.next_id)
        reference = body.get("message_reference")
        if reference:
            message["type"] = 19
            message["message_reference"] = {"type": 0, "channel_id": str(channel), **reference}
        self.sent.append(message)
        if nonce is not None:
            self.nonces[(channel, str(nonce))] = message
        self.history[channel].append(message)
        # Discord sends the bot its own new message over the gateway too.
        task = asyncio.get_running_loop().create_task(self.dispatch("MESSAGE_CREATE", message))
        self._echoes.add(task)
        task.add_done_callback(self._echoes.discard)
        return message

    def _failure(self, status: int) -> web.Response:
        if status == 429:
            body = {"message": "You are being rate limited.", "retry_after": 0.05, "global": False}
            return _json(body, 429, {"Via": "1.1 google", "Retry-After": "1"})
        if status == 403:
            return _error(403, "Missing Permissions", 50013)
        if status == 404:
            return _error(404, "Unknown Channel", 10003)
        return _error(status, "Internal Server Error")

    async def _put_commands(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        commands = await request.json()
        problem = _commands_problem(commands)
        if problem is not None:
            return _error(400, f"Invalid Form Body: {problem}", 50035)
        self.command_puts.append(commands)
        self.commands = [
            {
                "id": str(self.next_id()),
                "application_id": str(APPLICATION_ID),
                "version": "1",
                "type": 1,
                "default_member_permissions": None,
                "dm_permission": True,
                "nsfw": False,
                **command,
            }
            for command in commands
        ]
        self._changed()
        return _json(self.commands)

    async def _get_commands(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "401: Unauthorized")
        return _json(self.commands)

    async def _callback(self, request: web.Request) -> web.Response:
        body = await request.json()
        interaction_id = int(request.match_info["id"])
        if interaction_id in self.callback_at:  # Discord: an interaction is answered once
            self.callbacks_refused.append(interaction_id)
            self._changed()
            return _error(400, "Interaction has already been acknowledged.", 40060)
        self.callback_at[interaction_id] = time.monotonic()
        if self.callback_delay:
            await asyncio.sleep(self.callback_delay)  # a slow platform, not a wait of ours
        self.acked_tokens.add(request.match_info["token"])
        self.callbacks.append((interaction_id, body))
        self._changed()
        return _json(
            {
                "interaction": {
                    "id": request.match_info["id"],
                    "type": 2,
                    "response_message_loading": body.get("type") == 5,
                    "response_message_ephemeral": False,
                },
                "resource": {"type": body.get("type")},
            }
        )

    async def _edit_message(self, request: web.Request) -> web.Response:
        """A bot edits one of its messages: the content (and the components, when the
        body has them: ``[]`` takes them away) change in place, and it is logged."""
        channel, ident = int(request.match_info["channel"]), request.match_info["message"]
        mine = self.find(channel, ident)
        if mine is None or mine["author"]["id"] != BOT_USER["id"]:
            return _error(404, "Unknown Message", 10008)
        body = await request.json()
        problem = _components_problem(body.get("components"))
        if problem:
            return _error(400, f"Invalid Form Body: components: {problem}", 50035)
        mine["content"] = str(body.get("content", mine["content"]))
        if "components" in body:
            mine["components"] = body["components"]
        mine["edited_timestamp"] = iso()
        self.message_edits.append((ident, mine["content"], time.monotonic()))
        self._changed()
        return _json(mine)

    def _action_failure(self) -> web.Response | None:
        if not self.action_failures:
            return None
        self._changed()
        return self._failure(self.action_failures.popleft())

    def _target(self, request: web.Request) -> tuple[int, str, dict[str, Any] | None]:
        channel, ident = int(request.match_info["channel"]), request.match_info["message"]
        return channel, ident, self.find(channel, ident)

    async def _delete(self, request: web.Request) -> web.Response:
        """Delete Message: gone from the channel's history; unknown (or gone) is 404."""
        if (failed := self._action_failure()) is not None:
            return failed
        channel, ident, message = self._target(request)
        if message is None:
            self.unknown_deletes.append((channel, ident))
            self._changed()
            return _error(404, "Unknown Message", 10008)
        self.history[channel].remove(message)
        self.deleted.append((channel, ident))
        self._changed()
        return web.Response(status=204)

    async def _react(self, request: web.Request) -> web.Response:
        """Create Reaction (the bot's own): each emoji once per message."""
        if (failed := self._action_failure()) is not None:
            return failed
        _, ident, message = self._target(request)
        if message is None:
            return _error(404, "Unknown Message", 10008)
        mine = self.reactions.setdefault(ident, [])
        if request.match_info["emoji"] not in mine:
            mine.append(request.match_info["emoji"])
        self._changed()
        return web.Response(status=204)

    async def _pin(self, request: web.Request) -> web.Response:
        """Pin (PUT) or unpin (DELETE) a message of the channel; twice is once."""
        if (failed := self._action_failure()) is not None:
            return failed
        channel, ident, message = self._target(request)
        if message is None:
            return _error(404, "Unknown Message", 10008)
        pinned = request.method == "PUT"
        self.pin_calls.append((channel, ident, pinned))
        pins = self.pins.setdefault(channel, [])
        if pinned and ident not in pins:
            pins.append(ident)
        elif not pinned and ident in pins:
            pins.remove(ident)
        message["pinned"] = pinned
        self._changed()
        return web.Response(status=204)

    async def _edit(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        if token in self.expired_tokens:
            return _error(401, "Invalid Webhook Token", 50027)
        body = await request.json()
        self.original_edits.append((token, body))
        self._changed()
        message = self.message(CHANNEL_ID, str(body.get("content", "")), author=BOT_USER)
        return _json(message)

    async def _followup(self, request: web.Request) -> web.Response:
        """Create Followup Message: only after the interaction's acknowledgement, while
        its token is valid."""
        token = request.match_info["token"]
        if (failed := self._action_failure()) is not None:
            return failed
        refusal = None
        if token in self.expired_tokens:
            refusal = _error(401, "Invalid Webhook Token", 50027)
        elif token not in self.acked_tokens:
            refusal = _error(404, "Unknown Webhook", 10015)
        if refusal is not None:
            self.followups_refused.append((token, refusal.status))
            self._changed()
            return refusal
        body = await request.json()
        self.followups.append((token, body))
        self._changed()
        message = self.message(CHANNEL_ID, str(body.get("content", "")), author=BOT_USER)
        message["flags"] = int(body.get("flags") or 0)
        return _json(message)
