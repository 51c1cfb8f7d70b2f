"""Turns that wait for a person: the wait record and the store role's two
implementations, mixed into the stores.

A handler's ``ctx.ask`` (and a tool call that needs approval) ends its run with the
turn **suspended**: in ONE transaction the event's inbox row becomes ``waiting`` (no
lane runs it, recovery does not take it), the replies it queued so far — the question
among them — become outbox rows, and a ``waits`` row says what it waits for. The wait
is named by its turn and its position (``{event key}#wait:{n}``, DESIGN §13), so a
suspended turn that is run again writes the same row, which the insert ignores.

A wait ends once. :meth:`WaitStore.resolve_wait` is a conditional update (``WHERE
status = 'open'``) that records who ended it (``answered_by``: the answering event's
key, ``expiry``, or the ``/cancel``'s key), and in the same transaction puts the waiting
turn back to ``received`` only if this very call ended the wait; the caller reads back
``answered_by`` to learn whether it won. So two answers racing (on one instance or two),
an answer racing the expiry, or the same answering event run twice after a crash, all
converge to one resolution and one resumed turn. The resumed turn's attempts start
afresh at 1 (the next run is its second), so a long dialog never reaches
``pipeline.max_attempts`` by being answered, and its steps are read from the store.

The ``waits`` table is the ledger of expiries too: :meth:`due_waits` reads the open
waits whose deadline passed (after downtime as well), and each is ended through the
same conditional update, so an expiry fires exactly once however many instances look.
Rows are kept after they end: an approval's row is its audit record (who asked, the
arguments' hash, who decided and when).
"""

from __future__ import annotations

import abc
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from tether.events import OutMessage
from tether.memory.records import InboxRow, OutboxRow
from tether.memory.sql.statements import FINISH, Statement

WaitKind = Literal["ask", "approval"]
WaitStatus = Literal["open", "answered", "expired", "cancelled"]
#: ``answered_by`` of a wait its deadline ended.
EXPIRY = "expiry"


@dataclass(frozen=True, slots=True)
class Wait:
    """One question a suspended turn waits on."""

    #: ``{event key}#wait:{position}``.
    id: str
    #: The waiting turn.
    event_key: str
    #: Its place among the turn's waits (0 for the first ``ctx.ask``).
    position: int
    #: The waiting turn's session: its lane, and where a message answer comes from.
    conversation: str
    kind: WaitKind
    #: The chat the question (or the approval card) was posted in (``Target.key``).
    chat: str
    #: What the question's buttons carry (``tw:{token}:{choice}``), unique per wait.
    token: str
    #: Who may answer a question, ``platform:user``; None: anyone in the conversation.
    sender: str | None
    #: Epoch seconds after which it expires, or None for never.
    deadline: float | None
    status: WaitStatus
    #: The question's text (an approval: the card's), for the console and the audit.
    question: str
    #: What the resumed run checks and the card needs: ``trace`` (the steps and waits
    #: the turn had reached), ``digest`` (of the question), ``choices``; an approval's
    #: ``tool``, ``arguments``, ``hash`` and ``approvers``.
    detail: dict[str, Any] = field(default_factory=dict)
    #: The answer: ``text``, ``data``, ``sender``, ``name``, ``key`` (an approval's also
    #: ``decision``); None while open or when it expired.
    answer: dict[str, Any] | None = None
    #: The event key that ended it, :data:`EXPIRY`, or the ``/cancel`` event's key.
    answered_by: str | None = None
    created: float = 0.0
    resolved: float | None = None


@dataclass(frozen=True, slots=True)
class Resolution:
    """What :meth:`WaitStore.resolve_wait` found: whether this call ended the wait, the
    wait as it now is, and the waiting turn's row if it is ready to run again."""

    won: bool
    wait: Wait | None
    turn: InboxRow | None = None


def wait_id(event_key: str, position: int) -> str:
    return f"{event_key}#wait:{position}"


