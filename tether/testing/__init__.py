"""What a bot author needs to test their own handlers, without a platform.

Import it in tests only::

    from tether.testing import Bot, FakeModel, asks_for, tool_call

- :class:`Bot`: a whole Tether in the test's process on the loopback platform and an
  in-memory store; ``say``, ``press``, ``send_file`` and ``advance`` (the clock, for
  cron jobs and reminders) each return the replies they caused.
- :class:`FakeModel`: a scripted OpenAI-compatible server on 127.0.0.1 that the real
  client talks to: text answers, tool calls (:func:`asks_for`, :func:`tool_call`),
  streamed answers, and failures on demand.
- :class:`LoopbackAdapter`: the in-process platform underneath, for a test that builds
  its own :class:`~tether.Gateway`.
- ``tether.testing.plugin``: pytest fixtures (``fake_model``); name it in a conftest's
  ``pytest_plugins``.

docs/handlers.md, "Testing", shows a whole test.
"""

from __future__ import annotations

from tether.adapters.loopback import Acted, Delivery, LoopbackAdapter
from tether.testing.bot import Bot, Clock, Reply
from tether.testing.model import FakeModel, asks_for, scripted, tool_call
from tether.testing.stream import Pacing

__all__ = [
    "Acted",
    "Bot",
    "Clock",
    "Delivery",
    "FakeModel",
    "LoopbackAdapter",
    "Pacing",
    "Reply",
    "asks_for",
    "scripted",
    "tool_call",
]
