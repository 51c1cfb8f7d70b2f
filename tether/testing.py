"""What a bot author needs to test their own handlers, without a platform.

Import it in tests only::

    from tether.testing import LoopbackAdapter

:class:`LoopbackAdapter` is an in-process platform: ``await adapter.say(text)`` goes
through the same durable pipeline as a Telegram update, and ``adapter.sent`` holds what
the handlers answered.
"""

from __future__ import annotations

from tether.adapters.loopback import LoopbackAdapter

__all__ = ["LoopbackAdapter"]
