"""The outbox: a reply is a committed row first and a platform call second.

One lane per target chat keeps a chat's messages (and a long reply's chunks) in order;
lanes run side by side within a concurrency limit and the adapter's token buckets. Each
send is marked ``sending`` (committed) before the platform call, so after a crash we
know which rows may have gone out: those are resent only where the adapter's send is
idempotent (or the operator asked for it), and otherwise marked ``unknown``.

What a platform call did (``sent``, or ``unknown`` for an ambiguous failure) is recorded
until the store takes it (:meth:`Outbox._record`): a failed commit of that mark never
makes the outbox call the platform again, and never leaves a delivered reply
``sending`` for a restart to send a second time.

A store outage fails every chat's lane, attempt after attempt: each kind of those
failures is one streak (:mod:`tether.gateway.core.streaks`), ``outbox.error`` (the store
failed around a send) or ``outbox.mark_failed`` once in full, then a count, and
``outbox.recovered`` / ``outbox.mark_recovered`` when the store takes writes again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping

import structlog

from tether import metrics
from tether.adapters.base import Adapter
from tether.backoff import equal_jitter, full_jitter
from tether.config.schema import OutboxConfig
from tether.errors import SendAmbiguous, SendFatal, SendRetryable
from tether.gateway.core import media
from tether.gateway.core.edits import (
    EDIT_REFUSED,
    action_of,
    deliver,
    edit_of,
    edit_refused,
    repeatable,
)
from tether.gateway.core.lanes import Lanes, SharedStore
from tether.gateway.core.streaks import Streak
from tether.limits import Buckets
from tether.memory.records import OutboxRow, OutboxStatus
from tether.memory.roles import OutboxStore
from tether.redaction import redactor

log = structlog.get_logger("tether.outbox")


class Outbox:
    """Sends committed replies: one lane per target chat (:mod:`tether.gateway.core.lanes`).

    The outbox's own policy on top of the lanes: which rows may be sent at all
    (:meth:`_usable`), the adapter's token buckets, the ``sending`` mark before each
    platform call, and which failures are retried, buried or left ``unknown``.
    """

    def __init__(
        self, store: OutboxStore, adapters: Mapping[str, Adapter], config: OutboxConfig
    ) -> None:
        self.store = store
        self.adapters = adapters
        self.config = config
        self.buckets = Buckets()
        self._store_errors = Streak(log, "outbox.error", recovered="outbox.recovered")
        self._mark_errors = Streak(
            log, "outbox.mark_failed", recovered="outbox.mark_recovered", traceback=False
        )
        #: Awaited with each row the platform got (or may have got), before it is marked:
        #: rooms relay it to the other agents (gateway/agent/rooms.py). Must not raise.
        self.on_delivered: Callable[[OutboxRow], Awaitable[None]] | None = None
        shared = (
            SharedStore[OutboxRow](store, "out", store.unsent_for, self._usable)
            if store.shared
            else None
        )
        self._lanes = Lanes(
            self._attempt,
            due=_next_at,
            concurrency=config.concurrency,
            task="send",
            failed=_lane_failed,
            shared=shared,
        )

    async def start(self) -> None:
        """Load what a previous run left unsent and start sending it."""
        if self._lanes.shared:
            for target in await self.store.busy_targets():
                self._lanes.poke(target)
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
        resendable = adapter.idempotent_send or adapter.resend_unknown or repeatable(row)
        if row.status == "sending" and not resendable:
            await self._delivered(row)
            await self._mark_unknown(row, "interrupted while sending (process stopped)")
            return False
        return True

    def enqueue(self, rows: Iterable[OutboxRow]) -> None:
        lanes = self._lanes
        if lanes.shared:
            for target in dict.fromkeys(row.message.target.key for row in rows):
                lanes.poke(target)
            return
        for row in rows:
            lanes.add(row.message.target.key, row)

    def poke(self, target: str) -> None:
        """Shared store: look at ``target``'s unsent rows (new ones may be there)."""
        self._lanes.poke(target)

    async def _attempt(self, target: str, row: OutboxRow) -> bool:
        """One send attempt; True once the row is final, else its ``next_at`` is set."""
        try:
            return await self._send(row)
        except Exception:
            # The store failed around the send: keep the row, pause, retry.
            self._store_errors.failed(key=row.key)
            row.next_at = time.time() + full_jitter(
                row.attempts + 1, self.config.backoff_base, self.config.backoff_max
            )
            return False

    async def _send(self, row: OutboxRow) -> bool:
        """One attempt; True when the row reached a final state (sent, dead, unknown)."""
        adapter = self.adapters[row.platform]
        await self.buckets.acquire(adapter.limits(row.message.target))
        row.attempts += 1
        # A row sent as a message since its edit was refused says so on this mark too.
        note = row.error if edit_refused(row) else None
        await self.store.mark_outbox(row.key, "sending", attempts=row.attempts, error=note)
        self._store_errors.passed()
        started = time.monotonic()
        olog = log.bind(key=row.key, target=row.message.target.key, attempt=row.attempts)
        try:
            if row.message.files:  # loaded from the store's blobs: gateway/core/media.py
                sent = await media.deliver(adapter, self.store, row.message)
            else:
                sent = await deliver(adapter, row, lambda exc: self._edit_refused(row, exc, olog))
        except SendRetryable as exc:
            if exc.retry_after is not None:
                for limit in adapter.limits(row.message.target):
                    self.buckets.get(limit).block(exc.retry_after)
            return await self._retry(row, exc, exc.retry_after, olog)
        except SendFatal as exc:
            await self._dead(row, exc, olog)
            return True
        except Exception as exc:  # SendAmbiguous, and anything the adapter did not classify
            if adapter.idempotent_send or adapter.resend_unknown or repeatable(row):
                return await self._retry(row, exc, None, olog)
            error = _describe(exc)
            await self._delivered(row)
            await self._record(row, "unknown", error=error)
            self._unknown(row, error)
            return True
        row.status, row.platform_id = "sent", sent.platform_id
        await self._delivered(row)
        await self._record(row, "sent", platform_id=sent.platform_id)
        metrics.labelled(metrics.OUTBOX, row.platform, "sent").inc()
        olog.info(
            "outbox.sent",
            platform_id=sent.platform_id,
            duration_ms=round((time.monotonic() - started) * 1000, 2),
        )
        return True

    async def _edit_refused(
        self, row: OutboxRow, exc: SendFatal, olog: structlog.typing.FilteringBoundLogger
    ) -> None:
        """The message ``row`` edits is gone (or can no longer be edited), or the press it
        answers takes no answer: from now on the row is a new message, and says so durably
        before that send (gateway/core/edits.py)."""
        note = f"{EDIT_REFUSED}: {_describe(exc)}"
        await self.store.mark_outbox(row.key, "sending", attempts=row.attempts, error=note)
        row.error = note
        metrics.OUTBOX.labels(row.platform, "edit_refused").inc()
        action = action_of(row.message)
        olog.warning(
            "outbox.edit_refused",
            edit_of=edit_of(row.message),
            action=action["do"] if action else None,
            error=_describe(exc),
        )

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
            else full_jitter(row.attempts, self.config.backoff_base, self.config.backoff_max)
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

    async def _record(
        self,
        row: OutboxRow,
        status: OutboxStatus,
        *,
        platform_id: str | None = None,
        error: str | None = None,
    ) -> None:
        """Record what the platform call for ``row`` did, however long the store takes.

        Never raises, so a failed commit cannot reach :meth:`_attempt`, which would call
        the platform again. Posted (``durable=False``): a store that commits in groups
        (SQLite) keeps posting the mark until a commit takes it, without this lane
        waiting a commit per reply; a store that commits each write (PostgreSQL) raises
        here instead, and the mark is tried again after a pause — the lane waits, as
        every later send of this chat would need the store anyway. Only a crash while
        the mark is in neither leaves the row ``sending`` (see :meth:`_usable`).
        """
        failures = 0
        while True:
            try:
                await self.store.mark_outbox(
                    row.key, status, platform_id=platform_id, error=error, durable=False
                )
                self._mark_errors.passed()
                return
            except Exception as exc:
                failures += 1
                delay = equal_jitter(failures, self.config.backoff_base, self.config.backoff_max)
                self._mark_errors.failed(exc, key=row.key, status=status, delay_s=delay)
                await asyncio.sleep(delay)

    async def _delivered(self, row: OutboxRow) -> None:
        if self.on_delivered is not None:
            await self.on_delivered(row)

    async def _mark_unknown(self, row: OutboxRow, error: str) -> None:
        await self.store.mark_outbox(row.key, "unknown", error=error)
        self._unknown(row, error)

    def _unknown(self, row: OutboxRow, error: str) -> None:
        metrics.OUTBOX.labels(row.platform, "unknown").inc()
        log.warning("outbox.unknown", key=row.key, error=error, attempt=row.attempts)

    async def flush(self, timeout: float) -> bool:
        """Wait until every queued row is sent (or final); False if ``timeout`` ran out
        (``outbox.flush_timeout``: what is left stays in the store for the next start)."""
        if await self._lanes.idle(timeout):
            return True
        log.warning("outbox.flush_timeout", timeout_s=round(timeout, 3))
        return False

    async def stop(self) -> None:
        """Cancel every send in flight: a row cut off stays ``sending`` and the restart
        treats it as interrupted (see :meth:`_usable`)."""
        await self._lanes.stop()
        self._store_errors.flush()
        self._mark_errors.flush()


def _next_at(row: OutboxRow) -> float | None:
    return row.next_at


def _lane_failed(target: str) -> None:
    log.exception("outbox.error", target=target)


def _describe(exc: Exception) -> str:
    kind = "ambiguous" if isinstance(exc, SendAmbiguous) else type(exc).__name__
    return redactor.scrub(f"{kind}: {exc}")