COLUMNS = (
    "id, event_key, position, conversation, kind, chat, token, sender, deadline, status,"
    " question, detail, answer, answered_by, created, resolved"
)
OPENED = (
    f"INSERT INTO waits ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (id) DO NOTHING"
)
SUSPENDED = (
    "UPDATE inbox SET status = 'waiting', retry_at = NULL, error = NULL, updated = ? WHERE key = ?"
)
RESOLVED = (
    "UPDATE waits SET status = ?, answer = ?, answered_by = ?, resolved = ?"
    " WHERE id = ? AND status = 'open'"
)
#: Back to ``received`` only if the wait was ended by ``answered_by`` (this call).
RESUMED = (
    "UPDATE inbox SET status = 'received', attempts = 1, retry_at = NULL, error = NULL,"
    " updated = ? WHERE key = ? AND status = 'waiting'"
    " AND EXISTS (SELECT 1 FROM waits WHERE id = ? AND answered_by = ?)"
)
ONE = f"SELECT {COLUMNS} FROM waits WHERE id = ?"
OF_EVENT = f"SELECT {COLUMNS} FROM waits WHERE event_key = ? ORDER BY position"
OPEN = f"SELECT {COLUMNS} FROM waits WHERE status = 'open' ORDER BY created, id"
OPEN_IN = (
    f"SELECT {COLUMNS} FROM waits WHERE status = 'open' AND conversation = ? ORDER BY created, id"
)
BY_TOKEN = f"SELECT {COLUMNS} FROM waits WHERE token = ?"
ENDED_BY = f"SELECT {COLUMNS} FROM waits WHERE answered_by = ? ORDER BY created, id"
DUE = (
    f"SELECT {COLUMNS} FROM waits WHERE status = 'open' AND deadline <= ? ORDER BY deadline LIMIT ?"
)
LISTED = f"SELECT {COLUMNS} FROM waits ORDER BY created DESC, id LIMIT ?"
LISTED_KIND = f"SELECT {COLUMNS} FROM waits WHERE kind = ? ORDER BY created DESC, id LIMIT ?"


def _wait(row: Sequence[Any]) -> Wait:
    return Wait(
        id=str(row[0]),
        event_key=str(row[1]),
        position=int(row[2]),
        conversation=str(row[3]),
        kind=row[4],
        chat=str(row[5]),
        token=str(row[6]),
        sender=None if row[7] is None else str(row[7]),
        deadline=None if row[8] is None else float(row[8]),
        status=row[9],
        question=str(row[10]),
        detail=json.loads(row[11]) if row[11] else {},
        answer=json.loads(row[12]) if row[12] else None,
        answered_by=None if row[13] is None else str(row[13]),
        created=float(row[14]),
        resolved=None if row[15] is None else float(row[15]),
    )


def _values(wait: Wait, now: float) -> tuple[Any, ...]:
    w = wait
    answer = None if w.answer is None else json.dumps(w.answer)
    return (w.id, w.event_key, w.position, w.conversation, w.kind, w.chat, w.token, w.sender,
            w.deadline, w.status, w.question, json.dumps(w.detail), answer, w.answered_by,
            w.created or now, w.resolved)  # fmt: skip


class Board:
    """Open waits by conversation, as one process knows them: all of them for a store it
    owns (SQLite, in memory); its own and those its lane reads found, for a shared one.
    What ``gateway/core/waits.py`` asks for every message, so a dict, not a read."""

    def __init__(self) -> None:
        self._open: dict[str, dict[str, Wait]] = {}

    def opened(self, wait: Wait) -> None:
        self._open.setdefault(wait.conversation, {})[wait.id] = wait

    def closed(self, wait: Wait) -> None:
        waits = self._open.get(wait.conversation)
        if waits is not None:
            waits.pop(wait.id, None)
            if not waits:
                del self._open[wait.conversation]

    def of(self, conversation: str) -> list[Wait]:
        return list(self._open.get(conversation, {}).values())

    def replace(self, conversation: str, waits: list[Wait]) -> None:
        if waits:
            self._open[conversation] = {w.id: w for w in waits}
        else:
            self._open.pop(conversation, None)

    def __len__(self) -> int:
        return sum(len(waits) for waits in self._open.values())

    def __contains__(self, conversation: object) -> bool:
        return conversation in self._open


