"""A concurrency limit whose release costs the same however many tasks wait.

``asyncio.Semaphore`` (Python 3.11) wakes the next waiter by scanning its queue from the
front past every waiter already woken but not yet resumed. When a group commit
finishes, dozens of lanes release their slots in the same loop turn while a hundred
wait, so each release rescans the ones before it: on ``bench/telegram.py`` that scan
was 3% of the run. Here a release hands its slot straight to the first waiter still
waiting (first come, first served, as before) and drops it from the queue.
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType


class Slots:
    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError(f"a concurrency limit of {count}: at least 1")
        self._free = count
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def __aenter__(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        handed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(handed)
        try:
            await handed
        except asyncio.CancelledError:
            if handed.done() and not handed.cancelled():
                self._release()  # handed a slot, then cancelled before using it: pass it on
            raise

    async def __aexit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self._release()

    def _release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():  # a cancelled waiter is dropped on the way
                waiter.set_result(None)
                return
        self._free += 1
