"""Telegram: updates in (Tether's own getUpdates loop, or a webhook route), Bot API out.

python-telegram-bot 22.x is the API client (``telegram.Bot``) and the parser
(``Update.de_json``), not the runtime. Its Updater confirms a batch as soon as it is in
memory, so a crash loses it; here the next getUpdates offset is asked for only after the
batch *and* the offset committed to the inbox in one transaction, and a webhook post is
answered 200 only after its commit. Keys are ``tg:{bot_id}:{update_id}``, so a webhook
retry or an overlapping poll is a duplicate the inbox drops.

Telegram has no idempotency key for sends: a timed-out sendMessage may or may not have
arrived. :func:`classify` tells the outbox which failures certainly did not send (safe to
retry) and which are ambiguous (the row becomes ``unknown`` unless ``resend_unknown``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import html
import json
import random
import re
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

import structlog
from aiohttp import web
from telegram import (
    Bot,
    CallbackQuery,
    Message,
    MessageEntity,
    Update,
)
from telegram.constants import ChatAction, ParseMode
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)

from tether.adapters.base import (
    Adapter,
    SendAmbiguous,
    SendError,
    SendFatal,
    SendRetryable,
    Sent,
)
from tether.adapters.telegram_http import NOT_SENT, AiohttpRequest
from tether.config.schema import TelegramConfig
from tether.events import (
    Attachment,
    ChatType,
    Conversation,
    Event,
    Kind,
    OutMessage,
    Sender,
    Target,
    parse_command,
)
from tether.gateway.ratelimit import Limit
from tether.gateway.splitting import utf16_len

if TYPE_CHECKING:
    from tether.gateway.inbox import Inbox

log = structlog.get_logger("tether.telegram")

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
#: Extra read time on top of the long-poll timeout before the HTTP client gives up.
_POLL_READ_MARGIN = 10.0
_CHAT_TYPES: dict[str, ChatType] = {
    "private": "dm",
    "group": "group",
    "supergroup": "group",
    "channel": "channel",
}
_PARSE_MODES = {"html": ParseMode.HTML, "markdown": ParseMode.MARKDOWN_V2}
_ENTITY_ERROR = re.compile(r"can't parse entities|can't find end of the entity", re.IGNORECASE)
#: Content without text or a file that handlers may still want (read it from ``raw``).
_MEDIA = ("animation", "document", "voice", "video", "audio", "video_note", "sticker")
_DEFAULT_MIME = {"video_note": "video/mp4", "voice": "audio/ogg"}
_OTHER_CONTENT = ("venue", "location", "contact", "poll", "dice", "game", "story")
#: Telegram shows "typing…" for about 5 s; do not ask again sooner for the same chat.
_TYPING_EVERY = 4.0
_MAX_CHORES = 256


class Dropped(NamedTuple):
    """Why an update did not become an event. It still advances the offset."""

    log_event: str  # telegram.ignored (by policy) or telegram.skipped (cannot handle)
    reason: str


class _Bot(Bot):
    """PTB's Bot with a getUpdates that returns the raw JSON list.

    ``Bot.get_updates`` parses the whole batch and raises if one update does not parse,
    which would pin the offset on that update forever. Tether parses each update on its
    own, so one bad update is skipped (and logged) while the rest of the batch goes on.
    """

    async def get_update_dicts(
        self, offset: int | None, timeout: int, allowed_updates: Sequence[str], limit: int = 100
    ) -> list[Any]:
        result = await self._post(
            "getUpdates",
            {
                "offset": offset,
                "timeout": timeout,
                "limit": limit,
                "allowed_updates": list(allowed_updates),
            },
            read_timeout=timeout + _POLL_READ_MARGIN,
        )
        return result if isinstance(result, list) else []

    async def send_message_dict(self, params: dict[str, Any]) -> dict[str, Any]:
        """sendMessage, returning Telegram's JSON instead of a parsed ``Message``.

        Only ``message_id`` is read, and building PTB's Message object (every field of
        it set one by one) was a tenth of Tether's CPU per reply in bench/telegram.py.
        Encoding, transport and error mapping are still PTB's.
        """
        result = await self._post("sendMessage", params)
        return result if isinstance(result, dict) else {}


class TelegramAdapter(Adapter):
    platform = "telegram"
    text_limit = 4096

    def __init__(self, config: TelegramConfig) -> None:
        self.config = config
        self.resend_unknown = config.resend_unknown
        #: Polling and webhook-registration retries (seconds); tests shorten them.
        self.backoff_base = 1.0
        self.backoff_max = 30.0
        self.open_attempts = 5
        #: Seconds between tries for the long poll while another instance holds it.
        self.standby_interval = 2.0
        #: This instance holds the long poll (always, on a store only one process uses).
        self.polling = False
        kwargs: dict[str, Any] = {}
        if config.base_url:
            kwargs["base_url"] = config.base_url
        self.bot = _Bot(
            config.token.get_secret_value(),
            request=AiohttpRequest(),
            get_updates_request=AiohttpRequest(connection_pool_size=1),
            **kwargs,
        )
        self.bot_id = int(config.token.get_secret_value().split(":", 1)[0])
        self.username: str | None = None
        self._inbox: Inbox | None = None
        self._task: asyncio.Task[None] | None = None
        self._connected = False
        self._opened = False
        self._chores: set[asyncio.Task[None]] = set()
        self._typing_at: dict[str, float] = {}
        self._secret = (
            config.webhook.secret_token.get_secret_value().encode()
            if config.webhook.secret_token
            else None
        )

    # -- lifecycle ------------------------------------------------------------------

    @property
    def offset_cursor(self) -> str:
        """The store cursor holding the highest update_id committed to the inbox."""
        return f"telegram:{self.bot_id}:offset"

    @property
    def connected(self) -> bool:
        return self._connected

    async def open(self) -> None:
        """getMe: the bot's id and @username (needed to tell ``/cmd@us`` from ``/cmd@them``)."""
        from tether.errors import GatewayError

        for attempt in range(1, self.open_attempts + 1):
            try:
                await self.bot.initialize()
                break
            except InvalidToken:
                await self.bot.shutdown()
                raise GatewayError(
                    "platforms.telegram.token was rejected by the Bot API (getMe failed)"
                ) from None
            except TelegramError as exc:
                if attempt == self.open_attempts:
                    await self.bot.shutdown()
                    raise GatewayError(
                        f"telegram: cannot reach the Bot API (getMe): {type(exc).__name__}: {exc}"
                    ) from None
                delay = self._delay(attempt)
                log.warning("telegram.open_retry", error=_describe(exc), retry_in_s=delay)
                await asyncio.sleep(delay)
        self.bot_id = self.bot.id
        self.username = self.bot.username
        self._opened = True
        log.info("telegram.ready", bot_id=self.bot_id, username=self.username)

    async def start(self, inbox: Inbox) -> None:
        self._inbox = inbox
        if self.config.mode == "webhook":
            self._task = asyncio.create_task(self._register_webhook(), name="telegram-webhook")
        else:
            self._task = asyncio.create_task(self._poll(inbox), name="telegram-poll")

    async def stop(self) -> None:
        """Stop ingress. The bot stays open: the outbox may still send until :meth:`close`."""
        self._inbox = None
        self._connected = False
        self.polling = False
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def close(self) -> None:
        """Release the HTTP clients, once the outbox has flushed."""
        chores = list(self._chores)
        if chores:
            await asyncio.wait(chores, timeout=2.0)
            for chore in chores:
                chore.cancel()
        if self._opened:
            self._opened = False
            await self.bot.shutdown()

    # -- polling --------------------------------------------------------------------

    async def _take_poll(self, inbox: Inbox) -> None:
        """Several instances on one shared store: one long-polls (it holds an advisory
        lock), the others stand by and take over when its process dies and the lock goes
        with its connection. Telegram would answer a second poller with 409 anyway."""
        lock = f"telegram:{self.bot_id}:poll"
        waiting = False
        while not await inbox.store.try_lock(lock):
            if not waiting:
                log.info("telegram.standby", reason="another instance holds the long poll")
                waiting = True
            self._connected = True  # standing by is healthy: sends still go out from here
            await asyncio.sleep(self.standby_interval)
        if waiting:
            log.info("telegram.takeover")
        self.polling = True

    async def _poll(self, inbox: Inbox) -> None:
        """fetch → accept batch + offset in one transaction → fetch from the next offset."""
        await self._take_poll(inbox)
        # A webhook left set (an earlier webhook-mode run) makes getUpdates answer 409.
        # drop_pending_updates=False: the backlog is still ours to answer.
        await self._until_ok(
            "deleteWebhook", lambda: self.bot.delete_webhook(drop_pending_updates=False)
        )
        stored = await inbox.store.cursor(self.offset_cursor)
        offset = int(stored) + 1 if stored is not None else None
        log.info("telegram.polling", offset=offset, timeout_s=self.config.poll_timeout)
        failures = 0
        while True:
            try:
                batch = await self.bot.get_update_dicts(
                    offset, self.config.poll_timeout, self.config.allowed_updates
                )
            except Conflict as exc:
                failures += 1
                self._connected = False
                delay = self._delay(failures)
                if failures == 1 or failures % 10 == 0:
                    log.warning(
                        "telegram.conflict",
                        error=_describe(exc),
                        hint="another process polls this bot, or a webhook is set",
                        failures=failures,
                        retry_in_s=delay,
                    )
                await asyncio.sleep(delay)
                continue
            except Exception as exc:  # network, 5xx, bad JSON: the loop must outlive them
                failures += 1
                self._connected = False
                delay = self._delay(failures)
                log.warning(
                    "telegram.poll_failed",
                    error=_describe(exc),
                    failures=failures,
                    retry_in_s=delay,
                )
                await asyncio.sleep(delay)
                continue
            if failures:
                log.info("telegram.poll_recovered", failures=failures)
                failures = 0
            self._connected = True
            if not batch:
                continue
            try:
                offset = await self._ingest(inbox, batch)
            except Exception as exc:
                # Nothing was confirmed: the same batch comes back on the next call.
                failures += 1
                delay = self._delay(failures)
                log.error(
                    "telegram.accept_failed",
                    error=_describe(exc),
                    updates=len(batch),
                    retry_in_s=delay,
                )
                await asyncio.sleep(delay)

    async def _ingest(self, inbox: Inbox, batch: list[Any]) -> int:
        """Commit one getUpdates batch and its offset together; return the next offset."""
        events: list[Event] = []
        top: int | None = None
        for item in batch:
            update_id = _update_id(item)
            if update_id is not None:
                top = update_id if top is None else max(top, update_id)
            outcome = self.normalize(item)
            if isinstance(outcome, Event):
                events.append(outcome)
            else:
                self._log_dropped(outcome, update_id)
        if top is None:
            raise ValueError(f"a batch of {len(batch)} updates without a single update_id")
        accepted = await inbox.accept(events, cursors={self.offset_cursor: str(top)})
        self._after_accept(events, accepted)
        return top + 1

    # -- webhook --------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        if self.config.mode == "webhook":
            app.router.add_post(self.config.webhook.path, self._webhook)

    async def _register_webhook(self) -> None:
        """setWebhook once the HTTP server listens (the gateway starts it before ingress)."""
        url = self.config.webhook.url
        assert url is not None and self._secret is not None  # the config validator ensures it
        secret = self._secret.decode()
        await self._until_ok(
            "setWebhook",
            lambda: self.bot.set_webhook(
                url,
                allowed_updates=self.config.allowed_updates,
                secret_token=secret,
                drop_pending_updates=False,
            ),
        )
        self._connected = True
        log.info("telegram.webhook_set", url=url, path=self.config.webhook.path)

    async def _webhook(self, request: web.Request) -> web.Response:
        """Verify, parse, commit, and only then 200 (Telegram retries anything else)."""
        given = request.headers.get(SECRET_HEADER, "").encode()
        if self._secret is None or not hmac.compare_digest(given, self._secret):
            log.warning(
                "telegram.webhook_forbidden",
                reason="wrong secret token" if given else "missing secret token",
                remote=request.remote,
            )
            return web.Response(status=403, text="forbidden")
        inbox = self._inbox
        if inbox is None:  # not started yet, or stopping: Telegram will deliver it again
            return web.Response(status=503, text="not ready")
        body = await request.read()
        try:
            data = json.loads(body)
        except ValueError as exc:
            log.warning("telegram.webhook_malformed", reason=f"invalid JSON: {exc}")
            return web.Response(status=400, text="invalid JSON")
        update_id = _update_id(data)
        if update_id is None:
            log.warning("telegram.webhook_malformed", reason="not an update (no update_id)")
            return web.Response(status=400, text="not an update")
        outcome = self.normalize(data)
        events = [outcome] if isinstance(outcome, Event) else []
        if not isinstance(outcome, Event):
            self._log_dropped(outcome, update_id)
        accepted = await inbox.accept(events)
        self._after_accept(events, accepted)
        return web.Response(text="ok")

    # -- normalize ------------------------------------------------------------------

    def normalize(self, data: Any) -> Event | Dropped:
        """One raw update → an :class:`Event`, or why not. Never raises."""
        update_id = _update_id(data)
        if update_id is None:
            return Dropped("telegram.skipped", "not an update (no integer update_id)")
        try:
            update = Update.de_json(dict(data), self.bot)
        except Exception as exc:
            return Dropped("telegram.skipped", f"unparsable: {type(exc).__name__}: {exc}")
        key = f"tg:{self.bot_id}:{update_id}"
        try:
            if update.callback_query is not None:
                return self._callback(key, update.callback_query, data)
            for kind, message in (
                (Kind.MESSAGE, update.message),
                (Kind.EDIT, update.edited_message),
                (Kind.MESSAGE, update.channel_post),
                (Kind.EDIT, update.edited_channel_post),
            ):
                if message is not None:
                    return self._message(key, kind, message, data)
        except Exception as exc:  # a shape PTB accepted but we cannot read
            return Dropped("telegram.skipped", f"cannot normalize: {type(exc).__name__}: {exc}")
        kinds = ", ".join(sorted(k for k in data if k != "update_id")) or "empty"
        return Dropped("telegram.skipped", f"unsupported update type: {kinds}")

    def _message(
        self, key: str, kind: Kind, message: Message, raw: dict[str, Any]
    ) -> Event | Dropped:
        chat_type = _CHAT_TYPES.get(message.chat.type, "group")
        sender = _sender(message)
        if sender is not None and sender.is_bot and self.config.ignore_bots:
            return Dropped("telegram.ignored", "from a bot")
        text = message.text or message.caption or ""
        mentions, mentions_bot = self._mentions(message)
        command = parse_command(text, self.username) if text.startswith("/") else None
        reply = message.reply_to_message
        # In a forum topic every message "replies" to the topic's first message.
        if reply is not None and message.is_topic_message:
            reply = None if reply.message_id == message.message_thread_id else reply
        reply_to_bot = bool(reply and reply.from_user and reply.from_user.id == self.bot_id)
        attachments = _attachments(message)
        meta: dict[str, Any] = {}
        content = next((name for name in _OTHER_CONTENT if getattr(message, name, None)), None)
        if content:
            meta["content"] = content
        if not text and not attachments and not content:
            return Dropped("telegram.skipped", "service message or unsupported content")
        addressed = command is not None or mentions_bot or reply_to_bot
        if chat_type == "group" and self.config.answer_groups == "addressed" and not addressed:
            reason = (
                "command for another bot"
                if text.startswith("/") and parse_command(text) is not None
                else "group message not addressed to the bot"
            )
            return Dropped("telegram.ignored", reason)
        is_command = kind is Kind.MESSAGE and command is not None
        thread_id = message.message_thread_id if message.is_topic_message else None
        when = (message.edit_date if kind is Kind.EDIT else None) or message.date
        return Event(
            key=key,
            platform=self.platform,
            kind=Kind.COMMAND if is_command else kind,
            conversation=Conversation(
                platform=self.platform,
                chat_id=str(message.chat.id),
                thread_id=str(thread_id) if thread_id else None,
                chat_type=chat_type,
            ),
            sender=sender,
            message_id=str(message.message_id),
            text=text,
            command=command[0] if is_command and command else None,
            args=command[1] if is_command and command else "",
            reply_to=str(reply.message_id) if reply is not None else None,
            reply_to_bot=reply_to_bot,
            mentions=mentions,
            mentions_bot=mentions_bot,
            attachments=attachments,
            timestamp=when,
            meta=meta,
            raw=raw,
        )

    def _callback(self, key: str, query: CallbackQuery, raw: dict[str, Any]) -> Event:
        """An inline-button press: ``text`` is the button's callback data."""
        user = query.from_user
        message = query.message
        if message is not None:
            chat_id, chat_type = str(message.chat.id), _CHAT_TYPES.get(message.chat.type, "group")
            topic = isinstance(message, Message) and message.is_topic_message
            thread_id = (
                message.message_thread_id if isinstance(message, Message) and topic else None
            )
            message_id: str | None = str(message.message_id)
        else:  # a button on an inline-mode message: no chat, answer the user privately
            chat_id, chat_type, thread_id, message_id = str(user.id), "dm", None, None
        meta: dict[str, Any] = {"callback_query_id": query.id}
        if query.inline_message_id:
            meta["inline_message_id"] = query.inline_message_id
        return Event(
            key=key,
            platform=self.platform,
            kind=Kind.CALLBACK,
            conversation=Conversation(
                platform=self.platform,
                chat_id=chat_id,
                thread_id=str(thread_id) if thread_id else None,
                chat_type=chat_type,
            ),
            sender=Sender(id=str(user.id), name=user.full_name, is_bot=user.is_bot),
            message_id=message_id,
            text=query.data or query.game_short_name or "",
            meta=meta,
            raw=raw,
        )

    def _mentions(self, message: Message) -> tuple[list[str], bool]:
        """``@username`` mentions (without the @) and text mentions (as user ids)."""
        types: list[str | None] = [MessageEntity.MENTION, MessageEntity.TEXT_MENTION]
        if message.text:
            found = message.parse_entities(types)
        elif message.caption:
            found = message.parse_caption_entities(types)
        else:
            return [], False
        mentions: list[str] = []
        ours = False
        me = (self.username or "").lower()
        for entity, value in found.items():
            if entity.type == MessageEntity.TEXT_MENTION and entity.user is not None:
                mentions.append(str(entity.user.id))
                ours = ours or entity.user.id == self.bot_id
            else:
                name = value.lstrip("@")
                mentions.append(name)
                ours = ours or (bool(me) and name.lower() == me)
        return mentions, ours

    def _log_dropped(self, dropped: Dropped, update_id: int | None) -> None:
        emit = log.info if dropped.log_event == "telegram.ignored" else log.warning
        emit(dropped.log_event, update_id=update_id, reason=dropped.reason)

    # -- after accept: best-effort chores --------------------------------------------

    def _after_accept(self, events: Sequence[Event], accepted: Sequence[bool]) -> None:
        """Stop inline-button spinners; show "typing…" where a new message arrived.

        Best effort and off the ingress path: a failure here is a debug line, never a
        failed accept. "typing…" lasts ~5 s or until the bot's next message, so it is
        sent once per chat per few seconds when a message arrives (the core has no hook
        for "a handler is running" yet).
        """
        now = time.monotonic()
        for event, fresh in zip(events, accepted, strict=True):
            if event.kind is Kind.CALLBACK:
                query_id = str(event.meta["callback_query_id"])
                self._chore("answerCallbackQuery", self.bot.answer_callback_query(query_id))
            elif fresh and self._typing_due(event, now):
                conv = event.conversation
                self._chore(
                    "sendChatAction",
                    self.bot.send_chat_action(
                        _chat_id(conv.chat_id),
                        ChatAction.TYPING,
                        message_thread_id=int(conv.thread_id) if conv.thread_id else None,
                    ),
                )

    def _typing_due(self, event: Event, now: float) -> bool:
        """A new message for the bot, and no "typing…" sent to its chat for a few seconds."""
        conv = event.conversation
        if not self.config.typing or conv.chat_type == "channel":
            return False
        if event.kind not in (Kind.MESSAGE, Kind.COMMAND):
            return False
        if now - self._typing_at.get(conv.key, -_TYPING_EVERY) < _TYPING_EVERY:
            return False
        if len(self._typing_at) > 10_000:  # bounded: forgetting only means one more action
            self._typing_at.clear()
        self._typing_at[conv.key] = now
        return True

    def _chore(self, what: str, call: Awaitable[Any]) -> None:
        async def run() -> None:
            try:
                await call
            except TelegramError as exc:
                log.debug("telegram.chore_failed", call=what, error=_describe(exc))

        if len(self._chores) >= _MAX_CHORES or not self._opened:
            if asyncio.iscoroutine(call):
                call.close()
            return
        task = asyncio.create_task(run(), name=f"telegram-{what}")
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    # -- send -----------------------------------------------------------------------

    def text_length(self, text: str) -> int:
        return utf16_len(text)

    def limits(self, target: Target) -> list[Limit]:
        """Telegram's published limits: ~1/s per chat (short bursts tolerated), 20/min per
        group, ~30/s overall. Negative chat ids are groups, supergroups and channels."""
        if not self.config.rate_limits:
            return []
        limits = [Limit(f"telegram:chat:{target.chat_id}", rate=1.0, burst=3.0)]
        if target.chat_id.startswith("-"):
            limits.append(Limit(f"telegram:group:{target.chat_id}", rate=20 / 60, burst=20.0))
        limits.append(Limit("telegram:global", rate=30.0, burst=30.0))
        return limits

    async def send(self, message: OutMessage) -> Sent:
        if not self._opened:
            raise SendRetryable("telegram adapter is not open")
        chat_id = _chat_id(message.target.chat_id)
        try:
            try:
                sent = await self._send_text(chat_id, message)
            except ChatMigrated as exc:  # a group became a supergroup: same chat, new id
                log.warning(
                    "telegram.chat_migrated", key=message.key, chat=chat_id, to=exc.new_chat_id
                )
                sent = await self._send_text(exc.new_chat_id, message)
        except TelegramError as exc:
            raise classify(exc) from exc
        return Sent(platform_id=str(sent.get("message_id")))

    async def _send_text(self, chat_id: int | str, message: OutMessage) -> dict[str, Any]:
        """sendMessage; formatted text that Telegram cannot parse goes again as plain text."""
        params: dict[str, Any] = {"chat_id": chat_id, "text": message.text}
        if message.target.thread_id:
            params["message_thread_id"] = int(message.target.thread_id)
        if message.reply_to and message.reply_to.lstrip("-").isdigit():
            # The quoted message may be gone by the time the reply goes out: send anyway.
            params["reply_parameters"] = {
                "message_id": int(message.reply_to),
                "allow_sending_without_reply": True,
            }
        parse_mode = _PARSE_MODES.get(message.format)
        try:
            return await self.bot.send_message_dict({**params, "parse_mode": parse_mode})
        except BadRequest as exc:
            if parse_mode is None or not _ENTITY_ERROR.search(str(exc)):
                raise
            # A 400 was not delivered, so sending again cannot duplicate.
            log.warning(
                "telegram.format_fallback",
                key=message.key,
                format=message.format,
                error=_describe(exc),
            )
            params["text"] = plain_text(message.text, message.format)
            return await self.bot.send_message_dict(params)

    # -- helpers --------------------------------------------------------------------

    def _delay(self, failures: int) -> float:
        """Exponential backoff with equal jitter: never a tight loop, never in lockstep."""
        ceiling = min(self.backoff_max, self.backoff_base * 2.0 ** min(failures - 1, 16))
        return round(ceiling * random.uniform(0.5, 1.0), 3)

    async def _until_ok(self, what: str, call: Callable[[], Awaitable[Any]]) -> None:
        failures = 0
        while True:
            try:
                await call()
                return
            except TelegramError as exc:
                failures += 1
                delay = self._delay(failures)
                log.warning(
                    "telegram.call_failed",
                    call=what,
                    error=_describe(exc),
                    failures=failures,
                    retry_in_s=delay,
                )
                await asyncio.sleep(delay)


