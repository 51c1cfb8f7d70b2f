"""Tether: a durable chat gateway for AI agents.

Everything a bot author imports comes from here (and, for tests, from
:mod:`tether.testing`)::

    from tether import Button, Context, Fatal, File, Retryable, Router

The names below are the public surface, pinned by ``tests/project/test_public_api.py``; where a
name is defined inside the package may change from one release to the next, the import
from ``tether`` does not.

The repository keeps one folder per concern (``gateway/``, ``adapters/``, ``memory/``,
``scheduler/``, ``config/``); installed, they live under this one namespace
(``tether.gateway``, ``tether.memory``, …) so that no generic top-level name such as
``config`` or ``memory`` lands in site-packages. The shared vocabulary sits in this
package's own modules, below every folder (events, errors, keys, limits, text, metrics,
redaction, cron). What needs the gateway (``Context``, ``Router``, ``Gateway``) is loaded
on first use (PEP 562), so importing ``tether.events`` alone stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tether.buttons import Button
from tether.errors import (
    ActionUnsupported,
    BudgetExceeded,
    ButtonError,
    ConfigError,
    DownloadError,
    Fatal,
    GatewayError,
    Retryable,
    TaskRefused,
    TooLarge,
    ToolError,
    ToolTimeout,
    WaitCancelled,
    WaitEnded,
    WaitExpired,
)
from tether.events import Attachment, Conversation, Event, Kind, OutMessage, Sender, Target
from tether.files import File

if TYPE_CHECKING:
    from tether.gateway.agent.chat import converse
    from tether.gateway.app import Gateway
    from tether.gateway.handler.asking import Answer
    from tether.gateway.handler.context import Context
    from tether.gateway.handler.routing import Handler, Middleware, NextHandler, Router

__all__ = [
    "ActionUnsupported",
    "Answer",
    "Attachment",
    "BudgetExceeded",
    "Button",
    "ButtonError",
    "ConfigError",
    "Context",
    "Conversation",
    "DownloadError",
    "Event",
    "Fatal",
    "File",
    "Gateway",
    "GatewayError",
    "Handler",
    "Kind",
    "Middleware",
    "NextHandler",
    "OutMessage",
    "Retryable",
    "Router",
    "Sender",
    "Target",
    "TaskRefused",
    "TooLarge",
    "ToolError",
    "ToolTimeout",
    "WaitCancelled",
    "WaitEnded",
    "WaitExpired",
    "converse",
]

#: Public names whose home imports the gateway: loaded when first asked for.
_LAZY = {
    "Answer": "tether.gateway.handler.asking",
    "Context": "tether.gateway.handler.context",
    "Router": "tether.gateway.handler.routing",
    "Handler": "tether.gateway.handler.routing",
    "Middleware": "tether.gateway.handler.routing",
    "NextHandler": "tether.gateway.handler.routing",
    "Gateway": "tether.gateway.app",
    "converse": "tether.gateway.agent.chat",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