class WaitStore(Protocol):
    """Suspended turns and what they wait for (:mod:`tether.memory.waits`)."""

    @abc.abstractmethod
    async def suspend(self, key: str, outbox: Sequence[OutMessage], wait: Wait) -> list[OutboxRow]:
        """ONE transaction: event ``key`` waiting, ``outbox`` as its rows (insert-or-
        ignore, returned like a checkpoint's), and ``wait`` (insert-or-ignore)."""

    @abc.abstractmethod
    async def resolve_wait(
        self, wait_id: str, status: WaitStatus, answer: dict[str, Any] | None, by: str
    ) -> Resolution:
        """End the open wait ``wait_id`` as ``status`` with ``answer``, by ``by``; its
        turn back to ``received`` in the same transaction. Idempotent for the same
        ``by``: a second call by the winner reports the win again (its ``turn`` only
        while that row is still ``received``)."""

    @abc.abstractmethod
    async def wait(self, wait_id: str) -> Wait | None: ...

    @abc.abstractmethod
    async def waits_of(self, event_key: str) -> list[Wait]:
        """Every wait of one turn, by position (the resumed run's answers)."""

    @abc.abstractmethod
    async def open_waits(self, conversation: str | None = None) -> list[Wait]:
        """Open waits, oldest first: all of them, or one conversation's."""

    @abc.abstractmethod
    async def wait_by_token(self, token: str) -> Wait | None:
        """The wait whose buttons carry ``token`` (open or ended)."""

    @abc.abstractmethod
    async def waits_ended_by(self, key: str) -> list[Wait]:
        """The waits event ``key`` ended (answered or cancelled): what an answering
        event that runs again after a crash did before, so it does not answer twice."""

    @abc.abstractmethod
    async def due_waits(self, now: float, limit: int = 100) -> list[Wait]:
        """Open waits whose deadline is at or before ``now``, soonest first."""

    @abc.abstractmethod
    async def waits(self, kind: WaitKind | None = None, limit: int = 100) -> list[Wait]:
        """The newest waits (of one ``kind``), open or ended: the audit."""


class SqlWaits:
    """:class:`WaitStore` over SQL, for :class:`~tether.memory.sql.store.SqlStore`."""

    if TYPE_CHECKING:  # provided by SqlStore and its engine

        async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Any]: ...

        def _outbox_saved(self, event_key: str, message: OutMessage, now: float) -> Statement: ...

        async def inbox_row(self, key: str) -> InboxRow | None: ...

        _write: Callable[..., Awaitable[None]]

    async def suspend(self, key: str, outbox: Sequence[OutMessage], wait: Wait) -> list[OutboxRow]:
        now = time.time()
        await self._write(
            FINISH,
            (SUSPENDED, (now, key)),
            *(self._outbox_saved(key, message, now) for message in outbox),
            (OPENED, _values(wait, now)),
        )
        return [OutboxRow(seq=0, key=m.key, event_key=key, message=m) for m in outbox]

    async def resolve_wait(
        self, wait_id: str, status: WaitStatus, answer: dict[str, Any] | None, by: str
    ) -> Resolution:
        now = time.time()
        found = await self.wait(wait_id)
        if found is None:
            return Resolution(False, None)
        if found.status == "open":
            encoded = None if answer is None else json.dumps(answer)
            await self._write(
                FINISH,
                (RESOLVED, (status, encoded, by, now, wait_id)),
                (RESUMED, (now, found.event_key, wait_id, by)),
            )
            found = await self.wait(wait_id)
            assert found is not None
        won = found.answered_by == by
        turn = await self.inbox_row(found.event_key) if won else None
        return Resolution(won, found, turn if turn and turn.status == "received" else None)

    async def wait(self, wait_id: str) -> Wait | None:
        rows = await self._rows(ONE, (wait_id,))
        return _wait(rows[0]) if rows else None

    async def waits_of(self, event_key: str) -> list[Wait]:
        return [_wait(row) for row in await self._rows(OF_EVENT, (event_key,))]

    async def open_waits(self, conversation: str | None = None) -> list[Wait]:
        if conversation is None:
            return [_wait(row) for row in await self._rows(OPEN)]
        return [_wait(row) for row in await self._rows(OPEN_IN, (conversation,))]

    async def wait_by_token(self, token: str) -> Wait | None:
        rows = await self._rows(BY_TOKEN, (token,))
        return _wait(rows[0]) if rows else None

    async def waits_ended_by(self, key: str) -> list[Wait]:
        return [_wait(row) for row in await self._rows(ENDED_BY, (key,))]

    async def due_waits(self, now: float, limit: int = 100) -> list[Wait]:
        return [_wait(row) for row in await self._rows(DUE, (now, limit))]

    async def waits(self, kind: WaitKind | None = None, limit: int = 100) -> list[Wait]:
        if kind is None:
            return [_wait(row) for row in await self._rows(LISTED, (limit,))]
        return [_wait(row) for row in await self._rows(LISTED_KIND, (kind, limit))]


