"""The scripted model's streamed answers (``stream: true``): server-sent events, one
``chat.completion.chunk`` per piece of the text, tool calls, the finish reason, and the
usage chunk when ``stream_options.include_usage`` asks for it — as the API sends them.

:class:`Pacing` lets a test hold a stream part-way (after ``hold_after`` pieces, until
:meth:`Pacing.release`), so it can look at, or kill, a gateway mid-stream at a moment it
chose; without it every piece is written at once.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Pacing:
    """How a streamed answer is cut and held: ``pieces`` chunks of the text, ``gap``
    seconds apart (a model writing); after ``hold_after`` of them the stream waits for
    :meth:`release` (None: never waits)."""

    pieces: int = 8
    gap: float = 0.0
    hold_after: int | None = None
    held: asyncio.Event = field(default_factory=asyncio.Event)  # set while a stream waits
    _go: asyncio.Event = field(default_factory=asyncio.Event)
    streams: int = 0  # streamed answers started

    def release(self) -> None:
        self._go.set()

    def hold_again(self) -> None:
        self._go.clear()
        self.held.clear()


def cut(text: str, pieces: int) -> list[str]:
    """``text`` in about ``pieces`` consecutive parts (none empty), joined back exactly."""
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, pieces)))
    return [text[i : i + size] for i in range(0, len(text), size)]


async def stream(
    request: web.Request,
    body: dict[str, Any],
    message: dict[str, Any],
    usage: tuple[int, int],
    pacing: Pacing | None,
    ident: str,
) -> web.StreamResponse:
    """Write ``message`` (content and tool calls) as the API streams it."""
    pacing = pacing or Pacing()
    pacing.streams += 1
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    base = {"id": ident, "object": "chat.completion.chunk", "created": 0,
            "model": body.get("model")}  # fmt: skip

    async def send(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        chunk = {**base, "choices": [choice], **extra}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

    await send({"role": "assistant", "content": ""})
    for index, piece in enumerate(cut(str(message.get("content") or ""), pacing.pieces)):
        if pacing.hold_after is not None and index == pacing.hold_after:
            pacing.held.set()
            await pacing._go.wait()
        if index and pacing.gap:
            await asyncio.sleep(pacing.gap)  # the pace of the fake model's writing
        await send({"content": piece})
    for index, call in enumerate(message.get("tool_calls") or []):
        await send({"tool_calls": [{"index": index, **call}]})
    await send({}, "tool_calls" if message.get("tool_calls") else "stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        prompt, completion = usage
        counts = {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion}  # fmt: skip
        chunk: dict[str, Any] = {**base, "choices": [], "usage": counts}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response
