"""Feishu/Lark: events in (a verified webhook route, or the SDK's long connection), IM API out.

lark-oapi is the API client and the long-connection client, not the webhook runtime:
its ``EventDispatcherHandler.do`` is synchronous, answers every rejection with HTTP 500
and checks no timestamp freshness. So the webhook route here verifies the request
itself (signature over the raw body, timestamp, verification token, decryption) and
answers 401/403/400 for what fails, and 200 only after the event is committed to the
inbox. Feishu redelivers anything not answered 200 within 3 s, and sometimes delivers
twice anyway; messages are keyed ``fs:msg:{message_id}`` (its docs say to dedup on
the message, not the event id), other events ``fs:evt:{event_id}``.

The long connection (``lark_oapi.ws.Client``) blocks forever on a module-level event
loop and acks each event when its synchronous handler returns. It runs in a thread
with a loop of its own; the handler waits for the inbox commit on Tether's loop before
it returns, so the ack follows the commit. An exception there makes the SDK answer
500, and Feishu delivers the event again.

Sends carry a ``uuid`` derived from the outbox key: Feishu sends at most one message
per uuid within an hour, so a retry after a timeout or a 5xx cannot post twice, and
the adapter declares ``idempotent_send``. They go out through one pooled aiohttp
session rather than the SDK's sync client in a thread: that client opens a new
``requests`` session and TCP connection per call, and at 200 replies/s on two cores
the threads' GIL traffic raised the webhook ack p99 from ~4 ms to ~160 ms
(bench/feishu.py). The SDK still owns the tenant token (its cache, its refresh); its
blocking fetch runs in a thread when the cache is empty.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import logging
import math
import random
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote

import aiohttp
import lark_oapi as lark
import lark_oapi.ws.client as lark_ws
import requests
import structlog
from aiohttp import web
from lark_oapi.core.exception import ObtainAccessTokenException
from lark_oapi.core.token.manager import TokenManager
from lark_oapi.core.utils.decryptor import AESCipher

from tether.adapters import feishu_content as content
from tether.adapters.base import Adapter, SendAmbiguous, SendError, SendFatal, SendRetryable, Sent
from tether.config.schema import FeishuConfig
from tether.events import ChatType, Conversation, Event, Kind, OutMessage, Sender, Target
from tether.events import parse_command as _parse_command
from tether.gateway.ratelimit import Limit

if TYPE_CHECKING:
    from tether.gateway.inbox import Inbox

log = structlog.get_logger("tether.feishu")

TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"
SIGNATURE_HEADER = "X-Lark-Signature"
RATE_LIMIT_RESET_HEADER = "x-ogw-ratelimit-reset"
_JSON = "application/json; charset=utf-8"
#: Feishu's throttling code (with HTTP 429); the tenant-token codes mean "fetch a new one".
RATE_LIMITED = 99991400
_TOKEN_INVALID = frozenset({99991661, 99991663, 99991668})
#: How long the long-connection handler waits for the inbox commit before it gives up
#: (the SDK then answers 500 and Feishu delivers the event again).
_WS_COMMIT_TIMEOUT = 10.0
_WS_STOP_TIMEOUT = 5.0


class Dropped(NamedTuple):
    """Why an event did not become an :class:`Event`. It is still answered 200 / acked."""

    log_event: str  # feishu.ignored (by policy) or feishu.skipped (cannot handle)
    reason: str


class Rejected(NamedTuple):
    """A webhook request that failed verification: the HTTP status and why."""

    status: int
    reason: str


class FeishuAdapter(Adapter):
    platform = "feishu"
    #: UTF-8 bytes (see :meth:`text_length`). Feishu caps a text message's request body
    #: at 150 KB but a post (how Markdown is sent) at 30 KB, and the text is JSON-escaped
    #: twice on the way (inside ``content``, then inside the body); 24,000 bytes leaves
    #: room for that escaping under the smaller cap, and is still ~8,000 CJK characters
    #: or a few screens of English — longer replies are split, code fences kept intact.
    text_limit = 24_000
    idempotent_send = True

    def __init__(self, config: FeishuConfig) -> None:
        self.config = config
        self.open_attempts = 5
        self.backoff_base = 1.0
        self.backoff_max = 30.0
        self.bot_open_id: str | None = None
        self.bot_name: str = ""
        self._client: lark.Client | None = None
        self._http: aiohttp.ClientSession | None = None
        self._token_lock = asyncio.Lock()
        self._inbox: Inbox | None = None
        self._main_loop: asyncio.AbstractEventLoop | None = None
        self._ws_thread: threading.Thread | None = None
        self._ws_loop: asyncio.AbstractEventLoop | None = None
        self._ws_client: lark_ws.Client | None = None
        self._ws_stopping = False
        self._ws_error: str | None = None
        secret = config.encrypt_key.get_secret_value() if config.encrypt_key else ""
        self._encrypt_key = secret
        self._cipher = AESCipher(secret) if secret else None
        token = config.verification_token
        self._token = token.get_secret_value().encode() if token else None
        _route_sdk_logs()

    # -- lifecycle ------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        if self.config.mode == "webhook":
            return self._inbox is not None
        client = self._ws_client
        return client is not None and getattr(client, "_conn", None) is not None

    @property
    def problem(self) -> str | None:
        if self.connected:
            return None
        if self.config.mode == "webhook":
            return "not accepting webhook posts (starting or stopping)"
        if self._ws_error:
            return f"long connection failed: {self._ws_error}"
        return "long connection not established (connecting or reconnecting)"

    async def open(self) -> None:
        """The bot's own open_id (``GET /open-apis/bot/v3/info``), to tell mentions of it."""
        from tether.errors import GatewayError

        self._client = (
            lark.Client.builder()
            .app_id(self.config.app_id)
            .app_secret(self.config.app_secret.get_secret_value())
            .domain(self.config.domain)
            .timeout(self.config.timeout)
            .log_level(lark.LogLevel.WARNING)
            .build()
        )
        self._http = aiohttp.ClientSession(
            self.config.domain,
            timeout=aiohttp.ClientTimeout(total=self.config.timeout),
            raise_for_status=False,
        )
        for attempt in range(1, self.open_attempts + 1):
            try:
                bot = await asyncio.to_thread(self._bot_info)
                break
            except ObtainAccessTokenException as exc:
                await self.close()
                raise GatewayError(
                    "platforms.feishu: app_id/app_secret were rejected"
                    f" (tenant_access_token: code {exc.code}, {exc.msg})"
                ) from None
            except Exception as exc:
                if attempt == self.open_attempts:
                    await self.close()
                    raise GatewayError(
                        f"feishu: cannot read the bot's info (bot/v3/info): {_describe(exc)}"
                    ) from None
                delay = self._delay(attempt)
                log.warning("feishu.open_retry", error=_describe(exc), retry_in_s=delay)
                await asyncio.sleep(delay)
        self.bot_open_id = str(bot.get("open_id") or "") or None
        self.bot_name = str(bot.get("app_name") or "")
        log.info(
            "feishu.ready", open_id=self.bot_open_id, name=self.bot_name, mode=self.config.mode
        )

    def _bot_info(self) -> dict[str, Any]:
        assert self._client is not None
        request = (
            lark.BaseRequest.builder()
            .http_method(lark.HttpMethod.GET)
            .uri("/open-apis/bot/v3/info")
            .token_types({lark.AccessTokenType.TENANT})
            .build()
        )
        response = self._client.request(request)
        raw = response.raw
        data = json.loads(raw.content or b"{}")
        if raw.status_code != 200 or data.get("code") != 0:
            raise RuntimeError(
                f"HTTP {raw.status_code}, code {data.get('code')}: {data.get('msg')}"
            )
        bot = data.get("bot")
        return bot if isinstance(bot, dict) else {}

    async def start(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self._main_loop = asyncio.get_running_loop()
        if self.config.mode == "webhook":
            if not self._encrypt_key:
                log.warning(
                    "feishu.unsigned_webhook",
                    hint="without encrypt_key Feishu neither encrypts nor signs event posts;"
                    " only the verification token authenticates them",
                )
            return
        ready = threading.Event()
        self._ws_stopping = False
        self._ws_error = None
        self._ws_thread = threading.Thread(
            target=self._run_ws, args=(ready,), name="feishu-ws", daemon=True
        )
        self._ws_thread.start()
        await asyncio.to_thread(ready.wait)

    async def stop(self) -> None:
        """Stop ingress. Sending goes on until :meth:`close` (the outbox flushes first)."""
        self._inbox = None
        thread = self._ws_thread
        if thread is None:
            return
        self._ws_thread = None
        self._ws_stopping = True
        client, loop = self._ws_client, self._ws_loop
        if client is not None:
            client._auto_reconnect = False  # a closed connection must not be reopened
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile: it is on its way out
                loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, _WS_STOP_TIMEOUT)
        if thread.is_alive():
            # Only a blocking call inside the SDK (its endpoint lookup has no timeout)
            # can hold it; the thread is a daemon, so it cannot keep the process alive.
            log.warning("feishu.ws_stop_timeout", timeout_s=_WS_STOP_TIMEOUT)

    async def close(self) -> None:
        """Release the HTTP session, once the outbox has flushed."""
        self._client = None
        if self._http is not None:
            await self._http.close()
            self._http = None

    # -- long connection --------------------------------------------------------------

    def _run_ws(self, ready: threading.Event) -> None:
        """The SDK's client on a loop of its own, in this thread, until :meth:`stop`."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        lark_ws.loop = loop  # the SDK schedules everything on this module-level name
        self._ws_loop = loop
        client: lark_ws.Client | None = None
        try:
            client = lark_ws.Client(
                self.config.app_id,
                self.config.app_secret.get_secret_value(),
                log_level=lark.LogLevel.WARNING,
                event_handler=_WsHandler(self._deliver_ws),
                domain=self.config.domain,
                auto_reconnect=True,
            )
            self._ws_client = client
            ready.set()
            log.info("feishu.ws_starting", domain=self.config.domain)
            client.start()
        except Exception as exc:
            if not self._ws_stopping:  # stop() ends start() by stopping its loop
                self._ws_error = _describe(exc)
                log.error("feishu.ws_failed", error=self._ws_error)
        finally:
            ready.set()
            _close_loop(loop, client)
            self._ws_client = None
            log.info("feishu.ws_stopped")

    def _deliver_ws(self, payload: bytes) -> None:
        """Runs in the SDK's thread: commit on Tether's loop, return (→ ack) only after."""
        inbox, loop = self._inbox, self._main_loop
        if inbox is None or loop is None or self._ws_stopping:
            raise RuntimeError("tether is stopping; not accepted (Feishu will redeliver)")
        data = json.loads(payload)
        if not isinstance(data, dict):
            raise ValueError("event payload is not a JSON object")
        future = asyncio.run_coroutine_threadsafe(self._ingest(inbox, data), loop)
        future.result(timeout=_WS_COMMIT_TIMEOUT)

    # -- webhook --------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        if self.config.mode == "webhook":
            app.router.add_post(self.config.webhook.path, self._webhook)

    async def _webhook(self, request: web.Request) -> web.Response:
        """Verify, then answer url_verification or commit the event; 200 only after that."""
        body = await request.read()
        outcome = self.verify(body, request.headers)
        if isinstance(outcome, Rejected):
            log.warning("feishu.webhook_rejected", status=outcome.status, reason=outcome.reason)
            return web.json_response({"msg": outcome.reason}, status=outcome.status)
        if outcome.get("type") == "url_verification":
            log.info("feishu.url_verification")
            return web.json_response({"challenge": outcome.get("challenge", "")})
        inbox = self._inbox
        if inbox is None:  # not started yet, or stopping: Feishu will deliver it again
            return web.json_response({"msg": "not ready"}, status=503)
        try:
            await self._ingest(inbox, outcome)
        except Exception as exc:  # the store failed: not committed, so not acknowledged
            log.error("feishu.accept_failed", error=_describe(exc))
            return web.json_response({"msg": "not stored, deliver again"}, status=503)
        return web.json_response({"msg": "success"})

    def verify(
        self, body: bytes, headers: Mapping[str, str], now: float | None = None
    ) -> dict[str, Any] | Rejected:
        """The plaintext event of an authentic, fresh request, or why it was refused.

        With an encrypt key, Feishu encrypts the body and signs it: ``X-Lark-Signature``
        = sha256_hex(timestamp + nonce + encrypt_key + raw body). The signature is checked
        over the raw bytes before anything is decrypted; only ``url_verification`` (sent
        once, while the URL is configured) may come unsigned, and it is still token-checked.
        """
        try:
            parsed = json.loads(body)
        except ValueError:
            return Rejected(400, "body is not JSON")
        if not isinstance(parsed, dict):
            return Rejected(400, "body is not a JSON object")
        data: dict[str, Any] = parsed
        timestamp = headers.get(TIMESTAMP_HEADER)
        nonce = headers.get(NONCE_HEADER)
        signature = headers.get(SIGNATURE_HEADER)
        signed = bool(timestamp and nonce and signature)
        if self._encrypt_key and signed:
            assert timestamp is not None and nonce is not None and signature is not None
            expected = hashlib.sha256(
                (timestamp + nonce + self._encrypt_key).encode() + body
            ).hexdigest()
            if not hmac.compare_digest(expected.encode(), signature.encode()):
                return Rejected(401, "signature does not match")
        if timestamp is not None:
            stale = self._stale(timestamp, now)
            if stale:
                return Rejected(401, stale)
        if "encrypt" in data:
            decrypted = self._decrypt(data["encrypt"])
            if isinstance(decrypted, Rejected):
                return decrypted
            data = decrypted
        elif self._cipher is not None:
            return Rejected(401, "body is not encrypted although encrypt_key is set")
        if self._encrypt_key and not signed and data.get("type") != "url_verification":
            return Rejected(401, "missing signature headers")
        header = data.get("header")
        token = header.get("token") if isinstance(header, dict) else data.get("token")
        if self._token is not None and not (
            isinstance(token, str) and hmac.compare_digest(token.encode(), self._token)
        ):
            return Rejected(403, "verification token does not match")
        return data

    def _stale(self, timestamp: str, now: float | None) -> str | None:
        try:
            sent_at = float(timestamp)
        except ValueError:
            return "timestamp is not a number"
        if not math.isfinite(sent_at):
            return "timestamp is not a number"
        age = (time.time() if now is None else now) - sent_at
        if abs(age) > self.config.webhook.max_age:
            return f"timestamp is {age:.0f} s from now (max {self.config.webhook.max_age:.0f})"
        return None

    def _decrypt(self, encrypted: Any) -> dict[str, Any] | Rejected:
        if self._cipher is None:
            return Rejected(401, "body is encrypted but no encrypt_key is configured")
        if not isinstance(encrypted, str):
            return Rejected(400, "encrypt is not a string")
        try:
            raw = base64.b64decode(encrypted, validate=True)
        except (binascii.Error, ValueError):
            return Rejected(400, "encrypt is not base64")
        try:
            data = json.loads(self._cipher.decrypt(raw))
        except ValueError:  # bad padding or garbage: encrypted with another key
            return Rejected(401, "cannot decrypt (a different encrypt_key?)")
        if not isinstance(data, dict):
            return Rejected(400, "decrypted body is not a JSON object")
        return dict(data)

    # -- normalize ------------------------------------------------------------------

    async def _ingest(self, inbox: Inbox, data: dict[str, Any]) -> None:
        outcome = self.normalize(data)
        if isinstance(outcome, Dropped):
            header = data.get("header")
            event_id = header.get("event_id") if isinstance(header, dict) else data.get("uuid")
            emit = log.info if outcome.log_event == "feishu.ignored" else log.warning
            emit(outcome.log_event, event_id=event_id, reason=outcome.reason)
            return
        await inbox.accept([outcome])

    def normalize(self, data: Mapping[str, Any]) -> Event | Dropped:
        """One decrypted event (v2 schema) → an :class:`Event`, or why not. Never raises."""
        header = data.get("header")
        if not isinstance(header, dict):
            return Dropped("feishu.skipped", "not a v2 event (schema 2.0 has a header)")
        event_id = header.get("event_id")
        event_type = header.get("event_type")
        event = data.get("event")
        if not event_id or not isinstance(event, dict):
            return Dropped("feishu.skipped", "no event_id or event")
        raw = {**data, "header": {k: v for k, v in header.items() if k != "token"}}
        try:
            if event_type == "im.message.receive_v1":
                return self._message(event, header, raw)
            chat_id = event.get("chat_id")
            if not isinstance(chat_id, str) or not chat_id:
                return Dropped("feishu.skipped", f"unsupported event type {event_type}")
            return Event(
                key=f"fs:evt:{event_id}",
                platform=self.platform,
                kind=Kind.SYSTEM,
                conversation=Conversation(
                    platform=self.platform, chat_id=chat_id, chat_type="group"
                ),
                timestamp=_millis(header.get("create_time")),
                meta={"event_type": event_type, "event_id": event_id},
                raw=raw,
            )
        except Exception as exc:  # a shape we cannot read: skip it, never fail the request
            return Dropped("feishu.skipped", f"cannot normalize: {_describe(exc)}")

    def _message(
        self, event: dict[str, Any], header: Mapping[str, Any], raw: dict[str, Any]
    ) -> Event | Dropped:
        message = event.get("message")
        if not isinstance(message, dict) or not message.get("message_id"):
            return Dropped("feishu.skipped", "message without message_id")
        sender = _dict(event.get("sender"))
        ids = _dict(sender.get("sender_id"))
        is_bot = sender.get("sender_type") not in (None, "", "user")
        if is_bot and self.config.ignore_bots:
            return Dropped("feishu.ignored", "from a bot")
        mentions = [m for m in message.get("mentions") or [] if isinstance(m, dict)]
        names = content.mention_names(mentions)
        message_type = str(message.get("message_type") or "")
        parsed = content.parse(message_type, str(message.get("content") or ""), names)
        if not parsed.text and not parsed.attachments:
            return Dropped("feishu.skipped", f"unsupported message type {message_type!r}")
        mentioned = [_open_id(m) for m in mentions]
        mentions_bot = bool(self.bot_open_id) and self.bot_open_id in mentioned
        chat_type: ChatType = "dm" if message.get("chat_type") == "p2p" else "group"
        if chat_type == "group" and self.config.answer_groups == "mentioned" and not mentions_bot:
            return Dropped("feishu.ignored", "group message does not mention the bot")
        # The bot as the text shows it: its name in this mention, or its app name.
        shown = {
            f"@{names.get(str(m.get('key')))}" for m in mentions if _open_id(m) == self.bot_open_id
        }
        shown.add(f"@{self.bot_name}" if self.bot_name else "")
        command = _parse_command(_without_prefix(parsed.text, shown))
        message_id = str(message["message_id"])
        # A thread is named by its root message: replying to it (reply_in_thread) is
        # how a message reaches a thread, so the target carries what send needs.
        thread = (message.get("root_id") or message_id) if message.get("thread_id") else None
        meta: dict[str, Any] = {
            "event_id": header.get("event_id"),
            "message_type": message_type,
            "tenant_key": header.get("tenant_key") or sender.get("tenant_key"),
        }
        meta.update({k: ids[k] for k in ("open_id", "union_id", "user_id") if ids.get(k)})
        meta.update({k: message[k] for k in ("thread_id", "root_id") if message.get(k)})
        return Event(
            key=f"fs:msg:{message_id}",
            platform=self.platform,
            kind=Kind.COMMAND if command else Kind.MESSAGE,
            conversation=Conversation(
                platform=self.platform,
                chat_id=str(message.get("chat_id") or ""),
                thread_id=str(thread) if thread else None,
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

    # -- send -----------------------------------------------------------------------

    def text_length(self, text: str) -> int:
        """UTF-8 bytes: Feishu's caps are on the request body size, not characters."""
        return len(text.encode("utf-8"))

    def limits(self, target: Target) -> list[Limit]:
        """5 messages/s per chat (shared by every bot in a group), 50/s per API for the app."""
        if not self.config.rate_limits:
            return []
        return [
            Limit(f"feishu:chat:{target.chat_id}", rate=5.0, burst=5.0),
            Limit("feishu:app", rate=50.0, burst=50.0),
        ]

    async def send(self, message: OutMessage) -> Sent:
        http = self._http
        if http is None:
            raise SendRetryable("feishu adapter is not open")
        path, query, body = self.request_for(message)
        try:
            token = await self._tenant_token()
        except (ObtainAccessTokenException, requests.RequestException, ValueError) as exc:
            raise SendRetryable(f"no tenant_access_token: {_describe(exc)}") from exc
        headers = {"Authorization": f"Bearer {token}", "Content-Type": _JSON}
        # UTF-8 as is (not \uXXXX escapes, which double CJK text): the size caps are in bytes.
        data = json.dumps(body, ensure_ascii=False).encode()
        try:
            async with http.post(path, params=query, data=data, headers=headers) as response:
                status, answer_headers = response.status, response.headers
                answer = await response.json(content_type=None)
        except aiohttp.ClientConnectorError as exc:  # never connected: nothing was sent
            raise SendRetryable(_describe(exc)) from exc
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:  # may have been sent
            raise SendAmbiguous(_describe(exc)) from exc
        answer = answer if isinstance(answer, dict) else {}
        code = answer.get("code")
        if status < 300 and code == 0:
            result = answer.get("data")
            message_id = result.get("message_id") if isinstance(result, dict) else None
            return Sent(platform_id=str(message_id) if message_id else None)
        if code in _TOKEN_INVALID:  # revoked, or expired early: fetch a new one next time
            TokenManager.cache.set(self._token_key, "", 0)
        raise classify(status, code, answer.get("msg"), answer_headers)

    @property
    def _token_key(self) -> str:
        return f"self_tenant_token:{self.config.app_id}"  # lark-oapi's cache key

    async def _tenant_token(self) -> str:
        """The SDK's cached tenant token; its blocking fetch runs in a thread, once."""
        token = TokenManager.cache.get(self._token_key)
        if token:
            return str(token)
        async with self._token_lock:
            client = self._client
            if client is None:
                raise ValueError("feishu adapter is not open")
            token = await asyncio.to_thread(TokenManager.get_self_tenant_token, client.config)
        return str(token)

    def request_for(self, message: OutMessage) -> tuple[str, dict[str, str], dict[str, Any]]:
        """Path, query and body: create in the chat, or reply (to the quoted message, or
        into the thread, whose root message the target names)."""
        if message.format == "markdown":
            msg_type, body = "post", content.markdown_body(message.text)
        elif message.format == "html":
            msg_type, body = "text", content.text_body(content.html_to_text(message.text))
        else:
            msg_type, body = "text", content.text_body(message.text)
        payload: dict[str, Any] = {
            "msg_type": msg_type,
            "content": body,
            "uuid": send_uuid(message.key),
        }
        thread = message.target.thread_id
        parent = message.reply_to or thread
        if parent:
            payload["reply_in_thread"] = bool(thread)
            return f"/open-apis/im/v1/messages/{quote(parent, safe='')}/reply", {}, payload
        payload["receive_id"] = message.target.chat_id
        return "/open-apis/im/v1/messages", {"receive_id_type": "chat_id"}, payload

    # -- helpers --------------------------------------------------------------------

    def _delay(self, failures: int) -> float:
        ceiling = min(self.backoff_max, self.backoff_base * 2.0 ** min(failures - 1, 16))
        return round(ceiling * random.uniform(0.5, 1.0), 3)


