"""The SQLite store's link to its writer process: the batching queue, the pipe, and the
futures settled after each commit.

Every write goes through a single writer task that gathers whatever is queued and sends
it, as ONE message, to a child process (:mod:`tether.memory.sqlite.writer`) that commits
it as ONE transaction: ``executemany`` per statement shape, one commit. The process
keeps the SQL off the event loop and on the machine's other core, where a thread could
not (see that module for why). Callers still get their own future back, resolved only
after that commit: durable-before-ack holds for each of them.

Write ordering inside a batch is by *phase* (:data:`tether.memory.sql.statements.ACCEPT` ...
``OUTBOX``). A write is only ever submitted after the writes it depends on have
committed, or sits in a later phase of the same batch, so grouping statements by shape
never reorders dependent writes.

A failed batch fails its callers, who retry (every write is idempotent) — except the
writes posted without a caller to tell, which are re-posted when they must land (see
:meth:`WriterLink.post`). The outcome of the last batch is the store's health:
:attr:`WriterLink.problem` until a batch commits again.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

# Imported as a module, not its names: ``frame`` is looked up at each send (tests record it).
import tether.memory.sqlite.writer as writer_process
from tether.backoff import equal_jitter
from tether.events import Event
from tether.memory.records import InboxRow
from tether.memory.sql.statements import BEGIN, Statement
from tether.memory.sqlite.batch import Accept, Queue, Write, accepted, resolve
from tether.memory.sqlite.pipe import STDERR_LINE, read_reply, relay_stderr
from tether.memory.store import WritesFailing

log = structlog.get_logger("tether.sqlite")
#: How long ``close`` waits for the writer process to finish before killing it, and for
#: writes that must land (re-posted after a failed batch) before giving them up.
_WRITER_EXIT_S = 10.0
#: Batches at the writer at once: the next one gathers while the last one commits.
IN_FLIGHT = 4
#: Pause before re-posting writes of a failed batch: base and cap, seconds (it grows
#: with the failures in a row, so a full disk is not hammered).
_REPOST_BASE_S, _REPOST_MAX_S = 0.02, 2.0


class WriterLink:
    """One SQLite file's writes: queued here, committed by the writer process in groups.

    ``label`` is the path the user configured (for messages); ``open`` gets the file the
    writer really opens (for ``:memory:`` a scratch file).
    """

    def __init__(self, label: str, synchronous: str) -> None:
        self.label = label
        self.synchronous = synchronous
        self._file = label
        #: ``device:inode`` of the file: a writer opens that file or none (see writer).
        self._identity = ""
        #: Why the last batch failed, until one commits again (readiness reads it).
        self.problem: str | None = None
        self._failures = 0  # batches failed in a row
        #: Writes that must land, from failed batches, waiting to be re-posted.
        self._held: list[Write] = []
        self._repost_at: asyncio.TimerHandle | None = None
        #: Batches taken from the queue and not settled yet (close waits for them).
        self._unsettled = 0
        self._abandoned = False
        self._relays: set[asyncio.Task[None]] = set()
        #: The writer process; replaced when it dies (tests signal it).
        self.process: asyncio.subprocess.Process | None = None
        self._replies: asyncio.Task[None] | None = None
        #: Batches sent to the current writer and not answered yet, oldest first (each
        #: writer has its own: a dead one's reader fails only what that one held).
        self._inflight: deque[Queue] = deque()
        self._room = asyncio.Semaphore(IN_FLIGHT)
        self._queue = Queue()
        #: Events whose 'running' mark still waits in the queue (see :meth:`take_begin`).
        self._begun: dict[str, Write] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    # -- lifecycle ------------------------------------------------------------------

    async def open(self, file: str, identity: str) -> None:
        """Start writing to ``file``, which must stay the file ``identity`` names."""
        self._file, self._identity = file, identity
        self.problem, self._failures, self._abandoned = None, 0, False
        await self._start_writer()
        self._closing = False
        self._task = asyncio.create_task(self._write_loop(), name="sqlite-writer")

    async def close(self) -> None:
        """Commit what is queued — re-posted writes that must land included, for up to
        ``_WRITER_EXIT_S`` — then let the writer process exit."""
        if self._task:
            self._closing = True
            self._wake.set()
            done, _ = await asyncio.wait([self._task], timeout=_WRITER_EXIT_S)
            if not done:
                self._abandon()
                await self._task
            self._task = None
        await self._stop_writer()
        await asyncio.gather(*self._relays)

    def _abandon(self) -> None:
        """Closing, and the store still refuses writes that must land: give them up,
        loudly (their rows stay as the last commit left them, which recovery handles)."""
        self._abandoned = True
        if self._repost_at:
            self._repost_at.cancel()
        log.error(
            "store.writes_abandoned", path=self.label, count=len(self._held), error=self.problem
        )
        self._held.clear()
        self._wake.set()

    async def _start_writer(self) -> asyncio.subprocess.Process:
        writer = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", writer_process.__file__,
            self._file, self._identity, self.synchronous,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, limit=STDERR_LINE,
        )  # fmt: skip
        relay = asyncio.create_task(relay_stderr(writer, self.label), name="sqlite-writer-stderr")
        self._relays.add(relay)
        relay.add_done_callback(self._relays.discard)
        try:
            ok, ready = await read_reply(writer)
        except (asyncio.IncompleteReadError, OSError):
            code = await writer.wait()
            await relay  # what it printed is in the log now
            raise RuntimeError(f"the SQLite writer for {self.label} failed ({code})") from None
        if not ok:
            await writer.wait()
            raise WritesFailing(f"the SQLite writer cannot open {self.label}: {ready}")
        assert ready == writer_process.READY, ready
        self.process, self._inflight = writer, deque()
        self._replies = asyncio.create_task(
            self._read_replies(writer, self._inflight), name="sqlite-replies"
        )
        return writer

    async def _stop_writer(self) -> None:
        """EOF to the writer: it answers what it was sent, then exits."""
        writer, replies = self.process, self._replies
        if writer is None:
            return
        assert writer.stdin is not None
        writer.stdin.close()
        try:
            await asyncio.wait_for(writer.wait(), _WRITER_EXIT_S)
        except TimeoutError:
            writer.kill()
        if replies:
            await replies
        self.process = self._replies = None

    # -- what the store submits -----------------------------------------------------

    def accept(
        self, items: Sequence[tuple[Event, str, str]], cursors: Mapping[str, str]
    ) -> asyncio.Future[list[InboxRow | None]]:
        """Queue events for the inbox (and cursors to move with them); the future holds
        each one's new row, or None for a key already there, once committed."""
        future: asyncio.Future[list[InboxRow | None]] = asyncio.get_running_loop().create_future()
        self._check_open()
        self._queue.accepts.append(Accept(items, cursors, future))
        self._wake.set()
        return future

    async def write(self, phase: int, *statements: Statement) -> None:
        """Queue statements for the next group commit and wait until it has committed."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueue(Write(phase, list(statements), future))
        await future

    def post(self, phase: int, *statements: Statement, must_land: bool = False) -> Write:
        """Queue statements for the next group commit without waiting for it.

        For writes that need not be durable before the caller goes on: the writer keeps
        them ordered before anything submitted later, and a crash before the commit
        leaves the row as it was, which recovery already handles. Reads wait for them
        (:meth:`settled`), so the store still reads its own writes; a failure is logged
        with its batch.

        ``must_land``: a failed batch does not drop the write but posts it again (after
        a pause that grows while batches keep failing) until a batch commits it, and
        :meth:`close` waits for that. For records of what already happened outside —
        a reply that reached the platform — where the state left behind by a lost write
        would make a restart do it again. Safe because such a write sets a final state
        that nothing later in this process overwrites, so landing after writes posted
        after it changes nothing, and it is idempotent, so landing twice (a batch that
        committed, but whose writer died before answering) changes nothing either.
        Waiting for each one instead would cost a commit round trip per reply.
        """
        write = Write(phase, list(statements), None, must_land)
        self._enqueue(write)
        self._queue.posted += 1
        return write

    async def probe(self) -> None:
        """Commit a write that reaches the disk, with whatever else is queued; raise as
        that batch failed. How readiness learns that writes work again after a failure,
        when nothing else is being written."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueue(Write(0, [], future))
        self._queue.probe = True
        await future

    def begin(self, key: str, statement: Statement) -> None:
        """Post event ``key``'s 'running' mark, and remember it until its batch leaves."""
        self._begun[key] = self.post(BEGIN, statement)

    def take_begin(self, key: str) -> Sequence[Any] | None:
        """The parameters of ``key``'s 'running' mark, if that mark has not reached the
        writer yet: then it is dropped, and the finishing write sets the attempts
        instead. A quick handler finishes within the batch that would have marked it
        running; that row is one of eight an event writes."""
        write = self._begun.pop(key, None)
        if write is None:
            return None
        (_sql, params), *_ = write.statements
        write.statements.clear()
        return params

    async def settled(self) -> None:
        """Wait for the newest batch with posted writes (batches settle in order)."""
        batch = self._queue if self._queue.posted else None
        if batch is None:
            batch = next((b for b in reversed(self._inflight) if b.posted), None)
        if batch is None:
            return
        if batch.settled is None:
            batch.settled = asyncio.get_running_loop().create_future()
        await asyncio.wait([batch.settled])  # a cancelled reader leaves it to the others

    def _enqueue(self, write: Write) -> None:
        self._check_open()
        self._queue.writes.append(write)
        self._wake.set()

    def _check_open(self) -> None:
        if self._task is None or self._closing:
            raise RuntimeError("store is closed")

    # -- the writer task ------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            if not self._queue:
                if self._closing and (self._abandoned or not (self._unsettled or self._held)):
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._room.acquire()
            batch, self._queue = self._queue, Queue()
            self._begun.clear()
            self._unsettled += 1
            try:
                await self._send(batch)
            except Exception as exc:
                self._settle(batch, exc)

    async def _send(self, batch: Queue) -> None:
        """Hand a batch to the writer process: its statements grouped by (phase, SQL), so
        the writer runs one ``executemany`` per shape, in phase order."""
        groups: dict[tuple[int, str], list[Sequence[Any]]] = {}
        for write in sorted(batch.writes, key=lambda w: w.phase):
            for sql, params in write.statements:
                groups.setdefault((write.phase, sql), []).append(params)
        accepts = [
            ([(event.key, conversation, payload) for event, conversation, payload in a.items],
             a.cursors)
            for a in batch.accepts
        ]  # fmt: skip
        data = writer_process.frame(
            (accepts, [(sql, rows) for (_, sql), rows in groups.items()], batch.probe)
        )
        writer = self.process
        if writer is None or writer.returncode is not None:
            writer = await self._start_writer()
        assert writer.stdin is not None
        self._inflight.append(batch)
        writer.stdin.write(data)
        try:
            await writer.stdin.drain()
        except OSError:
            # The writer is gone; its reply reader fails everything in flight, this too.
            with contextlib.suppress(ProcessLookupError):
                writer.kill()

    async def _read_replies(
        self, writer: asyncio.subprocess.Process, inflight: deque[Queue]
    ) -> None:
        """Settle each batch as the writer answers it, in the order they were sent."""
        try:
            while True:
                ok, result = await read_reply(writer)
                batch = inflight.popleft()
                if not ok:
                    self._settle(batch, result)
                    continue
                for accept, seqs in zip(batch.accepts, result, strict=True):
                    # A caller cancelled while it waited (an adapter stopping mid-backfill)
                    # has a cancelled future: its rows are committed all the same, and
                    # this reader must live on to settle every batch after it.
                    if not accept.future.done():
                        accept.future.set_result(accepted(accept, seqs))
                self._settle(batch, None)
        except (asyncio.IncompleteReadError, OSError):
            pass  # EOF: the writer exited, after a close or on its own
        if self.process is writer:
            self.process = None
        code = await writer.wait()
        if inflight:
            log.error("store.writer_exited", path=self.label, code=code)
            # Not known to be committed: callers retry, and every write is idempotent.
            error = RuntimeError(f"the SQLite writer process for {self.label} exited ({code})")
            while inflight:
                self._settle(inflight.popleft(), error)

    def _settle(self, batch: Queue, error: BaseException | None) -> None:
        """Resolve every future of ``batch`` — with ``error``, or done (accepts already
        are) — record the outcome as the store's health, and hold the writes that must
        land for re-posting."""
        if batch.done:
            return
        batch.done = True
        self._room.release()
        self._unsettled -= 1
        resolve(batch, error)
        if error is None:
            self._failures = 0
            if self.problem is not None:
                log.info("store.writes_recovered", path=self.label, was=self.problem)
                self.problem = None
        else:
            self._failures += 1
            self.problem = f"{type(error).__name__}: {error}"
            held = [w for w in batch.writes if w.must_land and w.statements]
            log.error(
                "store.write_failed", path=self.label, error=repr(error),
                posted=batch.posted, reposted=0 if self._abandoned else len(held),
            )  # fmt: skip
            if held and not self._abandoned:
                self._hold(held)
        if batch.settled is not None and not batch.settled.done():
            batch.settled.set_result(None)
        self._wake.set()  # a closing write loop waits for every batch to settle

    def _hold(self, writes: list[Write]) -> None:
        self._held += writes
        if self._repost_at is None:
            delay = equal_jitter(self._failures, _REPOST_BASE_S, _REPOST_MAX_S)
            self._repost_at = asyncio.get_running_loop().call_later(delay, self._repost)

    def _repost(self) -> None:
        self._repost_at = None
        for write in self._held:
            self._queue.writes.append(write)
            self._queue.posted += 1
        self._held.clear()
        self._wake.set()
