"""A fake external service with a side effect: a counter over HTTP on 127.0.0.1.

The tool tests' tools call it, so "the side effect happened exactly once" is a number a
test reads, not a claim. ``POST /inc`` counts the request the moment it arrives and
answers with the new count; :meth:`Counter.hold` keeps the next answers back (the tool
is then mid-call, for a test to kill its process at that point).
"""

from __future__ import annotations

import asyncio

from aiohttp import web


class Counter:
    def __init__(self) -> None:
        self.count = 0
        self.url = ""
        self._held = False
        self._closing = asyncio.Event()
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None

    def hold(self) -> None:
        """Count the next requests but never answer them (until the server closes)."""
        self._held = True

    async def wait_for(self, count: int, timeout: float = 30.0) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: self.count >= count)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/inc", self._inc)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def close(self) -> None:
        self._closing.set()
        if self._runner:
            await self._runner.cleanup()

    async def _inc(self, request: web.Request) -> web.Response:
        async with self._changed:
            self.count += 1
            count = self.count
            self._changed.notify_all()
        if self._held:
            await self._closing.wait()
            raise web.HTTPServiceUnavailable()
        return web.json_response({"count": count})
