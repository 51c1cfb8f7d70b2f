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

from adapters.base import Adapter, SendAmbiguous, SendFatal, SendRetryable
from config.schema import OutboxConfig
from gateway import metrics
from gateway.logs import redactor
from gateway.pipeline import backoff
from gateway.ratelimit import Buckets
from memory.store import OutboxRow, Store

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

    async def start(self) -> None:
        """Load what a previous run left unsent and start sending it."""
        rows = []
        for row in await self.store.unsent():
            adapter = self.adapters.get(row.platform)
            if adapter is None:
                log.warning("outbox.no_adapter", key=row.key, platform=row.platform)
                continue
            if row.status == "sending" and not (adapter.idempotent_send or adapter.resend_unknown):
                await self._mark_unknown(row, "interrupted while sending (process stopped)")
                continue
            rows.append(row)
        self.enqueue(rows)

    def enqueue(self, rows: Iterable[OutboxRow]) -> None:
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

    async def _work(self, target: str) -> None:
        lane = self._lanes[target]
        try:
            while lane and not self._stopping:
                row = lane[0]
                if row.next_at is not None and (wait := row.next_at - time.time()) > 0:
                    await asyncio.sleep(wait)
                async with self._slots:
                    try:
                        finished = await self._send(row)
                    except Exception:
                        # The store failed around the send: keep the row, pause, retry.
                        log.exception("outbox.error", key=row.key)
                        row.next_at = time.time() + backoff(
                            row.attempts + 1, self.config.backoff_base, self.config.backoff_max
                        )
                        finished = False
                if finished:
                    lane.popleft()
        finally:
            self._workers.pop(target, None)
            if not lane:
                self._lanes.pop(target, None)
            if not self._workers:
                self._idle.set()

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
        await self.store.mark_outbox(row.key, "sent", platform_id=sent.platform_id)
        metrics.OUTBOX.labels(row.platform, "sent").inc()
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
