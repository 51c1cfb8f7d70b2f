"""The Telegram adapter: the bot's identity, and the rooms wired into one :class:`Adapter`.

:mod:`.normalize` reads updates, :mod:`.ingress` brings them in (poll loop or webhook
route), :mod:`.send` sends replies, :mod:`.chores` does what follows an accept, and
:mod:`.http` is the Bot API client all of them share. This class owns the lifecycle:
getMe on open, ingress between start and stop, the HTTP clients until close.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog
from telegram import BotCommand
from telegram.error import InvalidToken

from tether.adapters.base import Adapter, Sent
from tether.adapters.kit import Dropped, open_with_retries
from tether.adapters.telegram import edit, media
from tether.adapters.telegram.chores import Chores
from tether.adapters.telegram.epochs import offset_cursor
from tether.adapters.telegram.http import AiohttpRequest, BotClient
from tether.adapters.telegram.ingress import Pace, UpdateIngress
from tether.adapters.telegram.markdown import shown_length
from tether.adapters.telegram.normalize import normalize
from tether.adapters.telegram.recipient import Recipient
from tether.adapters.telegram.send import rate_limits, send_message
from tether.config.schema import TelegramConfig
from tether.errors import SendRetryable
from tether.events import Attachment, Event, OutMessage, Target
from tether.files import FileKind, Upload
from tether.limits import Limit
from tether.text import Length, utf16_len

if TYPE_CHECKING:
    from aiohttp import web

    from tether.adapters.base import Ingress

log = structlog.get_logger("tether.telegram")


class TelegramAdapter(Adapter):
    """One bot token: updates in by long poll or webhook, replies out by sendMessage."""

    platform = "telegram"
    can_edit = True  # editMessageText; about one edit a second per chat
    actions = frozenset({"edit", "delete", "react", "pin", "answer"})  # edit.py
    text_limit = 4096
    caption_limit = media.CAPTION_LIMIT
    upload_limit = 50 * 1024 * 1024  # the Bot API's limit for a bot's uploads
    file_groups: frozenset[FileKind] = frozenset({"photo", "video"})  # an album

    def __init__(self, config: TelegramConfig) -> None:
        self.config = config
        self.resend_unknown = config.resend_unknown
        #: Polling and webhook-registration retries (seconds); tests shorten them.
        self.backoff_base = 1.0
        self.backoff_max = 30.0
        self.open_attempts = 5
        #: Seconds between tries for the long poll while another instance holds it.
        self.standby_interval = 2.0
        kwargs: dict[str, Any] = {}
        if config.base_url:
            kwargs["base_url"] = config.base_url
            kwargs["base_file_url"] = media.file_base_url(config.base_url)
        token = config.token.get_secret_value()
        self.bot = BotClient(
            token,
            request=AiohttpRequest(),
            get_updates_request=AiohttpRequest(connection_pool_size=1),
            **kwargs,
        )
        #: Until getMe answers, the id is the token's prefix and the username unknown.
        self.recipient = Recipient(
            bot_id=int(token.split(":", 1)[0]),
            answer_groups=config.answer_groups,
            ignore_bots=config.ignore_bots,
        )
        self.chores = Chores(self.bot, typing=config.typing)
        self.ingress = UpdateIngress(
            self.bot, config, normalize=self.normalize, after_accept=self._after_accept
        )
        self._opened = False

    # -- lifecycle ------------------------------------------------------------------

    @property
    def bot_id(self) -> int:
        return self.recipient.bot_id

    @property
    def username(self) -> str | None:
        return self.recipient.username

    @property
    def offset_cursor(self) -> str:
        """The store cursor holding the top update_id of the last batch polled."""
        return offset_cursor(self.bot_id)

    @property
    def connected(self) -> bool:
        return self.ingress.connected

    @property
    def polling(self) -> bool:
        """This instance holds the long poll (always, on a store only one process uses)."""
        return self.ingress.polling

    async def open(self) -> None:
        """getMe: the bot's id and @username (needed to tell ``/cmd@us`` from ``/cmd@them``)."""
        await open_with_retries(
            "telegram",
            self.open_attempts,
            self.bot.initialize,
            refused=_refused,
            unreachable="the Bot API (getMe)",
            give_up=self.bot.shutdown,
            base=self.backoff_base,
            cap=self.backoff_max,
        )
        self.recipient = dataclasses.replace(
            self.recipient, bot_id=self.bot.id, username=self.bot.username
        )
        self._opened = True
        log.info("telegram.ready", bot_id=self.bot_id, username=self.username)

    async def start(self, inbox: Ingress) -> None:
        pace = Pace(self.backoff_base, self.backoff_max, self.standby_interval)
        self.ingress.start(inbox, self.bot_id, pace)

    async def stop(self) -> None:
        """Stop ingress. The bot stays open: the outbox may still send until :meth:`close`."""
        await self.ingress.stop()

    async def close(self) -> None:
        """Release the HTTP clients, once the outbox has flushed."""
        await self.chores.drain()
        if self._opened:
            self._opened = False
            await self.bot.shutdown()

    def routes(self, app: web.Application) -> None:
        if self.config.mode == "webhook":
            app.router.add_post(self.config.webhook.path, self.ingress.webhook)

    # -- in -------------------------------------------------------------------------

    def normalize(self, data: Any, epoch: int = 0) -> Event | Dropped:
        """One raw update, arrived in ``epoch`` (:mod:`.epochs`) → an :class:`Event`, or
        why not. Never raises."""
        return normalize(data, self.recipient, epoch)

    def _after_accept(self, events: Sequence[Event], accepted: Sequence[bool]) -> None:
        if self._opened:
            self.chores.after_accept(events, accepted)

    # -- out ------------------------------------------------------------------------

    def text_length(self, text: str) -> int:
        return utf16_len(text)

    def length_for(self, format: str) -> Length:
        # Telegram's limit counts the text as shown: Markdown is measured converted.
        return shown_length if format == "markdown" else utf16_len

    async def edit(self, message: OutMessage, platform_id: str) -> Sent:
        return await edit.edit_text(self._open_bot(), message, platform_id)

    async def delete(self, target: Target, message_id: str) -> None:
        await edit.delete_message(self._open_bot(), target, message_id)

    async def react(self, target: Target, message_id: str, emoji: str) -> None:
        await edit.react(self._open_bot(), target, message_id, emoji)

    async def pin(self, target: Target, message_id: str, *, pinned: bool) -> None:
        await edit.pin(self._open_bot(), target, message_id, pinned=pinned)

    async def answer(self, message: OutMessage, press: Mapping[str, Any], alert: bool) -> Sent:
        return await edit.answer(self._open_bot(), message, press, alert)

    def claim_press(self, event: Event) -> None:
        query_id = event.meta.get("callback_query_id")
        if query_id:
            self.chores.claim(str(query_id))

    def _open_bot(self) -> BotClient:
        if not self._opened:
            raise SendRetryable("telegram adapter is not open")
        return self.bot

    def limits(self, target: Target) -> list[Limit]:
        return rate_limits(target) if self.config.rate_limits else []

    async def set_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        """setMyCommands: the menu Telegram shows under the "/" button (default scope)."""
        await self.bot.set_my_commands([BotCommand(name, about) for name, about in commands])

    async def send(self, message: OutMessage) -> Sent:
        if not self._opened:
            raise SendRetryable("telegram adapter is not open")
        return await send_message(self.bot, message)

    async def send_files(self, message: OutMessage, files: Sequence[Upload]) -> Sent:
        if not self._opened:
            raise SendRetryable("telegram adapter is not open")
        return await media.send_files(self.bot, message, files)

    async def download(self, attachment: Attachment, message_id: str | None, cap: int) -> bytes:
        return await media.download(self.bot, attachment, cap)


def _refused(exc: BaseException) -> str | None:
    """A 401 from getMe: the token is wrong, and no retry can fix that."""
    if isinstance(exc, InvalidToken):
        return "platforms.telegram.token was rejected by the Bot API (getMe failed)"
    return None
