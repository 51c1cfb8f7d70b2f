"""The Feishu/Lark adapter: wires ingress (webhook or long connection), the pure
normalizer and the IM API sender together, and owns the start-up probe.

Events come in by a verified webhook route (:mod:`.webhook`) or the SDK's long
connection (:mod:`.long_connection`); both hand the same decrypted JSON to
:func:`.normalize.normalize`, commit the event to the inbox, and acknowledge only after
that. Replies go out through :mod:`.send`; edits, recalls, reactions and pins of
messages already in the chat through :mod:`.edit`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import lark_oapi as lark
import structlog
from aiohttp import web
from lark_oapi.core.exception import ObtainAccessTokenException

from tether.adapters.base import Adapter, Sent
from tether.adapters.feishu import edit as changes
from tether.adapters.feishu import media
from tether.adapters.feishu.edit import EDIT_LIMIT, Cards, edit_message
from tether.adapters.feishu.long_connection import LongConnection
from tether.adapters.feishu.normalize import IGNORED, SKIPPED, Bot, event_id_of, normalize
from tether.adapters.feishu.send import Messages, request_for
from tether.adapters.feishu.webhook import Rejected, Verifier, answer
from tether.adapters.kit import Dropped, open_with_retries
from tether.adapters.untrusted import unstorable
from tether.config.schema import FeishuConfig
from tether.errors import DownloadError, SendRetryable
from tether.events import Attachment, Event, Kind, OutMessage, Target
from tether.files import Upload
from tether.limits import Limit

if TYPE_CHECKING:
    import threading

    from tether.adapters.base import Ingress

log = structlog.get_logger("tether.feishu")
#: The keys several of our accounts receive alike (normalize's), before :meth:`account_key`.
_SHARED_KEY = re.compile(r"fs:msg:(.+)")


class FeishuAdapter(Adapter):
    """One Feishu/Lark app (``platforms.feishu``): its bot's identity, read at
    :meth:`open`, is what tells a mention of this bot from a mention of anyone else."""

    platform = "feishu"
    #: A streamed reply edits its preview: text and posts, at most 20 edits a message.
    can_edit, edit_interval, edit_limit = True, 1.5, EDIT_LIMIT
    #: ``ctx.edit`` (a card too), recall, react, pin (:mod:`.edit`). Not ``answer``:
    #: Feishu shows a toast only in the card callback's own answer, which Tether gives
    #: right after the inbox commit, before the handler runs, so ``ctx.answer`` is
    #: refused at the call.
    actions = frozenset({"edit", "delete", "react", "pin"})
    #: UTF-8 bytes (see :meth:`text_length`). Feishu caps a text message's request body
    #: at 150 KB but a post (how Markdown is sent) at 30 KB, and the text is JSON-escaped
    #: twice on the way (inside ``content``, then inside the body); 24,000 bytes leaves
    #: room for that escaping under the smaller cap, and is still ~8,000 CJK characters
    #: or a few screens of English — longer replies are split, code fences kept intact.
    text_limit = 24_000
    idempotent_send = True
    caption_limit = 0  # a file message has no caption: the text goes before it (.media)
    upload_limit = 30 * 1024 * 1024  # images over 10 MB go as files (.media)
    #: The start-up probe (bot/v3/info): tries, and the reconnect backoff between them
    #: (seconds, :func:`~tether.backoff.equal_jitter`). Tests shorten them per instance.
    open_attempts = 5
    backoff_base = 1.0
    backoff_max = 30.0

    def __init__(self, config: FeishuConfig) -> None:
        self.config = config
        self.bot_open_id: str | None = None
        self.bot_name: str = ""
        self._client: lark.Client | None = None
        self._messages: Messages | None = None
        self._inbox: Ingress | None = None
        self._ws: LongConnection | None = None
        #: Messages known to be cards, which an edit PATCHes (:mod:`.edit`).
        self._cards = Cards()
        key = config.encrypt_key.get_secret_value() if config.encrypt_key else ""
        token = config.verification_token
        self._verifier = Verifier(
            key, token.get_secret_value() if token else None, config.webhook.max_age
        )
        _route_sdk_logs()

    # -- lifecycle ------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        if self.config.mode == "webhook":
            return self._inbox is not None
        return self._ws is not None and self._ws.connected

    @property
    def problem(self) -> str | None:
        if self.connected:
            return None
        if self.config.mode == "webhook":
            return "not accepting webhook posts (starting or stopping)"
        if self._ws is not None and self._ws.error:
            return f"long connection failed: {self._ws.error}"
        return "long connection not established (connecting or reconnecting)"

    async def open(self) -> None:
        """The bot's own open_id (``GET /open-apis/bot/v3/info``), to tell mentions of it."""
        self._client = (
            lark.Client.builder()
            .app_id(self.config.app_id)
            .app_secret(self.config.app_secret.get_secret_value())
            .domain(self.config.domain)
            .timeout(self.config.timeout)
            .log_level(lark.LogLevel.WARNING)
            .build()
        )
        self._messages = Messages(
            self._client, self.config.domain, self.config.timeout, self.config.app_id
        )
        bot = await open_with_retries(
            "feishu",
            self.open_attempts,
            lambda: asyncio.to_thread(self._bot_info),
            refused=_refused,
            unreachable="the bot's info (bot/v3/info)",
            give_up=self.close,
            base=self.backoff_base,
            cap=self.backoff_max,
        )
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

    def account_key(self, key: str) -> str | None:
        """``fs:msg:{id}`` → ``fs:{app_id}:msg:{id}``: every app in a chat receives its
        messages, each under its own key."""
        found = _SHARED_KEY.fullmatch(key)
        return f"fs:{self.config.app_id}:msg:{found.group(1)}" if found else None

    async def start(self, inbox: Ingress) -> None:
        self._inbox = inbox
        if self.config.mode == "webhook":
            if not self._verifier.signed:
                log.warning(
                    "feishu.unsigned_webhook",
                    hint="without encrypt_key Feishu neither encrypts nor signs event posts;"
                    " only the verification token authenticates them",
                )
            return
        self._ws = LongConnection(self.config, self._commit_now)
        await self._ws.start()

    async def stop(self) -> None:
        """Stop ingress. Sending goes on until :meth:`close` (the outbox flushes first)."""
        self._inbox = None
        if self._ws is not None:
            await self._ws.stop()

    async def close(self) -> None:
        """Release the HTTP session, once the outbox has flushed."""
        self._client = None
        messages, self._messages = self._messages, None
        if messages is not None:
            await messages.close()

    @property
    def _ws_thread(self) -> threading.Thread | None:
        """The long connection's thread while it runs (tests wait for it to end)."""
        return self._ws.thread if self._ws is not None else None

    # -- ingress --------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        if self.config.mode == "webhook":
            app.router.add_post(self.config.webhook.path, self._webhook)

    async def _webhook(self, request: web.Request) -> web.Response:
        return await answer(request, self._verifier, self._inbox, self._commit)

    def verify(
        self, body: bytes, headers: Mapping[str, str], now: float | None = None
    ) -> dict[str, Any] | Rejected:
        """See :meth:`.webhook.Verifier.verify`."""
        return self._verifier.verify(body, headers, now)

    async def _commit_now(self, data: dict[str, Any]) -> None:
        """The long connection's commit: refused (so not acked) once stopping began."""
        inbox = self._inbox
        if inbox is None:
            raise RuntimeError("tether is stopping; not accepted (Feishu will redeliver)")
        await self._commit(inbox, data)

    async def _commit(self, inbox: Ingress, data: dict[str, Any]) -> None:
        outcome = self.normalize(data)
        if isinstance(outcome, Event) and (reason := unstorable(outcome)):
            outcome = Dropped(SKIPPED, reason)  # no redelivery could make it storable
        if isinstance(outcome, Dropped):
            emit = log.info if outcome.log_event == IGNORED else log.warning
            emit(outcome.log_event, event_id=event_id_of(data), reason=outcome.reason)
            return
        if outcome.kind is Kind.CALLBACK and outcome.message_id:
            self._cards.add(outcome.message_id)  # a press comes from one of our cards
        await inbox.accept([outcome])

    def normalize(self, data: Mapping[str, Any]) -> Event | Dropped:
        """:func:`.normalize.normalize` with this bot's identity and policy."""
        bot = Bot(
            open_id=self.bot_open_id,
            name=self.bot_name,
            answer_groups=self.config.answer_groups,
            ignore_bots=self.config.ignore_bots,
        )
        return normalize(data, bot)

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
        messages = self._messages
        if messages is None:
            raise SendRetryable("feishu adapter is not open")
        sent = await messages.send(message)
        if message.buttons and sent.platform_id:
            self._cards.add(sent.platform_id)
        return sent

    async def edit(self, message: OutMessage, platform_id: str) -> Sent:
        return await edit_message(self._open(), message, platform_id, self._cards)

    async def delete(self, target: Target, message_id: str) -> None:
        await changes.recall(self._open(), message_id)

    async def react(self, target: Target, message_id: str, emoji: str) -> None:
        await changes.react(self._open(), message_id, emoji)

    async def pin(self, target: Target, message_id: str, *, pinned: bool) -> None:
        await changes.pin(self._open(), message_id, pinned=pinned)

    def _open(self) -> Messages:
        messages = self._messages
        if messages is None:
            raise SendRetryable("feishu adapter is not open")
        return messages

    async def send_files(self, message: OutMessage, files: Sequence[Upload]) -> Sent:
        messages = self._messages
        if messages is None:
            raise SendRetryable("feishu adapter is not open")
        return await media.send_files(messages, message, files)

    async def download(self, attachment: Attachment, message_id: str | None, cap: int) -> bytes:
        if self._messages is None:
            raise DownloadError("feishu adapter is not open")
        return await media.download(self._messages, attachment, message_id, cap)

    def request_for(self, message: OutMessage) -> tuple[str, dict[str, str], dict[str, Any]]:
        """See :func:`.send.request_for`."""
        return request_for(message)


def _refused(exc: BaseException) -> str | None:
    """The start-up error line when Feishu rejected the app's credentials."""
    if isinstance(exc, ObtainAccessTokenException):
        return (
            "platforms.feishu: app_id/app_secret were rejected"
            f" (tenant_access_token: code {exc.code}, {exc.msg})"
        )
    return None


def _route_sdk_logs() -> None:
    """lark-oapi's "Lark" logger prints to stdout on its own handler; send it through
    the root handler instead, where Tether's formatter scrubs secrets."""
    sdk = logging.getLogger("Lark")
    sdk.handlers.clear()
    sdk.propagate = True
