"""Tools from Model Context Protocol servers (``mcp.servers`` in the YAML), through the
official ``mcp`` SDK.

Each server is supervised by a task of its own (:class:`McpServer`): it starts the
command (stdio) or opens the URL (streamable HTTP), lists the tools, and keeps the
session until Tether stops or the server dies. A server that dies — its process exits,
a call finds the connection closed, a liveness ping goes unanswered — is restarted with
backoff (:func:`tether.backoff.equal_jitter`); meanwhile its tools stay listed and
answer "unavailable", so the model can tell the person instead of guessing.

What the model sees (:class:`McpTools`, a :class:`~.spec.ToolSource`): each tool as
``{server}__{tool}`` (characters the API refuses become ``_``; at most 64), filtered by
the server's ``allow`` / ``deny`` patterns. A call waits at most the server's
``timeout``; the tool's own error (``isError``) and a timeout reach the model as a
:class:`~.spec.ToolError`. A tool counts as idempotent only when its annotations say so
(``idempotentHint`` or ``readOnlyHint``): a server's other tools may have done their
work when Tether died mid-call, so they are never re-run blindly.

A server that changes its tools says so (``notifications/tools/list_changed``): they are
listed again, and the next turn offers the new list (``mcp.tools_changed``).

What a server may cost is bounded (:mod:`.mcp_bounds`): its stderr and stray stdout are
logged within a rate and otherwise counted, and an answer over ``max_result_bytes`` is
refused unread on both transports (the stdio one is :mod:`.mcp_stdio`'s).

Logs: ``mcp.started`` (server, transport, tools), ``mcp.died`` (server, error, and for a
stdio server how its process ended and the last lines of its stderr; retry_in_s),
``mcp.restarted`` (server, attempt), ``mcp.tools_changed`` (server, tools),
``mcp.stderr``, ``mcp.stderr_dropped``, ``mcp.bad_stdout``, ``mcp.refused``; the gauge
``tether_mcp_up{server}``. Header and environment values are secrets: never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import mcp.types as mcp_types
import structlog
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared.exceptions import MCPError
from prometheus_client import Gauge

from tether.backoff import equal_jitter
from tether.config.mcp import McpConfig, McpServerConfig
from tether.errors import ToolError
from tether.gateway.handler.context import Context
from tether.gateway.handler.tool import Tool, timed_out
from tether.gateway.tools.mcp_bounds import CappedTransport, Diagnostics, Wire, refused_in
from tether.gateway.tools.mcp_stdio import stdio_transport

log = structlog.get_logger("tether.mcp")

UP = Gauge("tether_mcp_up", "1 while an MCP server is connected", ["server"])

#: Between a server's name and its tool's in what the model sees.
SEPARATOR = "__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
#: Restart delays: 0.5 s doubling up to 30 s (half of it always waited).
_RESTART_BASE, _RESTART_MAX = 0.5, 30.0
#: How long the gateway's start waits for a server's first attempt to connect.
START_WAIT = 30.0


def tool_name(server: str, tool: str) -> str:
    """``server__tool`` within the API's ``[A-Za-z0-9_-]{1,64}``."""
    return (server + SEPARATOR + _UNSAFE.sub("_", tool))[:64]


def allowed(config: McpServerConfig, name: str) -> bool:
    """The server's ``allow`` (empty: all) and then ``deny`` patterns, on the tool's own name."""
    if config.allow and not any(fnmatch.fnmatchcase(name, p) for p in config.allow):
        return False
    return not any(fnmatch.fnmatchcase(name, p) for p in config.deny)


def result_text(result: mcp_types.CallToolResult) -> str:
    """A tool's result as the text the model reads: its text parts, else its structured
    content as JSON, else a note of what kinds of content it returned."""
    texts = [part.text for part in result.content if isinstance(part, mcp_types.TextContent)]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    kinds = sorted({type(part).__name__ for part in result.content})
    return f"(no text; content: {', '.join(kinds)})" if kinds else "(empty result)"


