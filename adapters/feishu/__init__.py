"""Feishu/Lark: events in by a verified webhook or the SDK's long connection, IM API out.

The rooms, in the order an event passes them:

- :mod:`.webhook` / :mod:`.long_connection` — ingress; acknowledge only after the commit.
- :mod:`.normalize` (with :mod:`.content` and :mod:`.described`) — pure: a payload dict
  in, an ``Event`` or a ``Dropped`` out. What tests and fuzzers call.
- :mod:`.send` — replies through the IM API, and which ``Send*`` error a failure is.
- :mod:`.adapter` — :class:`FeishuAdapter`, which wires them together.

``FeishuAdapter`` is loaded on first use (PEP 562): lark-oapi takes ~2 s to import, and
``import tether.adapters.feishu.normalize`` should not pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.adapters.feishu.adapter import FeishuAdapter

__all__ = ["FeishuAdapter"]


def __getattr__(name: str) -> Any:
    if name == "FeishuAdapter":
        from tether.adapters.feishu.adapter import FeishuAdapter

        return FeishuAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
