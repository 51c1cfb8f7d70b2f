"""Out: replies through the IM API, and which ``Send*`` error a failure is.

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
import hashlib
import html
import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
import lark_oapi as lark
import requests
from lark_oapi.core.exception import ObtainAccessTokenException
from lark_oapi.core.token.manager import TokenManager

from tether.adapters.base import Sent
from tether.adapters.feishu.cards import card_body
from tether.adapters.feishu.normalize import THREAD_MESSAGE
from tether.adapters.kit import describe
from tether.errors import SendAmbiguous, SendError, SendFatal, SendRetryable
from tether.events import OutMessage

RATE_LIMIT_RESET_HEADER = "x-ogw-ratelimit-reset"
_JSON = "application/json; charset=utf-8"
#: Feishu's throttling code (with HTTP 429); the tenant-token codes mean "fetch a new one".
RATE_LIMITED = 99991400
_TOKEN_INVALID = frozenset({99991661, 99991663, 99991668})


class Messages:
    """``im/v1/messages`` over one pooled session, authorized by the SDK's tenant token."""

    def __init__(self, client: lark.Client, domain: str, timeout: float, app_id: str) -> None:
        self._client = client
        self._http = aiohttp.ClientSession(
            domain, timeout=aiohttp.ClientTimeout(total=timeout), raise_for_status=False
        )
        self._token_key = f"self_tenant_token:{app_id}"  # lark-oapi's cache key
        self._token_lock = asyncio.Lock()

    async def close(self) -> None:
        await self._http.close()

    async def send(self, message: OutMessage, content: tuple[str, str] | None = None) -> Sent:
        """Post ``message`` (as ``content``'s ``(msg_type, content)`` when given: a file
        already uploaded, :mod:`.media`), with its uuid."""
        path, query, body = request_for(message)
        if content is not None:
            body["msg_type"], body["content"] = content
        try:
            token = await self._tenant_token()
        except (ObtainAccessTokenException, requests.RequestException, ValueError) as exc:
            raise SendRetryable(f"no tenant_access_token: {describe(exc)}") from exc
        headers = {"Authorization": f"Bearer {token}", "Content-Type": _JSON}
        # UTF-8 as is (not \uXXXX escapes, which double CJK text): the size caps are in bytes.
        data = json.dumps(body, ensure_ascii=False).encode()
        try:
            async with self._http.post(path, params=query, data=data, headers=headers) as response:
                status, answer_headers = response.status, response.headers
                answer = await response.json(content_type=None)
        except aiohttp.ClientConnectorError as exc:  # never connected: nothing was sent
            raise SendRetryable(describe(exc)) from exc
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:  # may have been sent
            raise SendAmbiguous(describe(exc)) from exc
        answer = answer if isinstance(answer, dict) else {}
        code = answer.get("code")
        if status < 300 and code == 0:
            result = answer.get("data")
            message_id = result.get("message_id") if isinstance(result, dict) else None
            return Sent(platform_id=str(message_id) if message_id else None)
        if code in _TOKEN_INVALID:  # revoked, or expired early: fetch a new one next time
            TokenManager.cache.set(self._token_key, "", 0)
        raise classify(status, code, answer.get("msg"), answer_headers)

    async def _tenant_token(self) -> str:
        """The SDK's cached tenant token; its blocking fetch runs in a thread, once."""
        token = TokenManager.cache.get(self._token_key)
        if token:
            return str(token)
        async with self._token_lock:
            token = await asyncio.to_thread(TokenManager.get_self_tenant_token, self._client.config)
        return str(token)


def request_for(message: OutMessage) -> tuple[str, dict[str, str], dict[str, Any]]:
    """Path, query and body: create in the chat, or reply (to the quoted message, or
    into the thread: to a message in it, as the event put it in ``meta``, else to the
    root message that a target written by hand names)."""
    if message.buttons:  # a card: the text, then the buttons (:mod:`.cards`)
        text = html_to_text(message.text) if message.format == "html" else message.text
        markdown = message.format == "markdown"
        msg_type, body = "interactive", card_body(text, markdown, message.buttons)
    elif message.format == "markdown":
        msg_type, body = "post", markdown_body(message.text)
    elif message.format == "html":
        msg_type, body = "text", text_body(html_to_text(message.text))
    else:
        msg_type, body = "text", text_body(message.text)
    payload: dict[str, Any] = {
        "msg_type": msg_type,
        "content": body,
        "uuid": send_uuid(message.key),
    }
    thread = message.target.thread_id
    parent = message.reply_to or message.meta.get(THREAD_MESSAGE) or thread
    if parent:
        payload["reply_in_thread"] = bool(thread)
        return f"/open-apis/im/v1/messages/{quote(parent, safe='')}/reply", {}, payload
    payload["receive_id"] = message.target.chat_id
    return "/open-apis/im/v1/messages", {"receive_id_type": "chat_id"}, payload


def send_uuid(key: str) -> str:
    """Feishu's idempotency key (≤ 50 chars) for an outbox key: stable across retries."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def text_body(text: str) -> str:
    """The ``content`` of a ``text`` message."""
    return json.dumps({"text": text}, ensure_ascii=False)


def markdown_body(text: str) -> str:
    """The ``content`` of a ``post`` that Feishu renders as Markdown (the ``md`` element)."""
    post = {"zh_cn": {"title": "", "content": [[{"tag": "md", "text": text}]]}}
    return json.dumps(post, ensure_ascii=False)


def html_to_text(text: str) -> str:
    """Feishu has no HTML message type: keep the text, drop the tags, decode entities."""
    text = re.sub(r"<br\s*/?>", "\n", text, flags=re.IGNORECASE)
    return html.unescape(re.sub(r"<[^>]*>", "", text))


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


def _reset_seconds(headers: Mapping[str, str]) -> float:
    for name, value in headers.items():
        if name.lower() == RATE_LIMIT_RESET_HEADER:
            try:
                return max(0.0, float(value))
            except ValueError:
                break
    return 1.0
