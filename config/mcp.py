"""``mcp:``: Model Context Protocol servers whose tools the agent may call.

Each server is either a command Tether starts and talks to over stdio, or a
streamable-HTTP URL (with headers, e.g. a bearer token). Their tools reach the model as
``{server}__{tool}`` (see :mod:`tether.gateway.tools.mcp`), so the server's name is
kept short and plain: with the separator it must leave room in the API's 64-character
function names.

Header values and environment values are :class:`~pydantic.SecretStr`: they often
carry tokens, so they are masked in ``tether check`` and scrubbed from every log line.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
from pathlib import Path
from typing import Self

from pydantic import Field, SecretStr, field_validator, model_validator

from tether.config.section import Section

#: A server's name: part of every tool name the model sees.
SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,30}")
#: A tool's result larger than this is refused by default (``max_result_bytes``): one
#: MiB is some 250,000 tokens, past any context a result is any use in, and what the
#: SDK's own streamable-HTTP client allows for one event.
DEFAULT_MAX_RESULT_BYTES = 1 << 20
#: Lines of stderr logged at once before ``stderr_lines_per_s`` applies.
STDERR_BURST = 50


class McpServerConfig(Section):
    """One server: ``command`` (stdio) or ``url`` (streamable HTTP), never both."""

    #: The program and its arguments, e.g. ``[npx, -y, "@modelcontextprotocol/server-git"]``.
    command: list[str] | None = None
    #: Extra environment for the command (added to a minimal safe environment).
    env: dict[str, SecretStr] = {}
    #: Working directory of the command.
    cwd: str | None = None
    #: A streamable-HTTP endpoint, e.g. ``https://mcp.example.com/mcp``.
    url: str | None = None
    #: Sent with every HTTP request (``Authorization: Bearer ${TOKEN}``).
    headers: dict[str, SecretStr] = {}
    #: Seconds one tool call may take before the model is told it timed out.
    timeout: float = Field(default=30.0, gt=0)
    #: Only these of its tools (names or shell patterns like ``read_*``); empty: all.
    allow: list[str] = []
    #: Never these (checked after ``allow``).
    deny: list[str] = []
    #: These of its tools (names or shell patterns) wait for a person's approval before
    #: each call (agent.tools.approvals says who approves, where and how long).
    approval: list[str] = []
    #: Seconds between liveness pings of a running server (a dead one is restarted).
    ping_interval: float = Field(default=15.0, gt=0)
    #: The largest message read from the server (a tool's result), in bytes. A larger one
    #: is skipped unread, not parsed, and the call answers that it was too large.
    max_result_bytes: int = Field(default=DEFAULT_MAX_RESULT_BYTES, ge=1024)
    #: Lines per second of the server's stderr (and of stray non-JSON stdout) that become
    #: log lines, after a burst of :data:`STDERR_BURST`; the rest are counted, not logged.
    #: ``0``: none are logged.
    stderr_lines_per_s: float = Field(default=10.0, ge=0)

    @field_validator("command")
    @classmethod
    def _program(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or not value[0].strip()):
            raise ValueError("needs the program to run, e.g. [python, server.py]")
        return value

    @field_validator("url")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if (self.command is None) == (self.url is None):
            raise ValueError("needs exactly one of command (a stdio server) or url (HTTP)")
        if self.command is None and (self.env or self.cwd):
            raise ValueError("env and cwd are for a command; an HTTP server takes headers")
        if self.url is None and self.headers:
            raise ValueError("headers are for a url; a command takes env")
        return self


def missing_program(server: McpServerConfig) -> str | None:
    """Why a stdio server's program cannot be started here, or None (also for an HTTP
    server): a path that is not an executable file (relative to ``cwd`` when given), or
    a name not on the ``PATH`` the server gets (its ``env``'s, else the gateway's).

    ``tether check`` asks, not loading the config: a file is valid on a machine where the
    program is installed later, and a running gateway retries a server that fails to
    start. Asked at check time it turns a silent restart loop into one line."""
    if server.command is None:
        return None
    program = server.command[0]
    if os.sep in program:
        path = Path(server.cwd or ".") / program
        if not (path.is_file() and os.access(path, os.X_OK)):
            return f"{program!r} is not an executable file"
        return None
    env_path = server.env.get("PATH")
    search = env_path.get_secret_value() if env_path else os.environ.get("PATH", os.defpath)
    if shutil.which(program, path=search) is None:
        return f"{program!r} is not on the PATH"
    return None


class McpToolFilter(Section):
    """``agent.mcp_tools`` (and each ``agents[i].mcp_tools``): which MCP tools this agent
    may call, by the name the model sees (``server__tool``; shell patterns like
    ``git__*``). Empty ``allow``: all of them; ``deny`` is checked after it."""

    allow: list[str] = []
    deny: list[str] = []

    def allows(self, name: str) -> bool:
        if self.allow and not any(fnmatch.fnmatchcase(name, p) for p in self.allow):
            return False
        return not any(fnmatch.fnmatchcase(name, p) for p in self.deny)


class McpConfig(Section):
    """``mcp: {servers: {NAME: {...}}}``."""

    servers: dict[str, McpServerConfig] = {}

    @field_validator("servers")
    @classmethod
    def _names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in value:
            if not SERVER_NAME.fullmatch(name):
                raise ValueError(
                    f"server name {name!r}: 1-30 characters of A-Z, a-z, 0-9, _ and -"
                    " (it prefixes each of its tools' names)"
                )
        return value
