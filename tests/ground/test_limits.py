"""Token buckets (tether/limits.py): per-chat buckets do not pile up for every chat ever
sent to (issue 38, item 11), and forgetting idle ones never loosens a limit.

Time is a clock the test moves: 100,000 chats at Telegram's overall rate would take an
hour of real time.
"""

from __future__ import annotations

import pytest

from tether.adapters.telegram.send import rate_limits
from tether.events import Target
from tether.limits import KEEP, Buckets, Limit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.slow
async def test_sending_to_100000_chats_keeps_a_bounded_number_of_buckets() -> None:
    """Through the limits the outbox draws from for Telegram (a bucket per chat, and the
    global one), at Telegram's overall 30 messages a second."""
    clock = Clock()
    buckets = Buckets(clock)
    kept = 0
    for chat in range(100_000):
        await buckets.acquire(rate_limits(Target(platform="telegram", chat_id=str(chat))))
        kept = max(kept, len(buckets))
        clock.now += 1 / 30
    assert kept <= KEEP + 1, kept
    # The latest chats' buckets are still the ones drawn from (a second send waits).
    assert buckets.get(Limit("telegram:chat:99999", rate=1.0, burst=3.0)).tokens < 3


async def test_a_bucket_that_is_not_full_again_is_kept_and_still_limits() -> None:
    clock = Clock()
    buckets = Buckets(clock)
    busy = [Limit("chat:busy", rate=1.0, burst=2.0)]
    await buckets.acquire(busy)
    await buckets.acquire(busy)  # empty now
    for chat in range(KEEP - 1):  # chats sent to once
        await buckets.acquire([Limit(f"chat:{chat}", rate=1.0)])
    clock.now += 1.5  # the others are full again; "busy" has 1.5 of its 2 tokens
    await buckets.acquire([Limit("chat:one-more", rate=1.0)])
    assert len(buckets) == 2  # "busy" and "one-more": the idle ones are forgotten
    await buckets.acquire(busy)  # 0.5 tokens left: a fresh bucket would have had 1
    assert buckets.get(busy[0]).delay() > 0


async def test_a_blocked_bucket_is_not_forgotten_before_its_retry_after() -> None:
    clock = Clock()
    buckets = Buckets(clock)
    limit = Limit("chat:blocked", rate=1.0, burst=1.0)
    buckets.get(limit).block(60)  # the platform said "retry after 60 s"
    for chat in range(2 * KEEP):
        await buckets.acquire([Limit(f"chat:{chat}", rate=1.0, burst=1.0)])
        clock.now += 0.01
    assert len(buckets) < KEEP  # the idle ones were forgotten meanwhile
    assert 35 < buckets.get(limit).delay() <= 60  # 20 s went by
