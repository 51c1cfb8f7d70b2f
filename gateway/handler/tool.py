"""What a tool is, whatever it comes from: a name and JSON schema the model sees, a
coroutine that runs it, and whether running it twice is harmless.

Every source of tools (Python functions registered on a Router, the built-in tools, MCP
servers) produces :class:`Tool` values through a :class:`ToolSource`; the agent's tool
loop only knows this module, so a new source never touches the loop.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tether.errors import ToolTimeout

#: What OpenAI-compatible APIs accept as a function name.
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

#: How long one call of a Python tool may run before it is cancelled (``@router.tool``'s
#: ``timeout``): long enough for a slow web request, short of ``pipeline.handler_timeout``
#: (300 s by default), so that the model hears of a hung tool while the turn goes on.
DEFAULT_TIMEOUT = 60.0

#: The turn's :class:`~tether.gateway.handler.context.Context`, as a tool is handed it.
#: Named loosely here because the context names this module (the tools its turn may
#: call): a tool's own code types its ``ctx`` as the Context it is.
ToolContext = Any

#: ``run(ctx, arguments)`` → the result the model reads (text; JSON for structured data).
ToolRun = Callable[[ToolContext, dict[str, Any]], Awaitable[str]]


def timed_out(seconds: float, what: str = "the tool") -> ToolTimeout:
    return ToolTimeout(
        f"{what} did not finish within {seconds:g}s and was cancelled; it may or may not"
        " have done its work: check before trying again, or tell the person"
    )


def left_running(seconds: float, what: str = "the tool") -> str:
    """What the model reads of a call that would not stop when cancelled at its timeout."""
    return (
        f"{what} did not finish within {seconds:g}s and did not stop when cancelled, so it"
        " was left running: whether it does its work is unknown, and it will not be run"
        " again for this message. Check before trying again, or tell the person"
    )


@dataclass(frozen=True, slots=True)
class Tool:
    """One callable tool, as the model sees it and as the loop runs it.

    ``idempotent`` is the tool's own promise that running it again after a crash is
    harmless (a read, an upsert). A tool that is not idempotent and was running when the
    process died is not run blindly again: the model is told it may or may not have run.
    """

    name: str
    description: str
    #: JSON schema of the arguments (``{"type": "object", ...}``).
    parameters: dict[str, Any]
    run: ToolRun
    idempotent: bool = False
    #: Where it comes from, for logs and metrics: ``python``, ``builtin``, ``mcp:NAME``.
    source: str = "python"
    extra: dict[str, Any] = field(default_factory=dict)
    #: Seconds one call may run before it is cancelled (the tool loop enforces it, and
    #: leaves behind a call that will not stop: ``gateway/tools/deadline.py``). None: only
    #: the turn's own bounds (``pipeline.handler_timeout``, ``/stop``), or the source's
    #: (an MCP server's ``timeout``).
    timeout: float | None = None
    #: Each call waits for a person's approval first (gateway/tools/approvals.py).
    approval: bool = False

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r} must match {NAME.pattern}")

    def schema(self) -> dict[str, Any]:
        """The entry for the API's ``tools`` list."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class Toolset(Protocol):
    """Every tool the model may call in one turn, by name: what the agent's tool loop asks
    of the gateway's toolbox (``gateway/tools/toolbox.py``), which the pipeline hands on
    without knowing more of it."""

    async def tools(self, ctx: ToolContext) -> dict[str, Tool]: ...


class ToolSource(Protocol):
    """Where tools come from. Asked once per turn, so a source may answer differently
    per conversation or agent (allow/deny lists), or per moment (an MCP server that is
    down answers with tools that say "unavailable")."""

    async def tools(self, ctx: ToolContext) -> list[Tool]: ...
