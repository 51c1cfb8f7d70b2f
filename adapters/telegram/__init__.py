"""Telegram: updates in (Tether's own getUpdates loop, or a webhook route), Bot API out.

One room per concern, the same rooms every adapter has:

- :mod:`.normalize` — pure: an update dict in, an ``Event`` or a ``Dropped`` out;
  :mod:`.content` is its part for names, forwards, old payloads and content without text.
- :mod:`.ingress` — the poll loop and the webhook route; acknowledged after the commit.
  :mod:`.epochs` is its part for update ids Telegram restarts after a quiet week.
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

#: What importing PTB loads for nothing Tether uses, each for the life of the process:
#: ``cryptography``, which PTB imports whenever it is installed (another dependency brings
#: it) only to decrypt Telegram Passport data, which Tether never asks for (8 MB of
#: resident memory, bench/idle.py); and ``httpx._main``, httpx's command-line client,
#: which ``import httpx`` (PTB's transport module imports it) loads for its ``httpx.main``
#: entry point: click (which the MCP SDK's uvicorn brings) and pygments where installed,
#: ~1.5 MB, even when the rest of the CLI's extras are missing and ``httpx.main`` ends up
#: a stub that says so.
_UNUSED_BY_TETHER = ("cryptography", "httpx._main")


def _import_ptb_lean() -> None:
    """Import PTB with :data:`_UNUSED_BY_TETHER` out of its sight, unless PTB is loaded.

    A module set to ``None`` in ``sys.modules`` makes its import raise ImportError, and
    both importers expect that: PTB then reports Passport decryption unavailable, and
    httpx defines ``httpx.main`` as a stub (the ``httpx`` command, a process of its own,
    is unaffected). The block lasts for PTB's import only: whatever imports either
    module later gets it. A module something loaded before is left alone.
    """
    if "telegram" in sys.modules:
        return
    blocked = [name for name in _UNUSED_BY_TETHER if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # import -> ImportError
    try:
        import telegram  # noqa: F401
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


_import_ptb_lean()

if TYPE_CHECKING:
    from tether.adapters.telegram.adapter import TelegramAdapter

__all__ = ["TelegramAdapter"]


def __getattr__(name: str) -> Any:
    if name != "TelegramAdapter":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from tether.adapters.telegram.adapter import TelegramAdapter

    globals()[name] = TelegramAdapter
    return TelegramAdapter
