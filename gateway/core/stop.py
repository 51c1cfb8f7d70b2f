"""``/stop``: cancel the conversation's running turn, within a second, never queued behind it.

A conversation's events run one at a time in its lane, so a ``/stop`` queued like any
message would run only after the turn it is meant to stop — up to
``pipeline.handler_timeout`` later. Three pieces keep it out of that queue:

- the dispatcher runs a ``/stop`` row at once, beside the lane (:func:`is_stop` is its
  test; it still goes through the pipeline, so access, dedup and the checkpoint hold);
- the pipeline registers each running handler here with its ``asyncio.timeout``, by
  conversation (:meth:`Turns.running`);
- the ``/stop`` command (``gateway/builtin/stop.py``, ahead of every router) moves that
  deadline to *now*: the handler is cancelled where it waits (an LLM call, a slow
  tool) and the timeout turns the cancellation into a ``TimeoutError`` the pipeline
  recognizes as a stop (:meth:`Turns.stopped`), not a timeout.

A stopped turn ends cleanly: its inbox row is checkpointed ``done`` (no retry, no dead
letter) with what it had already queued plus :data:`STOPPED_NOTICE`; the steps it
finished are kept (they were saved as they finished). Logs ``turn.stopped`` (the
stopped event's key and how long it ran) and counts ``tether_turns_stopped_total``.

A turn that waits in ``retry_wait`` (for the model, for a service that asked to be tried
later) holds its lane as surely as a running one, so ``/stop`` ends it too: the lane that
holds it (:class:`WaitingLanes`, the dispatcher) names it and is woken, and its next
run (:meth:`Turns.called_off`) checkpoints it done without running the handler again;
``/stop`` answers :data:`STOPPED_WAITING` (``turn.stopped`` with ``waiting: true``).

Where the store is shared by several processes (PostgreSQL), the turn may run in
another process than the one that received ``/stop``. That one then finds the running
event in the conversation's lane in the store and writes its key to the cursor
``stop:{conversation}`` (:func:`request`); each process that runs turns on a shared
store reads those cursors every :data:`POLL` seconds while it runs any, and stops the
turn whose key is asked for (``turn.stopped`` with ``requested: true``); a turn waiting
in another process's lane reads the request at its next run. Keys, not clocks: a request
for a turn that already ended matches nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import structlog
from prometheus_client import Counter

from tether.events import Event, Kind
from tether.memory.records import InboxRow

log = structlog.get_logger("tether.stop")

STOPPED = Counter("tether_turns_stopped_total", "Running turns cancelled by /stop")

#: Sent in the chat by the stopped turn itself, with its checkpoint.
STOPPED_NOTICE = "Stopped."
#: The ``/stop`` event's own answers.
STOPPED_ANSWER = "Stopped the running answer."
STOPPED_WAITING = "Stopped the answer that was waiting to be tried again."
NOTHING_RUNNING = "Nothing is running."
COMMAND = "stop"
#: Seconds between looks at the stop requests of other processes (shared store only).
POLL = 0.5
#: How far back those looks reach (a request is matched by key, so overlap is harmless).
_LOOKBACK = 120.0


def stop_cursor(conversation: str) -> str:
    """The cursor that asks whichever process runs ``conversation``'s turn to stop it."""
    return f"stop:{conversation}"


class StopRequests(Protocol):
    """What the cross-process requests use of a shared store."""

    shared: bool

    async def recent_cursors(self, prefix: str, since: float) -> dict[str, str]: ...

    async def lane(self, conversation: str) -> list[InboxRow]: ...

    async def cursor(self, name: str) -> str | None: ...

    async def set_cursor(self, name: str, value: str) -> None: ...


class WaitingLanes(Protocol):
    """The lanes that hold turns waiting to be retried (the dispatcher)."""

    def waiting(self, conversation: str) -> str | None:
        """The key of the event waiting for its retry at the head of the lane, if any."""

    def wake(self, conversation: str) -> bool:
        """Run the lane's waiting event now instead of at its retry time."""


def is_stop(event: Event) -> bool:
    """The event is ``/stop``: the dispatcher runs it beside the lane, not in it."""
    return event.kind == Kind.COMMAND and event.command == COMMAND


@dataclass(slots=True)
class _Turn:
    key: str
    deadline: asyncio.Timeout
    started: float
    stopped: bool = False


