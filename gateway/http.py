"""The one HTTP server per process: probes, metrics, and the adapters' webhook routes.

Adapters add their routes before the server starts; it is up before any webhook is
registered with a platform, so the first delivery finds it listening.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

log = structlog.get_logger("tether.http")

Readiness = Callable[[], Awaitable[list[str]]]


class HttpServer:
    def __init__(self, host: str, port: int, readiness: Readiness) -> None:
        self.host = host
        self.port = port
        self.readiness = readiness
        self.app = web.Application()
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        self.app.router.add_get("/metrics", self._metrics)
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        for address in self._runner.addresses:  # the real port when 0 was asked for
            self.port = int(address[1])
        log.info("http.listening", host=self.host, port=self.port)

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
