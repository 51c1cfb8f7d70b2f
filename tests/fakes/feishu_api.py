"""A fake Feishu/Lark open platform on 127.0.0.1, for driving the real lark-oapi client.

It runs its own event loop in a thread of its own: lark-oapi fetches its tenant token
and discovers the long-connection endpoint with blocking ``requests`` calls, which
would deadlock a fake sharing the test's loop. Point the SDK at it with
``domain=fake.domain``. It serves:

- ``POST /open-apis/auth/v3/tenant_access_token/internal`` (checks app id and secret),
- ``GET /open-apis/bot/v3/info`` (the bot's open_id),
- ``POST /open-apis/im/v1/messages`` and ``/messages/{id}/reply``, deduplicated on
  ``uuid`` the way Feishu does (a repeat returns the first message, nothing new posted),
- changes to a message: ``PUT /messages/{id}`` (edit a text or post), ``PATCH`` (update a
  shared card), ``DELETE`` (recall), ``POST /messages/{id}/reactions``, ``POST /pins`` and
  ``DELETE /pins/{id}``, with Feishu's codes for a message recalled (230011), one not
  found, the wrong type, a person's message the bot may not recall (230026, unless the
  chat is in ``admin_chats``) and an unknown ``emoji_type`` (231001). A person's message
  the bot acts on is added with :meth:`FakeFeishu.add_message`,
- ``POST /callback/ws/endpoint`` and ``GET /ws``: the long connection, speaking the
  SDK's own protobuf frames (``lark_oapi.ws.pb.pbbp2_pb2.Frame``); ``push_event``
  sends an event and every ack the client sends back is recorded.

It records every call and can fail the next send (``fail_next``) with a 5xx (after
"delivering" it, as a platform that timed out on its answer would) or a 429, and the
next change to a message (``fail_next_change``: PATCH, recall, reaction, pin). Tests
wait on conditions (``await fake.until(lambda: ...)``), never on sleeps.

The helpers at the end build webhook requests the way Feishu does: the v2 event
JSON, AES-256-CBC encryption with SHA-256(encrypt key), and the signature headers.
``python -m tests.fakes.feishu_api --port N`` runs it standalone (for the benchmark).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import itertools
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web
from Crypto.Cipher import AES  # pycryptodome, which lark-oapi depends on

APP_ID = "cli_tether_test_app"
APP_SECRET = "fs-app-secret-7f3a9c2e41d8"
VERIFICATION_TOKEN = "fs-verify-token-5b8e1d0c"
ENCRYPT_KEY = "fs-encrypt-key-c94e27a1b6"
TENANT_TOKEN = "t-fake-tenant-access-token"
BOT_OPEN_ID = "ou_tether_bot_0001"
BOT_NAME = "Tether"
_SERVICE_ID = 7
_BODY_CAPS = {"text": 150 * 1024, "post": 30 * 1024, "interactive": 30 * 1024}
#: The ``emoji_type`` names the fake takes (a few of Feishu's; it refuses the rest).
EMOJI_TYPES = frozenset(
    {"OK", "THUMBSUP", "THANKS", "MUSCLE", "APPLAUSE", "DONE", "SMILE", "LAUGH", "HEART"}
    | {"ThumbsDown", "PARTY", "Fire"}
)


@dataclass
class Call:
    path: str
    query: dict[str, str]
    body: dict[str, Any]
    status: int = 200
    size: int = 0  # bytes of the request body, as sent
    method: str = "POST"
    at: float = field(default_factory=time.monotonic)


@dataclass
class Failure:
    status: int
    code: int
    msg: str
    headers: dict[str, str] = field(default_factory=dict)
    deliver: bool = False  # post the message, then answer with the failure anyway


@dataclass
class Ack:
    """The response frame the SDK sent for one pushed event."""

    message_id: str
    code: int
    probe: Any = None  # what ``ack_probe`` returned when the ack arrived
    at: float = field(default_factory=time.monotonic)


class FakeFeishu:
    def __init__(self, app_id: str = APP_ID, app_secret: str = APP_SECRET) -> None:
        self.app_id = app_id
        self.app_secret = app_secret
        self.calls: list[Call] = []
        self.messages: list[dict[str, Any]] = []  # posted messages, one per uuid
        #: Edits (PUT im/v1/messages/:id; PATCH for cards): (message id, content after,
        #: monotonic time).
        self.edits: list[tuple[str, Any, float]] = []
        #: People's messages (:meth:`add_message`), which the bot may react to, pin, recall.
        self.people: dict[str, dict[str, Any]] = {}
        #: Ids recalled (DELETE im/v1/messages/:id), in order.
        self.recalled: list[str] = []
        #: The bot's reactions: (message id, emoji_type), once each, in order.
        self.reactions: list[tuple[str, str]] = []
        #: Message ids pinned now, in the order they were pinned.
        self.pins: list[str] = []
        #: Chats where the bot is an admin, so it may recall people's messages.
        self.admin_chats: set[str] = set()
        self.change_failures: deque[Failure] = deque()
        self.acks: list[Ack] = []
        self.failures: deque[Failure] = deque()
        #: Called (in the fake's thread) with the frame's message id when an ack arrives.
        self.ack_probe: Callable[[str], Any] | None = None
        self.ws_connections = 0
        self.pings = 0  # the SDK pings as soon as it has connected
        self.refuse_connections = False  # the endpoint lookup answers "forbidden"
        self.ws_open = False
        self.port = 0
        self._by_uuid: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ws: web.WebSocketResponse | None = None
        self._runner: web.AppRunner | None = None

    # -- lifecycle ------------------------------------------------------------------

    @property
    def domain(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/open-apis/auth/v3/tenant_access_token/internal", self._token)
        app.router.add_get("/open-apis/bot/v3/info", self._bot_info)
        app.router.add_post("/open-apis/im/v1/messages", self._create)
        app.router.add_post("/open-apis/im/v1/messages/{message_id}/reply", self._reply)
        app.router.add_put("/open-apis/im/v1/messages/{message_id}", self._update)
        app.router.add_patch("/open-apis/im/v1/messages/{message_id}", self._patch_card)
        app.router.add_delete("/open-apis/im/v1/messages/{message_id}", self._recall)
        app.router.add_post("/open-apis/im/v1/messages/{message_id}/reactions", self._react)
        app.router.add_post("/open-apis/im/v1/pins", self._pin)
        app.router.add_delete("/open-apis/im/v1/pins/{message_id}", self._unpin)
        app.router.add_post("/callback/ws/endpoint", self._endpoint)
        app.router.add_get("/ws", self._websocket)
        app.router.add_get("/_fake/stats", self._stats)
        return app

    async def serve(self, port: int = 0) -> None:
        self._loop = asyncio.get_running_loop()
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.port = int(self._runner.addresses[0][1])

    def start(self) -> FakeFeishu:
        """Serve from a thread with its own loop; returns once it listens."""
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            loop.run_until_complete(self.serve())
            ready.set()
            loop.run_forever()
            if self._runner is not None:
                loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-feishu", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    # -- test controls ---------------------------------------------------------------

    def fail_next(
        self,
        status: int,
        code: int,
        msg: str = "failed",
        *,
        headers: dict[str, str] | None = None,
        deliver: bool = False,
    ) -> None:
        """The next message send answers ``status``/``code`` (after posting, if ``deliver``)."""
        self.failures.append(Failure(status, code, msg, headers or {}, deliver))

    def fail_next_change(
        self, status: int, code: int, msg: str = "failed", *, headers: dict[str, str] | None = None
    ) -> None:
        """The next PATCH, recall, reaction or pin answers ``status``/``code``, undone."""
        self.change_failures.append(Failure(status, code, msg, headers or {}))

    def add_message(
        self, message_id: str, *, chat_id: str = "oc_chat_1", open_id: str = "ou_user_1"
    ) -> None:
        """A text message a person sent (as the event that names it says)."""
        self.people[message_id] = {
            "message_id": message_id,
            "chat_id": chat_id,
            "sender": open_id,
            "msg_type": "text",
        }

    def sends(self) -> list[Call]:
        return [call for call in self.calls if call.path.startswith("/open-apis/im/")]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    async def until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait (off the test's loop) until ``predicate()`` holds after some fake activity."""
        if not await asyncio.to_thread(self.wait_for, predicate, timeout):
            raise TimeoutError("condition not met in time")

    async def holds_within(self, predicate: Callable[[], bool], timeout: float) -> bool:
        return await asyncio.to_thread(self.wait_for, predicate, timeout)

    def push_event(self, payload: dict[str, Any]) -> str:
        """Send one event over the long connection as the SDK's DATA frame; its frame id."""
        assert self._loop is not None
        frame_id = f"frame-{next(self._ids)}"
        future = asyncio.run_coroutine_threadsafe(self._push(frame_id, payload), self._loop)
        future.result(10)
        return frame_id

    def _changed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- the open platform -----------------------------------------------------------

    async def _record(self, request: web.Request) -> Call:
        body: dict[str, Any] = {}
        raw = await request.read() if request.can_read_body else b""
        if raw:
            data = json.loads(raw)
            body = data if isinstance(data, dict) else {}
        call = Call(request.path, dict(request.query), body, size=len(raw), method=request.method)
        self.calls.append(call)
        return call

    def _answer(
        self, call: Call, status: int, data: dict[str, Any], **headers: str
    ) -> web.Response:
        call.status = status
        self._changed()
        return web.json_response(data, status=status, headers=headers or None)

    async def _token(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        if call.body.get("app_id") != self.app_id or call.body.get("app_secret") != self.app_secret:
            return self._answer(call, 400, {"code": 10014, "msg": "app secret invalid"})
        answer = {"code": 0, "msg": "ok", "tenant_access_token": TENANT_TOKEN, "expire": 7200}
        return self._answer(call, 200, answer)

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {TENANT_TOKEN}"

    async def _bot_info(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        if not self._authorized(request):
            return self._answer(call, 401, {"code": 99991663, "msg": "Invalid access token"})
        bot = {"activate_status": 2, "app_name": BOT_NAME, "open_id": BOT_OPEN_ID}
        return self._answer(call, 200, {"code": 0, "msg": "ok", "bot": bot})

    async def _create(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        return self._post(call, request, str(call.body.get("receive_id") or ""), None)

    async def _reply(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        return self._post(call, request, "", request.match_info["message_id"])

    async def _update(self, request: web.Request) -> web.Response:
        """Edit a text or post message the bot sent, at most 20 times, as Feishu allows."""
        call = await self._record(request)
        if not self._authorized(request):
            return self._answer(call, 401, {"code": 99991663, "msg": "Invalid access token"})
        ident = request.match_info["message_id"]
        message = next((m for m in self.messages if m["message_id"] == ident), None)
        if message is None:
            return self._answer(call, 400, {"code": 230001, "msg": "message not found"})
        if ident in self.recalled:
            return self._answer(call, 400, {"code": 230011, "msg": "The message is recalled."})
        if message["msg_type"] not in ("text", "post"):
            msg = "This operation is not supported for this message type."
            return self._answer(call, 400, {"code": 230054, "msg": msg})
        if call.body.get("msg_type") not in ("text", "post"):
            return self._answer(call, 400, {"code": 230001, "msg": "msg_type must be text or post"})
        if sum(1 for edit in self.edits if edit[0] == ident) >= 20:
            return self._answer(call, 400, {"code": 230072, "msg": "edited too many times"})
        message["msg_type"] = call.body["msg_type"]
        message["content"] = json.loads(str(call.body.get("content") or "{}"))
        self.edits.append((ident, message["content"], time.monotonic()))
        data = {"message_id": ident, "msg_type": message["msg_type"]}
        return self._answer(call, 200, {"code": 0, "msg": "success", "data": data})

    async def _patch_card(self, request: web.Request) -> web.Response:
        """Update a shared card the bot sent: ``update_multi`` before and after, as Feishu asks."""
        call, refused = await self._change(request)
        if refused is not None:
            return refused
        ident = request.match_info["message_id"]
        message = next((m for m in self.messages if m["message_id"] == ident), None)
        if message is None or message["msg_type"] != "interactive":
            return self._answer(call, 400, {"code": 230001, "msg": "not a card the bot sent"})
        if ident in self.recalled:
            return self._answer(call, 400, {"code": 230011, "msg": "The message is recalled."})
        content = call.body.get("content")
        problem = card_problem(content)
        if problem:
            return self._answer(call, 400, {"code": 230099, "msg": problem})
        card = json.loads(str(content))
        for shown in (message["content"], card):
            if not (shown.get("config") or {}).get("update_multi"):
                msg = "only a shared card (config.update_multi) can be updated"
                return self._answer(call, 400, {"code": 230099, "msg": msg})
        message["content"] = card
        self.edits.append((ident, card, time.monotonic()))
        return self._answer(call, 200, {"code": 0, "msg": "success", "data": {}})

    async def _recall(self, request: web.Request) -> web.Response:
        call, refused = await self._change(request)
        if refused is not None:
            return refused
        ident = request.match_info["message_id"]
        message = self._find(ident)
        if message is None:
            return self._answer(call, 400, {"code": 230001, "msg": "invalid message_id"})
        if ident in self.recalled:
            return self._answer(call, 400, {"code": 230011, "msg": "The message is recalled."})
        if ident in self.people and message["chat_id"] not in self.admin_chats:
            msg = "No permission to recall this message."
            return self._answer(call, 400, {"code": 230026, "msg": msg})
        self.recalled.append(ident)
        return self._answer(call, 200, {"code": 0, "msg": "success", "data": {}})

    async def _react(self, request: web.Request) -> web.Response:
        call, refused = await self._change(request)
        if refused is not None:
            return refused
        ident = request.match_info["message_id"]
        if self._find(ident) is None or ident in self.recalled:
            msg = "The message is not found, maybe not exist or deleted."
            return self._answer(call, 400, {"code": 231003, "msg": msg})
        kind = (call.body.get("reaction_type") or {}).get("emoji_type")
        if kind not in EMOJI_TYPES:
            return self._answer(call, 400, {"code": 231001, "msg": "reaction type is invalid."})
        if (ident, kind) not in self.reactions:  # the same reaction twice is one
            self.reactions.append((ident, kind))
        data = {"reaction_id": f"r_{ident}_{kind}", "reaction_type": {"emoji_type": kind}}
        return self._answer(call, 200, {"code": 0, "msg": "success", "data": data})

    async def _pin(self, request: web.Request) -> web.Response:
        call, refused = await self._change(request)
        if refused is not None:
            return refused
        ident = str(call.body.get("message_id") or "")
        message = self._find(ident)
        if message is None:
            return self._answer(call, 400, {"code": 230001, "msg": "invalid message_id"})
        if ident in self.recalled:
            return self._answer(call, 400, {"code": 230011, "msg": "The message is recalled."})
        if ident not in self.pins:  # pinned already: Feishu answers with that pin
            self.pins.append(ident)
        pin = {"message_id": ident, "chat_id": message["chat_id"], "operator_id": APP_ID}
        return self._answer(call, 200, {"code": 0, "msg": "success", "data": {"pin": pin}})

    async def _unpin(self, request: web.Request) -> web.Response:
        call, refused = await self._change(request)
        if refused is not None:
            return refused
        ident = request.match_info["message_id"]
        if self._find(ident) is None:
            return self._answer(call, 400, {"code": 230001, "msg": "invalid message_id"})
        if ident in self.pins:
            self.pins.remove(ident)
        return self._answer(call, 200, {"code": 0, "msg": "success", "data": {}})

    async def _change(self, request: web.Request) -> tuple[Call, web.Response | None]:
        """Record a change to a message; the refusal it gets before looking, if any."""
        call = await self._record(request)
        if not self._authorized(request):
            return call, self._answer(call, 401, {"code": 99991663, "msg": "Invalid access token"})
        if self.change_failures:
            failure = self.change_failures.popleft()
            body = {"code": failure.code, "msg": failure.msg}
            return call, self._answer(call, failure.status, body, **failure.headers)
        return call, None

    def _find(self, ident: str) -> dict[str, Any] | None:
        """A message the bot sent, or a person's (:meth:`add_message`)."""
        sent = next((m for m in self.messages if m["message_id"] == ident), None)
        return sent if sent is not None else self.people.get(ident)

    def _post(
        self, call: Call, request: web.Request, chat_id: str, parent: str | None
    ) -> web.Response:
        if not self._authorized(request):
            return self._answer(call, 401, {"code": 99991663, "msg": "Invalid access token"})
        cap = _BODY_CAPS.get(str(call.body.get("msg_type")), _BODY_CAPS["text"])
        if call.size > cap:  # Feishu's request body caps: text 150 KB, post and cards 30 KB
            return self._answer(call, 400, {"code": 230025, "msg": "message content too long"})
        if call.body.get("msg_type") == "interactive":
            problem = card_problem(call.body.get("content"))
            if problem:
                return self._answer(call, 400, {"code": 230099, "msg": problem})
        failure = self.failures.popleft() if self.failures else None
        if failure is not None and not failure.deliver:
            body = {"code": failure.code, "msg": failure.msg}
            return self._answer(call, failure.status, body, **failure.headers)
        uuid = str(call.body.get("uuid") or "")
        message = self._by_uuid.get(uuid) if uuid else None
        if message is None:
            message = {
                "message_id": f"om_sent_{next(self._ids)}",
                "chat_id": chat_id,
                "parent_id": parent,
                "msg_type": call.body.get("msg_type"),
                "content": json.loads(str(call.body.get("content") or "{}")),
                "uuid": uuid,
                "reply_in_thread": bool(call.body.get("reply_in_thread")),
            }
            self.messages.append(message)
            if uuid:
                self._by_uuid[uuid] = message
        if failure is not None:  # delivered, but the answer says otherwise
            body = {"code": failure.code, "msg": failure.msg}
            return self._answer(call, failure.status, body, **failure.headers)
        data = {"message_id": message["message_id"], "chat_id": chat_id, "msg_type": "text"}
        return self._answer(call, 200, {"code": 0, "msg": "success", "data": data})

    async def _stats(self, _request: web.Request) -> web.Response:
        return web.json_response({"calls": len(self.calls), "messages": len(self.messages)})

    # -- the long connection -----------------------------------------------------------

    async def _endpoint(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        if self.refuse_connections or call.body.get("AppSecret") != self.app_secret:
            return self._answer(call, 200, {"code": 403, "msg": "app credentials rejected"})
        url = f"ws://127.0.0.1:{self.port}/ws?device_id=dev-1&service_id={_SERVICE_ID}"
        config = {"ReconnectCount": -1, "ReconnectInterval": 1, "ReconnectNonce": 0}
        config["PingInterval"] = 120
        data = {"URL": url, "ClientConfig": config}
        return self._answer(call, 200, {"code": 0, "msg": "ok", "data": data})

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._ws = ws
        self.ws_connections += 1
        self.ws_open = True
        self._changed()
        try:
            async for message in ws:
                if message.type is WSMsgType.BINARY:
                    self._on_frame(message.data)
        finally:
            self.ws_open = False
            self._ws = None
            self._changed()
        return ws

    def _on_frame(self, data: bytes) -> None:
        from lark_oapi.ws.pb.pbbp2_pb2 import Frame  # lazily: lark-oapi takes ~2 s to import

        frame = Frame()
        frame.ParseFromString(data)
        if frame.method != 1:  # a control frame: the client's ping, which needs no answer
            self.pings += 1
            self._changed()
            return
        headers = {h.key: h.value for h in frame.headers}
        message_id = headers.get("message_id", "")
        probe = self.ack_probe(message_id) if self.ack_probe else None
        code = int(json.loads(frame.payload or b"{}").get("code") or 0)
        self.acks.append(Ack(message_id, code, probe))
        self._changed()

    async def _push(self, frame_id: str, payload: dict[str, Any]) -> None:
        if self._ws is None:
            raise RuntimeError("no long connection open")
        from lark_oapi.ws.pb.pbbp2_pb2 import Frame  # lazily: lark-oapi takes ~2 s to import

        frame = Frame()
        frame.SeqID = 0
        frame.LogID = 0
        frame.service = _SERVICE_ID
        frame.method = 1  # DATA
        for key, value in (
            ("type", "event"),
            ("message_id", frame_id),
            ("trace_id", frame_id),
            ("sum", "1"),
            ("seq", "0"),
        ):
            header = frame.headers.add()
            header.key, header.value = key, value
        frame.payload = json.dumps(payload).encode()
        await self._ws.send_bytes(frame.SerializeToString())


# -- building webhook requests the way Feishu does ------------------------------------


def message_event(
    message_id: str,
    text: str = "hello",
    *,
    event_id: str | None = None,
    chat_id: str = "oc_chat_1",
    chat_type: str = "p2p",
    open_id: str = "ou_user_1",
    sender_type: str = "user",
    message_type: str = "text",
    content: dict[str, Any] | None = None,
    mentions: list[dict[str, Any]] | None = None,
    token: str = VERIFICATION_TOKEN,
    **message_fields: Any,
) -> dict[str, Any]:
    """An ``im.message.receive_v1`` event (schema 2.0) as Feishu posts it."""
    now_ms = str(int(time.time() * 1000))
    message: dict[str, Any] = {
        "message_id": message_id,
        "create_time": now_ms,
        "chat_id": chat_id,
        "chat_type": chat_type,
        "message_type": message_type,
        "content": json.dumps(content if content is not None else {"text": text}),
        **message_fields,
    }
    if mentions:
        message["mentions"] = mentions
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or f"ev_{os.urandom(8).hex()}",
            "event_type": "im.message.receive_v1",
            "create_time": now_ms,
            "token": token,
            "app_id": APP_ID,
            "tenant_key": "tenant_1",
        },
        "event": {
            "sender": {
                "sender_id": {"open_id": open_id, "union_id": "on_union_1", "user_id": "u_1"},
                "sender_type": sender_type,
                "tenant_key": "tenant_1",
            },
            "message": message,
        },
    }


def card_action_event(
    data: str,
    *,
    message_id: str = "om_card_1",
    chat_id: str = "oc_chat_1",
    open_id: str = "ou_user_1",
    event_id: str | None = None,
    token: str = VERIFICATION_TOKEN,
) -> dict[str, Any]:
    """A ``card.action.trigger`` callback (schema 2.0): a press on a card's button whose
    ``value`` is ``{"data": data}``, as Feishu posts it."""
    now_ms = str(int(time.time() * 1000))
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or f"ev_{os.urandom(8).hex()}",
            "event_type": "card.action.trigger",
            "create_time": now_ms,
            "token": token,
            "app_id": APP_ID,
            "tenant_key": "tenant_1",
        },
        "event": {
            "operator": {"tenant_key": "tenant_1", "open_id": open_id, "union_id": "on_union_1"},
            "token": f"c-{os.urandom(8).hex()}",
            "action": {"value": {"data": data}, "tag": "button"},
            "host": "im_message",
            "context": {"open_message_id": message_id, "open_chat_id": chat_id},
        },
    }


def card_problem(content: Any) -> str | None:
    """What Feishu would refuse in an ``interactive`` message's card (the parts Tether
    uses): elements, a button's text, and exactly one of ``value`` or ``url``."""
    card = json.loads(content) if isinstance(content, str) else None
    elements = card.get("elements") if isinstance(card, dict) else None
    if not isinstance(elements, list) or not elements:
        return "card has no elements"
    for element in elements:
        if not isinstance(element, dict) or element.get("tag") != "action":
            continue
        for button in element.get("actions") or []:
            text = button.get("text") if isinstance(button, dict) else None
            if not isinstance(text, dict) or not text.get("content"):
                return "a button needs text"
            if ("value" in button) == ("url" in button):
                return "a button needs a value or a url"
    return None


def mention(key: str, open_id: str, name: str) -> dict[str, Any]:
    return {"key": key, "id": {"open_id": open_id, "union_id": "on_x"}, "name": name}


def encrypt(plaintext: bytes, key: str = ENCRYPT_KEY) -> str:
    """base64(iv ‖ AES-256-CBC(PKCS#7(plaintext))) with key = SHA-256(encrypt key)."""
    iv = os.urandom(16)
    pad = 16 - len(plaintext) % 16
    cipher = AES.new(hashlib.sha256(key.encode()).digest(), AES.MODE_CBC, iv)
    return base64.b64encode(iv + cipher.encrypt(plaintext + bytes([pad]) * pad)).decode()


def signed_request(
    payload: dict[str, Any],
    key: str | None = ENCRYPT_KEY,
    *,
    timestamp: float | None = None,
    nonce: str = "nonce-1",
) -> tuple[bytes, dict[str, str]]:
    """The body and headers Feishu posts: encrypted and signed when ``key`` is given."""
    plain = json.dumps(payload).encode()
    if key is None:
        return plain, {"Content-Type": "application/json"}
    body = json.dumps({"encrypt": encrypt(plain, key)}).encode()
    stamp = str(int(time.time() if timestamp is None else timestamp))
    signature = hashlib.sha256((stamp + nonce + key).encode() + body).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "X-Lark-Request-Timestamp": stamp,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": signature,
    }
    return body, headers


async def _serve(port: int) -> None:
    fake = FakeFeishu()
    await fake.serve(port)
    print(json.dumps({"port": fake.port}), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(_serve(parser.parse_args().port))