def classify(exc: TelegramError) -> SendError:
    """Which ``Send*`` error a failed sendMessage is, by whether it certainly did not send.

    Not sent (retry is safe): 429 flood control, connection refused or never made, pool
    exhausted. Rejected (never will send): 400/403/401. Anything after the request may
    have reached Telegram (a read timeout, a dropped connection, a 5xx) is ambiguous.
    """
    text = _describe(exc)
    if isinstance(exc, RetryAfter):
        return SendRetryable(text, retry_after=retry_after_seconds(exc))
    if isinstance(exc, BadRequest | Forbidden | InvalidToken | ChatMigrated):
        return SendFatal(text)
    if isinstance(exc, NetworkError) and _not_sent(exc):
        return SendRetryable(text)
    if isinstance(exc, TimedOut):
        return SendAmbiguous(f"timed out after the request was sent: {text}")
    return SendAmbiguous(text)


def retry_after_seconds(exc: RetryAfter) -> float:
    """``RetryAfter.retry_after`` in seconds (an int, or a timedelta with PTB_TIMEDELTA)."""
    with warnings.catch_warnings():  # PTB 22 warns that the type will become timedelta
        warnings.simplefilter("ignore")
        value: int | timedelta = exc.retry_after
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    return float(seconds)


def plain_text(text: str, fmt: str) -> str:
    """The readable text of HTML or MarkdownV2 markup, for the plain-text fallback."""
    if fmt == "html":
        return html.unescape(re.sub(r"<[^>]*>", "", text))
    if fmt == "markdown":
        return re.sub(r"\\([_*\[\]()~`>#+\-=|{}.!\\])", r"\1", text)
    return text


