"""In over Socket Mode (``mode: socket``, the default): no public URL, slack_sdk's aiohttp
:class:`SocketModeClient` holds the WebSocket, and each envelope is acknowledged only
once its payload is committed to the inbox.

The app-level token (``xapp-…``) opens the connection (``apps.connections.open`` gives
the URL; the SDK reconnects on ``disconnect`` messages and dead pings). Slack resends
an envelope nobody acknowledged, with ``retry_attempt`` counting up and the payload
unchanged; the normalizer's key (the message's channel and ``ts``, an interaction's
``trigger_id``) makes the resend the same inbox row, so it is acknowledged and nothing
else. A commit that fails (the store is down, Tether is stopping) is not acknowledged,
so Slack delivers the envelope again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from tether.adapters.kit import describe

log = structlog.get_logger("tether.slack")

#: Normalize one payload and hand it to the inbox; raises when it was not committed.
Commit = Callable[[dict[str, Any]], Awaitable[None]]
#: The envelope types that carry a payload for the normalizer.
_PAYLOADS = frozenset({"events_api", "slash_commands", "interactive"})


class SocketMode:
    """One Socket Mode connection for one app, feeding :data:`Commit`."""

    def __init__(
        self, app_token: str, web: AsyncWebClient, commit: Commit, ping_interval: float = 5.0
    ) -> None:
        self._app_token = app_token
        self._web = web
        self._commit = commit
        self._ping_interval = ping_interval
        self._client: SocketModeClient | None = None
        self.acked = 0

    @property
    def connected(self) -> bool:
        session = self._client.current_session if self._client is not None else None
        return session is not None and not session.closed

    async def start(self) -> None:
        """Connect (the SDK retries a failed connect every ``ping_interval``)."""
        self._client = SocketModeClient(
            app_token=self._app_token,
            web_client=self._web,
            ping_interval=self._ping_interval,
        )
        self._client.socket_mode_request_listeners.append(self._on_request)
        await self._client.connect()  # type: ignore[no-untyped-call]

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()  # type: ignore[no-untyped-call]

    async def _on_request(
        self, client: AsyncBaseSocketModeClient, request: SocketModeRequest
    ) -> None:
        """Commit, then acknowledge; an envelope not committed is left unacknowledged."""
        if request.type in _PAYLOADS and isinstance(request.payload, dict):
            try:
                await self._commit(request.payload)
            except Exception as exc:
                log.error(
                    "slack.accept_failed",
                    error=describe(exc),
                    envelope=request.envelope_id,
                    retry_attempt=request.retry_attempt,
                )
                return
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
        self.acked += 1
