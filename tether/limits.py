"""Token buckets for outbound limits that adapters declare (per chat, per group, global)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limit:
    """``rate`` sends per second, bursting to ``burst``, shared by everything named ``bucket``."""

    bucket: str
    rate: float
    burst: float = 1.0


class TokenBucket:
    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.stamp = time.monotonic()
        self.blocked_until = 0.0

    def _refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def delay(self) -> float:
        """Seconds until one token is available (0 if now)."""
        now = time.monotonic()
        self._refill(now)
        wait = max(0.0, self.blocked_until - now)
        if self.tokens < 1:
            wait = max(wait, (1 - self.tokens) / self.rate)
        return wait

    def take(self) -> None:
        self._refill(time.monotonic())
        self.tokens -= 1

    def block(self, seconds: float) -> None:
        """The platform said "retry after": nothing leaves this bucket until then."""
        self.blocked_until = max(self.blocked_until, time.monotonic() + seconds)


class Buckets:
    """Named buckets created on first use; :meth:`acquire` waits until all allow a send."""

    def __init__(self) -> None:
        self._buckets: dict[str, TokenBucket] = {}

    def get(self, limit: Limit) -> TokenBucket:
        bucket = self._buckets.get(limit.bucket)
        if bucket is None:
            bucket = self._buckets[limit.bucket] = TokenBucket(limit.rate, limit.burst)
        return bucket

    async def acquire(self, limits: list[Limit]) -> None:
        if not limits:
            return
        buckets = [self.get(limit) for limit in limits]
        while True:
            wait = max(bucket.delay() for bucket in buckets)
            if wait <= 0:
                for bucket in buckets:
                    bucket.take()
                return
            await asyncio.sleep(wait)
