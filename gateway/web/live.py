"""The console's Live page: every transition as it is logged, streamed as server-sent events.

Every transition already emits one structured log line (DESIGN §8), so the stream is the
log itself: :class:`LiveHub` is a structlog processor, put just before the renderer, that
copies each dotted event name (``event.received``, ``outbox.sent``, ``cron.fired``, …) to
the queues of the pages watching. With nobody watching it costs one truthiness check per
line. Values are scrubbed with the log redactor and cut to a few hundred characters, so a
page never shows more than the log would (and no secret the log would not).

A slow page does not slow the gateway: its queue is bounded and it loses the lines that
do not fit (the page is told how many).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
from typing import Any

import structlog
from aiohttp import web

from tether.redaction import redactor

#: Transition names: ``area.what`` (``http.*`` is the server's own chatter, left out).
_TRANSITION = re.compile(r"^(?!http\.)[a-z_]+\.[a-z_.]+$")
_KEEP = 300
#: The hub goes just before the first of these: it needs the event as a dict.
_RENDERERS = (
    structlog.processors.JSONRenderer,
    structlog.processors.KeyValueRenderer,
    structlog.processors.LogfmtRenderer,
    structlog.dev.ConsoleRenderer,
)
QUEUE = 500


class LiveHub:
    def __init__(self) -> None:
        self._queues: set[asyncio.Queue[dict[str, Any] | None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0
        self.dropped = 0

    def attach(self) -> None:
        """Put the hub into structlog's chain (again, if the logging was reconfigured)."""
        processors = structlog.get_config()["processors"]
        if not any(p is self for p in processors):
            renderer = next(
                (i for i, p in enumerate(processors) if isinstance(p, _RENDERERS)), None
            )
            processors.insert(len(processors) if renderer is None else renderer, self)

    def __call__(self, _logger: Any, _name: str, event_dict: Any) -> Any:
        if (
            self._queues
            and isinstance(event_dict, dict)
            and _TRANSITION.match(str(event_dict.get("event", "")))
        ):
            line = {k: _short(redactor.scrub_value(v)) for k, v in event_dict.items()}
            if threading.get_ident() == self._thread:
                self._publish(line)
            elif self._loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop has closed
                    self._loop.call_soon_threadsafe(self._publish, line)
        return event_dict

    async def close(self, _app: web.Application | None = None) -> None:
        """End every stream (the server's shutdown): aiohttp would otherwise wait up to
        its shutdown timeout for handlers that never return by themselves."""
        for queue in self._queues:
            while True:
                try:
                    queue.put_nowait(None)
                    break
                except asyncio.QueueFull:
                    queue.get_nowait()  # make room: the page is going away anyway

    def _publish(self, line: dict[str, Any]) -> None:
        for queue in self._queues:
            try:
                queue.put_nowait(line)
            except asyncio.QueueFull:
                self.dropped += 1

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """``GET /ui/api/live``: ``text/event-stream`` until the page goes away."""
        self.attach()
        self._loop, self._thread = asyncio.get_running_loop(), threading.get_ident()
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",  # nginx: pass each event on at once
            }
        )
        await response.prepare(request)
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(QUEUE)
        self._queues.add(queue)
        try:
            await response.write(b": connected\n\n")
            while True:
                try:
                    async with asyncio.timeout(15):
                        line = await queue.get()
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
                    continue
                if line is None:  # the server is shutting down
                    break
                data = json.dumps(line, default=str)
                await response.write(f"data: {data}\n\n".encode())
        except ConnectionResetError:  # the page went away
            pass
        finally:
            self._queues.discard(queue)
        return response


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _KEEP:
        return value[:_KEEP] + "…"
    if isinstance(value, int | float | bool) or value is None:
        return value
    return value if isinstance(value, str) else _short(str(value))
