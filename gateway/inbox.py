"""The front door: adapters hand events here; they are durable when ``accept`` returns.

Dedup is the store's insert-or-ignore on the event key. New events go to the dispatcher;
duplicates are logged (``event.duplicate``), counted, and never handled again, and they
change nothing else either: the flood limit (:class:`Throttle`) counts new events only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import structlog

from tether.events import Event
from tether.gateway import metrics
from tether.gateway.access import Throttle
from tether.gateway.dispatcher import Dispatcher
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
        """

        async def commit(marked: list[Event]) -> list[InboxRow | None]:
            items = [(event, event.session(self.group_sessions)) for event in marked]
            return await self.store.accept(items, cursors)

        if self.throttle:
            rows = await self.throttle.admit(events, commit, self._known)
        else:
            rows = await commit(list(events))
        fresh = []
        for event, row in zip(events, rows, strict=True):
            if row is None:
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

    async def _known(self, keys: list[str]) -> set[str]:
        """The keys the inbox already holds: asked only when a flood makes it matter."""
        return {key for key in keys if await self.store.inbox_row(key) is not None}
