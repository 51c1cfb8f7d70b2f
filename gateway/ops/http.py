"""The one HTTP server per process: probes, metrics, and the adapters' webhook routes.

Adapters add their routes before the server starts; it is up before any webhook is
registered with a platform, so the first delivery finds it listening.

It faces the internet, so what one client may hold is bounded (``http.read_timeout``,
``http.max_connections``, 1 MiB bodies): aiohttp's own settings where it has them, and
:mod:`.http_guard` for what it has not (a body deadline, a connection cap, one log line
per malformed request instead of a traceback).
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tether.config.schema import HttpConfig
from tether.gateway.ops.http_guard import CappedSite, RequestLog, body_deadline

log = structlog.get_logger("tether.http")

Readiness = Callable[[], Awaitable[list[str]]]


class HttpServer:
    def __init__(self, config: HttpConfig, readiness: Readiness) -> None:
        self.host = config.host
        self.port = config.port
        self.config = config
        self.readiness = readiness
        self.app = web.Application(middlewares=[body_deadline(config.read_timeout)])
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        self.app.router.add_get("/metrics", self._metrics)
        self._runner: web.AppRunner | None = None
        #: The probes' and metrics' routes: with only these, nobody outside needs the port.
        self._own_routes = len(self.app.router.resources())

    async def start(self) -> None:
        timeout = self.config.read_timeout
        self._runner = web.AppRunner(
            self.app,
            access_log=None,
            logger=RequestLog(),
            # Also the time a new connection has to send its request head.
            keepalive_timeout=timeout,
            # After a 408 or 413, the rest of the body is drained this long, not 10 s.
            lingering_time=min(timeout, 10.0),
        )
        await self._runner.setup()
        try:
            await self._listen(self._runner, self.port)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or not self.may_move():
                raise
            asked = self.port
            await self._listen(self._runner, 0)
            log.warning("http.port_moved", asked=asked, port=self.port, set_it="http.port")
        log.info("http.listening", host=self.host, port=self.port)

    def may_move(self) -> bool:
        """Whether a port in use may be traded for a free one: only the default port
        (``http.port`` not written in the config), and only while nothing outside needs
        to find it (no webhook, no console: just the probes). So the first ``make run`` on
        a machine where 8080 is taken chats instead of failing; a configured port, or one
        a platform or a proxy points at, fails as before, naming the key."""
        unset = "port" not in self.config.model_fields_set
        return unset and len(self.app.router.resources()) == self._own_routes

    async def _listen(self, runner: web.AppRunner, port: int) -> None:
        site = CappedSite(runner, self.host, port, self.config.max_connections)
        await site.start()
        for address in runner.addresses:  # the real port when 0 was asked for
            self.port = int(address[1])

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def _readyz(self, _request: web.Request) -> web.Response:
        problems = await self.readiness()
        if problems:
            return web.json_response({"status": "not ready", "reasons": problems}, status=503)
        return web.json_response({"status": "ready"})

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})
