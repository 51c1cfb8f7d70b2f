"""A store that keeps everything in process memory: for tests, and the baseline that
``bench/pipeline.py`` measures the durable store against (same contract, nothing kept)."""

from __future__ import annotations

import asyncio
import bisect
import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from tether.events import Event, OutMessage
from tether.memory.blobs import MemoryBlobs
from tether.memory.embeddings import MemoryEmbeddings
from tether.memory.inmemory.console import ConsoleTables
from tether.memory.inmemory.facts import FactTables
from tether.memory.inmemory.ops import OpsTables
from tether.memory.inmemory.steps import StepTables
from tether.memory.people import MemoryPeople
from tether.memory.recall import MemoryRecall
from tether.memory.records import (
    UNFINISHED_INBOX,
    UNSENT_OUTBOX,
    ConversationState,
    DeadLetter,
    Fact,
    InboxRow,
    MemoryChanges,
    OutboxRow,
    OutboxStatus,
    Pairing,
    Turn,
    Usage,
    Window,
)
from tether.memory.reminders import MemoryReminders
from tether.memory.revocations import MemoryRevocations
from tether.memory.state import MemoryState
from tether.memory.store import Store
from tether.memory.tasks import MemoryTasks
from tether.memory.waits import MemoryWaits


class MemoryStore(
    MemoryEmbeddings,
    MemoryRecall,
    MemoryReminders,
    MemoryTasks,
    MemoryWaits,
    MemoryBlobs,
    MemoryRevocations,
    MemoryPeople,
    MemoryState,
    FactTables,
    StepTables,
    OpsTables,
    ConsoleTables,
    Store,
):
    """Dicts and lists behind the store contract; no method awaits mid-change: no locks."""

    def __init__(self) -> None:
        self._inbox: dict[str, InboxRow] = {}
        self._touched: dict[str, float] = {}
        self._steps: dict[tuple[str, str], str] = {}
        self._outbox: dict[str, OutboxRow] = {}
        self._turns: dict[str, list[Turn]] = {}
        self._turn_keys: set[tuple[str, int]] = set()
        self._message_id = 0
        self._conversations: dict[str, ConversationState] = {}
        self._facts: dict[str, list[Fact]] = {}
        self._fact_keys: set[tuple[str, int]] = set()
        self._fact_id = 0
        self._usage_keys: set[tuple[str, str]] = set()
        self._usage: dict[tuple[str, str, str], Usage] = {}  # (conversation, day, model)
        self._dead: dict[str, DeadLetter] = {}
        self._cursors: dict[str, str] = {}
        self._cursor_times: dict[str, float] = {}
        self._pairings: dict[tuple[str, str], Pairing] = {}
        self._sent_at: dict[str, float] = {}
        self._seq = 0
        self._out_seq = 0
        self._open = False

    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False

    async def ping(self) -> None:
        if not self._open:
            raise RuntimeError("store is closed")

    def _check(self) -> None:
        if not self._open:
            raise RuntimeError("store is closed")

    # -- inbox ----------------------------------------------------------------------

    async def accept(
        self, items: Sequence[tuple[Event, str]], cursors: Mapping[str, str] | None = None
    ) -> list[InboxRow | None]:
        self._check()
        out: list[InboxRow | None] = []
        now = time.time()
        for event, conversation in items:
            if event.key in self._inbox:
                out.append(None)
                continue
            self._seq += 1
            row = InboxRow(seq=self._seq, key=event.key, conversation=conversation, event=event)
            self._inbox[event.key] = row
            self._touched[event.key] = now
            out.append(replace(row))
        self._cursors.update(cursors or {})
        self._cursor_times.update(dict.fromkeys(cursors or {}, time.time()))
        await asyncio.sleep(0)
        return out

    async def recover(self) -> list[InboxRow]:
        self._check()
        for row in self._inbox.values():
            if row.status == "running":
                self._move(row, "received")
        return [replace(r) for r in self._inbox.values() if r.status in UNFINISHED_INBOX]

    async def lane(self, conversation: str) -> list[InboxRow]:
        self._check()
        return [
            replace(r)
            for r in self._inbox.values()
            if r.conversation == conversation and r.status in UNFINISHED_INBOX
        ]

    async def busy_conversations(self) -> list[str]:
        self._check()
        busy = (r.conversation for r in self._inbox.values() if r.status in UNFINISHED_INBOX)
        return list(dict.fromkeys(busy))

    async def pending(self, older_than: float) -> list[InboxRow]:
        self._check()
        return [
            replace(r)
            for r in self._inbox.values()
            if r.status == "received" and self._touched[r.key] < older_than
        ]

    async def begin(self, row: InboxRow) -> None:
        self._check()
        row.attempts += 1
        row.status = "running"
        stored = self._inbox[row.key]
        self._move(stored, "running", attempts=row.attempts)
        self._touched[row.key] = time.time()

    async def checkpoint(
        self,
        key: str,
        outbox: Sequence[OutMessage],
        turns: Sequence[Turn],
        changes: MemoryChanges | None = None,
    ) -> list[OutboxRow]:
        self._check()
        stored = self._inbox[key]
        stored.status, stored.error, stored.retry_at = "done", None, None
        rows = self._add_outbox(key, outbox)
        now = time.time()
        for position, turn in enumerate(turns):
            if (key, position) in self._turn_keys:
                continue
            self._turn_keys.add((key, position))
            self._message_id += 1
            self._turns.setdefault(turn.conversation, []).append(
                replace(turn, event_key=key, created=now, id=self._message_id, summarized=False)
            )
        if changes:
            self._apply(key, changes, now)
        return rows

    async def retry_later(self, key: str, retry_at: float, error: str) -> None:
        self._check()
        stored = self._inbox[key]
        self._move(stored, "retry_wait", retry_at=retry_at, error=error)

    async def bury(self, letter: DeadLetter, outbox: Sequence[OutMessage] = ()) -> list[OutboxRow]:
        self._check()
        stored = self._inbox[letter.key]
        self._move(stored, "dead", error=letter.error, retry_at=None)
        self._dead[letter.key] = replace(
            letter, snapshot=copy.deepcopy(letter.snapshot), created=time.time()
        )
        return self._add_outbox(letter.key, outbox)

    def _add_outbox(self, key: str, outbox: Sequence[OutMessage]) -> list[OutboxRow]:
        """Insert-or-ignore ``outbox`` as event ``key``'s rows (checkpoint, bury)."""
        rows = []
        for message in outbox:
            if message.key not in self._outbox:
                self._out_seq += 1
                self._outbox[message.key] = OutboxRow(
                    seq=self._out_seq, key=message.key, event_key=key, message=message
                )
            rows.append(OutboxRow(seq=0, key=message.key, event_key=key, message=message))
        return rows

    async def inbox_row(self, key: str) -> InboxRow | None:
        self._check()
        row = self._inbox.get(key)
        return replace(row) if row else None

    # -- outbox ---------------------------------------------------------------------

    async def unsent(self) -> list[OutboxRow]:
        self._check()
        rows = [r for r in self._outbox.values() if r.status in UNSENT_OUTBOX]
        return [replace(r) for r in sorted(rows, key=lambda r: r.seq)]

    async def unsent_keys(self) -> list[str]:
        self._check()
        rows = [r for r in self._outbox.values() if r.status in UNSENT_OUTBOX]
        return [r.key for r in sorted(rows, key=lambda r: r.seq)]

    async def mark_outbox(
        self,
        key: str,
        status: OutboxStatus,
        *,
        attempts: int | None = None,
        next_at: float | None = None,
        platform_id: str | None = None,
        error: str | None = None,
        durable: bool = True,
    ) -> None:
        self._check()
        row = self._outbox[key]
        row.status, row.next_at, row.error = status, next_at, error
        if attempts is not None:
            row.attempts = attempts
        if platform_id is not None:
            row.platform_id = platform_id
        if status == "sent":
            self._sent_at[key] = time.time()

    async def outbox_rows(self, event_key: str) -> list[OutboxRow]:
        self._check()
        rows = [r for r in self._outbox.values() if r.event_key == event_key]
        return [replace(r) for r in sorted(rows, key=lambda r: r.seq)]

    # -- conversation memory --------------------------------------------------------

    async def history(self, conversation: str, limit: int) -> list[Turn]:
        self._check()
        turns = self._turns.get(conversation, [])[-limit:] if limit > 0 else []
        return [replace(turn) for turn in turns]

    async def recent(self, conversation: str, budget: int, *, after_id: int = 0) -> Window:
        self._check()
        turns: list[Turn] = []
        used = 0
        for turn in reversed(self._turns.get(conversation, [])):
            if turn.id <= after_id:
                break
            if turn.summarized:
                continue
            tokens = _tokens(turn)
            if used + tokens > budget:
                turns.reverse()
                return Window(turns, used, more=True)
            turns.append(replace(turn, tokens=tokens))
            used += tokens
        turns.reverse()
        return Window(turns, used, more=False)

    async def oldest_unsummarized(
        self, conversation: str, budget: int, *, after_id: int = 0, before_id: int | None = None
    ) -> list[Turn]:
        self._check()
        stored = self._turns.get(conversation, [])
        start = bisect.bisect_right([t.id for t in stored], after_id)
        out: list[Turn] = []
        used = 0
        for turn in stored[start:]:
            if before_id is not None and turn.id >= before_id:
                break
            if turn.summarized:
                continue
            tokens = _tokens(turn)
            if out and used + tokens > budget:
                break
            out.append(replace(turn, tokens=tokens))
            used += tokens
        return out

    async def last_message_id(self, conversation: str) -> int:
        self._check()
        stored = self._turns.get(conversation)
        return stored[-1].id if stored else 0

    async def conversation(self, conversation: str) -> ConversationState:
        self._check()
        found = self._conversations.get(conversation)
        return copy.deepcopy(found) if found else ConversationState(conversation)

    async def usage(self, conversation: str, since: str = "") -> list[Usage]:
        self._check()
        rows = [
            replace(row)
            for (conv, day, _model), row in self._usage.items()
            if conv == conversation and day >= since
        ]
        return sorted(rows, key=lambda row: (row.day, row.model))

    async def turns_after(self, conversation: str, after_id: int, upto_id: int) -> list[Turn]:
        self._check()
        stored = self._turns.get(conversation, [])
        return [replace(turn) for turn in stored if after_id < turn.id <= upto_id]

    async def ahead_of(self, prefix: str) -> dict[str, tuple[int, int]]:
        self._check()
        out = {}
        for conversation, stored in self._turns.items():
            cursor = int(self._cursors.get(prefix + conversation, "0"))
            if stored and stored[-1].id > cursor:
                out[conversation] = (cursor, stored[-1].id)
        return out

    def _apply(self, key: str, changes: MemoryChanges, now: float) -> None:
        self._ended(changes.task)
        self._apply_state(changes.handler_state)
        for name, value in changes.cursors.items():
            self._cursors[name] = value
            self._cursor_times[name] = now
        first = 0  # facts are unique by (key, position) across the conversations
        for part in (changes, *changes.elsewhere):
            self._apply_one(key, part, now, first)
            first += len(part.facts) + len(part.person_facts)

    def _apply_one(self, key: str, changes: MemoryChanges, now: float, first: int) -> None:
        conversation = changes.conversation
        if changes.state is not None:
            self._conversations[conversation] = copy.deepcopy(changes.state)
        self._apply_facts(key, changes, now, first)
        if changes.summarized is not None:
            first, last = changes.summarized
            for turn in self._turns.get(conversation, []):
                if first <= turn.id <= last:
                    turn.summarized = True
        for call in changes.usage:
            if (key, call.name) in self._usage_keys:
                continue
            self._usage_keys.add((key, call.name))
            row = self._usage.setdefault(
                (conversation, call.day, call.model),
                Usage(conversation, call.model, call.day, 0, 0, 0.0, 0),
            )
            row.prompt_tokens += call.prompt_tokens
            row.completion_tokens += call.completion_tokens
            row.cost += call.cost
            row.calls += 1

    # -- cursors --------------------------------------------------------------------

    async def cursor(self, name: str) -> str | None:
        self._check()
        return self._cursors.get(name)

    async def set_cursor(self, name: str, value: str) -> None:
        self._check()
        self._cursors[name] = value
        self._cursor_times[name] = time.time()

    async def recent_cursors(self, prefix: str, since: float) -> dict[str, str]:
        self._check()
        return {
            name: value
            for name, value in self._cursors.items()
            if name.startswith(prefix) and self._cursor_times.get(name, 0.0) >= since
        }


def _tokens(turn: Turn) -> int:
    """The stored count; rows without one are charged like the SQLite store does."""
    return turn.tokens if turn.tokens is not None else len(turn.text) + 4