class MemoryWaits:
    """:class:`WaitStore` in a dict, for :class:`~tether.memory.inmemory.store.MemoryStore`."""

    _wait_rows: dict[str, Wait] | None = None

    if TYPE_CHECKING:  # provided by MemoryStore
        _inbox: dict[str, InboxRow]

        def _check(self) -> None: ...

        def _move(self, row: InboxRow, status: Any, **changes: object) -> None: ...

        def _add_outbox(self, key: str, outbox: Sequence[OutMessage]) -> list[OutboxRow]: ...

    @property
    def _kept_waits(self) -> dict[str, Wait]:
        if self._wait_rows is None:
            self._wait_rows = {}
        return self._wait_rows

    async def suspend(self, key: str, outbox: Sequence[OutMessage], wait: Wait) -> list[OutboxRow]:
        self._check()
        now = time.time()
        self._move(self._inbox[key], "waiting", retry_at=None, error=None)
        rows = self._add_outbox(key, outbox)
        self._kept_waits.setdefault(wait.id, replace(wait, created=wait.created or now))
        return rows

    async def resolve_wait(
        self, wait_id: str, status: WaitStatus, answer: dict[str, Any] | None, by: str
    ) -> Resolution:
        self._check()
        found = self._kept_waits.get(wait_id)
        if found is None:
            return Resolution(False, None)
        if found.status == "open":
            found = replace(
                found, status=status, answer=answer, answered_by=by, resolved=time.time()
            )
            self._kept_waits[wait_id] = found
            turn = self._inbox.get(found.event_key)
            if turn is not None and turn.status == "waiting":
                self._move(turn, "received", attempts=1, retry_at=None, error=None)
        won = found.answered_by == by
        row = self._inbox.get(found.event_key)
        ready = replace(row) if won and row is not None and row.status == "received" else None
        return Resolution(won, found, ready)

    async def wait(self, wait_id: str) -> Wait | None:
        return self._kept_waits.get(wait_id)

    async def waits_of(self, event_key: str) -> list[Wait]:
        found = [w for w in self._kept_waits.values() if w.event_key == event_key]
        return sorted(found, key=lambda w: w.position)

    async def open_waits(self, conversation: str | None = None) -> list[Wait]:
        return [
            w
            for w in sorted(self._kept_waits.values(), key=lambda w: (w.created, w.id))
            if w.status == "open" and (conversation is None or w.conversation == conversation)
        ]

    async def wait_by_token(self, token: str) -> Wait | None:
        return next((w for w in self._kept_waits.values() if w.token == token), None)

    async def waits_ended_by(self, key: str) -> list[Wait]:
        found = [w for w in self._kept_waits.values() if w.answered_by == key]
        return sorted(found, key=lambda w: (w.created, w.id))

    async def due_waits(self, now: float, limit: int = 100) -> list[Wait]:
        due = [
            w
            for w in self._kept_waits.values()
            if w.status == "open" and w.deadline is not None and w.deadline <= now
        ]
        return sorted(due, key=lambda w: w.deadline or 0.0)[:limit]

    async def waits(self, kind: WaitKind | None = None, limit: int = 100) -> list[Wait]:
        found = [w for w in self._kept_waits.values() if kind is None or w.kind == kind]
        return sorted(found, key=lambda w: (-w.created, w.id))[:limit]
