"""Telegram: updates in (Tether's own getUpdates loop, or a webhook route), Bot API out.

One room per concern, the same rooms every adapter has:

- :mod:`.normalize` — pure: an update dict in, an ``Event`` or a ``Dropped`` out;
  :mod:`.content` is its part for names, forwards, old payloads and content without text.
- :mod:`.ingress` — the poll loop and the webhook route; acknowledged after the commit.
- :mod:`.send` — sendMessage and the classification of its failures.
- :mod:`.chores` — best-effort calls after an accept (button spinners, "typing…").
- :mod:`.http` — PTB's ``Bot`` on an aiohttp transport.
- :mod:`.adapter` — :class:`TelegramAdapter`, which wires them together.

``TelegramAdapter`` is loaded on first use (PEP 562), so that importing
``tether.adapters.telegram.normalize`` (tests, fuzzers) does not load the HTTP client,
the config schema or the gateway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.adapters.telegram.adapter import TelegramAdapter

__all__ = ["TelegramAdapter"]


def __getattr__(name: str) -> Any:
    if name != "TelegramAdapter":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from tether.adapters.telegram.adapter import TelegramAdapter

    globals()[name] = TelegramAdapter
    return TelegramAdapter
