"""Discord: gateway events in (discord.py's Client), REST out, gaps filled by backfill.

Discord delivers gateway events zero, one or several times: a RESUME replays, and a
restart (discord.py closes its session with 1000) loses the gap. So every message is
keyed ``dc:msg:{id}`` (edits ``dc:edit:{id}:{edited_timestamp}``, slash commands
``dc:int:{id}``) and a replay is a duplicate the inbox drops; and every message seen
commits ``discord:channel:{channel}:last`` with it. After each READY (a new session:
a start, or a resume that failed) the channels whose cursor moved within
``backfill_hours`` are read with ``GET /channels/{id}/messages?after={last}``, oldest
first, through the same path, so what came while Tether was away is answered once.

Sends pass a ``nonce`` derived from the outbox key with ``enforce_nonce``: Discord
returns the existing message for a repeated nonce, so a retry after a timeout or a 5xx
cannot post twice and the adapter declares ``idempotent_send``. discord.py's own
rate-limit waits are per-route ``asyncio.sleep``s; a send that waits longer than
``send_timeout`` is abandoned as ambiguous (the outbox then retries it, same nonce).

discord.py is imported only when this module is used (when Discord is enabled).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import aiohttp
import structlog

from tether.adapters.base import Adapter, SendAmbiguous, SendError, SendFatal, SendRetryable, Sent
from tether.config.schema import DiscordConfig
from tether.events import (
    REPLY_META,
    Attachment,
    ChatType,
    Conversation,
    Event,
    Kind,
    OutMessage,
    Sender,
    parse_command,
)
from tether.gateway.splitting import utf16_len

if TYPE_CHECKING:
    import discord
    from discord import app_commands

    from tether.gateway.inbox import Inbox

log = structlog.get_logger("tether.discord")

PLATFORM = "discord"
#: Interaction tokens live 15 minutes; answer by channel message a little before that.
INTERACTION_TTL = 15 * 60
_INTERACTION_MARGIN = 30.0
#: Intents Discord must have switched on for the bot in the developer portal.
PRIVILEGED_INTENTS = ("message_content", "members", "presences")
#: Gateway close codes after which reconnecting cannot help (discord.py gives up too).
_FATAL_CLOSE = {
    4004: "the token was rejected (authentication failed)",
    4010: "invalid shard",
    4011: "sharding required",
    4012: "invalid API version",
    4013: "invalid intents",
}
_BACKFILL_PAGE = 100


class Dropped(NamedTuple):
    """Why a message did not become an :class:`Event` (its cursor still moves)."""

    log_event: str  # discord.ignored (by policy) or discord.skipped (cannot handle)
    reason: str


def cursor_name(channel_id: int | str) -> str:
    """The store cursor holding the last message id seen in a channel (or thread)."""
    return f"discord:channel:{channel_id}:last"


CURSOR_PREFIX = "discord:channel:"


def send_nonce(key: str) -> str:
    """Discord's idempotency nonce (≤ 25 chars) for an outbox key: stable across retries."""
    return hashlib.sha256(key.encode()).hexdigest()[:25]


