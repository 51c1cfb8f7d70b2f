"""The per-sender flood limit, decided at the inbox on new events only.

A flood from one sender beyond ``access.rate_limit`` is stored but marked
(``meta["throttled"]``), handled as a no-op by the pipeline, and answered with one notice.
It runs at arrival, before the dispatcher, so it costs a flooding sender nothing to be
refused and a redelivery spends nothing of their budget (see :class:`Throttle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import structlog

from tether import metrics
from tether.config.schema import RateLimitConfig
from tether.events import Event
from tether.keys import TRUSTED_PLATFORMS, sender_name
from tether.limits import TokenBucket
from tether.memory.records import InboxRow

log = structlog.get_logger("tether.access")

#: ``Event.meta`` key of a throttled event: ``"notice"`` (answer with the notice) or ``"drop"``.
THROTTLED = "throttled"
THROTTLE_NOTICE = "You are sending messages faster than I can take them; I skipped some."


#: Commits events to the inbox (insert-or-ignore): the new row for each, None for a duplicate.
Commit = Callable[[list[Event]], Awaitable[list[InboxRow | None]]]
#: The keys among these that the inbox already holds.
Lookup = Callable[[list[str]], Awaitable[set[str]]]


@dataclass(slots=True, eq=False)
class _Sender:
    """One sender's flood state, and the lock that orders the decisions about them."""

    bucket: TokenBucket
    #: This flood has had its notice; cleared when a message passes again.
    noticed: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Accepts holding or waiting for ``lock``: the state is forgotten only at zero.
    users: int = 0


@dataclass(slots=True)
class _Decision:
    """What marking one event did to its sender, so that a duplicate can take it back."""

    index: int
    sender: _Sender
    took: bool


class Throttle:
    """Per-sender token buckets, decided at arrival, for new events only.

    A platform's redelivery is a duplicate at the inbox and must change nothing: it spends
    none of the sender's budget and never takes the flood notice, or a sender whose
    messages Feishu pushed three times would be throttled for messages they really sent.
    So the decision is made as if the inbox's dedup came first. Decisions about one sender
    are made under their lock (held until the commit returns), and whatever a duplicate
    decided is taken back once the store has said it was one: exact when each sender has
    one event in the batch or the budget covers all of theirs (a webhook, a normal
    poll). A batch that the budget does not cover (a poller re-reading its last batch
    into a flood) asks the store for the known keys first and decides only the others.

    The excess is marked, not dropped: the decision travels with the stored event
    (``meta["throttled"]``), so a re-run after a crash or a redelivery after a restart
    sees the same one; the pipeline handles it as a no-op and answers the flood's first
    throttled message with one notice.
    """

    def __init__(self, config: RateLimitConfig) -> None:
        self.config = config
        self._senders: dict[str, _Sender] = {}
        self._swept = time.monotonic()

    def counts(self, event: Event) -> bool:
        """Does the flood limit apply? Not to the operator, cron, or an unknown sender."""
        return (
            bool(self.config.messages)
            and event.sender is not None
            and event.platform not in TRUSTED_PLATFORMS
        )

    async def admit(
        self, events: Sequence[Event], commit: Commit, known: Lookup
    ) -> list[InboxRow | None]:
        """Commit ``events`` through ``commit``, the new ones marked where over the limit."""
        counted = [event for event in events if self.counts(event)]
        if not counted:
            return await commit(list(events))
        async with self._holding(counted):
            seen = set() if self._covers(counted) else await known([e.key for e in counted])
            senders = {self._senders[sender_name(event)] for event in counted}
            initial = {sender: sender.noticed for sender in senders}
            marked, decisions = self._mark(events, seen)
            rows: list[InboxRow | None] | None = None
            try:
                rows = await commit(marked)
            finally:
                self._settle(decisions, rows, initial)
        for decision in decisions:
            row = rows[decision.index]
            if row is not None and not decision.took:
                metrics.THROTTLED.labels(row.event.platform).inc()
                notice = row.event.meta.get(THROTTLED) == "notice"
                log.warning(
                    "event.throttled", key=row.key, sender=sender_name(row.event), notice=notice
                )
        return rows

    @contextlib.asynccontextmanager
    async def _holding(self, events: list[Event]) -> AsyncIterator[None]:
        """Hold the locks of every sender in ``events``, taken in name order (no deadlock)."""
        senders = []
        for who in sorted({sender_name(event) for event in events}):
            sender = self._sender(who)
            sender.users += 1  # before the next lookup may sweep
            senders.append(sender)
        try:
            async with contextlib.AsyncExitStack() as stack:
                for sender in senders:
                    await stack.enter_async_context(sender.lock)
                yield
        finally:
            for sender in senders:
                sender.users -= 1

    def _covers(self, events: list[Event]) -> bool:
        """Is every decision here the same whichever of them turn out to be duplicates?"""
        per_sender = Counter(sender_name(event) for event in events)
        for who, count in per_sender.items():
            bucket = self._senders[who].bucket
            if count > 1 and (bucket.delay() > 0 or bucket.tokens < count):
                return False
        return True

    def _mark(self, events: Sequence[Event], seen: set[str]) -> tuple[list[Event], list[_Decision]]:
        """Decide every counted event not ``seen`` (and each key once)."""
        seen = set(seen)
        marked: list[Event] = []
        decisions: list[_Decision] = []
        for index, event in enumerate(events):
            if not self.counts(event) or event.key in seen:
                marked.append(event)
                continue
            seen.add(event.key)
            sender = self._senders[sender_name(event)]
            took = sender.bucket.delay() <= 0
            decisions.append(_Decision(index, sender, took))
            if took:
                sender.bucket.take()
                sender.noticed = False
                marked.append(event)
                continue
            verdict = "drop" if sender.noticed else "notice"
            sender.noticed = True
            marked.append(event.model_copy(update={"meta": {**event.meta, THROTTLED: verdict}}))
        return marked, decisions

    def _settle(
        self,
        decisions: list[_Decision],
        rows: list[InboxRow | None] | None,
        initial: dict[_Sender, bool],
    ) -> None:
        """Take back what the events that were not stored (duplicates; all, if the commit
        failed) decided: their tokens, and the notice state they left behind."""
        noticed = dict(initial)
        for decision in decisions:
            bucket = decision.sender.bucket
            if rows is None or rows[decision.index] is None:
                if decision.took:
                    bucket.tokens = min(bucket.burst, bucket.tokens + 1)
            else:
                noticed[decision.sender] = not decision.took
        for sender, value in noticed.items():
            sender.noticed = value

    def _sender(self, who: str) -> _Sender:
        sender = self._senders.get(who)
        if sender is None:
            self._forget_idle()
            rate = self.config.messages / self.config.per_seconds
            sender = self._senders[who] = _Sender(TokenBucket(rate, self.config.messages))
        return sender

    def _forget_idle(self) -> None:
        """Drop full buckets now and then, so one-off senders do not accumulate."""
        now = time.monotonic()
        if now - self._swept < self.config.per_seconds:
            return
        self._swept = now
        for who, sender in list(self._senders.items()):
            bucket = sender.bucket
            idle = sender.users == 0 and bucket.delay() <= 0
            if idle and bucket.tokens >= bucket.burst - 1e-9:
                del self._senders[who]
