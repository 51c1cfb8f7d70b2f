"""What one client may hold on the HTTP server, and what a stranger may put in its log.

The server faces the internet (webhooks), so a client that connects and never finishes
a request, or opens thousands of connections, must not hold it. aiohttp's own knobs
do most of it, set in :mod:`.http`: ``keepalive_timeout`` closes a connection that has
not sent a complete request head within ``http.read_timeout`` of connecting (or of its
last answer), ``client_max_size`` refuses a body over 1 MiB with 413,
``max_line_size``/``max_field_size`` bound the head, and ``lingering_time`` bounds how
long an unread body is drained before closing. What aiohttp does not do is here:

- :func:`body_deadline` — aiohttp has no body read timeout: ``request.read()`` waits as
  long as the client trickles. Every body is read here first, within the timeout.
- :class:`CappedSite` — aiohttp has no connection limit. This site counts with the
  server's own connection tracking and refuses connections over ``http.max_connections``.
- :class:`RequestLog` — aiohttp logs every request it cannot parse at ERROR with a
  traceback, so anyone could fill the log; those become one warning line.

What belongs in a reverse proxy instead (TLS, per-IP rate limits, slowloris at scale) is
in docs/operations.md.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler, Middleware
from aiohttp.web_protocol import RequestPayloadError

log = structlog.get_logger("tether.http")

#: The answer to a connection over the cap, sent before anything is read from it.
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\nRetry-After: 1\r\n"
    b"\r\nbusy\n"
)


def body_deadline(timeout: float) -> Middleware:
    """Read every request body before its handler runs, within ``timeout`` seconds.

    A body still incomplete by then is answered 408 and the connection closed (after
    aiohttp's bounded lingering). A body that does not decode (broken chunking, a bad
    gzip stream) is 400. Handlers then get the body from aiohttp's cache.
    """

    @web.middleware
    async def read_body(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.body_exists:
            try:
                async with asyncio.timeout(timeout):
                    await request.read()
            except TimeoutError:
                log.warning(
                    "http.body_timeout", path=request.path, timeout_s=timeout, remote=request.remote
                )
                raise web.HTTPRequestTimeout(
                    text="request body too slow", headers={"Connection": "close"}
                ) from None
            except (HttpProcessingError, RequestPayloadError) as exc:
                log.warning("http.bad_body", path=request.path, reason=_one_line(exc))
                raise web.HTTPBadRequest(text="unreadable body") from None
        return await handler(request)

    return read_body


class CappedSite(web.BaseSite):
    """A TCP site that serves at most ``limit`` connections at once (aiohttp has no cap).

    The count is the server's own connection tracking (``Server.connections``). A
    connection over the cap is answered 503 and closed before its request is read, and
    the first refusal of a run of them is logged (``http.at_capacity``), the recovery
    too (``http.below_capacity``). Connections accepted in one burst are counted a loop
    turn later, so a burst can overshoot the cap by up to one accept batch (the listen
    backlog, 128).
    """

    def __init__(self, runner: web.BaseRunner, host: str, port: int, limit: int) -> None:
        super().__init__(runner)
        self._host = host
        self._port = port
        self._limit = limit
        self._refused = 0

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._protocol, self._host, self._port, backlog=self._backlog
        )

    def _protocol(self) -> asyncio.BaseProtocol:
        server = self._runner.server
        assert server is not None  # the runner is set up before a site exists
        if len(server.connections) < self._limit:
            if self._refused:
                log.info("http.below_capacity", refused=self._refused)
                self._refused = 0
            return server()
        if not self._refused:
            log.warning(
                "http.at_capacity",
                max_connections=self._limit,
                hint="more are answered 503; raise http.max_connections or limit per IP in a proxy",
            )
        self._refused += 1
        return _Refusal()


class _Refusal(asyncio.Protocol):
    """Over the cap: one 503 and hang up, without reading the request."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if isinstance(transport, asyncio.WriteTransport):
            transport.write(BUSY)
        transport.close()


class RequestLog(logging.Logger):
    """aiohttp's server logger, minus the tracebacks a stranger can cause.

    aiohttp answers a request it cannot parse (a bad request line, a duplicate
    ``Content-Type``, a header over 8 KiB, a non-HTTP byte stream) with 400, and logs it
    at ERROR with a traceback. Here that is one ``http.bad_request`` warning; anything
    else aiohttp logs (a handler that raised: a bug of ours) stays an error with its
    traceback, through aiohttp's own logger and handlers.
    """

    def __init__(self) -> None:
        super().__init__("aiohttp.server")
        self.parent = logging.getLogger("aiohttp.server")

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            log.warning("http.bad_request", status=exc_info.code, reason=_one_line(exc_info))
            return
        super().exception(msg, *args, exc_info=exc_info, **kwargs)


def _one_line(exc: BaseException) -> str:
    """aiohttp's messages span lines (the offending bytes, a caret under them)."""
    text = exc.message if isinstance(exc, HttpProcessingError) else str(exc)
    return " ".join(str(text).split())[:200]