def _not_sent(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, NOT_SENT):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _update_id(data: Any) -> int | None:
    if not isinstance(data, Mapping):
        return None
    value = data.get("update_id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _chat_id(chat_id: str) -> int | str:
    """Numeric ids as ints; ``@channelusername`` stays a string."""
    return int(chat_id) if chat_id.lstrip("-").isdigit() else chat_id


def _sender(message: Message) -> Sender | None:
    """Who sent it. Anonymous admins and linked channels post as a chat, not as a user."""
    if message.sender_chat is not None:
        chat = message.sender_chat
        return Sender(id=str(chat.id), name=chat.title or chat.username or "", is_bot=False)
    user = message.from_user
    if user is None:
        return None
    return Sender(id=str(user.id), name=user.full_name, is_bot=user.is_bot)


def _attachments(message: Message) -> list[Attachment]:
    """Files by Telegram file_id: the largest photo size, and one entry per other media."""
    out: list[Attachment] = []
    if message.photo:  # sizes come smallest first
        photo = message.photo[-1]
        out.append(
            Attachment(kind="photo", file_id=photo.file_id, mime="image/jpeg", size=photo.file_size)
        )
    for kind in _MEDIA:
        media = getattr(message, kind, None)
        if media is None or (kind == "document" and message.animation):
            continue  # a GIF arrives as both `animation` and `document`: report it once
        mime = getattr(media, "mime_type", None)
        if kind == "sticker":
            mime = (
                "video/webm"
                if media.is_video
                else "application/x-tgsticker"
                if media.is_animated
                else "image/webp"
            )
        out.append(
            Attachment(
                kind=kind,
                file_id=media.file_id,
                mime=mime or _DEFAULT_MIME.get(kind),
                size=media.file_size,
                name=getattr(media, "file_name", None),
            )
        )
    return out
