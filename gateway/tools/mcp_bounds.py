"""What an MCP server may cost the gateway: its stderr, its stray stdout, its answers' size.

A server is somebody else's program, and a broken one is cheap to write: a debug loop on
stderr, a library that prints to stdout, a tool that returns a whole database. Relayed as
they came, one server cost a gateway a core and 427 MB of log in 30 s, an ERROR traceback
per stray stdout line, and 41 s of CPU with 160 MB more memory for a 50 MB result before
the result was cut to 20,000 characters anyway. Here each costs a bounded amount:

- :class:`Diagnostics`: the server's stderr and stray stdout become log lines within a
  token bucket (``mcp.servers.NAME.stderr_lines_per_s`` after a burst), each cut to
  :data:`LINE_CHARS`; the rest are counted (``mcp.stderr_dropped`` now and then, and the
  counters below), not decoded. It keeps the last bytes of stderr, which ``mcp.died``
  quotes: why a server died is usually the last thing it wrote.
- :func:`refusal`: an answer longer than ``max_result_bytes`` is skipped to its end
  without being kept or parsed (``gateway/tools/mcp_stdio.py`` reads the lines), and the
  request it answers gets a JSON-RPC error saying so, so the call ends at once instead of
  at its timeout. Its id is read from the line's first or last bytes, where servers put
  it (the Python SDK first, the TypeScript SDK last).
- :class:`CappedTransport`: the same cap on a streamable-HTTP server's JSON answers (its
  event-stream answers have the SDK's own per-event cap, given the same number).

Metrics: ``tether_mcp_stderr_dropped_lines_total{server}``,
``tether_mcp_bad_stdout_lines_total{server}``, ``tether_mcp_refused_total{server}``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import mcp_types
import structlog
from mcp.shared.message import SessionMessage
from prometheus_client import Counter

from tether.config.mcp import STDERR_BURST
from tether.limits import TokenBucket

log = structlog.get_logger("tether.mcp")

STDERR_DROPPED = Counter(
    "tether_mcp_stderr_dropped_lines", "MCP servers' stderr lines counted, not logged", ["server"]
)
BAD_STDOUT = Counter(
    "tether_mcp_bad_stdout_lines",
    "Lines an MCP server wrote to stdout that are not JSON-RPC",
    ["server"],
)
REFUSED = Counter(
    "tether_mcp_refused", "MCP answers refused unread: over max_result_bytes", ["server"]
)

#: Characters of one stderr or stdout line that a log line quotes.
LINE_CHARS = 1000
#: How often at most ``mcp.stderr_dropped`` says how many lines were not logged.
REPORT_EVERY = 10.0
#: Bytes of an oversized line kept at each end, to find the id of the request it answers.
ENDS = 256
#: Bytes of stderr kept for ``mcp.died``, and how many of its last lines it quotes.
TAIL_BYTES, TAIL_LINES = 4096, 5
#: The stderr pipe's size asked for (Linux allows up to 1 MiB unprivileged), one read's
#: most, and how long the relay lets a trickle gather after a read that was not full.
PIPE_BYTES = READ_BYTES = 1 << 20
GATHER = 0.01
#: Where a response's ``id`` is: first (after ``jsonrpc``) or last in the object.
_ID = r'(-?\d+|"(?:[^"\\]|\\.){0,200}")'
_HEAD_ID = re.compile(rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID.encode())
_TAIL_ID = re.compile(rb'[,{]\s*"id"\s*:\s*' + _ID.encode() + rb"\s*\}\s*$")
#: A ``method`` among the top-level keys the line starts with: a request or notification
#: of the server's, whose id is not one of ours (it is dropped, not answered).
_METHOD = re.compile(rb'^\s*\{[^{}\[\]]*?"method"\s*:')
#: The start of every refusal's text, whichever transport refused (and how calls tell).
REFUSED_TEXT = "the answer was more than"
#: What the SDK's event-stream reader says when an event passes ``max_sse_event_size``.
_SSE_LIMIT = re.compile(r"exceeded the (\d+) byte limit")


@dataclass(slots=True)
class Wire:
    """Counters of one server's traffic over all its connections (tests read them)."""

    stderr_bytes: int = 0
    stderr_logged: int = 0
    stderr_dropped: int = 0
    bad_stdout: int = 0
    refused: int = 0
    refused_bytes: int = 0
    #: The longest line read whole (kept and parsed): never more than max_result_bytes.
    largest_kept: int = 0


