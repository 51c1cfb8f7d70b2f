"""The Socket Mode half of the fake Slack: a WebSocket server on 127.0.0.1 for the real
slack_sdk aiohttp ``SocketModeClient``.

Attach it to a :class:`~tests.fakes.slack_api.FakeSlack` and ``apps.connections.open``
hands out its ``ws://`` URL. What the SDK's client relies on, it does as Slack does:

- ``hello`` first on every connection (the client needs nothing before it, but Slack
  always sends it, with ``num_connections`` and ``debug_info``);
- pings: the client connects with ``autoping=False`` and pings every ``ping_interval``
  with ``sdk-ping-pong:{time}``; it replaces a connection whose pongs stop for four
  intervals, and aiohttp's heartbeat closes one whose pong is late by half an interval.
  The fake pongs each ping with its data unless :attr:`FakeSocketMode.answer_pings` is
  off; :meth:`FakeSocketMode.round_trip` pings the client and waits for its pong;
- envelopes (:meth:`FakeSocketMode.push`): ``envelope_id``, ``type``, ``payload``,
  ``accepts_response_payload``, ``retry_attempt``, ``retry_reason``. Each is
  acknowledged with ``{"envelope_id": …}`` on the socket; :attr:`FakeSocketMode.acks`
  lists them in arrival order, :meth:`FakeSocketMode.acked` waits for one, and
  :attr:`FakeSocketMode.ack_probe` runs at each arrival (what the store holds then);
- :meth:`FakeSocketMode.redeliver`: an envelope again with ``retry_attempt`` one up and
  the payload unchanged, under a new ``envelope_id`` (a client must not rely on the id
  to deduplicate);
- :meth:`FakeSocketMode.disconnect` sends ``{"type": "disconnect", "reason":
  "refresh_requested"}`` (the client asks ``apps.connections.open`` again and moves);
  :meth:`FakeSocketMode.drop` closes the socket, with a close frame or, ``abrupt``, by
  cutting the TCP connection (the client notices at its next ping check).

Nothing here sleeps to synchronize: every change wakes :meth:`FakeSocketMode.wait_for`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.slack_api import APP_ID, FakeSlack

#: Envelope types that Slack marks as accepting a response payload.
_RESPONDS = frozenset({"slash_commands", "interactive"})


@dataclass
class Envelope:
    """One delivery as it went out: a redelivery is a new :class:`Envelope`."""

    envelope_id: str
    type: str
    payload: Any
    accepts_response_payload: bool
    retry_attempt: int = 0
    retry_reason: str = ""
    #: Which connection (1, 2, …) it was sent on.
    connection: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def message(self) -> dict[str, Any]:
        return {
            "envelope_id": self.envelope_id,
            "type": self.type,
            "payload": self.payload,
            "accepts_response_payload": self.accepts_response_payload,
            "retry_attempt": self.retry_attempt,
            "retry_reason": self.retry_reason,
            **self.extra,
        }


class FakeSocketMode:
    """Socket Mode on an ephemeral port; one live socket at a time is the current one."""

    def __init__(self, slack: FakeSlack, app_id: str = APP_ID) -> None:
        self.slack = slack
        self.app_id = app_id
        self.port = 0
        #: Connections accepted (each got its ``hello``).
        self.connections = 0
        #: Envelope ids acknowledged, in arrival order (a duplicate ack appears twice).
        self.acks: list[str] = []
        #: Run when an ack arrives, before it is recorded; its result is in :attr:`probes`.
        self.ack_probe: Callable[[str], Awaitable[Any]] | None = None
        self.probes: dict[str, Any] = {}
        #: Every envelope pushed, by id.
        self.sent: dict[str, Envelope] = {}
        #: Frames from the client that were neither an ack nor a ping (kept to look at).
        self.other: list[str] = []
        self.answer_pings = True
        self.pings = 0
        self._pongs: set[bytes] = set()
        self._probe_ids = itertools.count(1)
        self._live: list[tuple[int, web.WebSocketResponse, asyncio.BaseTransport | None]] = []
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/link/?ticket=fake-ticket&app_id={self.app_id}"

    @property
    def open(self) -> bool:
        """A socket is connected (the current one)."""
        return any(not ws.closed for _n, ws, _t in self._live)

    @property
    def connection_opens(self) -> int:
        """How many times ``apps.connections.open`` was asked for a URL."""
        return sum(1 for method, _args in self.slack.log if method == "apps.connections.open")

    async def start(self) -> FakeSocketMode:
        app = web.Application()
        app.router.add_get("/link/", self._socket)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self.slack.socket_url = self.url
        return self

    async def stop(self) -> None:
        self.slack.socket_url = None
        for _n, ws, _t in list(self._live):
            await ws.close()
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    async def wait_for(self, condition: Callable[[], bool], timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(condition)

    async def connected(self, connections: int = 1, timeout: float = 10.0) -> None:
        """Until ``connections`` sockets were accepted, one is open and its client reads
        it (it answered a ping: the SDK had its session and its receiving task by then)."""
        await self.wait_for(lambda: self.connections >= connections and self.open, timeout)
        await self.round_trip(timeout)

    async def acked(self, envelope: Envelope | str, timeout: float = 10.0) -> None:
        """Until the envelope's acknowledgement has arrived."""
        envelope_id = envelope if isinstance(envelope, str) else envelope.envelope_id
        await self.wait_for(lambda: envelope_id in self.acks, timeout)

    # -- what Slack sends ------------------------------------------------------------

    async def push(
        self,
        kind: str,
        payload: Any,
        *,
        retry_attempt: int = 0,
        retry_reason: str = "",
        accepts_response_payload: bool | None = None,
        **extra: Any,
    ) -> Envelope:
        """Send one envelope on the current socket."""
        responds = (
            kind in _RESPONDS if accepts_response_payload is None else accepts_response_payload
        )
        envelope = Envelope(
            envelope_id=str(uuid.uuid4()),
            type=kind,
            payload=payload,
            accepts_response_payload=responds,
            retry_attempt=retry_attempt,
            retry_reason=retry_reason,
            extra=extra,
        )
        envelope.connection, ws = self._current()
        self.sent[envelope.envelope_id] = envelope
        await ws.send_str(json.dumps(envelope.message()))
        return envelope

    async def redeliver(self, envelope: Envelope, reason: str = "timeout") -> Envelope:
        """``envelope`` again, as Slack resends one not acknowledged in time."""
        return await self.push(
            envelope.type,
            envelope.payload,
            retry_attempt=envelope.retry_attempt + 1,
            retry_reason=reason,
            accepts_response_payload=envelope.accepts_response_payload,
            **envelope.extra,
        )

    async def send_raw(self, text: str) -> None:
        """A frame as given (not JSON, a message without an envelope id, …)."""
        await self._current()[1].send_str(text)

    async def disconnect(self, reason: str = "refresh_requested") -> None:
        """Slack's notice that this connection ends: the client should move to a new one."""
        message = {"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake"}}
        await self._current()[1].send_str(json.dumps(message))

    async def drop(self, *, abrupt: bool = False) -> None:
        """Close the current socket: a close frame, or (``abrupt``) the TCP connection cut
        with no frame at all, as when a network path dies."""
        _n, ws, transport = self._live[-1] if self._live else (0, None, None)
        if ws is None:
            raise RuntimeError("no socket to drop")
        if abrupt:
            assert transport is not None
            transport.abort()
        else:
            await ws.close(code=1001, message=b"going away")

    async def round_trip(self, timeout: float = 10.0) -> None:
        """Ping the client and wait for its pong: everything the client wrote before it
        answered has arrived (one TCP stream, in order)."""
        data = f"fake-probe:{next(self._probe_ids)}".encode()
        await self._current()[1].ping(data)
        await self.wait_for(lambda: data in self._pongs, timeout)

    # -- the socket ------------------------------------------------------------------

    def _current(self) -> tuple[int, web.WebSocketResponse]:
        for number, ws, _transport in reversed(self._live):
            if not ws.closed:
                return number, ws
        raise RuntimeError("no Socket Mode client is connected")

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        self.connections += 1
        entry = (self.connections, ws, request.transport)
        self._live.append(entry)
        hello = {
            "type": "hello",
            "num_connections": sum(1 for _n, w, _t in self._live if not w.closed),
            "debug_info": {"host": "applink-fake", "build_number": 1},
            "connection_info": {"app_id": self.app_id},
        }
        await ws.send_str(json.dumps(hello))
        await self._notify()
        try:
            async for frame in ws:
                if frame.type == WSMsgType.PING:
                    self.pings += 1
                    if self.answer_pings:
                        await ws.pong(frame.data)
                elif frame.type == WSMsgType.PONG:
                    self._pongs.add(bytes(frame.data))
                elif frame.type == WSMsgType.TEXT:
                    await self._received(frame.data)
                await self._notify()
        finally:
            self._live.remove(entry)
            await self._notify()
        return ws

    async def _received(self, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            message = None
        envelope_id = message.get("envelope_id") if isinstance(message, dict) else None
        if not isinstance(envelope_id, str):
            self.other.append(text)
            return
        if self.ack_probe is not None:
            self.probes[envelope_id] = await self.ack_probe(envelope_id)
        self.acks.append(envelope_id)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
