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

import sys
from typing import TYPE_CHECKING, Any


def _import_ptb_without_passport() -> None:
    """Import PTB with ``cryptography`` out of its sight, unless something loaded it first.

    PTB imports ``cryptography`` whenever it is installed (another dependency brings it),
    only to decrypt Telegram Passport data, which Tether never asks for; that import is
    8 MB of resident memory for the life of the process (bench/idle.py). The block lasts
    for PTB's import only: whatever imports ``cryptography`` later gets it.
    """
    if "telegram" in sys.modules or "cryptography" in sys.modules:
        return
    sys.modules["cryptography"] = None  # type: ignore[assignment]  # import -> ImportError
    try:
        import telegram  # noqa: F401
    finally:
        if sys.modules.get("cryptography", 0) is None:
            del sys.modules["cryptography"]


_import_ptb_without_passport()

if TYPE_CHECKING:
    from tether.adapters.telegram.adapter import TelegramAdapter

__all__ = ["TelegramAdapter"]


def __getattr__(name: str) -> Any:
    if name != "TelegramAdapter":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from tether.adapters.telegram.adapter import TelegramAdapter

    globals()[name] = TelegramAdapter
    return TelegramAdapter
