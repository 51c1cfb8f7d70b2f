"""In over Socket Mode (``mode: socket``, the default): no public URL, slack_sdk's aiohttp
:class:`SocketModeClient` holds the WebSocket, and each envelope is acknowledged only
once its payload is committed to the inbox.

The app-level token (``xapp-…``) opens the connection: ``apps.connections.open`` gives
the URL. The first one is asked for here, at :meth:`SocketMode.start`, so a refused
token stops the start with a line naming it instead of the SDK retrying it forever;
the SDK then connects (in the background, as the other adapters' ingress does) and
replaces the connection on a ``disconnect`` message (Slack's ``refresh_requested``
every few hours), on a close, and when its pings go unanswered for four intervals.

Slack resends an envelope nobody acknowledged, with ``retry_attempt`` counting up and
the payload unchanged; the normalizer's key (the message's channel and ``ts``, an
interaction's ``trigger_id``) makes the resend the same inbox row, so it is
acknowledged and nothing else. A commit that fails (the store is down, Tether is
stopping) is not acknowledged, so Slack delivers the envelope again. An envelope whose
payload no resend could make usable (not an object, an unknown type) is acknowledged
and skipped with a reason, so it does not come back for ever.

The envelopes are read raw (a message listener, not the SDK's ``SocketModeRequest``):
the SDK raises on a payload that is not an object, before any listener could
acknowledge it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.web.async_client import AsyncWebClient

from tether.adapters.kit import describe, open_with_retries
from tether.adapters.slack.fields import IGNORED, SKIPPED

log = structlog.get_logger("tether.slack")

#: Normalize one payload and hand it to the inbox; raises when it was not committed.
Commit = Callable[[dict[str, Any]], Awaitable[None]]
#: The envelope types that carry a payload for the normalizer.
_PAYLOADS = frozenset({"events_api", "slash_commands", "interactive"})
#: ``apps.connections.open`` refusals no retry gets past (a wrong or revoked token, or
#: a bot token where the app-level one belongs).
_REFUSED = re.compile(
    r"invalid_auth|not_authed|token_revoked|account_inactive|not_allowed_token_type"
)
#: Seconds :meth:`SocketMode.stop` waits for commits in flight to finish (and be
#: acknowledged) before it closes the socket under them.
STOP_TIMEOUT = 5.0


class SocketMode:
    """One Socket Mode connection for one app, feeding :data:`Commit`."""

    def __init__(
        self,
        app_token: str,
        web: AsyncWebClient,
        commit: Commit,
        ping_interval: float = 5.0,
        *,
        open_attempts: int = 5,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
    ) -> None:
        self._app_token = app_token
        self._web = web
        self._commit = commit
        self._ping_interval = ping_interval
        self._open_attempts = open_attempts
        self._backoff = (backoff_base, backoff_max)
        self._client: SocketModeClient | None = None
        self._connecting: asyncio.Task[None] | None = None
        #: Envelopes being committed; :meth:`stop` lets them finish.
        self._inflight: set[asyncio.Task[Any]] = set()
        #: Envelopes acknowledged since :meth:`start` (committed, duplicates or skipped).
        self.acked = 0

    @property
    def connected(self) -> bool:
        session = self._client.current_session if self._client is not None else None
        return session is not None and not session.closed

    async def start(self) -> None:
        """Ask for the first URL (a refused token raises :class:`GatewayError`), then
        connect in the background; :attr:`connected` tells when the socket is up."""
        url = await open_with_retries(
            "slack",
            self._open_attempts,
            self._issue_url,
            refused=_refused,
            unreachable="apps.connections.open",
            base=self._backoff[0],
            cap=self._backoff[1],
        )
        client = SocketModeClient(
            app_token=self._app_token,
            web_client=self._web,
            ping_interval=self._ping_interval,
        )
        client.wss_uri = url  # connect() uses it instead of asking again
        client.message_listeners.append(self._on_message)
        self._client = client
        self._connecting = asyncio.create_task(
            client.connect(),  # type: ignore[no-untyped-call]
            name="slack-socket-mode",
        )

    async def stop(self) -> None:
        """Let commits in flight finish and be acknowledged, then close the socket."""
        client, self._client = self._client, None
        connecting, self._connecting = self._connecting, None
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=STOP_TIMEOUT)
        if client is not None:
            await client.close()  # type: ignore[no-untyped-call]
        if connecting is not None:
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await connecting

    async def _issue_url(self) -> str:
        found = await self._web.apps_connections_open(app_token=self._app_token)
        url = found.get("url")
        if not isinstance(url, str) or not url:
            raise ValueError("apps.connections.open answered without a url")
        return url

    async def _on_message(
        self, client: AsyncBaseSocketModeClient, message: dict[str, Any], _raw: str | None
    ) -> None:
        """Commit, then acknowledge; an envelope not committed is left unacknowledged.

        Runs in a task of the SDK's per message, so envelopes are committed side by
        side; a message without ``envelope_id`` (``hello``) asks for no answer.
        """
        envelope_id = message.get("envelope_id")
        if not isinstance(envelope_id, str) or not envelope_id:
            if message.get("type") == "hello":
                log.info("slack.socket_hello", connections=message.get("num_connections"))
            return
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
        try:
            if await self._take(envelope_id, message):
                await self._acknowledge(client, envelope_id)
        finally:
            if task is not None:
                self._inflight.discard(task)

    async def _take(self, envelope_id: str, message: dict[str, Any]) -> bool:
        """Whether the envelope may be acknowledged: committed, or never usable."""
        kind, payload = message.get("type"), message.get("payload")
        retry = message.get("retry_attempt")
        if kind not in _PAYLOADS:
            log.info(IGNORED, envelope=envelope_id, reason=f"envelope type {kind!r}")
            return True
        if not isinstance(payload, dict):
            reason = f"{kind} payload is {type(payload).__name__}, not an object"
            log.warning(SKIPPED, envelope=envelope_id, reason=reason)
            return True
        try:
            await self._commit(payload)
        except Exception as exc:
            log.error(
                "slack.accept_failed",
                error=describe(exc),
                envelope=envelope_id,
                retry_attempt=retry,
            )
            return False
        return True

    async def _acknowledge(self, client: AsyncBaseSocketModeClient, envelope_id: str) -> None:
        """``{"envelope_id": …}`` on the socket. When the socket is gone, Slack resends
        the envelope on the next one, and the resend is the same inbox row."""
        try:
            await client.send_socket_mode_response({"envelope_id": envelope_id})
        except Exception as exc:
            log.warning("slack.ack_failed", envelope=envelope_id, error=describe(exc))
            return
        self.acked += 1


def _refused(exc: BaseException) -> str | None:
    """The start-up error line when Slack rejected the app-level token."""
    found = _REFUSED.search(str(exc))
    if found:
        return (
            "platforms.slack: app_token was rejected "
            f"(apps.connections.open: {found.group(0)}; it must be an xapp-… token "
            "with connections:write)"
        )
    return None
