"""Changing a message already in the chat: edits (a streamed reply's preview, a task's
status, ``ctx.edit``), recalls (``ctx.delete``), reactions (``ctx.react``) and pins
(``ctx.pin``).

**Edits.** Feishu edits text and post messages with ``PUT im/v1/messages/{id}`` (each at
most 20 times; the streaming preview keeps two of those for the final answer,
``edit_limit``), and cards with ``PATCH im/v1/messages/{id}`` ``{"content": card}`` — a
different call, which the row does not name. The rule:

- a row with buttons is a card (on Feishu only a card carries buttons): PATCH;
- so is a message :class:`Cards` remembers as one — the adapter sent it as a card, or a
  press on it came in (a pressed message is always one of our cards): PATCH, with a
  card of the text and no buttons, so ``await ctx.edit("Booked ✓")`` leaves the
  pressed card showing the text, its buttons gone;
- anything else is PUT as text or post (the streaming preview is a post, a task's
  status a text). Should Feishu answer that the message is not text or post
  (:data:`NOT_TEXT_OR_POST`: a card this process never saw, e.g. pressed before a
  restart), the same edit is PATCHed as a card.

PATCH needs a shared card, ``config.update_multi`` true before and after, which
:func:`.cards.card_body` declares. Tether answers a card callback (``{}``) right after
the inbox commit, before the handler runs, so the PATCH comes after that answer, as
Feishu requires. A card sent before ``update_multi`` was declared cannot be PATCHed: the
edit is refused and the core sends the text as a new message (gateway/core/edits.py).

**Actions.** Recall ``DELETE im/v1/messages/{id}``; react ``POST …/{id}/reactions``
with an ``emoji_type`` — Feishu's names, not Unicode: :func:`reaction_type` maps the
common emoji and passes a name (``THUMBSUP``) through; pin ``POST im/v1/pins``, unpin
``DELETE im/v1/pins/{id}``. A message already recalled counts as deleted.

Each call is idempotent (the same content set again, a reaction or pin set twice), so
every failure that may have reached Feishu (a timeout, a 5xx) is retryable, as a send
with its uuid is; "never will work" (no permission, no such message) is
:class:`SendFatal`.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
import requests
from lark_oapi.core.exception import ObtainAccessTokenException
from lark_oapi.core.token.manager import TokenManager

from tether.adapters.base import Sent
from tether.adapters.feishu.cards import card_body
from tether.adapters.feishu.send import (
    _TOKEN_INVALID,
    Messages,
    classify,
    html_to_text,
    markdown_body,
    text_body,
)
from tether.adapters.kit import describe
from tether.errors import SendAmbiguous, SendError, SendFatal, SendRetryable
from tether.events import OutMessage

#: Feishu's cap on edits of one message.
EDIT_LIMIT = 20
#: PUT's answer for a message that is neither text nor post ("This operation is not
#: supported for this message type"): the edit is tried again as a card.
NOT_TEXT_OR_POST = 230054
#: A recall's answers for a message already gone: recalled (230011) or deleted (230110).
GONE = frozenset({230011, 230110})
#: Refusals that pass: too frequent (230020), a pin's 5 QPS per message (230047), the
#: same reaction being processed (231015).
_BUSY = frozenset({230020, 230047, 231015})
#: Unicode emoji → Feishu's ``emoji_type`` (open.feishu.cn, "表情文案说明"). Variation
#: selectors and skin tones are dropped before the lookup: ❤️ is ❤, 👍🏽 is 👍.
REACTIONS = {
    "👍": "THUMBSUP",
    "👎": "ThumbsDown",
    "❤": "HEART",
    "😂": "LAUGH",
    "👏": "APPLAUSE",
    "✅": "DONE",
    "🎉": "PARTY",
    "👌": "OK",
    "💪": "MUSCLE",
}
_MODIFIERS = re.compile("[\ufe0f\U0001f3fb-\U0001f3ff]")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_JSON = "application/json; charset=utf-8"


class Cards:
    """The ids of messages known to be cards (sent as one, or pressed), the latest
    ``size``: what tells an edit to PATCH rather than PUT. Memory only; after a restart
    the PUT's refusal tells instead."""

    def __init__(self, size: int = 4096) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def add(self, message_id: str) -> None:
        self._ids[message_id] = None
        self._ids.move_to_end(message_id)
        while len(self._ids) > self._size:
            self._ids.popitem(last=False)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._ids


def edit_body(message: OutMessage) -> dict[str, Any]:
    """The new content: a post (Markdown) or a text, as the message was sent."""
    if message.format == "markdown":
        return {"msg_type": "post", "content": markdown_body(message.text)}
    text = html_to_text(message.text) if message.format == "html" else message.text
    return {"msg_type": "text", "content": text_body(text)}


