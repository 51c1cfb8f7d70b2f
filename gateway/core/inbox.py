"""The front door: adapters hand events here; they are durable when ``accept`` returns.

It is the :class:`~tether.adapters.base.Ingress` every adapter is started with: ``accept``,
and the cursors and the long-poll lock an adapter keeps beside its events; the adapters
never hold the store itself.

Dedup is the store's insert-or-ignore on the event key. New events go to the dispatcher;
duplicates are logged (``event.duplicate``), counted, and never handled again, and they
change nothing else either: the flood limit (:class:`Throttle`) counts new events only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

import structlog

from tether import metrics
from tether.adapters.untrusted import unstorable
from tether.events import Event
from tether.gateway.core.dispatcher import Dispatcher
from tether.gateway.core.throttle import Throttle
from tether.memory.records import InboxRow
from tether.memory.roles import InboxStore

log = structlog.get_logger("tether.inbox")


class Inbox:
    def __init__(
        self,
        store: InboxStore,
        dispatcher: Dispatcher,
        group_sessions: str = "per_user",
        throttle: Throttle | None = None,
    ) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self.group_sessions = group_sessions
        self.throttle = throttle

    async def accept(
        self, events: Sequence[Event], cursors: Mapping[str, str] | None = None
    ) -> list[bool]:
        """Commit ``events`` (and ``cursors``) in one transaction; True where an event is new.

        Acknowledge the platform only after this returns. With a flood limit, the
        throttle decides on the new events only and the decision is stored with each.
        An event that can never be stored is left out with ``event.unstorable`` and
        reported False, so the rest of its batch is committed and acknowledged.
        """

        async def commit(marked: list[Event]) -> list[InboxRow | None]:
            items = [(event, event.session(self.group_sessions)) for event in marked]
            return await self.store.accept(items, cursors)

        try:
            rows = await self._admit(events, commit)
        except ValueError:
            refused = _unstorable(events)
            if not refused:
                raise
            kept = [event for event in events if event.key not in refused]
            stored = iter(await self._admit(kept, commit))
            rows = [None if event.key in refused else next(stored) for event in events]
        else:
            refused = {}
        fresh = []
        for event, row in zip(events, rows, strict=True):
            if event.key in refused:
                metrics.labelled(metrics.EVENTS, event.platform, "unstorable").inc()
                log.warning("event.unstorable", key=event.key, reason=refused[event.key])
            elif row is None:
                metrics.DUPLICATES.labels(event.platform).inc()
                conversation = event.session(self.group_sessions)
                log.info("event.duplicate", key=event.key, conversation=conversation)
            else:
                metrics.labelled(metrics.EVENTS, event.platform, "received").inc()
                log.info(
                    "event.received",
                    key=event.key,
                    conversation=row.conversation,
                    kind=event.kind.value,
                )
                fresh.append(row)
        await self.dispatcher.submit(fresh)
        return [row is not None for row in rows]

    async def cursor(self, name: str) -> str | None:
        return await self.store.cursor(name)

    async def recent_cursors(self, prefix: str, since: float) -> dict[str, str]:
        return await self.store.recent_cursors(prefix, since)

    async def try_lock(self, name: str) -> bool:
        return await self.store.try_lock(name)

    async def _admit(
        self,
        events: Sequence[Event],
        commit: Callable[[list[Event]], Awaitable[list[InboxRow | None]]],
    ) -> list[InboxRow | None]:
        if self.throttle:
            return await self.throttle.admit(events, commit, self._known)
        return await commit(list(events))

    async def _known(self, keys: list[str]) -> set[str]:
        """The keys the inbox already holds: asked only when a flood makes it matter."""
        return {key for key in keys if await self.store.inbox_row(key) is not None}


def _unstorable(events: Sequence[Event]) -> dict[str, str]:
    """The events no store can ever hold (a lone surrogate), by key, with the reason.

    Asked only after a commit refused its batch, so the common path pays nothing. Such
    an event is acknowledged like a duplicate: redelivering it could never store it, and
    refusing the batch would hold back every event behind it (a poller would fetch the
    same batch forever).
    """
    return {event.key: reason for event in events if (reason := unstorable(event)) is not None}
