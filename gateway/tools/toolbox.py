"""The toolbox: every tool the model may call in a turn, gathered from its sources.

A source (:class:`~.spec.ToolSource`) is asked once per turn, so what the model sees can
depend on the conversation or on the moment (an MCP server that is down). The sources a
gateway has are listed in ONE place, :func:`build_toolbox`: a new kind of tool is a new
source there, and the loop (:mod:`.loop`) never changes.

Two tools with one name would make the model's call ambiguous, so a clash among the
names known before the first turn (Python tools, built-ins, and whatever a source lists
in ``names()``) stops the start with one line naming both sources; a clash that only
appears in a turn (a server that added a tool) keeps the first tool and logs
``tool.clash``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import structlog

from tether.errors import GatewayError
from tether.gateway.handler.tool import Tool, ToolSource

if TYPE_CHECKING:
    from tether.config.schema import Settings
    from tether.gateway.handler.context import Context
    from tether.gateway.handler.routing import Router
    from tether.memory.store import Store

log = structlog.get_logger("tether.tools")


@runtime_checkable
class Named(Protocol):
    """A source that knows its tool names before any turn (checked for clashes at start)."""

    def names(self) -> list[str]: ...


@runtime_checkable
class Lifecycle(Protocol):
    """A source with something to start and stop (an MCP server's process)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class ToolClash(GatewayError):
    """Two sources offer a tool of the same name."""


class Toolbox:
    """The tools of one gateway, from ``sources`` in order (earlier wins in a turn)."""

    def __init__(self, sources: Sequence[ToolSource]) -> None:
        self.sources = list(sources)
        self._check_names()

    def check(self, router: Router) -> None:
        """Raise ToolClash if ``router`` (a reload's new one) would bring a tool whose name
        another source offers: the reload is refused, as the start would be."""
        self._check_names(router)

    def _check_names(self, router: Router | None = None) -> None:
        seen: dict[str, str] = {}
        for source in self.sources:
            if not isinstance(source, Named):
                continue
            label = _label(source)
            names = source.names()
            if router is not None and isinstance(source, RouterTools):
                names = [tool.name for tool in router.tools()]
            for name in names:
                if name in seen:
                    raise ToolClash(
                        f"tool name {name!r} is offered twice: by {seen[name]} and by {label};"
                        " rename one (@router.tool(name=...)) or switch one off (agent.tools)"
                    )
                seen[name] = label

    async def start(self) -> None:
        """Start the sources that need it (in order), then check the names again."""
        for source in self.sources:
            if isinstance(source, Lifecycle):
                await source.start()
        self._check_names()

    async def stop(self) -> None:
        for source in reversed(self.sources):
            if isinstance(source, Lifecycle):
                try:
                    await source.stop()
                except Exception:
                    log.exception("tools.stop_failed", source=_label(source))

    async def tools(self, ctx: Context) -> dict[str, Tool]:
        """The tools for this turn by name; on a clash the earlier source's tool stays."""
        found: dict[str, Tool] = {}
        for source in self.sources:
            for tool in await source.tools(ctx):
                if tool.name in found:
                    ctx.log.warning(
                        "tool.clash",
                        tool=tool.name,
                        kept=found[tool.name].source,
                        dropped=tool.source,
                    )
                    continue
                found[tool.name] = tool
        return found


class RouterTools:
    """The ``@router.tool`` functions of the gateway's router (plugins included),
    read from the router in use now, so a reload's new router brings its tools."""

    def __init__(self, router: Callable[[], Router]) -> None:
        self._router = router

    def names(self) -> list[str]:
        return [tool.name for tool in self._router().tools()]

    async def tools(self, ctx: Context) -> list[Tool]:
        return self._router().tools()


def build_toolbox(
    settings: Settings,
    router: Callable[[], Router],
    store: Store | None = None,
    more: Sequence[ToolSource] = (),
    **extra: Any,
) -> Toolbox:
    """The gateway's toolbox: Python tools first (a plugin's tool is the author's
    choice), then the built-ins that ``agent.tools`` leaves on, then ``more`` (sources
    from the floors above this one: background tasks' tools), then other sources.

    Add a new source HERE (``sources.append(...)``); ``store`` and ``extra`` are for
    sources that need more than the settings (schedules keep their jobs in the store).
    """
    from tether.gateway.tools.builtin import BuiltinTools
    from tether.gateway.tools.reminders import reminder_tools

    sources: list[ToolSource] = [RouterTools(router), BuiltinTools(settings.agent.tools)]
    reminders = reminder_tools(settings.agent.tools, extra.get("reminders"), store)
    if reminders is not None:
        sources.append(reminders)  # schedule, list_schedules, cancel_schedule
    sources.extend(more)
    if settings.mcp.servers:
        # Imported only here: the MCP SDK (starlette, uvicorn, cryptography...) is ~30 MB
        # of resident memory that a gateway without mcp.servers never uses (bench/idle.py).
        from tether.gateway.tools.mcp import McpTools

        sources.append(McpTools(settings.mcp))  # mcp.servers: gateway/tools/mcp.py
    return Toolbox(sources)


def _label(source: object) -> str:
    return getattr(source, "label", None) or type(source).__name__
