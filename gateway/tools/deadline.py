"""One tool call within its timeout, and a call that will not stop left behind.

asyncio stops a task by raising ``CancelledError`` where it waits. A tool that catches it
(``except BaseException``, a retry loop, a library that shields its work) goes on, and a
turn that awaited it in its own task went on waiting: past the tool's timeout, past
``/stop``, past ``pipeline.handler_timeout`` (which cancels the same way), its lane held
for good. So every call runs in a task of its own and the turn waits *for* that task,
not in it:

- past the tool's ``timeout`` its task is cancelled and given :data:`GRACE` seconds to
  end. A tool that ends is a timeout (:class:`~tether.errors.ToolTimeout`: the model
  reads that it was cancelled and may or may not have done its work). One that does not
  is :class:`Abandoned`: left running and the turn goes on (the outcome ``unknown``);
- when the turn itself is cancelled (``/stop``, its handler timeout, the gateway
  stopping) the task is cancelled the same way; one that does not end within
  :data:`GRACE` is abandoned too (the caller records it: ``on_abandon``), and the
  cancellation goes on up, so the turn ends.

An abandoned call is kept referenced until it ends, whenever that is: ``tool.abandoned``
when it is left, ``tool.abandoned_ended`` when it ends, and the gauge
``tether_tool_calls_abandoned`` counts those still running. What it does meanwhile is not
part of any turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import Gauge

from tether.errors import ToolError
from tether.gateway.handler.tool import left_running, timed_out

#: Seconds a cancelled call has to end before it is abandoned: time to run its
#: ``finally`` blocks, short of what ``/stop`` promises (within a second or so).
GRACE = 1.0

ABANDONED = Gauge(
    "tether_tool_calls_abandoned", "Tool calls that did not stop when cancelled, still running"
)
_left: set[asyncio.Task[Any]] = set()


class Abandoned(ToolError):
    """The call did not stop when it was cancelled at its timeout: it was left running."""


def abandoned() -> list[asyncio.Task[Any]]:
    """The calls left running that have not ended yet."""
    return list(_left)


async def run(
    call: Awaitable[str],
    timeout: float | None,
    name: str,
    log: Any,
    on_abandon: Callable[[], Awaitable[None]],
) -> str:
    """The result of ``call`` (the tool's ``run(ctx, arguments)``), run in its own task.

    Raises what the tool raised, :class:`~tether.errors.ToolTimeout` past ``timeout``,
    :class:`Abandoned` past it for a call that would not stop; and, when the caller is
    cancelled, ``CancelledError`` after ``on_abandon`` if the call would not stop."""
    task = asyncio.ensure_future(call)
    started = time.monotonic()
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        if not await _stopped(task):
            _abandon(task, name, log, "turn cancelled", started)
            await asyncio.shield(on_abandon())
        raise
    if not done:
        assert timeout is not None
        if not await _stopped(task):
            _abandon(task, name, log, "timeout", started)
            raise Abandoned(left_running(timeout, name))
        if task.cancelled() or task.exception() is not None:
            raise timed_out(timeout, name) from None
    elif task.cancelled():  # not by us: something inside it cancelled its task
        raise ToolError(f"{name} was cancelled before it finished")
    return task.result()  # it finished; or what it raised


async def _stopped(task: asyncio.Task[Any]) -> bool:
    """Cancel ``task``; whether it ended within :data:`GRACE`."""
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=GRACE)
    return bool(done)


def _abandon(task: asyncio.Task[Any], name: str, log: Any, why: str, started: float) -> None:
    _left.add(task)
    ABANDONED.inc()
    log.warning("tool.abandoned", why=why, ran_s=round(time.monotonic() - started, 3))

    def ended(task: asyncio.Task[Any]) -> None:
        _left.discard(task)
        ABANDONED.dec()
        error = None if task.cancelled() else task.exception()
        outcome = "cancelled" if task.cancelled() else "failed" if error else "done"
        log.info(
            "tool.abandoned_ended",
            outcome=outcome,
            ran_s=round(time.monotonic() - started, 3),
            error=None if error is None else f"{type(error).__name__}: {error}",
        )

    task.add_done_callback(ended)
