"""What the writer link queues between two sends: accepts, writes, and their futures.

A :class:`Queue` is one batch: the events to accept and the writes to commit, each with
the future its caller awaits, settled (:func:`resolve`) only after the writer process
answered the batch's commit. Kept apart from :mod:`.link` so the link reads as the
loop that fills, sends and settles them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.events import Event
from tether.memory.records import InboxRow
from tether.memory.sql.statements import Statement


@dataclass(slots=True)
class Accept:
    items: Sequence[tuple[Event, str, str]]  # event, conversation, serialized payload
    cursors: Mapping[str, str]
    future: asyncio.Future[list[InboxRow | None]]


@dataclass(slots=True)
class Write:
    phase: int
    statements: list[Statement]
    future: asyncio.Future[None] | None  # None: posted, nobody waits for it
    #: Posted, and must land: re-posted after a failed batch until one commits it.
    must_land: bool = False


@dataclass(slots=True)
class Queue:
    accepts: list[Accept] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    #: Posted writes in this batch, and a future for readers waiting for them.
    posted: int = 0
    settled: asyncio.Future[None] | None = None
    #: Also write a page that reaches the disk (see :meth:`WriterLink.probe`).
    probe: bool = False
    #: Settled already (a batch can fail on two paths; it is settled once).
    done: bool = False

    def __bool__(self) -> bool:
        return bool(self.accepts or self.writes or self.probe)


def accepted(accept: Accept, seqs: Sequence[int | None]) -> list[InboxRow | None]:
    return [
        None if seq is None else InboxRow(seq, event.key, conversation, event)
        for (event, conversation, _payload), seq in zip(accept.items, seqs, strict=True)
    ]


def resolve(batch: Queue, error: BaseException | None) -> None:
    futures: list[asyncio.Future[Any]] = [a.future for a in batch.accepts]
    futures += [w.future for w in batch.writes if w.future is not None]
    for future in futures:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
