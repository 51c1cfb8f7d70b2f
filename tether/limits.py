"""Token buckets for outbound limits that adapters declare (per chat, per group, global).

A per-chat limit makes one bucket per chat ever sent to. A bucket that has refilled to
its burst and is not blocked is the same as one made afresh, so :class:`Buckets` forgets
such buckets now and then (whenever it holds twice as many as after the last time, and
at least :data:`KEEP`): what it keeps follows the chats sent to within a few seconds,
not every chat since the start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

#: Buckets kept before the first look for idle ones (and the least the next look waits for).
KEEP = 1024

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Limit:
    """``rate`` sends per second, bursting to ``burst``, shared by everything named ``bucket``."""

    bucket: str
    rate: float
    burst: float = 1.0


class TokenBucket:
    __slots__ = ("blocked_until", "burst", "clock", "rate", "stamp", "tokens")

    def __init__(self, rate: float, burst: float, clock: Clock = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.tokens = burst
        self.stamp = clock()
        self.blocked_until = 0.0

    def _refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def delay(self) -> float:
        """Seconds until one token is available (0 if now)."""
        now = self.clock()
        self._refill(now)
        wait = max(0.0, self.blocked_until - now)
        if self.tokens < 1:
            wait = max(wait, (1 - self.tokens) / self.rate)
        return wait

    def take(self) -> None:
        self._refill(self.clock())
        self.tokens -= 1

    def block(self, seconds: float) -> None:
        """The platform said "retry after": nothing leaves this bucket until then."""
        self.blocked_until = max(self.blocked_until, self.clock() + seconds)

    def idle(self) -> bool:
        """Full again and not blocked: no different from a new bucket."""
        now = self.clock()
        self._refill(now)
        return self.tokens >= self.burst and self.blocked_until <= now


class Buckets:
    """Named buckets created on first use; :meth:`acquire` waits until all allow a send."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._buckets: dict[str, TokenBucket] = {}
        self._clock = clock
        self._look_at = KEEP

    def __len__(self) -> int:
        return len(self._buckets)

    def get(self, limit: Limit) -> TokenBucket:
        bucket = self._buckets.get(limit.bucket)
        if bucket is None:
            bucket = TokenBucket(limit.rate, limit.burst, self._clock)
            self._buckets[limit.bucket] = bucket
        return bucket

    async def acquire(self, limits: list[Limit]) -> None:
        if not limits:
            return
        while True:
            if len(self._buckets) >= self._look_at:
                self._forget_idle()
            # Looked up afresh after each wait, and taken from without an await between:
            # a bucket forgotten meanwhile is made again, never drawn from as a stale copy.
            buckets = [self.get(limit) for limit in limits]
            wait = max(bucket.delay() for bucket in buckets)
            if wait <= 0:
                for bucket in buckets:
                    bucket.take()
                return
            await asyncio.sleep(wait)

    def _forget_idle(self) -> None:
        """Drop the idle buckets; the next look waits until twice as many are held again,
        so the cost stays a constant per bucket made."""
        for name in [name for name, bucket in self._buckets.items() if bucket.idle()]:
            del self._buckets[name]
        self._look_at = max(KEEP, 2 * len(self._buckets))
