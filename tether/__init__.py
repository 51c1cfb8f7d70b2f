"""Tether: a durable chat gateway for AI agents.

What a bot author imports::

    from tether import Context, Router, Retryable, Fatal, File

The repository keeps one folder per concern (``gateway/``, ``adapters/``, ``memory/``,
``scheduler/``, ``config/``); installed, they live under this one namespace
(``tether.gateway``, ``tether.memory``, …) so that no generic top-level name such as
``config`` or ``memory`` lands in site-packages.

The shared vocabulary sits here, below every folder: :mod:`tether.events` (what an event
and a reply look like), :mod:`tether.errors` (how a handler or a start fails) and
:mod:`tether.backoff` (how long to wait before trying again). ``Context`` and ``Router``
are loaded on first use (PEP 562), so importing ``tether.events`` alone stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.errors import Fatal, Retryable
from tether.events import Attachment, Conversation, Event, Kind, OutMessage, Sender, Target
from tether.files import File

if TYPE_CHECKING:
    from tether.gateway.context import Context
    from tether.gateway.routing import Router

__all__ = [
    "Attachment",
    "Context",
    "Conversation",
    "Event",
    "Fatal",
    "File",
    "Kind",
    "OutMessage",
    "Retryable",
    "Router",
    "Sender",
    "Target",
]

_LAZY = {"Context": "tether.gateway.context", "Router": "tether.gateway.routing"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