class _WsHandler(lark.EventDispatcherHandler):  # type: ignore[misc]
    """Hands the long connection's raw event bytes to the adapter.

    ``lark_oapi.ws.Client`` calls ``_do_without_validation(payload)`` and acks with 200
    when it returns (500 if it raises). Taking the bytes here, instead of registering
    typed processors, gives the same JSON the webhook route sees, so both modes share
    one normalizer.
    """

    def __init__(self, deliver: Any) -> None:
        super().__init__()
        self._deliver = deliver

    def _do_without_validation(self, payload: bytes) -> None:
        self._deliver(payload)

    def do_without_validation(self, payload: bytes) -> None:  # older SDK name
        self._deliver(payload)


def classify(
    status: int, code: int | None, msg: str | None, headers: Mapping[str, str]
) -> SendError:
    """Which ``Send*`` error a failed send is. Sends are idempotent (uuid), so only
    "never will work" (SendFatal) stops the retries; 429 waits out the reset time."""
    text = f"HTTP {status}, code {code}: {msg}"
    if status == 429 or code == RATE_LIMITED:
        return SendRetryable(text, retry_after=_reset_seconds(headers))
    if code in _TOKEN_INVALID:
        return SendRetryable(text)
    if status >= 500 or status == 0:
        return SendAmbiguous(text)
    return SendFatal(text)


