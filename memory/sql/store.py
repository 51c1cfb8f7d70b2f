"""What the SQLite and PostgreSQL stores do the same way: every read, and every write
that is the same statements in either.

A subclass supplies two things: ``_rows`` (run a ``?`` query, return its rows) and
``_write`` (commit statements as one transaction, in a phase). It keeps for itself only
what its engine does differently: opening, accepting events (SQLite's writer process
numbers them; PostgreSQL inserts with ``unnest``), the 'running' mark and the
checkpoint (SQLite folds one into the other when they meet in a batch), the outbox's
'sent' mark (SQLite need not wait for it), and requeueing (one transaction on
PostgreSQL).
"""

from __future__ import annotations

import abc
import json
import time
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

from tether.events import OutMessage
from tether.memory.blobs import SqlBlobs
from tether.memory.people import SqlPeople
from tether.memory.people.erasure import SqlErasure
from tether.memory.records import (
    ConversationState,
    DeadLetter,
    Fact,
    InboxRow,
    MemoryChanges,
    OutboxRow,
    Pairing,
    Turn,
    Usage,
    Window,
)
from tether.memory.reminders import SqlReminders
from tether.memory.retention import SqlPruning
from tether.memory.revocations import SqlRevocations
from tether.memory.sql import statements as sql
from tether.memory.sql.console import ConsoleSql
from tether.memory.sql.rows import (
    Row,
    conversation_row,
    dead_letter_row,
    fact_row,
    inbox_row,
    newest_within,
    oldest_within,
    outbox_row,
    turn_row,
)
from tether.memory.sql.statements import ACCEPT, FINISH, STEP, Statement
from tether.memory.state import SqlState
from tether.memory.store import Store
from tether.memory.tasks import SqlTasks
from tether.memory.waits import SqlWaits


class Commit(Protocol):
    """Commit ``statements`` as one transaction; return once they are durable."""

    def __call__(self, phase: int, *statements: Statement) -> Awaitable[None]: ...


