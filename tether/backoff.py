"""How long to wait before trying again: the one place that computes a retry delay.

Two shapes, for two kinds of waiter:

- :func:`full_jitter` — uniform in ``[0, min(cap, base·2^(attempt-1))]``. For work that
  many lanes retry at once (events, outbox rows): spreading the retries over the whole
  window keeps a recovering store or platform from being hit in lockstep.
- :func:`equal_jitter` — uniform in ``[ceiling/2, ceiling]``. For one connection that
  reconnects (a poll loop, a websocket, a start-up probe): never a tight loop, because
  half the window is always waited, and still not in lockstep with a second instance.

The exponent is capped so that a long outage cannot overflow a float.
"""

from __future__ import annotations

import random

_MAX_EXPONENT = 16


def ceiling(attempt: int, base: float, cap: float) -> float:
    """``min(cap, base·2^(attempt-1))`` for attempt 1, 2, …"""
    return min(cap, base * 2.0 ** min(max(attempt, 1) - 1, _MAX_EXPONENT))


def full_jitter(attempt: int, base: float, cap: float) -> float:
    """Uniform in ``[0, ceiling]``: retries of many lanes spread over the window."""
    return random.uniform(0, ceiling(attempt, base, cap))


def equal_jitter(attempt: int, base: float, cap: float) -> float:
    """Uniform in ``[ceiling/2, ceiling]``, rounded to ms: a reconnect never spins."""
    top = ceiling(attempt, base, cap)
    return round(top * random.uniform(0.5, 1.0), 3)
