"""The outbox: a reply is a committed row first and a platform call second.

One lane per target chat keeps a chat's messages (and a long reply's chunks) in order;
lanes run side by side within a concurrency limit and the adapter's token buckets. Each
send is marked ``sending`` (committed) before the platform call, so after a crash we
know which rows may have gone out: those are resent only where the adapter's send is
idempotent (or the operator asked for it), and otherwise marked ``unknown``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Iterable, Mapping

import structlog

from tether.adapters.base import Adapter, SendAmbiguous, SendFatal, SendRetryable
from tether.config.schema import OutboxConfig
from tether.gateway import metrics
from tether.gateway.logs import redactor
from tether.gateway.pipeline import backoff
from tether.gateway.ratelimit import Buckets
from tether.memory.store import OutboxRow, Store

log = structlog.get_logger("tether.outbox")


class Outbox:
    def __init__(self, store: Store, adapters: Mapping[str, Adapter], config: OutboxConfig) -> None:
        self.store = store
        self.adapters = adapters
        self.config = config
        self.buckets = Buckets()
        self._slots = asyncio.Semaphore(config.concurrency)
        self._lanes: dict[str, deque[OutboxRow]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = False
        self._shared = store.shared
        self._dirty: set[str] = set()

    async def start(self) -> None:
        """Load what a previous run left unsent and start sending it."""
        if self._shared:
            for target in await self.store.busy_targets():
                self.poke(target)
            return
        rows = []
        for row in await self.store.unsent():
            if await self._usable(row):
                rows.append(row)
        self.enqueue(rows)

    async def _usable(self, row: OutboxRow) -> bool:
        """False for a row that cannot be sent as it is: no adapter, or a send that a
        crash interrupted on a platform where resending could duplicate it."""
        adapter = self.adapters.get(row.platform)
        if adapter is None:
            log.warning("outbox.no_adapter", key=row.key, platform=row.platform)
            return False
        if row.status == "sending" and not (adapter.idempotent_send or adapter.resend_unknown):
            await self._mark_unknown(row, "interrupted while sending (process stopped)")
            return False
        return True

    def enqueue(self, rows: Iterable[OutboxRow]) -> None:
        if self._shared:
            for target in dict.fromkeys(row.message.target.key for row in rows):
                self.poke(target)
            return
        for row in rows:
            target = row.message.target.key
            lane = self._lanes.get(target)
            if lane is None:
                lane = self._lanes[target] = deque()
            lane.append(row)
            self._idle.clear()
            if target not in self._workers and not self._stopping:
                self._workers[target] = asyncio.create_task(
                    self._work(target), name=f"send:{target}"
                )

    def poke(self, target: str) -> None:
        """Shared store: look at ``target``'s unsent rows (new ones may be there)."""
        if self._stopping:
            return
        if target in self._workers:
            self._dirty.add(target)
            return
        self._idle.clear()
        self._workers[target] = asyncio.create_task(
            self._work_shared(target), name=f"send:{target}"
        )

    async def _work(self, target: str) -> None:
        lane = self._lanes[target]
        try:
            while lane and not self._stopping:
                if await self._attempt(lane[0]):
                    lane.popleft()
        finally:
            self._workers.pop(target, None)
            if not lane:
                self._lanes.pop(target, None)
            if not self._workers:
                self._idle.set()

    async def _work_shared(self, target: str) -> None:
        """One process sends to a chat at a time: take its lock, send what the store
        holds for it in order, let go, and look once more."""
        lock = f"out:{target}"
        try:
            while not self._stopping:
                self._dirty.discard(target)
                if not await self.store.try_lock(lock):
                    return
                try:
                    while not self._stopping and (rows := await self.store.unsent_for(target)):
                        for row in rows:
                            if not await self._usable(row):
                                continue
                            while not self._stopping and not await self._attempt(row):
                                pass
                finally:
                    await self.store.unlock(lock)
                if target not in self._dirty and not await self.store.unsent_for(target):
                    return
        except Exception:
            log.exception("outbox.error", target=target)
        finally:
            self._workers.pop(target, None)
            if not self._workers:
                self._idle.set()

    async def _attempt(self, row: OutboxRow) -> bool:
        """One send attempt after the row's retry time; True once it is final."""
        if row.next_at is not None and (wait := row.next_at - time.time()) > 0:
            await asyncio.sleep(wait)
        async with self._slots:
            try:
                return await self._send(row)
            except Exception:
                # The store failed around the send: keep the row, pause, retry.
                log.exception("outbox.error", key=row.key)
                row.next_at = time.time() + backoff(
                    row.attempts + 1, self.config.backoff_base, self.config.backoff_max
                )
                return False

    async def _send(self, row: OutboxRow) -> bool:
        """One attempt; True when the row reached a final state (sent, dead, unknown)."""
        adapter = self.adapters[row.platform]
        await self.buckets.acquire(adapter.limits(row.message.target))
        row.attempts += 1
        await self.store.mark_outbox(row.key, "sending", attempts=row.attempts)
        started = time.monotonic()
        olog = log.bind(key=row.key, target=row.message.target.key, attempt=row.attempts)
        try:
            sent = await adapter.send(row.message)
        except SendRetryable as exc:
            if exc.retry_after is not None:
                for limit in adapter.limits(row.message.target):
                    self.buckets.get(limit).block(exc.retry_after)
            return await self._retry(row, exc, exc.retry_after, olog)
        except SendFatal as exc:
            await self._dead(row, exc, olog)
            return True
        except Exception as exc:  # SendAmbiguous, and anything the adapter did not classify
            if adapter.idempotent_send or adapter.resend_unknown:
                return await self._retry(row, exc, None, olog)
            await self._mark_unknown(row, _describe(exc))
            return True
        row.status, row.platform_id = "sent", sent.platform_id
        # Not waited for: a crash before it commits leaves the row 'sending', which the
        # restart treats as ambiguous; the send itself already happened.
        await self.store.mark_outbox(row.key, "sent", platform_id=sent.platform_id, durable=False)
        metrics.labelled(metrics.OUTBOX, row.platform, "sent").inc()
        olog.info(
            "outbox.sent",
            platform_id=sent.platform_id,
            duration_ms=round((time.monotonic() - started) * 1000, 2),
        )
        return True

    async def _retry(
        self,
        row: OutboxRow,
        exc: Exception,
        retry_after: float | None,
        olog: structlog.typing.FilteringBoundLogger,
    ) -> bool:
        if row.attempts >= self.config.max_attempts:
            await self._dead(row, exc, olog)
            return True
        delay = (
            retry_after
            if retry_after is not None
            else backoff(row.attempts, self.config.backoff_base, self.config.backoff_max)
        )
        row.next_at = time.time() + delay
        error = _describe(exc)
        await self.store.mark_outbox(row.key, "retry_wait", next_at=row.next_at, error=error)
        metrics.OUTBOX.labels(row.platform, "retry").inc()
        olog.warning("outbox.retry", error=error, delay_s=round(delay, 3))
        return False

    async def _dead(
        self, row: OutboxRow, exc: Exception, olog: structlog.typing.FilteringBoundLogger
    ) -> None:
        error = _describe(exc)
        await self.store.mark_outbox(row.key, "dead", error=error)
        metrics.OUTBOX.labels(row.platform, "dead").inc()
        olog.error("outbox.dead", error=error)

    async def _mark_unknown(self, row: OutboxRow, error: str) -> None:
        await self.store.mark_outbox(row.key, "unknown", error=error)
        metrics.OUTBOX.labels(row.platform, "unknown").inc()
        log.warning("outbox.unknown", key=row.key, error=error, attempt=row.attempts)

    async def flush(self, timeout: float) -> bool:
        """Wait until every queued row is sent (or final); False if ``timeout`` ran out."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        return False

    async def stop(self) -> None:
        self._stopping = True
        tasks = list(self._workers.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _describe(exc: Exception) -> str:
    kind = "ambiguous" if isinstance(exc, SendAmbiguous) else type(exc).__name__
    return redactor.scrub(f"{kind}: {exc}")