class DiscordAdapter(Adapter):
    platform = PLATFORM
    text_limit = 2000
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
        self._tree: app_commands.CommandTree[discord.Client] | None = None
        self._inbox: Inbox | None = None
        self._task: asyncio.Task[None] | None = None
        self._backfill_task: asyncio.Task[None] | None = None
        self._connected = False
        self._problem: str | None = None
        self._saved_urls: tuple[str, Any] | None = None

    # -- lifecycle ------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def problem(self) -> str | None:
        return self._problem

    @property
    def client(self) -> discord.Client:
        if self._client is None:
            raise RuntimeError("the discord adapter is not open")
        return self._client

    async def open(self) -> None:
        """Log in over REST (the bot's identity, the application id), sync ``/ask``."""
        import discord

        from tether.errors import GatewayError

        self._point_at_endpoints()
        for attempt in range(1, self.open_attempts + 1):
            client = self._make_client()
            try:
                await client.login(self.config.token.get_secret_value())
                break
            except discord.LoginFailure:
                await client.close()
                raise GatewayError(
                    "platforms.discord.token was rejected by Discord (GET /users/@me: 401)"
                ) from None
            except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
                await client.close()
                if attempt == self.open_attempts:
                    raise GatewayError(
                        f"discord: cannot reach the API to log in: {_describe(exc)}"
                    ) from None
                delay = self._delay(attempt)
                log.warning("discord.open_retry", error=_describe(exc), retry_in_s=delay)
                await asyncio.sleep(delay)
        self._client = client
        assert client.user is not None  # login() sets it
        self.bot_id = client.user.id
        self.bot_name = client.user.name
        self.application_id = client.application_id
        if self.config.ask_command:
            await self._sync_commands()
        log.info(
            "discord.ready",
            bot_id=self.bot_id,
            name=self.bot_name,
            application_id=self.application_id,
            intents=self.config.intents,
        )

    async def start(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self._problem = None
        self._task = asyncio.create_task(self._run(), name="discord-gateway")

    async def stop(self) -> None:
        """Close the gateway; REST stays open for the outbox until :meth:`close`."""
        self._inbox = None
        self._connected = False
        for task in (self._backfill_task, self._task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._backfill_task = None
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

    def _point_at_endpoints(self) -> None:
        """``api_base`` and ``gateway_url``: discord.py reads both from class attributes."""
        from discord.gateway import DiscordWebSocket
        from discord.http import Route

        if self._saved_urls is None:
            self._saved_urls = (Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
        if self.config.api_base:
            Route.BASE = self.config.api_base
        if self.config.gateway_url:
            import yarl

            DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.config.gateway_url)

    def _restore_endpoints(self) -> None:
        if self._saved_urls is None:
            return
        from discord.gateway import DiscordWebSocket
        from discord.http import Route

        Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = self._saved_urls
        self._saved_urls = None

    def _make_client(self) -> discord.Client:
        import discord

        # Tether sends no voice: skip the "PyNaCl/davey is not installed" warnings.
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
        intents = discord.Intents.none()
        for name in self.config.intents:
            setattr(intents, name, True)
        client = discord.Client(
            intents=intents,
            # A rate-limit wait longer than this (discord.py makes it at least 30 s) raises
            # RateLimited (→ SendRetryable after retry_after) instead of sleeping; shorter
            # ones are per-route asyncio sleeps, cut off by send_timeout.
            max_ratelimit_timeout=self.config.send_timeout,
        )
        # discord.py calls the client's on_<event> attributes (what @client.event sets).
        handlers: dict[str, Any] = {
            "on_connect": self._on_connect,
            "on_resumed": self._on_resumed,
            "on_disconnect": self._on_disconnect,
            "on_message": self._on_message,
            "on_raw_message_edit": self._on_raw_message_edit,
        }
        for name, handler in handlers.items():
            setattr(client, name, handler)
        if self.config.ask_command:
            self._tree = self._make_tree(client)
        return client

    async def _run(self) -> None:
        """discord.py's connect loop (it reconnects and resumes by itself), restarted after
        anything it does not handle (an event it cannot parse ends it), but given up for
        good after what reconnecting cannot fix: a refused intent, a rejected token."""
        import discord

        failures = 0
        while True:
            try:
                await self.client.connect(reconnect=True)
                return  # the client was closed
            except discord.PrivilegedIntentsRequired:
                wanted = [name for name in self.config.intents if name in PRIVILEGED_INTENTS]
                self._problem = (
                    f"Discord refused the privileged intent(s) {', '.join(wanted) or '?'}"
                    " (close code 4014): switch them on under Bot → Privileged Gateway"
                    " Intents in the developer portal, or remove them from"
                    " platforms.discord.intents"
                )
                log.error("discord.intents_refused", intents=wanted, reason=self._problem)
                return
            except discord.ConnectionClosed as exc:
                why = _FATAL_CLOSE.get(exc.code, exc.reason or "closed")
                self._problem = f"the gateway closed the connection with code {exc.code}: {why}"
                log.error("discord.gateway_closed", code=exc.code, reason=self._problem)
                return
            except Exception as exc:
                failures += 1
                delay = self._delay(failures)
                self._problem = f"the gateway connection failed: {_describe(exc)}"
                log.warning("discord.gateway_failed", error=_describe(exc), retry_in_s=delay)
                ws = self.client.ws
                if ws is not None:
                    with contextlib.suppress(Exception):
                        await ws.close(code=4000)
                await asyncio.sleep(delay)
            finally:
                self._connected = False

    # -- gateway events -------------------------------------------------------------

    async def _on_connect(self) -> None:
        """READY: a new session, so whatever came since the last one may be missing."""
        self._connected = True
        self._problem = None
        log.info("discord.connected", session="new")
        inbox = self._inbox
        if inbox is None or self.config.backfill_hours <= 0:
            return
        previous = self._backfill_task
        if previous is not None and not previous.done():
            previous.cancel()
        self._backfill_task = asyncio.create_task(self._backfill(inbox), name="discord-backfill")

    async def _on_resumed(self) -> None:
        self._connected = True
        self._problem = None  # Discord replays what was missed: no backfill needed
        log.info("discord.connected", session="resumed")

    async def _on_disconnect(self) -> None:
        if self._connected:
            log.warning("discord.disconnected")
        self._connected = False

    async def _on_message(self, message: discord.Message) -> None:
        inbox = self._inbox
        if inbox is None:  # stopping: backfill finds it after the restart
            return
        try:
            await self._ingest(inbox, message.channel.id, [message])
        except Exception as exc:
            log.error("discord.accept_failed", message_id=message.id, error=_describe(exc))

    async def _on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        inbox = self._inbox
        if inbox is None:
            return
        edited = payload.data.get("edited_timestamp")
        if not edited:  # an embed unfurl or a flag change, not the author editing
            return
        outcome = self.normalize(payload.message, edited=str(edited))
        if isinstance(outcome, Dropped):
            self._log_dropped(outcome, payload.message_id)
            return
        try:
            await inbox.accept([outcome])
        except Exception as exc:
            log.error("discord.accept_failed", message_id=payload.message_id, error=_describe(exc))

    async def _ingest(
        self, inbox: Inbox, channel_id: int, messages: Sequence[discord.Message]
    ) -> None:
        """Commit the messages' events and the channel's last seen id in one transaction."""
        events: list[Event] = []
        for message in messages:
            outcome = self.normalize(message)
            if isinstance(outcome, Event):
                events.append(outcome)
            else:
                self._log_dropped(outcome, message.id)
        last = max(message.id for message in messages)
        await inbox.accept(events, cursors={cursor_name(channel_id): str(last)})

    # -- backfill -------------------------------------------------------------------

    async def _backfill(self, inbox: Inbox) -> None:
        """Read each recently active channel after its last seen message, oldest first."""
        import discord

        since = time.time() - self.config.backfill_hours * 3600
        cursors = await inbox.store.recent_cursors(CURSOR_PREFIX, since)
        channels = [
            (int(name.split(":")[2]), int(value))
            for name, value in cursors.items()
            if name.endswith(":last") and value.isdigit()
        ]
        log.info("discord.backfill_started", channels=len(channels))
        found = 0
        for channel_id, last in channels:
            try:
                found += await self._backfill_channel(inbox, channel_id, last)
            except asyncio.CancelledError:
                raise
            except (discord.Forbidden, discord.NotFound) as exc:
                # Deleted, or the bot was removed: it stops being "recent" within the window.
                log.info("discord.backfill_skipped", channel=channel_id, error=_describe(exc))
            except Exception as exc:
                log.warning("discord.backfill_failed", channel=channel_id, error=_describe(exc))
        log.info("discord.backfill_done", channels=len(channels), messages=found)

    async def _backfill_channel(self, inbox: Inbox, channel_id: int, last: int) -> int:
        import discord

        channel = await self.client.fetch_channel(channel_id)
        if not isinstance(channel, discord.abc.Messageable):
            return 0
        page: list[discord.Message] = []
        count = 0
        history = channel.history(
            limit=self.config.backfill_limit, after=discord.Object(last), oldest_first=True
        )
        async for message in history:
            page.append(message)
            if len(page) >= _BACKFILL_PAGE:
                await self._ingest(inbox, channel_id, page)
                count, page = count + len(page), []
        if page:
            await self._ingest(inbox, channel_id, page)
            count += len(page)
        if count:
            log.info("discord.backfilled", channel=channel_id, messages=count)
        if count >= self.config.backfill_limit:
            log.warning(
                "discord.backfill_truncated", channel=channel_id, limit=self.config.backfill_limit
            )
        return count

    # -- normalize ------------------------------------------------------------------

    def normalize(self, message: discord.Message, *, edited: str | None = None) -> Event | Dropped:
        """One message (or its edit) → an :class:`Event`, or why not. Never raises."""
        try:
            return self._normalize(message, edited)
        except Exception as exc:  # a shape we cannot read: skip it, never fail ingress
            return Dropped("discord.skipped", f"cannot normalize: {_describe(exc)}")

    def _normalize(self, message: discord.Message, edited: str | None) -> Event | Dropped:
        import discord

        author = message.author
        if self.bot_id is not None and author.id == self.bot_id:
            return Dropped("discord.ignored", "our own message")
        if (author.bot or message.webhook_id is not None) and self.config.ignore_bots:
            return Dropped("discord.ignored", "from a bot or webhook")
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return Dropped("discord.skipped", f"system message ({message.type.name})")
        guild_id = _guild_id(message)
        chat_type: ChatType = "dm" if guild_id is None else "group"
        mentions = [str(user.id) for user in message.mentions]
        # People often @ the bot's own role (same name, listed first) instead of the bot.
        bot_role = any(
            role.tags is not None and role.tags.bot_id == self.bot_id
            for role in message.role_mentions
        )
        mentions_bot = self.bot_id is not None and (str(self.bot_id) in mentions or bot_role)
        reference = message.reference
        reply_to = (
            str(reference.message_id)
            if reference is not None
            and reference.message_id is not None
            and reference.type is discord.MessageReferenceType.reply
            else None
        )
        resolved = reference.resolved if reference is not None else None
        reply_to_bot = (
            isinstance(resolved, discord.Message)
            and self.bot_id is not None
            and resolved.author.id == self.bot_id
        )
        attachments = [_attachment(item) for item in message.attachments]
        text = message.clean_content  # <@123> → @name: readable for a handler or a model
        if not text and not attachments:
            return Dropped("discord.skipped", "no text or attachments (is message_content on?)")
        addressed = mentions_bot or reply_to_bot
        if chat_type == "group" and self.config.require_mention and not addressed:
            return Dropped("discord.ignored", "server message not addressed to the bot")
        command = parse_command(self._without_bot_mention(message.content))
        kind = Kind.EDIT if edited else Kind.COMMAND if command else Kind.MESSAGE
        channel = message.channel
        meta: dict[str, Any] = {"channel_id": str(channel.id)}
        if guild_id is not None:
            meta["guild_id"] = str(guild_id)
        if isinstance(channel, discord.Thread):
            # A thread is a channel of its own: its id is the chat, so replies land in it
            # whether or not discord.py has the thread cached; the parent is kept here.
            meta["parent_id"] = str(channel.parent_id)
        if edited:
            meta["edited_timestamp"] = edited
        return Event(
            key=f"dc:edit:{message.id}:{edited}" if edited else f"dc:msg:{message.id}",
            platform=PLATFORM,
            kind=kind,
            conversation=Conversation(
                platform=PLATFORM, chat_id=str(channel.id), chat_type=chat_type
            ),
            sender=Sender(id=str(author.id), name=author.display_name, is_bot=author.bot),
            message_id=str(message.id),
            text=text,
            command=command[0] if command and not edited else None,
            args=command[1] if command and not edited else "",
            reply_to=reply_to,
            reply_to_bot=reply_to_bot,
            mentions=mentions,
            mentions_bot=mentions_bot,
            attachments=attachments,
            timestamp=message.edited_at if edited and message.edited_at else message.created_at,
            meta=meta,
        )

    def _without_bot_mention(self, content: str) -> str:
        """``<@bot> /help`` → ``/help``: in servers a command comes after the mention."""
        if self.bot_id is None:
            return content
        return re.sub(rf"^\s*<@!?{self.bot_id}>\s*", "", content)

    def _log_dropped(self, dropped: Dropped, message_id: int) -> None:
        emit = log.info if dropped.log_event == "discord.ignored" else log.warning
        emit(dropped.log_event, message_id=message_id, reason=dropped.reason)

    # -- /ask -----------------------------------------------------------------------

    def _make_tree(self, client: discord.Client) -> app_commands.CommandTree[discord.Client]:
        from discord import app_commands

        tree = app_commands.CommandTree(client)

        @tree.command(name="ask", description="Ask the agent")
        @app_commands.describe(question="What you want to ask")
        async def ask(interaction: discord.Interaction, question: str) -> None:
            await self._on_ask(interaction, question)

        return tree

    async def _sync_commands(self) -> None:
        """Register ``/ask`` (a bulk overwrite: syncing the same command again is a no-op)."""
        if self._tree is None:
            return
        try:
            synced = await self._tree.sync()
            log.info("discord.commands_synced", commands=[command.name for command in synced])
        except Exception as exc:  # the bot still works without its slash command
            log.warning("discord.commands_sync_failed", error=_describe(exc))

    async def _on_ask(self, interaction: discord.Interaction, question: str) -> None:
        """Defer at once (Discord wants an answer within 3 s), then commit the event.

        The reply edits the deferred response through the interaction's webhook while
        its token is valid (15 minutes); later replies go to the channel instead.
        """
        import discord

        deferred = True
        try:
            await interaction.response.defer()
        except discord.HTTPException as exc:  # expired (>3 s) or already answered (a replay)
            deferred = False
            log.warning("discord.defer_failed", interaction_id=interaction.id, error=_describe(exc))
        inbox = self._inbox
        if inbox is None:
            log.warning("discord.interaction_dropped", reason="stopping")
            return
        event = self.interaction_event(interaction, question, deferred=deferred)
        try:
            await inbox.accept([event])
        except Exception as exc:
            log.error("discord.accept_failed", interaction_id=interaction.id, error=_describe(exc))

    def interaction_event(
        self, interaction: discord.Interaction, question: str, *, deferred: bool
    ) -> Event:
        user = interaction.user
        meta: dict[str, Any] = {"interaction_id": str(interaction.id)}
        if interaction.guild_id is not None:
            meta["guild_id"] = str(interaction.guild_id)
        if deferred:
            created = interaction.created_at.timestamp()
            meta[REPLY_META] = {
                "interaction": {
                    "application_id": str(interaction.application_id),
                    "token": interaction.token,
                    "expires": created + INTERACTION_TTL,
                }
            }
        return Event(
            key=f"dc:int:{interaction.id}",
            platform=PLATFORM,
            kind=Kind.COMMAND,
            conversation=Conversation(
                platform=PLATFORM,
                chat_id=str(interaction.channel_id),
                chat_type="dm" if interaction.guild_id is None else "group",
            ),
            sender=Sender(id=str(user.id), name=user.display_name, is_bot=user.bot),
            text=question,
            command="ask",
            args=question,
            mentions_bot=True,
            timestamp=interaction.created_at,
            meta=meta,
        )

    # -- send -----------------------------------------------------------------------

    def text_length(self, text: str) -> int:
        """UTF-16 units: never fewer than the characters Discord counts, so a chunk fits."""
        return utf16_len(text)

    async def send(self, message: OutMessage) -> Sent:
        import discord

        client = self._client
        if client is None:
            raise SendRetryable("discord adapter is not open")
        try:
            return await asyncio.wait_for(self._send(client, message), self.config.send_timeout)
        except TimeoutError as exc:
            raise SendAmbiguous(f"no answer within {self.config.send_timeout} s") from exc
        except discord.RateLimited as exc:
            raise SendRetryable(_describe(exc), retry_after=exc.retry_after) from exc
        except discord.HTTPException as exc:
            raise classify(exc) from exc
        except (aiohttp.ClientConnectorError, ConnectionRefusedError) as exc:
            raise SendRetryable(_describe(exc)) from exc  # never connected: not sent
        except (aiohttp.ClientError, OSError) as exc:
            raise SendAmbiguous(_describe(exc)) from exc

    async def _send(self, client: discord.Client, message: OutMessage) -> Sent:
        import discord

        interaction = message.meta.get("interaction")
        if isinstance(interaction, dict) and message.key.endswith("#0"):
            if float(interaction.get("expires", 0)) - _INTERACTION_MARGIN > time.time():
                try:
                    return await self._edit_original(client, interaction, message)
                except discord.HTTPException as exc:
                    if exc.status not in (401, 404) and exc.code not in (10015, 50027):
                        raise
                    log.warning("discord.interaction_expired", key=message.key)
            else:
                log.info("discord.interaction_expired", key=message.key)
        channel = client.get_partial_messageable(int(message.target.chat_id))
        if message.reply_to and message.reply_to.isdigit():
            reference = discord.MessageReference(
                message_id=int(message.reply_to),
                channel_id=channel.id,
                fail_if_not_exists=False,  # the quoted message may be gone: send anyway
            )
            sent = await channel.send(
                message.text,
                nonce=send_nonce(message.key),  # discord.py adds enforce_nonce=true
                reference=reference,
                allowed_mentions=_allowed_mentions(),
            )
        else:
            sent = await channel.send(
                message.text, nonce=send_nonce(message.key), allowed_mentions=_allowed_mentions()
            )
        return Sent(platform_id=str(sent.id))

    async def _edit_original(
        self, client: discord.Client, interaction: dict[str, Any], message: OutMessage
    ) -> Sent:
        """Edit the deferred response: idempotent, so a retry cannot post a second answer."""
        from discord.http import Route

        route = Route(
            "PATCH",
            "/webhooks/{webhook_id}/{webhook_token}/messages/@original",
            webhook_id=int(interaction["application_id"]),
            webhook_token=str(interaction["token"]),
        )
        payload = {"content": message.text, "allowed_mentions": _allowed_mentions().to_dict()}
        data = await client.http.request(route, json=payload)
        return Sent(platform_id=str(data.get("id")) if isinstance(data, dict) else None)

    # -- helpers --------------------------------------------------------------------

    def _delay(self, failures: int) -> float:
        ceiling = min(self.backoff_max, self.backoff_base * 2.0 ** min(failures - 1, 16))
        return round(ceiling * random.uniform(0.5, 1.0), 3)


def classify(exc: discord.HTTPException) -> SendError:
    """Which ``Send*`` error a refused send is. Sends are idempotent (nonce), so only
    "never will work" (4xx) stops the retries; 429 and 5xx wait and try again."""
    text = _describe(exc)
    if exc.status == 429:
        return SendRetryable(text, retry_after=_retry_after(exc))
    if exc.status >= 500:
        return SendRetryable(text)
    return SendFatal(text)  # 403 Forbidden, 404 Unknown Channel, 400 invalid, 401 token


def _retry_after(exc: discord.HTTPException) -> float | None:
    with contextlib.suppress(Exception):
        return float(exc.response.headers.get("Retry-After", ""))
    return None


def _allowed_mentions() -> discord.AllowedMentions:
    """An agent's text may say @everyone or name a role; only people are pinged."""
    import discord

    return discord.AllowedMentions(everyone=False, roles=False, users=True, replied_user=True)


def _guild_id(message: discord.Message) -> int | None:
    """The server, also when discord.py has not cached it (the channel is then partial)."""
    if message.guild is not None:
        return message.guild.id
    guild_id = getattr(message.channel, "guild_id", None)
    return guild_id if isinstance(guild_id, int) else None


def _attachment(item: discord.Attachment) -> Attachment:
    mime = item.content_type
    major = (mime or "").split("/", 1)[0]
    kind = major if major in ("image", "video", "audio") else "file"
    return Attachment(
        kind=kind,
        file_id=str(item.id),
        url=item.url,
        mime=mime,
        size=item.size,
        name=item.filename,
    )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
