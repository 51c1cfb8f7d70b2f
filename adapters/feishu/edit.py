"""Editing a message the bot sent (``PUT /open-apis/im/v1/messages/{message_id}``): a
streamed reply's preview, and the outbox row that finishes it.

Feishu edits text and post messages only, and each message at most 20 times; the
streaming preview keeps two of those for the final answer (``edit_limit``). Setting the
same content again leaves one message, so every failure that may have reached Feishu
(a timeout, a 5xx) is retryable, as a send with its uuid is.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import aiohttp
import requests
from lark_oapi.core.exception import ObtainAccessTokenException
from lark_oapi.core.token.manager import TokenManager

from tether.adapters.base import Sent
from tether.adapters.feishu.send import (
    _TOKEN_INVALID,
    Messages,
    classify,
    html_to_text,
    markdown_body,
    text_body,
)
from tether.adapters.kit import describe
from tether.errors import SendAmbiguous, SendRetryable
from tether.events import OutMessage

#: Feishu's cap on edits of one message.
EDIT_LIMIT = 20


def edit_body(message: OutMessage) -> dict[str, Any]:
    """The new content: a post (Markdown) or a text, as the message was sent."""
    if message.format == "markdown":
        return {"msg_type": "post", "content": markdown_body(message.text)}
    text = html_to_text(message.text) if message.format == "html" else message.text
    return {"msg_type": "text", "content": text_body(text)}


async def edit_message(messages: Messages, message: OutMessage, platform_id: str) -> Sent:
    """Replace the content of the bot's message ``platform_id`` with ``message``'s."""
    path = f"/open-apis/im/v1/messages/{quote(platform_id, safe='')}"
    try:
        token = await messages._tenant_token()  # the same token cache as sends
    except (ObtainAccessTokenException, requests.RequestException, ValueError) as exc:
        raise SendRetryable(f"no tenant_access_token: {describe(exc)}") from exc
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json; charset=utf-8",
    }
    data = json.dumps(edit_body(message), ensure_ascii=False).encode()
    try:
        async with messages._http.put(path, data=data, headers=headers) as response:
            status, answer_headers = response.status, response.headers
            answer = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise SendRetryable(describe(exc)) from exc  # an edit repeated is still one message
    answer = answer if isinstance(answer, dict) else {}
    code = answer.get("code")
    if status < 300 and code == 0:
        return Sent(platform_id=platform_id)
    if code in _TOKEN_INVALID:
        TokenManager.cache.set(messages._token_key, "", 0)
    error = classify(status, code, answer.get("msg"), answer_headers)
    if isinstance(error, SendAmbiguous):
        raise SendRetryable(str(error))
    raise error
