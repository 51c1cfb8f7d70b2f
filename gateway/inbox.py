"""The front door: adapters hand events here; they are durable when ``accept`` returns.

Dedup is the store's insert-or-ignore on the event key. New events go to the dispatcher;
duplicates are logged (``event.duplicate``), counted, and never handled again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import structlog

from tether.events import Event
from tether.gateway import metrics
from tether.gateway.access import Throttle
from tether.gateway.dispatcher import Dispatcher
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

        Acknowledge the platform only after this returns.
        """
        if self.throttle:
            events = self.throttle.mark(list(events))
        items = [(event, event.session(self.group_sessions)) for event in events]
        rows = await self.store.accept(items, cursors)
        fresh = []
        for (event, conversation), row in zip(items, rows, strict=True):
            if row is None:
                metrics.DUPLICATES.labels(event.platform).inc()
                log.info("event.duplicate", key=event.key, conversation=conversation)
            else:
                metrics.labelled(metrics.EVENTS, event.platform, "received").inc()
                log.info(
                    "event.received",
                    key=event.key,
                    conversation=conversation,
                    kind=event.kind.value,
                )
                fresh.append(row)
        await self.dispatcher.submit(fresh)
        return [row is not None for row in rows]
