"""The Slack adapter: Socket Mode or the Events API in, ``chat.postMessage`` out, and the
reconciliation that makes a send exactly-once although Slack takes no idempotency key.

**Reconciling a send.** Every message carries its outbox key in ``metadata``
(:mod:`.send`). The adapter declares ``idempotent_send``, so the outbox hands it rows a
crash left ``sending`` and retries after an ambiguous failure, and makes that true
itself: before posting a key that may already have been posted, it reads the target's
recent messages (``conversations.history``, or ``conversations.replies`` in a thread,
with ``include_all_metadata``) and, when one of ours carries the key, returns that
message instead of posting again. A key "may already have been posted" when

- this process tried it before (a timeout, a dropped connection, a 5xx), or
- it is the first try of a key in this process within ``recovery_window`` seconds of
  :meth:`open`: rows a previous run left ``sending`` are resent right after open
  (the outbox's recovery), and the adapter cannot tell them from new rows, so during
  that window every first send pays one read (Tier 3, ~50 a minute).

When the read itself fails, the send raises :class:`SendRetryable` and waits: nothing
was posted by asking.

**The window left.** A duplicate is still possible when (1) a recovered row is first
sent more than ``recovery_window`` (300 s) after start — a lane held back that long by
rate limits or a long backlog; (2) more than ``reconcile_depth`` (100) messages were
posted to the channel (or the thread) after the lost one and before the read; (3)
Slack created the message but had not made it visible to ``conversations.history`` yet
when the read ran (not seen in the fake; Slack documents no such lag). The outbox's
``unknown`` policy does not apply: with ``idempotent_send`` no row is left ``unknown``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from tether.adapters.base import Adapter, Sent
from tether.adapters.kit import Dropped, open_with_retries
from tether.adapters.slack.config import SlackConfig
from tether.adapters.slack.fields import IGNORED, SKIPPED
from tether.adapters.slack.ingress import Rejected, Verifier, answer
from tether.adapters.slack.normalize import Bot, id_of, normalize
from tether.adapters.slack.send import Messages, client
from tether.adapters.untrusted import unstorable
from tether.errors import SendRetryable
from tether.events import Event, OutMessage, Target
from tether.limits import Limit

if TYPE_CHECKING:
    from tether.adapters.base import Ingress
    from tether.adapters.slack.socket_mode import SocketMode

log = structlog.get_logger("tether.slack")
_REFUSED_TOKEN = re.compile(r"invalid_auth|not_authed|token_revoked|account_inactive")


class SlackAdapter(Adapter):
    """One Slack app (``platforms.slack``): its bot's ids, read at :meth:`open` with
    ``auth.test``, tell our own messages and mentions of us from everyone else's."""

    platform = "slack"
    #: Characters. Slack truncates ``text`` past 40,000 and advises at most 4,000 per
    #: message; longer replies are split (code fences kept), each part its own key.
    text_limit = 4_000
    idempotent_send = True  # made true by reading the key back (module docstring)
    #: A streamed reply edits its preview with ``chat.update`` (Tier 3: ~50 a minute).
    can_edit, edit_interval = True, 1.2
    #: Seconds after :meth:`open` during which a key's first send is reconciled.
    recovery_window = 300.0
    open_attempts = 5
    backoff_base = 1.0
    backoff_max = 30.0
    #: Socket Mode: seconds between the SDK's pings. A socket that died without a close
    #: is noticed within about one interval, one whose pings go unanswered for four.
    socket_ping_interval = 5.0

    def __init__(self, config: SlackConfig) -> None:
        self.config = config
        self.bot_user_id: str | None = None
        self.bot_id: str | None = None
        self._messages: Messages | None = None
        self._inbox: Ingress | None = None
        self._socket: SocketMode | None = None
        self._opened_at = 0.0
        #: Keys this process has posted or tried to (their send may have happened).
        self._tried: set[str] = set()
        secret = config.signing_secret.get_secret_value() if config.signing_secret else ""
        self._verifier = Verifier(secret, config.max_age)

    # -- lifecycle ------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        if self.config.mode == "events":
            return self._inbox is not None
        return self._socket is not None and self._socket.connected

    @property
    def problem(self) -> str | None:
        if self.connected:
            return None
        if self.config.mode == "events":
            return "not accepting Events API posts (starting or stopping)"
        return "Socket Mode not connected (connecting or reconnecting)"

    async def open(self) -> None:
        """Who the bot is (``auth.test``): our own messages are ignored by these ids."""
        token = self.config.bot_token.get_secret_value()
        web_client = client(token, self.config.api_base, self.config.timeout)
        found = await open_with_retries(
            "slack",
            self.open_attempts,
            web_client.auth_test,
            refused=_refused,
            unreachable="auth.test",
            base=self.backoff_base,
            cap=self.backoff_max,
        )
        self.bot_user_id = _text(found.get("user_id"))
        self.bot_id = _text(found.get("bot_id"))
        self._messages = Messages(web_client, self.bot_id)
        self._opened_at = time.monotonic()
        log.info("slack.ready", user_id=self.bot_user_id, bot_id=self.bot_id, mode=self.config.mode)

    async def start(self, inbox: Ingress) -> None:
        self._inbox = inbox
        if self.config.mode == "socket":
            from tether.adapters.slack.socket_mode import SocketMode

            assert self.config.app_token is not None  # the config requires it
            web_client = client("", self.config.api_base, self.config.timeout)
            socket = SocketMode(
                self.config.app_token.get_secret_value(),
                web_client,
                self._commit_now,
                self.socket_ping_interval,
                open_attempts=self.open_attempts,
                backoff_base=self.backoff_base,
                backoff_max=self.backoff_max,
            )
            await socket.start()  # a refused app token raises here, before it is kept
            self._socket = socket

    async def stop(self) -> None:
        """Stop ingress; sending goes on until :meth:`close`."""
        self._inbox = None
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.stop()

    async def close(self) -> None:
        messages, self._messages = self._messages, None
        if messages is not None:
            session = getattr(messages.web, "session", None)
            if session is not None:
                await session.close()

    # -- ingress --------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        if self.config.mode == "events":
            app.router.add_post(self.config.events_path, self._events)

    async def _events(self, request: web.Request) -> web.Response:
        return await answer(request, self._verifier, self._commit_now if self._inbox else None)

    async def _commit_now(self, data: dict[str, Any]) -> None:
        """Normalize and commit one payload; refused (so not acknowledged) once stopping."""
        inbox = self._inbox
        if inbox is None:
            raise RuntimeError("tether is stopping; not accepted (Slack will redeliver)")
        outcome = self.normalize(data)
        if isinstance(outcome, Event) and (reason := unstorable(outcome)):
            outcome = Dropped(SKIPPED, reason)  # no redelivery could make it storable
        if isinstance(outcome, Dropped):
            emit = log.info if outcome.log_event == IGNORED else log.warning
            emit(outcome.log_event, event_id=id_of(data), reason=outcome.reason)
            return
        await inbox.accept([outcome])

    def normalize(self, data: Mapping[str, Any]) -> Event | Dropped:
        """:func:`.normalize.normalize` with this bot's identity and policy."""
        bot = Bot(
            user_id=self.bot_user_id,
            bot_id=self.bot_id,
            answer_channels=self.config.answer_channels,
            ignore_bots=self.config.ignore_bots,
        )
        return normalize(data, bot)

    def verify(
        self, body: bytes, headers: Mapping[str, str], now: float | None = None
    ) -> dict[str, Any] | Rejected:
        """See :meth:`.ingress.Verifier.verify`."""
        return self._verifier.verify(body, dict(headers), now)

    # -- send -----------------------------------------------------------------------

    def limits(self, target: Target) -> list[Limit]:
        """About one message a second per channel (Slack's ``chat.postMessage`` tier)."""
        if not self.config.rate_limits:
            return []
        return [Limit(f"slack:chat:{target.chat_id}", rate=1.0, burst=3.0)]

    async def send(self, message: OutMessage) -> Sent:
        messages = self._open()
        if self._may_be_sent(message.key):
            found = await messages.already_sent(message, self.config.reconcile_depth)
            if found is not None:
                log.info("slack.reconciled", key=message.key, ts=found.platform_id)
                return found
        self._tried.add(message.key)
        return await messages.post(message)

    async def edit(self, message: OutMessage, platform_id: str) -> Sent:
        return await self._open().update(message, platform_id)

    async def already_sent(self, message: OutMessage) -> Sent | None:
        """The message that carries ``message.key`` among the target's recent ones."""
        return await self._open().already_sent(message, self.config.reconcile_depth)

    def _may_be_sent(self, key: str) -> bool:
        if not key:
            return False
        if key in self._tried:
            return True
        return time.monotonic() - self._opened_at < self.recovery_window

    def _open(self) -> Messages:
        messages = self._messages
        if messages is None:
            raise SendRetryable("slack adapter is not open")
        return messages


def _refused(exc: BaseException) -> str | None:
    """The start-up error line when Slack rejected the bot token."""
    found = _REFUSED_TOKEN.search(str(exc))
    if found:
        return f"platforms.slack: bot_token was rejected (auth.test: {found.group(0)})"
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