class Diagnostics:
    """One connection's stderr and stray stdout, as log lines within the server's rate."""

    def __init__(self, server: str, rate: float, wire: Wire) -> None:
        self.server = server
        self.wire = wire
        self._bucket = TokenBucket(rate, STDERR_BURST) if rate > 0 else None
        self._tail = b""
        self._unreported = 0
        self._reported = time.monotonic()
        #: How the process ended, for ``mcp.died`` (set by the stdio transport).
        self.exit: str | None = None

    def _admit(self, wanted: int) -> int:
        """How many of ``wanted`` lines may be logged now (tokens taken)."""
        allowed = 0
        while self._bucket is not None and allowed < wanted and self._bucket.delay() == 0:
            self._bucket.take()
            allowed += 1
        return allowed

    def _drop(self, lines: int) -> None:
        if lines:
            self.wire.stderr_dropped += lines
            self._unreported += lines
            STDERR_DROPPED.labels(self.server).inc(lines)

    async def relay(self, fd: int) -> None:
        """Read the server's stderr (the pipe ``fd``, its owner closes it) to its end: the lines
        the rate allows are logged as ``mcp.stderr``, the others only counted.

        Cheap whatever the server does: lines are split in C and only the logged ones
        decoded, and after a read that did not fill :data:`READ_BYTES` the relay waits
        :data:`GATHER` s for more to gather in the pipe, so a server writing a line at a
        time costs a read per ``GATHER``, not one per line. A server that writes faster
        than that is slowed by its own full pipe, as any pipe slows its writer."""
        os.set_blocking(fd, False)
        partial = b""
        try:
            while True:
                await anyio.wait_readable(fd)
                try:
                    chunk = os.read(fd, READ_BYTES)
                except BlockingIOError:
                    continue
                if not chunk:
                    break
                partial = self._take(partial, chunk)
                if len(chunk) < READ_BYTES:
                    await anyio.sleep(GATHER)
        except OSError:
            pass  # the pipe went with the process: what was read is accounted for
        if partial.strip():
            if self._admit(1):
                self._log_line(partial)
            else:
                self._drop(1)
        self.report()

    def _take(self, partial: bytes, chunk: bytes) -> bytes:
        """Log or count the lines ``chunk`` completes; the unfinished rest (bounded)."""
        self.wire.stderr_bytes += len(chunk)
        self._tail = (self._tail + chunk[-TAIL_BYTES:])[-TAIL_BYTES:]
        lines = (partial + chunk).split(b"\n")
        rest = lines.pop()[-LINE_CHARS * 4 :]
        allowed = self._admit(len(lines))
        for line in lines[:allowed]:
            self._log_line(line)
        self._drop(len(lines) - allowed)
        if self._unreported and time.monotonic() - self._reported >= REPORT_EVERY:
            self.report()
        return rest

    def _log_line(self, line: bytes) -> None:
        text = line[: LINE_CHARS * 4].decode(errors="replace").rstrip()
        if text:
            self.wire.stderr_logged += 1
            log.info("mcp.stderr", server=self.server, line=text[:LINE_CHARS])

    def report(self) -> None:
        """``mcp.stderr_dropped``: the lines not logged since the last report."""
        if self._unreported:
            log.warning(
                "mcp.stderr_dropped",
                server=self.server,
                lines=self._unreported,
                total=self.wire.stderr_dropped,
            )
            self._unreported = 0
        self._reported = time.monotonic()

    def stray(self, line: bytes) -> None:
        """A stdout line that is not JSON-RPC: counted, logged within the rate, no traceback."""
        self.wire.bad_stdout += 1
        BAD_STDOUT.labels(self.server).inc()
        if self._admit(1):  # else only counted: ``total`` of the next one says how many
            text = line[: LINE_CHARS * 4].decode(errors="replace").strip()[:LINE_CHARS]
            log.warning("mcp.bad_stdout", server=self.server, line=text, total=self.wire.bad_stdout)

    def last_lines(self) -> list[str]:
        """The last lines the server wrote to stderr (for ``mcp.died``)."""
        lines = self._tail.decode(errors="replace").splitlines()
        return [line[:300] for line in lines if line.strip()][-TAIL_LINES:]


