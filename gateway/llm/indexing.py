"""The indexer: every stored turn embedded once, in the background, beside the traffic.

A turn is written by the checkpoint of the event that said it, and never waits for its
vector: the indexer asks the store for the turns that have none of the configured model
(:meth:`~tether.memory.embeddings.EmbeddingStore.unembedded`), embeds them in batches of
``memory.embeddings.batch`` and writes the vectors, each keyed by its turn's id. The
question is the store's, so what was embedded survives any crash and is never paid
again: after a restart (or a SIGKILL between a call and its write, which loses at most
one batch's vectors, embedded again) only the turns still without one are sent.

It wakes every ``pipeline.sweep_interval`` and reads on from the last turn it saw
(on a store shared by several gateways, from a little before it: another process's turn
may commit after a newer one); the first pass after a start reads from the beginning.
On a shared store one gateway at a time indexes, the one holding the advisory lock
``embeddings:index``; when it dies its lock goes with its session and another one takes
over. A failed batch is tried again after a backoff; a text the endpoint refuses (a 400
for that text alone) is skipped and logged, and the rest are embedded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Protocol

import structlog

from tether.backoff import equal_jitter
from tether.gateway.llm.embeddings import Embedder, EmbeddingFailed
from tether.memory.embeddings.store import EmbeddingStore
from tether.memory.embeddings.vectors import Vector
from tether.memory.roles import LaneLocks

log = structlog.get_logger("tether.embeddings")

#: The advisory lock of the one indexing gateway on a shared store.
LOCK = "embeddings:index"
#: Turn ids read again each pass on a shared store (turns that committed late).
LOOKBACK = 1000
#: The longest pause after failed passes, seconds.
BACKOFF_CAP = 60.0


class IndexStore(EmbeddingStore, LaneLocks, Protocol):
    """What the indexer reads and writes: vectors, and the lock of a shared store."""


class Indexer:
    def __init__(self, store: IndexStore, embedder: Embedder, interval: float) -> None:
        self.store, self.embedder, self.interval = store, embedder, interval
        #: The newest turn id seen: the next pass reads on from it.
        self.after = 0
        #: Turns not to send: blank, or refused by the endpoint (until a restart).
        self.skipped: set[int] = set()
        self._held = False
        self._task: asyncio.Task[None] | None = None
        #: One pass at a time: two would each send the same unembedded turns.
        self._pass = asyncio.Lock()

    def start(self) -> None:
        self.store.on_locks_lost(self._lost)
        self._task = asyncio.create_task(self._run(), name="embeddings-indexer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._held:
            self._held = False
            await self.store.unlock(LOCK)

    def _lost(self, names: frozenset[str]) -> None:
        if LOCK in names:
            self._held = False

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                if await self._hold():
                    await self.catch_up()
                if failures:
                    log.info("embeddings.index_recovered", after_failures=failures)
                failures = 0
                pause = self.interval
            except Exception as exc:  # the endpoint or the store: tried again later
                failures += 1
                log.warning("embeddings.index_failed", error=str(exc), failures=failures)
                pause = equal_jitter(failures, self.interval, BACKOFF_CAP)
            await asyncio.sleep(pause)

    async def _hold(self) -> bool:
        if not self._held:
            self._held = await self.store.try_lock(LOCK)
        return self._held

    async def catch_up(self) -> int:
        """Embed every turn that has no vector now; how many were embedded. A pass
        asked for while one runs waits for it, then finds what is left (one pass is
        the background loop, and a caller who must know the index is current)."""
        async with self._pass:
            return await self._catch_up()

    async def _catch_up(self) -> int:
        model, done = self.embedder.model, 0
        cursor = max(0, self.after - LOOKBACK) if self.store.shared else self.after
        while page := await self.store.unembedded(model, cursor, self.embedder.batch):
            wanted = []
            for ident, text in page:
                if ident in self.skipped:
                    continue
                if text.strip():
                    wanted.append((ident, text))
                else:
                    self.skipped.add(ident)
            vectors = await self._vectors(wanted)
            await self.store.save_vectors(model, vectors)
            done += len(vectors)
            cursor = page[-1][0]
            self.after = max(self.after, cursor)
            if len(page) < self.embedder.batch:
                break
        return done

    async def _vectors(self, rows: Sequence[tuple[int, str]]) -> list[tuple[int, Vector]]:
        """The rows' vectors; when the endpoint refuses a batch, each row alone, and the
        ones it refuses alone are skipped."""
        if not rows:
            return []
        try:
            vectors = await self.embedder.embed([text for _, text in rows], "turn")
        except EmbeddingFailed as exc:
            if not exc.refused:
                raise
            if len(rows) > 1:
                return [pair for row in rows for pair in await self._vectors([row])]
            self.skipped.add(rows[0][0])
            log.warning("embeddings.turn_refused", message_id=rows[0][0], error=str(exc))
            return []
        return [(ident, vector) for (ident, _), vector in zip(rows, vectors, strict=True)]
