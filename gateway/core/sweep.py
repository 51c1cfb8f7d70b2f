"""The sweep: what the lanes would otherwise never hear of, looked for every interval.

Events reach a lane when the inbox accepts them, and replies reach a send lane at their
checkpoint; what another process put into the store (``tether dead retry``, a row an
instance that died had accepted or written) is found here. On a store one process
uses, ``received`` rows older than one interval that no lane knows; on a shared store
(PostgreSQL), every conversation and chat with work, whichever process wrote it, so a
lane or chat whose process died is taken over within one interval (the lanes' locks
keep two processes off one conversation). Each interval also runs ``chores`` (access:
telling people whose pairing was approved from the CLI).

A store that does not answer fails every interval for as long as the outage lasts: that
is one streak (:mod:`tether.gateway.core.streaks`): ``gateway.sweep_failed`` once with its
traceback, then a count (``repeated=N``) a minute, and ``gateway.sweep_recovered`` when
the store answers again. The chores, which need the store too, wait for it meanwhile
instead of failing beside the sweep every interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from tether.gateway.core.dispatcher import Dispatcher
from tether.gateway.core.outbox import Outbox
from tether.gateway.core.streaks import Streak
from tether.memory.roles import InboxStore, OutboxStore

log = structlog.get_logger("tether.gateway")


class SweepStore(InboxStore, OutboxStore, Protocol):
    """What the sweep reads: pending rows, and the lanes and chats that have work."""


class Sweep:
    def __init__(
        self,
        store: SweepStore,
        dispatcher: Dispatcher,
        outbox: Outbox,
        interval: float,
        chores: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self.outbox = outbox
        self.interval = interval
        self.chores = chores
        self._task: asyncio.Task[None] | None = None
        self.failing = Streak(log, "gateway.sweep_failed", recovered="gateway.sweep_recovered")
        self._chores = Streak(log, "gateway.chores_failed", recovered="gateway.chores_recovered")

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="inbox-sweep")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.failing.flush()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.sweep_once()

    async def sweep_once(self) -> None:
        """One interval's work: the sweep, then the chores if the store answered it."""
        if self.store.shared:
            answered = await self.shared()
        else:
            answered = await self.received(time.time() - self.interval)
        if not answered or self.chores is None:
            return
        try:
            await self.chores()
            self._chores.passed()
        except Exception:
            self._chores.failed()

    async def received(self, older_than: float) -> bool:
        """Submit ``received`` rows older than ``older_than`` that no lane knows of;
        False if the store failed."""
        try:
            read_at = time.monotonic()
            rows = await self.store.pending(older_than)
            fresh = [row for row in rows if not self.dispatcher.knows(row.key, read_at)]
            for row in rows:  # requeued by `tether dead retry` while it waited: run it now
                self.dispatcher.requeued(row, read_at)
            if fresh:
                log.info("gateway.swept", events=len(fresh))
                await self.dispatcher.submit(fresh)
        except Exception:
            self.failing.failed()
            return False
        self.failing.passed()
        return True

    async def shared(self) -> bool:
        """Shared store: look at every lane and chat with work; False if the store failed."""
        try:
            for conversation in await self.store.busy_conversations():
                self.dispatcher.poke(conversation)
            for target in await self.store.busy_targets():
                self.outbox.poke(target)
        except Exception:
            self.failing.failed()
            return False
        self.failing.passed()
        return True