class SqlStore(
    SqlReminders,
    SqlTasks,
    SqlWaits,
    SqlBlobs,
    SqlRevocations,
    SqlPeople,
    SqlState,
    SqlErasure,
    SqlPruning,
    ConsoleSql,
    Store,
):
    #: An attribute, not a method: SQLite binds its link's own ``write`` here, so a write
    #: costs no extra call on the way to the writer.
    _write: Commit
    #: The dialect's page reads of unsummarized turns (see :func:`sql.unsummarized_pages`).
    _newest_unsummarized: str
    _oldest_unsummarized: str
    #: The dialect's :func:`sql.last_received`.
    _last_received: str
    #: The dialect's reads of an inbox payload's platform and sender id, and what it runs
    #: after an erasure (:mod:`tether.memory.people.erasure`).
    _payload_platform: str
    _payload_sender: str
    _after_erasure: tuple[str, ...]

    @abc.abstractmethod
    async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run a ``?`` query on committed state (and this store's own writes)."""

    @abc.abstractmethod
    def _outbox_saved(self, event_key: str, message: OutMessage, now: float) -> Statement:
        """The dialect's insert-or-ignore of one outbox row written by ``event_key``."""

    # -- inbox ----------------------------------------------------------------------

    async def recover(self) -> list[InboxRow]:
        # Shared by several processes (PostgreSQL), 'running' rows may be another's work:
        # they are taken back only by whoever acquires their lane (see Dispatcher), never
        # reset wholesale here. SQLite's store, one process's own, resets them first.
        return [inbox_row(row) for row in await self._rows(sql.UNFINISHED)]

    async def lane(self, conversation: str) -> list[InboxRow]:
        return [inbox_row(row) for row in await self._rows(sql.LANE, (conversation,))]

    async def busy_conversations(self) -> list[str]:
        return [str(row[0]) for row in await self._rows(sql.BUSY_CONVERSATIONS)]

    async def pending(self, older_than: float) -> list[InboxRow]:
        return [inbox_row(row) for row in await self._rows(sql.PENDING, (older_than,))]

    async def retry_later(self, key: str, retry_at: float, error: str) -> None:
        await self._write(FINISH, (sql.RETRY, (retry_at, error, time.time(), key)))

    async def bury(self, letter: DeadLetter, outbox: Sequence[OutMessage] = ()) -> list[OutboxRow]:
        now = time.time()
        await self._write(
            FINISH,
            (sql.BURIED, (letter.error, now, letter.key)),
            *(self._outbox_saved(letter.key, message, now) for message in outbox),
            (
                sql.DEAD_LETTER_SAVED,
                (
                    letter.key,
                    letter.conversation,
                    letter.event.to_json(),
                    letter.error,
                    letter.traceback,
                    json.dumps(letter.snapshot, default=str),
                    now,
                ),
            ),
        )
        return [OutboxRow(seq=0, key=m.key, event_key=letter.key, message=m) for m in outbox]

    async def dead_letters(self) -> list[DeadLetter]:
        return [dead_letter_row(row) for row in await self._rows(sql.DEAD_LETTERS)]

    async def dead_letter(self, key: str) -> DeadLetter | None:
        rows = await self._rows(sql.DEAD_LETTER, (key,))
        return dead_letter_row(rows[0]) if rows else None

    async def inbox_row(self, key: str) -> InboxRow | None:
        rows = await self._rows(sql.INBOX_ROW, (key,))
        return inbox_row(rows[0]) if rows else None

    # -- steps ----------------------------------------------------------------------

    async def step(self, key: str, name: str) -> str | None:
        rows = await self._rows(sql.STEP_RESULT, (key, name))
        return str(rows[0][0]) if rows else None

    async def save_step(self, key: str, name: str, result: str) -> None:
        await self._write(STEP, (sql.STEP_SAVED, (key, name, result, time.time())))

    async def commit_step(self, key: str, name: str, result: str, changes: MemoryChanges) -> None:
        now = time.time()
        memory = sql.turns_and_memory(f"{key}/{name}", (), changes, now)
        await self._write(STEP, (sql.STEP_SAVED, (key, name, result, now)), *memory)

    async def steps(self, key: str) -> dict[str, str]:
        rows = await self._rows(sql.STEP_RESULTS, (key,))
        return {str(name): str(result) for name, result in rows}

    # -- outbox ---------------------------------------------------------------------

    async def unsent(self) -> list[OutboxRow]:
        return [outbox_row(row) for row in await self._rows(sql.UNSENT)]

    async def unsent_keys(self) -> list[str]:
        return [str(row[0]) for row in await self._rows(sql.UNSENT_KEYS)]

    async def outbox_rows(self, event_key: str) -> list[OutboxRow]:
        return [outbox_row(row) for row in await self._rows(sql.OUTBOX_ROWS, (event_key,))]

    # -- conversation memory --------------------------------------------------------

    async def history(self, conversation: str, limit: int) -> list[Turn]:
        rows = await self._rows(sql.HISTORY, (conversation, limit))
        return [turn_row(row) for row in reversed(rows)]

    async def recent(self, conversation: str, budget: int, *, after_id: int = 0) -> Window:
        async def page(after: int, before: int, limit: int) -> list[Row]:
            return await self._rows(self._newest_unsummarized, (conversation, after, before, limit))

        return Window(*await newest_within(page, turn_row, budget, after_id))

    async def oldest_unsummarized(
        self, conversation: str, budget: int, *, after_id: int = 0, before_id: int | None = None
    ) -> list[Turn]:
        async def page(after: int, before: int, limit: int) -> list[Row]:
            return await self._rows(self._oldest_unsummarized, (conversation, after, before, limit))

        return await oldest_within(page, budget, after_id, before_id)

    async def last_message_id(self, conversation: str) -> int:
        rows = await self._rows(sql.LAST_MESSAGE_ID, (conversation,))
        return int(rows[0][0])

    async def conversation(self, conversation: str) -> ConversationState:
        rows = await self._rows(sql.CONVERSATION, (conversation,))
        return conversation_row(rows[0]) if rows else ConversationState(conversation)

    async def facts(
        self,
        conversation: str,
        budget: int | None = None,
        owners: Sequence[str] = (),
        *,
        in_dm: bool = True,
    ) -> list[Fact]:
        seen = (conversation, *owners)
        if budget is None:
            query = sql.facts_query(len(owners), newest=False, in_dm=in_dm)
            return [fact_row(row) for row in await self._rows(query, seen)]
        newest = sql.facts_query(len(owners), newest=True, in_dm=in_dm)

        async def page(after: int, before: int, limit: int) -> list[Row]:
            return await self._rows(newest, (*seen, after, before, limit))

        facts, _used, _more = await newest_within(page, fact_row, budget, 0)
        return facts

    async def usage(self, conversation: str, since: str = "") -> list[Usage]:
        return [Usage(*row) for row in await self._rows(sql.USAGE, (conversation, since))]

    async def turns_after(self, conversation: str, after_id: int, upto_id: int) -> list[Turn]:
        rows = await self._rows(sql.TURNS_AFTER, (conversation, after_id, upto_id))
        return [turn_row(row) for row in rows]

    async def ahead_of(self, prefix: str) -> dict[str, tuple[int, int]]:
        cursors = await self.recent_cursors(prefix, 0.0)
        out = {}
        for conversation, newest in await self._rows(sql.NEWEST_MESSAGES):
            cursor = int(cursors.get(prefix + str(conversation), "0"))
            if int(newest) > cursor:
                out[str(conversation)] = (cursor, int(newest))
        return out

    # -- cursors --------------------------------------------------------------------

    async def cursor(self, name: str) -> str | None:
        rows = await self._rows(sql.CURSOR, (name,))
        return str(rows[0][0]) if rows else None

    async def set_cursor(self, name: str, value: str) -> None:
        await self._write(ACCEPT, (sql.CURSOR_SET, (name, value, time.time())))

    async def recent_cursors(self, prefix: str, since: float) -> dict[str, str]:
        rows = await self._rows(sql.RECENT_CURSORS, (prefix, prefix, since))
        return {str(name): str(value) for name, value in rows}

    # -- pairing --------------------------------------------------------------------

    async def pairing(self, platform: str, user_id: str) -> Pairing | None:
        rows = await self._rows(sql.PAIRING, (platform, user_id))
        return Pairing(*rows[0]) if rows else None

    async def request_pairing(self, platform: str, user_id: str, name: str, code: str) -> Pairing:
        now = time.time()
        await self._write(
            ACCEPT, (sql.PAIRING_REQUESTED, (platform, user_id, name, code, now, now))
        )
        found = await self.pairing(platform, user_id)
        assert found is not None
        return found

    async def approve_pairing(self, code: str) -> Pairing | None:
        code = code.strip().upper()
        await self._write(ACCEPT, (sql.PAIRING_APPROVED, (time.time(), code)))
        rows = await self._rows(sql.PAIRING_BY_CODE, (code,))
        return Pairing(*rows[0]) if rows else None

    async def revoke_pairing(self, platform: str, user_id: str) -> bool:
        found = await self.pairing(platform, user_id)
        await self._write(ACCEPT, (sql.PAIRING_REVOKED, (platform, user_id)))
        return found is not None

    async def pairings(self) -> list[Pairing]:
        return [Pairing(*row) for row in await self._rows(sql.PAIRINGS)]

    # -- reports --------------------------------------------------------------------

    async def counts(self) -> dict[str, dict[str, int]]:
        inbox = await self._rows(sql.INBOX_COUNTS)
        outbox = await self._rows(sql.OUTBOX_COUNTS)
        return {
            "inbox": {str(s): int(n) for s, n in inbox},
            "outbox": {str(s): int(n) for s, n in outbox},
        }

    async def spend(self, since: str) -> dict[str, tuple[int, float]]:
        rows = await self._rows(sql.SPEND, (since,))
        return {str(model): (int(tokens), float(cost)) for model, tokens, cost in rows}

    async def spend_by_conversation(self, since: str) -> dict[str, tuple[int, float]]:
        rows = await self._rows(sql.SPEND_BY_CONVERSATION, (since,))
        return {str(conv): (int(tokens), float(cost)) for conv, tokens, cost in rows}

    async def activity(self) -> dict[str, dict[str, float]]:
        received = await self._rows(self._last_received)
        sent = await self._rows(sql.LAST_SENT)
        out: dict[str, dict[str, float]] = {}
        for kind, rows in (("received", received), ("sent", sent)):
            for platform, when in rows:
                out.setdefault(str(platform), {})[kind] = float(when)
        return out