class McpServer:
    """One configured server: connected, watched and restarted by its own task."""

    def __init__(self, name: str, config: McpServerConfig) -> None:
        self.name = name
        self.config = config
        self.session: ClientSession | None = None
        #: The last listing (kept while the server is down: its tools say "unavailable").
        self.listed: list[mcp_types.Tool] = []
        #: Connections made so far (a restart makes the next); tests await a change.
        self.connects = 0
        #: Attempts to connect that ended, either way.
        self.attempts = 0
        self.changed = asyncio.Condition()
        self._broken = asyncio.Event()
        self._stopping = asyncio.Event()
        #: Set when the server said its tools changed: the watch lists them again.
        self._relist = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: What its traffic cost, over all connections (:mod:`.mcp_bounds`).
        self.wire = Wire()
        #: The stdio connection's stderr and exit, for ``mcp.died``.
        self._diagnostics: Diagnostics | None = None

    @property
    def transport(self) -> str:
        return "stdio" if self.config.command else "http"

    async def start(self) -> None:
        """Start supervising; wait for the first attempt to connect to end (at most
        :data:`START_WAIT` s or ``timeout``), so a healthy server's tools are there for the
        first turn. A server that is down is not fatal: it keeps being retried and its
        absence is logged (``mcp.died``)."""
        self._stopping.clear()
        self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.name}")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(START_WAIT, self.config.timeout)), self.changed:
                await self.changed.wait_for(lambda: self.attempts > 0)

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 10)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._task = None

    async def wait_connected(self, count: int, timeout: float) -> None:
        """Until ``count`` connections were made (``connects``) and the session is up."""
        async with asyncio.timeout(timeout), self.changed:
            await self.changed.wait_for(lambda: self.connects >= count and self.session is not None)

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def _supervise(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            error = "disconnected"
            try:
                async with self._connect() as session:
                    # A server's start (an interpreter, npx) may take longer than a call.
                    async with asyncio.timeout(max(START_WAIT, self.config.timeout)):
                        await session.initialize()
                        listing = await session.list_tools()
                    self.listed = list(listing.tools)
                    self._broken.clear()
                    self.session = session
                    self.connects += 1
                    UP.labels(self.name).set(1)
                    if self.connects == 1:
                        log.info(
                            "mcp.started",
                            server=self.name,
                            transport=self.transport,
                            tools=len(self.listed),
                        )
                    else:
                        log.info(
                            "mcp.restarted",
                            server=self.name,
                            attempt=failures,
                            tools=len(self.listed),
                        )
                    failures = 0
                    self.attempts += 1
                    await self._notify()
                    await self._watch(session)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            finally:
                self.session = None
                UP.labels(self.name).set(0)
            if self._stopping.is_set():
                break
            failures += 1
            delay = equal_jitter(failures, _RESTART_BASE, _RESTART_MAX)
            log.warning(
                "mcp.died", server=self.name, error=error[:300], **self._why(), retry_in_s=delay
            )
            self.attempts += 1
            await self._notify()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    async def _on_message(self, message: object) -> None:
        """The session's notification handler. It only marks the change: it runs inside
        the session's receive path, where waiting on a request (the new listing) would
        deadlock; :meth:`_watch` lists the tools again."""
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._relist.set()

    async def _watch(self, session: ClientSession) -> None:
        """Until Tether stops, a call found the connection broken, or a ping failed;
        meanwhile a server that says its tools changed has them listed again."""
        while not self._stopping.is_set() and not self._broken.is_set():
            waiters = [
                asyncio.ensure_future(self._stopping.wait()),
                asyncio.ensure_future(self._broken.wait()),
                asyncio.ensure_future(self._relist.wait()),
            ]
            try:
                await asyncio.wait(
                    waiters, timeout=self.config.ping_interval, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for waiter in waiters:
                    waiter.cancel()
            if self._stopping.is_set() or self._broken.is_set():
                return
            if self._relist.is_set():
                self._relist.clear()
                async with asyncio.timeout(self.config.timeout):
                    listing = await session.list_tools()  # raises when the server is gone
                self.listed = list(listing.tools)
                log.info("mcp.tools_changed", server=self.name, tools=len(self.listed))
                await self._notify()
                continue
            async with asyncio.timeout(self.config.timeout):
                await session.send_ping()  # raises when the server is gone

    @contextlib.asynccontextmanager
    async def _connect(self) -> AsyncIterator[ClientSession]:
        config = self.config
        if config.command:
            params = StdioServerParameters(
                command=config.command[0],
                args=config.command[1:],
                env={key: value.get_secret_value() for key, value in config.env.items()} or None,
                cwd=config.cwd,
            )
            # Its stderr becomes log lines within a rate (scrubbed of secrets like every
            # line, JSON when the logs are); how it ended is kept for ``mcp.died``.
            diagnostics = Diagnostics(self.name, config.stderr_lines_per_s, self.wire)
            self._diagnostics = diagnostics
            async with (
                stdio_transport(params, config.max_result_bytes, diagnostics) as (read, write),
                ClientSession(read, write, message_handler=self._on_message) as session,
            ):
                yield session
            return
        assert config.url is not None
        headers = {key: value.get_secret_value() for key, value in config.headers.items()}
        cap = config.max_result_bytes
        # The SDK's client (its timeouts), with JSON answers capped; event streams have
        # the SDK's own cap per event.
        http = httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
            transport=CappedTransport(cap, self.name, self.wire),
        )
        async with (
            http,
            streamable_http_client(config.url, http_client=http, max_sse_event_size=cap) as streams,
            ClientSession(*streams, message_handler=self._on_message) as session,
        ):
            yield session

    def _why(self) -> dict[str, Any]:
        """How a stdio server's process ended and what it last wrote to stderr."""
        diagnostics, self._diagnostics = self._diagnostics, None
        if diagnostics is None:
            return {}
        found = {"exit": diagnostics.exit, "stderr": diagnostics.last_lines()}
        return {key: value for key, value in found.items() if value}

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Call the server's tool ``name``; the model reads the result or the ToolError."""
        session = self.session
        if session is None:
            raise ToolError(
                f"MCP server {self.name!r} is unavailable right now (restarting);"
                " tell the person, or try again later"
            )
        try:
            async with asyncio.timeout(self.config.timeout):
                result = await session.call_tool(name, arguments)
        except TimeoutError:
            raise timed_out(self.config.timeout, f"MCP server {self.name!r}") from None
        except MCPError as exc:
            refused = refused_in(exc.error.message, self.name, self.wire)
            if refused is not None:  # too large to read: the server itself is fine
                raise ToolError(f"MCP server {self.name!r}: {refused}") from None
            if exc.error.code == mcp_types.CONNECTION_CLOSED:
                self._broken.set()
                raise ToolError(
                    f"MCP server {self.name!r} became unavailable during the call;"
                    " it may or may not have done its work"
                ) from None
            raise ToolError(f"MCP server {self.name!r}: {exc.error.message}") from None
        except Exception as exc:  # the transport broke under the call
            self._broken.set()
            raise ToolError(
                f"MCP server {self.name!r} became unavailable during the call"
                f" ({type(exc).__name__}); it may or may not have done its work"
            ) from None
        text = result_text(result)
        if result.is_error:
            raise ToolError(text)
        return text

    def tools(self) -> list[Tool]:
        """The server's allowed tools as the model sees them (its last listing)."""
        found = []
        for listed in self.listed:
            if not allowed(self.config, listed.name):
                continue
            hints = listed.annotations
            idempotent = bool(hints and (hints.idempotent_hint or hints.read_only_hint))
            found.append(
                Tool(
                    name=tool_name(self.name, listed.name),
                    description=listed.description or listed.title or listed.name,
                    parameters=listed.input_schema or {"type": "object", "properties": {}},
                    run=self._runner(listed.name),
                    idempotent=idempotent,
                    source=f"mcp:{self.name}",
                    approval=any(fnmatch.fnmatchcase(listed.name, p) for p in self.config.approval),
                )
            )
        return found

    def _runner(self, name: str) -> Any:
        async def run(ctx: Context, arguments: dict[str, Any]) -> str:
            return await self.call(name, arguments)

        return run


class McpTools:
    """The tool source of every configured MCP server (started and stopped with the
    gateway's toolbox)."""

    label = "mcp"

    def __init__(self, config: McpConfig) -> None:
        self.servers = {name: McpServer(name, server) for name, server in config.servers.items()}

    def names(self) -> list[str]:
        return [tool.name for server in self.servers.values() for tool in server.tools()]

    async def start(self) -> None:
        await asyncio.gather(*(server.start() for server in self.servers.values()))

    async def stop(self) -> None:
        await asyncio.gather(*(server.stop() for server in self.servers.values()))

    async def tools(self, ctx: Context) -> list[Tool]:
        """The servers' allowed tools that this turn's agent may call (``mcp_tools``)."""
        turn = ctx.llm.settings.agent.mcp_tools if ctx.llm.configured else None
        found = [tool for server in self.servers.values() for tool in server.tools()]
        return [tool for tool in found if turn is None or turn.allows(tool.name)]
