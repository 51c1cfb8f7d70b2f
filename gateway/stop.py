"""``/stop``: cancel the conversation's running turn, within a second, never queued behind it.

A conversation's events run one at a time in its lane, so a ``/stop`` queued like any
message would run only after the turn it is meant to stop — up to
``pipeline.handler_timeout`` later. Three pieces keep it out of that queue:

- the dispatcher runs a ``/stop`` row at once, beside the lane (:func:`is_stop` is its
  test; it still goes through the pipeline, so access, dedup and the checkpoint hold);
- the pipeline registers each running handler here with its ``asyncio.timeout``, by
  conversation (:meth:`Turns.running`);
- the ``/stop`` command (:mod:`.stop_command`, ahead of every router) moves that
  deadline to *now*: the handler is cancelled where it waits (an LLM call, a slow
  tool) and the timeout turns the cancellation into a ``TimeoutError`` the pipeline
  recognizes as a stop (:meth:`Turns.stopped`), not a timeout.

A stopped turn ends cleanly: its inbox row is checkpointed ``done`` (no retry, no dead
letter) with what it had already queued plus :data:`STOPPED_NOTICE`; the steps it
finished are kept (they were saved as they finished). Logs ``turn.stopped`` (the
stopped event's key and how long it ran) and counts ``tether_turns_stopped_total``.

Where the store is shared by several processes (PostgreSQL), ``/stop`` runs beside the
lane as well, but it reaches only the turns of the process that received it: a turn
running in another process answers :data:`NOTHING_RUNNING` (documented limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import structlog
from prometheus_client import Counter

from tether.events import Event, Kind

log = structlog.get_logger("tether.stop")

STOPPED = Counter("tether_turns_stopped_total", "Running turns cancelled by /stop")

#: Sent in the chat by the stopped turn itself, with its checkpoint.
STOPPED_NOTICE = "Stopped."
#: The ``/stop`` event's own answers.
STOPPED_ANSWER = "Stopped the running answer."
NOTHING_RUNNING = "Nothing is running."
#: Where the pipeline leaves the :class:`Turns` for the ``/stop`` handler (``ctx.data``).
DATA_KEY = "tether.turns"
COMMAND = "stop"


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

    def __init__(self) -> None:
        self._running: dict[str, _Turn] = {}
        #: Keys of turns cancelled by ``/stop`` whose pipeline run has not yet seen it.
        self._stopped: set[str] = set()

    @contextlib.contextmanager
    def running(self, conversation: str, event: Event, deadline: asyncio.Timeout) -> Iterator[None]:
        """While the block runs, ``/stop`` in ``conversation`` reschedules ``deadline``.

        A ``/stop`` is not registered: it runs beside the turn it stops, not instead."""
        if is_stop(event):
            yield
            return
        turn = _Turn(event.key, deadline, time.monotonic())
        self._running[conversation] = turn
        try:
            yield
        finally:
            if self._running.get(conversation) is turn:
                del self._running[conversation]

    def stop(self, conversation: str) -> str | None:
        """Cancel ``conversation``'s running turn; its event key, or None if none runs."""
        turn = self._running.pop(conversation, None)
        if turn is None or turn.stopped:
            return None
        turn.stopped = True
        self._stopped.add(turn.key)
        turn.deadline.reschedule(asyncio.get_running_loop().time())
        STOPPED.inc()
        log.info(
            "turn.stopped",
            key=turn.key,
            conversation=conversation,
            ran_ms=round((time.monotonic() - turn.started) * 1000, 2),
        )
        return turn.key

    def stopped(self, key: str) -> bool:
        """Was the turn of ``key`` cancelled by ``/stop``? (Asked once, by its pipeline run.)"""
        if key in self._stopped:
            self._stopped.discard(key)
            return True
        return False