def refused_text(cap: int, server: str, size: int | None = None) -> str:
    """What the model reads (``size``: the answer's length, when it is known)."""
    was = f"; it was {size:,}" if size is not None else ""
    return (
        f"{REFUSED_TEXT} {cap:,} bytes (mcp.servers.{server}.max_result_bytes){was}, so it"
        " was refused unread. The tool may have done its work: ask it for less (a narrower"
        " query, fewer results, one page)"
    )


def refusal(
    head: bytes, tail: bytes, size: int, cap: int, server: str, wire: Wire
) -> SessionMessage | None:
    """The JSON-RPC error answering the request an oversized line answered, or None when
    the line is the server's own request or notification, or names no id in a shape any
    SDK writes (then it is dropped and its call ends at its timeout). Counted either way
    (``mcp.refused``)."""
    wire.refused += 1
    wire.refused_bytes += size
    REFUSED.labels(server).inc()
    found = None if _METHOD.match(head) else _HEAD_ID.match(head) or _TAIL_ID.search(tail)
    log.warning("mcp.refused", server=server, bytes=size, limit=cap, answered=bool(found))
    if found is None:
        return None
    ident: Any = json.loads(found.group(1))
    error = mcp_types.ErrorData(
        code=mcp_types.INTERNAL_ERROR, message=refused_text(cap, server, size)
    )
    return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=ident, error=error))


def refused_in(message: str, server: str, wire: Wire) -> str | None:
    """The refusal a call's error carries, as the model should read it: ours (either
    transport's), or the SDK's event-stream cap (counted here, as ours are where they
    refuse); None for any other error."""
    if REFUSED_TEXT in message:
        return message[message.index(REFUSED_TEXT) :]
    found = _SSE_LIMIT.search(message)
    if found is None:
        return None
    cap = int(found.group(1))
    wire.refused += 1
    REFUSED.labels(server).inc()
    log.warning("mcp.refused", server=server, bytes=None, limit=cap, answered=True)
    return refused_text(cap, server)


class TooLarge(httpx2.StreamError):
    """A JSON answer over ``max_result_bytes``: the SDK turns a StreamError into an error
    for the request it answered, which is exactly what should happen."""


class _CappedBody(httpx2.AsyncByteStream):
    """A JSON answer's body, read until it passes ``cap`` (at once if its declared
    ``Content-Length`` does): raised while the SDK reads it, where it becomes the error
    of the request it answers."""

    def __init__(self, inner: Any, cap: int, server: str, wire: Wire, declared: int | None) -> None:
        self._inner, self._cap, self._server, self._wire = inner, cap, server, wire
        self._declared = declared

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._declared is not None and self._declared > self._cap:
            self._refuse(self._declared, self._declared)
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._cap:
                self._refuse(seen, self._declared)
            yield chunk

    def _refuse(self, seen: int, size: int | None) -> None:
        self._wire.refused += 1
        self._wire.refused_bytes += seen
        REFUSED.labels(self._server).inc()
        log.warning("mcp.refused", server=self._server, bytes=seen, limit=self._cap, answered=True)
        raise TooLarge(refused_text(self._cap, self._server, size))

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """An HTTP transport whose JSON answers stop at ``cap`` bytes (a ``Content-Length``
    over it is refused before a byte is read). Answers are asked for uncompressed, so
    the bytes counted are the bytes parsed."""

    def __init__(self, cap: int, server: str, wire: Wire) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._cap, self._server, self._wire = cap, server, wire

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        if response.headers.get("content-type", "").lower().startswith("application/json"):
            length = response.headers.get("content-length", "")
            declared = int(length) if length.isdigit() else None
            response.stream = _CappedBody(
                response.stream, self._cap, self._server, self._wire, declared
            )
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _QuietRefusals(logging.Filter):
    """The SDK logs a StreamError in a JSON answer with its traceback; a refusal is not a
    fault of ours and is logged once, as ``mcp.refused``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], TooLarge))


logging.getLogger("mcp.client.streamable_http").addFilter(_QuietRefusals())