def send_uuid(key: str) -> str:
    """Feishu's idempotency key (≤ 50 chars) for an outbox key: stable across retries."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _reset_seconds(headers: Mapping[str, str]) -> float:
    for name, value in headers.items():
        if name.lower() == RATE_LIMIT_RESET_HEADER:
            try:
                return max(0.0, float(value))
            except ValueError:
                break
    return 1.0


def _without_prefix(text: str, prefixes: set[str]) -> str:
    """``@Tether /help`` → ``/help``: in groups a command comes after the bot's mention."""
    stripped = text.lstrip()
    for prefix in sorted(prefixes, key=len, reverse=True):
        if len(prefix) > 1 and stripped.startswith(prefix):
            return stripped[len(prefix) :].lstrip()
    return stripped


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


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _route_sdk_logs() -> None:
    """lark-oapi's "Lark" logger prints to stdout on its own handler; send it through
    the root handler instead, where Tether's formatter scrubs secrets."""
    sdk = logging.getLogger("Lark")
    sdk.handlers.clear()
    sdk.propagate = True


def _close_loop(loop: asyncio.AbstractEventLoop, client: Any) -> None:
    """Cancel the SDK's tasks (receive, ping, cache sweep), close its socket, close the loop."""
    try:
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        if client is not None and getattr(client, "_conn", None) is not None:
            loop.run_until_complete(asyncio.wait_for(client._disconnect(), 2.0))
        loop.run_until_complete(loop.shutdown_asyncgens())
    except Exception as exc:
        log.debug("feishu.ws_cleanup_failed", error=_describe(exc))
    finally:
        loop.close()