class Turns:
    """The handler running now in each conversation, so that ``/stop`` can cancel it."""

    def __init__(self, store: StopRequests | None = None) -> None:
        self._running: dict[str, _Turn] = {}
        #: Keys of turns cancelled by ``/stop`` whose pipeline run has not yet seen it.
        self._stopped: set[str] = set()
        #: A shared store: stop requests of other processes are read from it.
        self.store = store if store is not None and store.shared else None
        self._watcher: asyncio.Task[None] | None = None
        #: The lanes, for turns that wait to be retried (set once the dispatcher is built).
        self.lanes: WaitingLanes | None = None
        #: Keys of waiting turns ``/stop`` called off, until their next run sees it.
        self._called_off: set[str] = set()

    @contextlib.contextmanager
    def running(self, conversation: str, event: Event, deadline: asyncio.Timeout) -> Iterator[None]:
        """While the block runs, ``/stop`` in ``conversation`` reschedules ``deadline``.

        A ``/stop`` is not registered: it runs beside the turn it stops, not instead."""
        if is_stop(event):
            yield
            return
        turn = _Turn(event.key, deadline, time.monotonic())
        self._running[conversation] = turn
        if self.store is not None and (self._watcher is None or self._watcher.done()):
            self._watcher = asyncio.create_task(self._watch(self.store), name="stop-requests")
        try:
            yield
        finally:
            if self._running.get(conversation) is turn:
                del self._running[conversation]

    async def _watch(self, store: StopRequests) -> None:
        """While this process runs turns: stop those another process was asked to stop."""
        since = time.time() - _LOOKBACK
        while self._running:
            await asyncio.sleep(POLL)  # a poll of the shared store (no event crosses hosts)
            try:
                asked = await store.recent_cursors("stop:", since)
            except Exception:
                log.exception("turn.stop_requests_failed")
                continue
            for name, key in asked.items():
                conversation = name.removeprefix("stop:")
                turn = self._running.get(conversation)
                if turn is not None and turn.key == key:
                    self.stop(conversation, requested=True)

    def stop(self, conversation: str, *, requested: bool = False) -> str | None:
        """Cancel ``conversation``'s running turn; its event key, or None if none runs."""
        turn = self._running.pop(conversation, None)
        if turn is None or turn.stopped:
            return None
        try:
            turn.deadline.reschedule(asyncio.get_running_loop().time())
        except RuntimeError:  # its handler_timeout is expiring this very moment
            return None
        turn.stopped = True
        self._stopped.add(turn.key)
        STOPPED.inc()
        log.info(
            "turn.stopped",
            key=turn.key,
            conversation=conversation,
            ran_ms=round((time.monotonic() - turn.started) * 1000, 2),
            requested=requested,
        )
        return turn.key

    def stopped(self, key: str) -> bool:
        """Was the turn of ``key`` cancelled by ``/stop``? (Asked once, by its pipeline run.)"""
        if key in self._stopped:
            self._stopped.discard(key)
            return True
        return False

    def stop_waiting(self, conversation: str) -> str | None:
        """Call off ``conversation``'s turn that waits in ``retry_wait`` in this process:
        its lane is woken and its next run ends it. Its event key, or None if none waits."""
        key = self.lanes.waiting(conversation) if self.lanes is not None else None
        if key is None or key in self._called_off:
            return None
        self._called_off.add(key)
        STOPPED.inc()
        log.info("turn.stopped", key=key, conversation=conversation, waiting=True)
        assert self.lanes is not None
        self.lanes.wake(conversation)
        return key

    async def called_off(self, row: InboxRow) -> bool:
        """Is this run of ``row`` one that ``/stop`` called off while it waited? Asked by
        its pipeline run before anything else; a retry on a shared store also reads
        whether another process was asked to stop it (:func:`request`)."""
        if row.key in self._called_off:
            self._called_off.discard(row.key)
            return True
        if self.store is None or row.attempts == 0:
            return False
        if await self.store.cursor(stop_cursor(row.conversation)) != row.key:
            return False
        where = {"key": row.key, "conversation": row.conversation}
        log.info("turn.stopped", **where, waiting=True, requested=True)
        return True


async def request(store: StopRequests, conversation: str, own_key: str) -> InboxRow | None:
    """Ask the process running (or holding the waiting) ``conversation``'s turn to stop
    it (shared store): that event's row, or None when the store shows none."""
    rows = [
        row
        for row in await store.lane(conversation)
        if row.status in ("running", "retry_wait") and row.key != own_key
    ]
    if not rows:
        return None
    await store.set_cursor(stop_cursor(conversation), rows[0].key)
    log.info("turn.stop_requested", key=rows[0].key, conversation=conversation)
    return rows[0]
