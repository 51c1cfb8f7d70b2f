"""The Discord adapter: one discord.py client, logged in at open, its gateway as ingress.

It wires the rooms together: :mod:`.ingress` (the gateway connection, raw messages,
backfill and ``/ask``), :mod:`.normalize` (payloads into events) and :mod:`.send`
(messages out). The REST half of the client serves the outbox from :meth:`open` to
:meth:`close`, so replies still go out while the gateway is stopped for a drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import discord
import structlog
import yarl
from discord.gateway import DiscordWebSocket
from discord.http import Route

from tether.adapters.base import Adapter, Sent
from tether.adapters.discord import commands, edit, media
from tether.adapters.discord.ingress import GatewayIngress
from tether.adapters.discord.normalize import PLATFORM, Bot
from tether.adapters.discord.send import send
from tether.adapters.kit import describe, open_with_retries
from tether.backoff import equal_jitter
from tether.config.schema import DiscordConfig
from tether.events import Attachment, OutMessage, Target
from tether.files import KINDS, FileKind, Upload
from tether.text import utf16_len

if TYPE_CHECKING:
    from tether.adapters.base import Ingress

log = structlog.get_logger("tether.discord")
#: The keys several of our accounts receive alike (normalize's), before :meth:`account_key`.
_SHARED_KEY = re.compile(r"dc:(msg|edit):(.+)")

_TOKEN_REJECTED = "platforms.discord.token was rejected by Discord (GET /users/@me: 401)"


class DiscordAdapter(Adapter):
    platform = PLATFORM
    can_edit = True  # a streamed reply edits its preview: about 5 edits per 5 s per channel
    actions = frozenset({"edit", "delete", "react", "pin", "answer"})  # edit.py
    text_limit = 2000
    caption_limit = 2000  # a file's caption is the message's content
    upload_limit = 10 * 1024 * 1024  # without the server's boosts
    file_groups: frozenset[FileKind] = frozenset(KINDS)  # up to 10 attachments of any kind
    idempotent_send = True

    def __init__(self, config: DiscordConfig) -> None:
        self.config = config
        self.open_attempts = 5
        self.backoff_base = 1.0
        self.backoff_max = 30.0
        self.bot_id: int | None = None
        self.bot_name = ""
        self.application_id: int | None = None
        self._client: discord.Client | None = None
        self._ingress = GatewayIngress(config, self._retry_delay)
        self._task: asyncio.Task[None] | None = None
        self._saved_urls: tuple[str, Any] | None = None

    # -- lifecycle ------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._ingress.connected

    @property
    def problem(self) -> str | None:
        return self._ingress.problem

    async def open(self) -> None:
        """Log in over REST (the bot's identity, the application id), sync ``/ask``."""
        self._point_at_endpoints()
        client = await open_with_retries(
            PLATFORM,
            self.open_attempts,
            self._login,
            refused=lambda exc: _TOKEN_REJECTED if isinstance(exc, discord.LoginFailure) else None,
            unreachable="the API to log in",
            base=self.backoff_base,
            cap=self.backoff_max,
        )
        self._client = client
        assert client.user is not None  # login() sets it
        self.bot_id = client.user.id
        self.bot_name = client.user.name
        self.application_id = client.application_id
        bot = Bot(
            id=str(self.bot_id),
            require_mention=self.config.require_mention,
            ignore_bots=self.config.ignore_bots,
        )
        self._ingress.attach(client, bot)
        if self.config.ask_command:
            try:
                await commands.keep_ask(client, client.application_id or 0)
            except Exception as exc:  # the bot still works without its slash command
                log.warning("discord.commands_sync_failed", error=describe(exc))
        log.info(
            "discord.ready",
            bot_id=self.bot_id,
            name=self.bot_name,
            application_id=self.application_id,
            intents=self.config.intents,
        )

    def account_key(self, key: str) -> str | None:
        """``dc:msg:{id}`` → ``dc:{bot_id}:msg:{id}`` (and edits alike): every bot in a
        channel receives its messages, each under its own key."""
        found = _SHARED_KEY.fullmatch(key)
        if found is None or self.bot_id is None:
            return None
        return f"dc:{self.bot_id}:{found.group(1)}:{found.group(2)}"

    async def start(self, inbox: Ingress) -> None:
        self._task = asyncio.create_task(self._ingress.run(inbox), name="discord-gateway")

    async def stop(self) -> None:
        """Close the gateway; REST stays open for the outbox until :meth:`close`."""
        await self._ingress.stop()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        client = self._client
        if client is not None:
            ready = getattr(client._connection, "_ready_task", None)
            if ready is not None:
                ready.cancel()
            if client.ws is not None:
                with contextlib.suppress(Exception):
                    await client.ws.close(code=1000)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        self._restore_endpoints()

    # -- send -----------------------------------------------------------------------

    def text_length(self, text: str) -> int:
        """UTF-16 units: never fewer than the characters Discord counts, so a chunk fits."""
        return utf16_len(text)

    async def set_commands(self, menu: Sequence[tuple[str, str]]) -> None:
        """The menu as global slash commands, written only when it changed (:mod:`.commands`)."""
        if self._client is None or self.application_id is None:
            raise RuntimeError("the discord adapter is not open")
        wanted = commands.entries(menu, ask=self.config.ask_command)
        await commands.sync(self._client, self.application_id, wanted)

    async def send(self, message: OutMessage) -> Sent:
        return await send(self._client, message, self.config.send_timeout)

    async def edit(self, message: OutMessage, platform_id: str) -> Sent:
        return await edit.edit_message(self._client, message, platform_id, self.config.send_timeout)

    async def delete(self, target: Target, message_id: str) -> None:
        await edit.delete_message(self._client, target, message_id, self.config.send_timeout)

    async def react(self, target: Target, message_id: str, emoji: str) -> None:
        await edit.react(self._client, target, message_id, emoji, self.config.send_timeout)

    async def pin(self, target: Target, message_id: str, *, pinned: bool) -> None:
        timeout = self.config.send_timeout
        await edit.pin(self._client, target, message_id, pinned=pinned, timeout=timeout)

    async def answer(self, message: OutMessage, press: Mapping[str, Any], alert: bool) -> Sent:
        """An ephemeral follow-up (``alert`` too: Discord has no dialog), once the press's
        acknowledgement, which a follow-up must come after, has ended."""
        timeout = self.config.send_timeout
        # The ingress's Presses acknowledge presses; only they know one still in flight.
        await self._ingress._presses.acknowledged(str(press.get("interaction_id")), timeout)
        return await edit.answer(self._client, self.application_id, message, press, timeout)

    async def send_files(self, message: OutMessage, files: Sequence[Upload]) -> Sent:
        timeout = max(self.config.send_timeout, media.UPLOAD_TIMEOUT)
        return await send(
            self._client, message, timeout, lambda c: media.send_files(c, message, files)
        )

    async def download(self, attachment: Attachment, message_id: str | None, cap: int) -> bytes:
        return await media.download(attachment, cap)

    # -- helpers --------------------------------------------------------------------

    async def _login(self) -> discord.Client:
        client = self._make_client()
        try:
            await client.login(self.config.token.get_secret_value())
        except BaseException:
            await client.close()
            raise
        return client

    def _make_client(self) -> discord.Client:
        # Tether sends no voice: skip the "PyNaCl/davey is not installed" warnings.
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
        intents = discord.Intents.none()
        for name in self.config.intents:
            setattr(intents, name, True)
        return discord.Client(
            intents=intents,
            # A rate-limit wait longer than this (discord.py makes it at least 30 s) raises
            # RateLimited (→ SendRetryable after retry_after) instead of sleeping; shorter
            # ones are per-route asyncio sleeps, cut off by send_timeout.
            max_ratelimit_timeout=self.config.send_timeout,
        )

    def _retry_delay(self, failures: int) -> float:
        """Read at each failure, so ``backoff_base``/``backoff_max`` set later count."""
        return equal_jitter(failures, self.backoff_base, self.backoff_max)

    def _point_at_endpoints(self) -> None:
        """``api_base`` and ``gateway_url``: discord.py reads both from class attributes."""
        if self._saved_urls is None:
            self._saved_urls = (Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
        if self.config.api_base:
            Route.BASE = self.config.api_base
        if self.config.gateway_url:
            DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.config.gateway_url)

    def _restore_endpoints(self) -> None:
        if self._saved_urls is not None:
            Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = self._saved_urls
            self._saved_urls = None
