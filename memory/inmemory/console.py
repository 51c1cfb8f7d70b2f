"""The in-memory store's side of the web console: a mixin of
:class:`~tether.memory.inmemory.store.MemoryStore`.

This store keeps no creation times, only when each event was last touched (accepted,
begun, requeued) and when each reply was sent; its timelines and time series use those.
Spend is kept per day, not per call, so its series of tokens and cost stay at zero. It
is the store for tests and the baseline of benchmarks, not one to run a console on.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from tether.memory.console import (
    ChatLine,
    ConversationInfo,
    EventInfo,
    Moved,
    SendInfo,
    StepInfo,
    Timeline,
    empty_series,
    off_the_plain_path,
)
from tether.memory.records import DeadLetter, Fact, InboxRow, InboxStatus, OutboxRow


class ConsoleTables:
    """:class:`~tether.memory.operator.ConsoleStore` over the dicts :class:`MemoryStore` owns."""

    _inbox: dict[str, InboxRow]
    _touched: dict[str, float]
    _outbox: dict[str, OutboxRow]
    _steps: dict[tuple[str, str], str]
    _dead: dict[str, DeadLetter]
    _facts: dict[str, list[Fact]]
    _sent_at: dict[str, float]

    def _check(self) -> None:
        raise NotImplementedError

    def _move(self, row: InboxRow, status: InboxStatus, **changes: object) -> None:
        """Move ``row`` to ``status`` (with ``changes`` to its other fields), and keep the
        move in its history as the SQL stores' trigger does
        (:func:`~tether.memory.console.off_the_plain_path`)."""
        before = row.status
        row.status = status
        for name, value in changes.items():
            setattr(row, name, value)
        if off_the_plain_path(before, status, row.attempts):
            if not hasattr(self, "_history"):
                self._history: dict[str, list[Moved]] = {}
            move = Moved(status, before, row.attempts, row.error, row.retry_at, time.time())
            self._history.setdefault(row.key, []).append(move)

    def _info(self, row: InboxRow) -> EventInfo:
        at = self._touched.get(row.key, 0.0)
        return EventInfo(
            row.key, row.conversation, row.event, row.status, row.attempts, row.error, at, at
        )

    async def series(self, since: float, bucket: float, count: int) -> dict[str, list[float]]:
        self._check()
        out = empty_series(count)

        def add(name: str, at: float) -> None:
            index = math.floor((at - since) / bucket)
            if at >= since and index < count:
                out[name][index] += 1

        for row in self._inbox.values():
            at = self._touched.get(row.key, 0.0)
            add("received", at)
            if row.attempts > 1:
                add("retried", at)
            if row.status == "dead":
                add("dead", at)
        for key, at in self._sent_at.items():
            if key in self._outbox:
                add("replies", at)
        return out

    async def find_events(
        self, *, key: str = "", conversation: str = "", status: str = "", limit: int = 50
    ) -> list[EventInfo]:
        self._check()
        found = [
            self._info(row)
            for row in sorted(self._inbox.values(), key=lambda r: r.seq, reverse=True)
            if key in row.key
            and conversation in row.conversation
            and (not status or row.status == status)
        ]
        return found[:limit]

    async def timeline(self, key: str) -> Timeline | None:
        self._check()
        row = self._inbox.get(key)
        if row is None:
            return None
        steps = [
            StepInfo(name, 0.0, result) for (k, name), result in self._steps.items() if k == key
        ]
        moves = list(getattr(self, "_history", {}).get(key, []))
        dead = self._dead.get(key)
        return Timeline(self._info(row), steps, [], self._sends(key), dead, moves)

    def _sends(self, event_key: str | None, statuses: tuple[str, ...] = ()) -> list[SendInfo]:
        return [
            SendInfo(
                out.key,
                out.message.text,
                out.status,
                out.attempts,
                out.platform_id,
                out.error,
                0.0,
                self._sent_at.get(out.key, 0.0),
            )
            for out in sorted(self._outbox.values(), key=lambda o: o.seq)
            if (event_key is None or out.event_key == event_key)
            and (not statuses or out.status in statuses)
        ]

    async def failed_sends(self, limit: int = 100) -> list[SendInfo]:
        self._check()
        return list(reversed(self._sends(None, ("dead", "unknown"))))[:limit]

    async def conversation_list(self, limit: int = 100) -> list[ConversationInfo]:
        self._check()
        found: dict[str, ConversationInfo] = {}
        for row in self._inbox.values():
            at = self._touched.get(row.key, 0.0)
            info = found.setdefault(row.conversation, ConversationInfo(row.conversation, 0, at))
            info.events += 1
            info.last = max(info.last, at)
        return sorted(found.values(), key=lambda info: info.last, reverse=True)[:limit]

    async def chat_log(self, conversation: str, limit: int = 200) -> list[ChatLine]:
        self._check()
        events = sorted(
            (row for row in self._inbox.values() if row.conversation == conversation),
            key=lambda row: row.seq,
        )[-limit:]
        keys = {row.key for row in events}
        lines = [
            ChatLine(row.seq, row.key, "user", row.event.text, self._touched.get(row.key, 0.0))
            for row in events
        ]
        lines += [
            ChatLine(out.seq, out.key, "agent", out.message.text, self._sent_at.get(out.key, 0.0))
            for out in self._outbox.values()
            if out.event_key in keys and out.status == "sent"
        ]
        return sorted(lines, key=lambda line: (line.at, line.role != "user", line.seq))

    def _fact(self, conversation: str, fact_id: int) -> Fact | None:
        return next((f for f in self._facts.get(conversation, []) if f.id == fact_id), None)

    async def facts_said(self, conversation: str) -> list[Fact]:
        self._check()
        return [replace(fact) for fact in self._facts.get(conversation, [])]

    async def edit_fact(self, conversation: str, fact_id: int, text: str, tokens: int) -> bool:
        self._check()
        found = self._fact(conversation, fact_id)
        if found is None:
            return False
        found.text, found.tokens = text, tokens
        return True

    async def forget_fact(self, conversation: str, fact_id: int) -> bool:
        self._check()
        found = self._fact(conversation, fact_id)
        if found is None:
            return False
        self._facts[conversation].remove(found)
        return True
