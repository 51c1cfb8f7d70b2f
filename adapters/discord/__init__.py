"""Discord: gateway events in (discord.py's client), REST out, gaps filled by backfill.

One room per concern, the same rooms every adapter has:

- :mod:`.normalize` — pure: a payload dict in, an ``Event`` or a ``Dropped`` out; what a
  message says (forwards, stickers, polls, embeds) is read by :mod:`.content`, names by
  id through :mod:`.servers`.
- :mod:`.ingress` — the gateway connection and the raw messages it delivers, with
  :mod:`.backfill` (what came while Tether was away), :mod:`.ask` (the ``/ask`` slash
  command) and :mod:`.cache` (discord.py's cache as the names normalize looks up).
- :mod:`.send` — Create Message with an idempotency nonce, and its failures classified.
- :mod:`.adapter` — :class:`DiscordAdapter`, which wires them together.

Importing this package loads nothing else: ``DiscordAdapter`` (and with it discord.py)
is imported on first use, so the platform library loads only when Discord is enabled and
tests and fuzzers can import :mod:`.normalize` alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.adapters.discord.adapter import DiscordAdapter

__all__ = ["DiscordAdapter"]


def __getattr__(name: str) -> Any:
    """PEP 562: ``tether.adapters.discord.DiscordAdapter`` resolved when first asked for."""
    if name == "DiscordAdapter":
        from tether.adapters.discord import adapter

        return adapter.DiscordAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