def card_content(message: OutMessage) -> str:
    """The card a card is edited to: the text, then the row's buttons (none: no buttons)."""
    text = html_to_text(message.text) if message.format == "html" else message.text
    return card_body(text, message.format == "markdown", message.buttons)


def reaction_type(emoji: str) -> str:
    """Feishu's ``emoji_type`` for ``emoji``: a mapped Unicode emoji, or a name as given."""
    bare = _MODIFIERS.sub("", emoji.strip())
    if bare in REACTIONS:
        return REACTIONS[bare]
    if _NAME.fullmatch(bare):
        return bare  # Feishu's own name (THUMBSUP, ThumbsDown, Fire): it checks it
    known = " ".join(REACTIONS)
    raise SendFatal(
        f"feishu has no reaction for {emoji!r}: use one of {known}"
        " or a Feishu emoji_type name such as THUMBSUP"
    )


async def edit_message(
    messages: Messages, message: OutMessage, platform_id: str, cards: Cards
) -> Sent:
    """Replace the content of the bot's message ``platform_id`` with ``message``'s."""
    path = _message_path(platform_id)
    if not message.buttons and platform_id not in cards:
        answer = await _call(messages, "PUT", path, edit_body(message))
        if _ok(answer):
            return Sent(platform_id=platform_id)
        if answer[1].get("code") != NOT_TEXT_OR_POST:
            raise _failure(answer)
    answer = await _call(messages, "PATCH", path, {"content": card_content(message)})
    if not _ok(answer):
        raise _failure(answer)
    cards.add(platform_id)
    return Sent(platform_id=platform_id)


async def recall(messages: Messages, message_id: str) -> None:
    """Recall ``message_id``; one already recalled or deleted counts as done."""
    answer = await _call(messages, "DELETE", _message_path(message_id))
    if not _ok(answer) and answer[1].get("code") not in GONE:
        raise _failure(answer)


async def react(messages: Messages, message_id: str, emoji: str) -> None:
    """Add the bot's reaction ``emoji`` to ``message_id``."""
    body = {"reaction_type": {"emoji_type": reaction_type(emoji)}}
    answer = await _call(messages, "POST", f"{_message_path(message_id)}/reactions", body)
    if not _ok(answer):
        raise _failure(answer)


async def pin(messages: Messages, message_id: str, *, pinned: bool) -> None:
    """Pin ``message_id`` in its chat (Feishu answers a pin twice with the first), or unpin it."""
    if pinned:
        answer = await _call(messages, "POST", "/open-apis/im/v1/pins", {"message_id": message_id})
    else:
        path = f"/open-apis/im/v1/pins/{quote(message_id, safe='')}"
        answer = await _call(messages, "DELETE", path)
    if not _ok(answer):
        raise _failure(answer)


#: One answer: HTTP status, JSON body, headers.
_Answer = tuple[int, dict[str, Any], Mapping[str, str]]


async def _call(
    messages: Messages, method: str, path: str, body: dict[str, Any] | None = None
) -> _Answer:
    """One authorized call over the senders' session; a failure to get an answer is
    retryable, since every call here may be repeated."""
    try:
        token = await messages._tenant_token()  # the same token cache as sends
    except (ObtainAccessTokenException, requests.RequestException, ValueError) as exc:
        raise SendRetryable(f"no tenant_access_token: {describe(exc)}") from exc
    headers = {"Authorization": f"Bearer {token}", "Content-Type": _JSON}
    data = json.dumps(body, ensure_ascii=False).encode() if body is not None else None
    try:
        async with messages._http.request(method, path, data=data, headers=headers) as response:
            status, answer_headers = response.status, response.headers
            answer = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise SendRetryable(describe(exc)) from exc
    answer = answer if isinstance(answer, dict) else {}
    if answer.get("code") in _TOKEN_INVALID:  # revoked, or expired early: fetch a new one
        TokenManager.cache.set(messages._token_key, "", 0)
    return status, answer, answer_headers


def _ok(answer: _Answer) -> bool:
    return answer[0] < 300 and answer[1].get("code") == 0


def _failure(answer: _Answer) -> SendError:
    status, body, headers = answer
    code = body.get("code")
    if code in _BUSY:
        return SendRetryable(f"HTTP {status}, code {code}: {body.get('msg')}")
    error = classify(status, code, body.get("msg"), headers)
    return SendRetryable(str(error)) if isinstance(error, SendAmbiguous) else error


def _message_path(message_id: str) -> str:
    return f"/open-apis/im/v1/messages/{quote(message_id, safe='')}"
