"""Out: ``chat.postMessage`` with the outbox key in the message's metadata, ``chat.update``
for edits, reading the key back (:meth:`Messages.already_sent`), and which ``Send*``
error a failure is.

``chat.postMessage`` has no idempotency key, so the key travels in the message itself:
``metadata = {"event_type": "tether_outbox", "event_payload": {"key": …}}``, which
``conversations.history`` (and ``conversations.replies`` in a thread) return with
``include_all_metadata``. The adapter (:mod:`.adapter`) decides when to read it back.

The SDK's own retries are off (``retry_handlers=[]``): its connection-error handler
would post again after a connection dropped mid-request, which is exactly how a message
is sent twice. The outbox decides about retries, from the error raised here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from tether.adapters.base import Sent
from tether.adapters.kit import describe
from tether.adapters.slack.mrkdwn import escape, to_mrkdwn
from tether.errors import SendAmbiguous, SendError, SendFatal, SendRetryable
from tether.events import OutMessage

#: The metadata ``event_type`` that marks a message as one of our outbox rows.
OUTBOX_EVENT = "tether_outbox"
#: Refusals that the same request may get past later (Slack's own trouble).
_SLACK_TROUBLE = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)


def client(token: str, base_url: str, timeout: float) -> AsyncWebClient:
    """The Web API client: no SDK retries (see the module docstring)."""
    return AsyncWebClient(token=token, base_url=base_url, timeout=int(timeout), retry_handlers=[])


def text_of(message: OutMessage) -> str:
    """The text as mrkdwn: Markdown converted, plain and HTML escaped (HTML's tags
    dropped would need a parser; Slack shows them as text, which loses nothing)."""
    if message.format == "markdown":
        return to_mrkdwn(message.text)
    return escape(message.text)


def post_arguments(message: OutMessage) -> dict[str, Any]:
    """``chat.postMessage``'s arguments: the channel, the thread, the key in metadata."""
    arguments: dict[str, Any] = {
        "channel": message.target.chat_id,
        "text": text_of(message),
        "metadata": {"event_type": OUTBOX_EVENT, "event_payload": {"key": message.key}},
        "unfurl_links": False,
    }
    thread = message.target.thread_id or message.meta.get("thread_ts")
    if isinstance(thread, str) and thread:
        arguments["thread_ts"] = thread
    return arguments


class Messages:
    """One bot token's Web API calls, each failure raised as its ``Send*`` error."""

    def __init__(self, web: AsyncWebClient, bot_id: str | None = None) -> None:
        self.web = web
        self.bot_id = bot_id

    async def post(self, message: OutMessage) -> Sent:
        answer = await self._call("chat_postMessage", **post_arguments(message))
        return Sent(platform_id=_string(answer.get("ts")))

    async def update(self, message: OutMessage, ts: str) -> Sent:
        """``chat.update``: the same text again is the same message, so a retry is safe."""
        channel = message.target.chat_id
        await self._call("chat_update", channel=channel, ts=ts, text=text_of(message))
        return Sent(platform_id=ts)

    async def already_sent(self, message: OutMessage, depth: int) -> Sent | None:
        """The message of ``message.key`` if one of ours is among the target's ``depth``
        most recent (a thread's first ``depth``), else None. A failed read raises
        :class:`SendRetryable`: nothing was posted by asking, and it may answer later."""
        thread = post_arguments(message).get("thread_ts")
        common = {"channel": message.target.chat_id, "limit": depth, "include_all_metadata": True}
        try:
            if thread:
                answer = await self._call("conversations_replies", ts=thread, **common)
            else:
                answer = await self._call("conversations_history", **common)
        except (SendAmbiguous, SendFatal) as exc:
            raise SendRetryable(f"cannot read back the key: {exc}") from exc
        found = answer.get("messages")
        for item in found if isinstance(found, list) else []:
            if isinstance(item, dict) and self._ours(item) and key_of(item) == message.key:
                return Sent(platform_id=_string(item.get("ts")))
        return None

    def _ours(self, item: Mapping[str, Any]) -> bool:
        return self.bot_id is None or item.get("bot_id") == self.bot_id

    async def _call(self, method: str, **arguments: Any) -> Mapping[str, Any]:
        try:
            response = await getattr(self.web, method)(**arguments)
        except SlackApiError as exc:
            raise classify(
                exc.response.status_code, exc.response.data, exc.response.headers
            ) from exc
        except aiohttp.ClientConnectorError as exc:  # never connected: nothing was sent
            raise SendRetryable(describe(exc)) from exc
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:  # it may have arrived
            raise SendAmbiguous(describe(exc)) from exc
        data = response.data
        return data if isinstance(data, Mapping) else {}


def key_of(item: Mapping[str, Any]) -> str | None:
    """The outbox key a message carries in its metadata, if it is one of ours."""
    metadata = item.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != OUTBOX_EVENT:
        return None
    payload = metadata.get("event_payload")
    key = payload.get("key") if isinstance(payload, dict) else None
    return key if isinstance(key, str) else None


def classify(status: int, data: Any, headers: Mapping[str, Any]) -> SendError:
    """Which ``Send*`` error a refusal is: 429 waits ``Retry-After``; Slack's own
    trouble (5xx, ``internal_error``) may have posted; the rest never will work as is
    (``channel_not_found``, ``not_in_channel``, ``invalid_auth``, ``msg_too_long``…)."""
    error = data.get("error") if isinstance(data, dict) else None
    text = f"HTTP {status}: {error or 'no error code'}"
    if status == 429 or error == "ratelimited":
        return SendRetryable(text, retry_after=_retry_after(headers))
    if status >= 500 or error in _SLACK_TROUBLE:
        return SendAmbiguous(text)
    return SendFatal(text)


def _retry_after(headers: Mapping[str, Any]) -> float:
    for name, value in headers.items():
        if name.lower() == "retry-after":
            found = value[0] if isinstance(value, list) and value else value
            try:
                return max(0.0, float(found))
            except (TypeError, ValueError):
                break
    return 1.0


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
