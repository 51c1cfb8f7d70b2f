"""Retry from the console, and what the operator is told it did.

:func:`retry` is ``tether dead retry`` (:meth:`~tether.memory.operator.ReportStore.requeue`)
plus handing the row to this gateway's lanes at once instead of waiting for the sweep.
:func:`outcome` is the sentence the dead page shows afterwards, and it says what is true
when the page is drawn: the event has run again and is done, died again, or waits in
``retry_wait`` until a time it names; or it is about to run, and then whether it can get
an answer. A requeued turn that asks the model while no model it may ask can answer
(every circuit breaker open, every key cooling) waits in ``retry_wait`` for the earliest
one, or, when that is further than ``llm.max_retry_after`` from when it arrived, is
answered with ``llm.busy_notice`` (the pipeline's rule): "it runs again now" would be
false in both cases, so the sentence says which.
"""

from __future__ import annotations

import time

from tether.errors import Fatal
from tether.gateway.llm.client import LLM
from tether.gateway.web.host import ConsoleHost
from tether.gateway.web.render import scrub, when
from tether.keys import event_of
from tether.memory.records import InboxRow


async def retry(host: ConsoleHost, key: str) -> bool:
    """``tether dead retry KEY``, and the requeued row straight into this gateway's lanes."""
    if not await host.store.requeue(key):
        return False
    row = await host.store.inbox_row(key)
    if row is not None and row.status == "received":
        await host.dispatcher.submit([row])
    else:  # an outbox row (``{event}#{n}``): into its chat's send lane
        rows = await host.store.outbox_rows(event_of(key))
        host.outbox.enqueue([out for out in rows if out.key == key])
    return True


def model_wait(llm: LLM | None, row: InboxRow) -> tuple[float, str] | None:
    """``(seconds, why)`` until the first model ``row``'s turn may ask can answer, when
    none of them can now; None when one can (or there is no model to ask)."""
    if llm is None:
        return None
    event = row.event
    try:
        candidates = llm.candidates(
            platform=event.platform,
            conversation=row.conversation,
            command=event.command,
            prompt_tokens=0,
        )
    except (Fatal, KeyError):  # no model fits, or a route names a model gone by a reload
        return None
    waits: list[tuple[float, str]] = []
    for name in candidates:
        breaker = llm.breakers.get(name)
        pool = llm.pools.get(llm.model(name).provider)
        cooling = pool.wait() if pool is not None else None
        if breaker is not None and breaker.wait() > 0:
            waits.append((breaker.wait(), f"{name}: circuit breaker open"))
        elif cooling is not None and cooling[0] > 0:
            waits.append((cooling[0], f"{name}: every key rate-limited"))
        else:
            return None  # this one can answer now
    return min(waits) if waits else None


async def outcome(host: ConsoleHost, key: str) -> str:
    """What became of ``key`` since the operator pressed Retry, as true now."""
    row = await host.store.inbox_row(key)
    if row is None:
        return f"Requeued {key}: the reply is in its chat's send lane again."
    if row.status == "done":
        return f"Requeued {key}: it ran again and is done."
    if row.status == "dead":
        return f"Requeued {key}: it ran again and died again: {scrub(row.error)}"
    if row.status == "retry_wait":
        seconds = max((row.retry_at or time.time()) - time.time(), 0.0)
        return (
            f"Requeued {key}: it ran, and waits until {when(row.retry_at)} UTC"
            f" (in {seconds:.0f} s) before it runs again: {scrub(row.error)}"
        )
    waiting = model_wait(host.llm, row)
    if waiting is None:
        return f"Requeued {key}: it runs again now."
    seconds, why = waiting
    llm = host.settings.llm
    bound = llm.max_retry_after if llm is not None else 0.0
    arrived = min(row.event.timestamp.timestamp(), time.time())
    last = host.settings.pipeline.max_attempts <= 1  # never waits into a last attempt
    if last or time.time() + seconds > arrived + bound:
        return (
            f"Requeued {key}: it runs again now, but no model it may ask can answer for"
            f" {seconds:.0f} s ({why}), which it may not wait for (past llm.max_retry_after"
            " from its arrival, or its last attempt): a turn that asks the model answers"
            " with llm.busy_notice instead."
        )
    return (
        f"Requeued {key}: it runs again now, but no model it may ask can answer for"
        f" {seconds:.0f} s more ({why}): a turn that asks the model waits until then."
    )
