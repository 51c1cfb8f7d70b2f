"""The store seen by each of its users: one protocol per role, so that code asks only for
the methods it calls.

Methods are shaped around the pipeline's transitions, not around tables, so that a
backend can batch them (SQLite's group commit) or lock them (PostgreSQL's SKIP LOCKED)
as it needs. :class:`tether.memory.store.Store` is the whole: every role plus opening
and closing, which is what the three implementations subclass.

Roles, in the order an event meets them:

- :class:`LaneLocks`: cross-process locks on a lane, for stores several processes share;
- :class:`CursorStore`: how far each platform's stream has been accepted;
- :class:`InboxStore`: accept, recover, run (begin → checkpoint | retry_later | bury);
- :class:`StepStore`: the memoized results of a handler's ``ctx.step``;
- :class:`OutboxStore`: the replies a checkpoint wrote, until they are sent;
- :class:`ConversationStore`: history, the window, summary, facts, spend, handler state;
- :class:`BlobStore`: the bytes of a reply's files, stored before its checkpoint;
- :class:`ReminderStore`: reminders and recurring jobs made from chat;
- :class:`TaskStore`: background tasks and sub-agents, and what became of each.

The roles that serve the operator rather than an event (pairing, ``tether status``,
the console) are in :mod:`tether.memory.operator`.

Why protocols whose methods are also ``abc.abstractmethod``: a consumer (and a test's
fake) only has to be shaped right, not inherit anything; and a store that does subclass
:class:`Store` but misses a method fails when it is constructed, not on the first call
in production. ``Protocol``'s metaclass is an ``ABCMeta``, so both hold at once.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from tether.events import Event, OutMessage
from tether.memory.people import PeopleStore
from tether.memory.recall.query import Hit, Scope
from tether.memory.records import (
    ConversationState,
    DeadLetter,
    Fact,
    InboxRow,
    MemoryChanges,
    OutboxRow,
    OutboxStatus,
    TaskStatus,
    Turn,
    Usage,
    Window,
)
from tether.memory.reminders import Reminder, ReminderStatus
from tether.memory.state.store import StateStore
from tether.memory.tasks import Task
from tether.memory.waits import WaitStore


class LaneLocks(Protocol):
    """A lane (a conversation's events, a chat's replies) run by one process at a time."""

    #: Several gateway processes may use this store at once (PostgreSQL). They then take a
    #: lane with :meth:`try_lock` before running it.
    shared: bool = False

    async def try_lock(self, name: str) -> bool:
        """Take the cross-process lock ``name``; stores used by one process always succeed."""
        return True

    async def unlock(self, name: str) -> None:
        """Release :meth:`try_lock`'s lock."""
        return None  # a body, so that type checkers do not take it for abstract

    def on_locks_lost(self, callback: Callable[[frozenset[str]], None]) -> None:
        """Have ``callback`` told the names of the locks this process held whenever it
        loses them all at once (PostgreSQL: the session that held them ended), so that
        it stops running those lanes: another process may take them over at once.
        Stores whose locks cannot be lost never call it."""
        return None


class CursorStore(Protocol):
    """Named positions in outside streams (a Telegram update id, a Discord message id)."""

    @abc.abstractmethod
    async def cursor(self, name: str) -> str | None: ...

    @abc.abstractmethod
    async def set_cursor(self, name: str, value: str) -> None: ...

    @abc.abstractmethod
    async def recent_cursors(self, prefix: str, since: float) -> dict[str, str]:
        """Cursors whose name starts with ``prefix``, set at or after ``since`` (epoch s).

        How an adapter finds what was active before a restart (Discord: the channels to
        backfill) from the cursors it already commits with its events, instead of
        keeping a second list that could disagree with them.
        """


class InboxStore(LaneLocks, CursorStore, Protocol):
    """Events from accept to done or dead. Cursors belong here because :meth:`accept`
    commits them with the events; locks, because a shared store's lanes need them."""

    @abc.abstractmethod
    async def accept(
        self, items: Sequence[tuple[Event, str]], cursors: Mapping[str, str] | None = None
    ) -> list[InboxRow | None]:
        """Insert-or-ignore ``(event, conversation)`` pairs and set ``cursors``, atomically.

        Returns the new row for each item, or ``None`` where the key was already known.
        Once this returns, the events are durable and the platform may be acknowledged.
        """

    @abc.abstractmethod
    async def recover(self) -> list[InboxRow]:
        """Every unfinished row by seq. A store used by one process also puts stale
        ``running`` rows back to ``received``; a shared store leaves that to whoever takes
        the conversation's lane (another process may be running them)."""

    @abc.abstractmethod
    async def pending(self, older_than: float) -> list[InboxRow]:
        """``received`` rows last touched before ``older_than`` (epoch seconds), by seq."""

    @abc.abstractmethod
    async def lane(self, conversation: str) -> list[InboxRow]:
        """The conversation's unfinished events by seq (read while holding its lane)."""

    @abc.abstractmethod
    async def busy_conversations(self) -> list[str]:
        """Conversations with unfinished events."""

    @abc.abstractmethod
    async def inbox_row(self, key: str) -> InboxRow | None: ...

    @abc.abstractmethod
    async def begin(self, row: InboxRow) -> None:
        """Mark the row running and count the attempt (``row.attempts`` goes up by one).

        Need not be durable on return, but must be ordered before every later write
        for the same event (its steps, its checkpoint).
        """

    @abc.abstractmethod
    async def checkpoint(
        self,
        key: str,
        outbox: Sequence[OutMessage],
        turns: Sequence[Turn],
        changes: MemoryChanges | None = None,
    ) -> list[OutboxRow]:
        """ONE transaction: the inbox row done, the outbox rows, the history rows, and the
        event's other memory ``changes`` (conversation row, facts, summarized marks, usage).

        Idempotent: outbox keys, (event key, position) of turns and facts, and (event key,
        call name) of usage are unique, so a repeated checkpoint of the same event adds
        nothing.
        """

    @abc.abstractmethod
    async def retry_later(self, key: str, retry_at: float, error: str) -> None: ...

    @abc.abstractmethod
    async def bury(self, letter: DeadLetter, outbox: Sequence[OutMessage] = ()) -> list[OutboxRow]:
        """ONE transaction: the event dead, its snapshot in ``dead_letters``, and ``outbox``
        (the notice to the person) as outbox rows, returned like :meth:`checkpoint`'s.

        Together, so that a crash can neither lose the notice of a dead event nor send
        one for an event that is not dead; its key is unique, so a second death of the
        same event (after ``tether dead retry``) adds no second notice.
        """


class StepStore(Protocol):
    """Results of ``ctx.step``, so a retried or recovered event does not redo costly calls."""

    @abc.abstractmethod
    async def step(self, key: str, name: str) -> str | None:
        """The stored JSON result of step ``name`` of event ``key``, if it completed."""

    @abc.abstractmethod
    async def save_step(self, key: str, name: str, result: str) -> None: ...

    @abc.abstractmethod
    async def commit_step(self, key: str, name: str, result: str, changes: MemoryChanges) -> None:
        """ONE transaction: step ``name``'s result and memory ``changes`` that must not
        wait for the event's checkpoint.

        For a handler that works through many independent parts and must keep each part
        it finished even if the event dies later (a reflection run applies each
        conversation as it is read, so a run that outlasts its attempts keeps them). The
        caller reads the step first and commits a part once; ``changes`` is keyed by
        ``{key}/{name}`` (facts by position, usage by call name), so its rows never meet
        the checkpoint's own.
        """

    @abc.abstractmethod
    async def steps(self, key: str) -> dict[str, str]: ...


class OutboxStore(LaneLocks, Protocol):
    """Replies from their checkpoint until they are sent, dead, or of unknown fate."""

    @abc.abstractmethod
    async def unsent(self) -> list[OutboxRow]:
        """Outbox rows not yet in a final state, by seq (``sending`` ones included)."""

    async def unsent_keys(self) -> list[str]:
        """The keys of :meth:`unsent`'s rows, by seq: what the watchdog times, each round,
        without reading and parsing every waiting message."""
        return [row.key for row in await self.unsent()]

    async def unsent_for(self, target: str) -> list[OutboxRow]:
        """Unsent outbox rows for one chat (``Target.key``), by seq."""
        return [row for row in await self.unsent() if row.message.target.key == target]

    async def busy_targets(self) -> list[str]:
        """Chats with unsent outbox rows."""
        return list(dict.fromkeys(row.message.target.key for row in await self.unsent()))

    @abc.abstractmethod
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
        """Set a row's status. ``durable=False`` may return before the write commits: for
        the outcome of a platform call (``sent``, ``unknown``), a final state that nothing
        later overwrites. The store then keeps the write until a commit takes it, posted
        again if its batch fails (SQLite), or raises as a durable write does (PostgreSQL);
        only a crash in between leaves the row ``sending``, which recovery treats as
        ambiguous."""

    @abc.abstractmethod
    async def outbox_rows(self, event_key: str) -> list[OutboxRow]: ...


class ConversationStore(StateStore, Protocol):
    """A conversation's committed memory, read by handlers; it is written only by the
    event's checkpoint (:meth:`InboxStore.checkpoint`), never here."""

    @abc.abstractmethod
    async def history(self, conversation: str, limit: int) -> list[Turn]:
        """The newest ``limit`` turns of ``conversation``, oldest first."""

    @abc.abstractmethod
    async def recent(self, conversation: str, budget: int, *, after_id: int = 0) -> Window:
        """The newest unsummarized turns with ``id > after_id`` whose stored token counts
        fit ``budget``, oldest first.

        Reads newest-first and stops at the first turn that does not fit, so its cost
        follows the budget, not the length of the history.
        """

    @abc.abstractmethod
    async def oldest_unsummarized(
        self, conversation: str, budget: int, *, after_id: int = 0, before_id: int | None = None
    ) -> list[Turn]:
        """The oldest unsummarized turns with ``after_id < id < before_id`` that fit
        ``budget`` (at least one, however large), oldest first: the next part to compact."""

    @abc.abstractmethod
    async def last_message_id(self, conversation: str) -> int:
        """The id of the conversation's newest message, 0 if it has none."""

    @abc.abstractmethod
    async def conversation(self, conversation: str) -> ConversationState:
        """The conversation's row, or a default one if nothing was ever stored."""

    @abc.abstractmethod
    async def facts(
        self,
        conversation: str,
        budget: int | None = None,
        owners: Sequence[str] = (),
        *,
        in_dm: bool = True,
    ) -> list[Fact]:
        """The facts a turn in ``conversation`` sees, oldest first: all, or the newest
        that fit ``budget``. The chat's own (about no one), and those about any identity
        in ``owners`` (the person writing, linked identities included) wherever they were
        said, those said in a DM only if ``in_dm`` (a turn in a DM); never a fact about
        someone else."""

    @abc.abstractmethod
    async def usage(self, conversation: str, since: str = "") -> list[Usage]:
        """Spend of ``conversation`` per model and day from UTC day ``since`` on, by day."""

    @abc.abstractmethod
    async def turns_after(self, conversation: str, after_id: int, upto_id: int) -> list[Turn]:
        """Every turn with ``after_id < id <= upto_id``, summarized or not, oldest first."""

    @abc.abstractmethod
    async def ahead_of(self, prefix: str) -> dict[str, tuple[int, int]]:
        """Conversations whose newest message id is above their cursor ``prefix +
        conversation`` (0 when unset): conversation → (cursor, newest id).

        How reflection finds the conversations with turns it has not read yet.
        """


class BlobStore(Protocol):
    """Content-addressed bytes (:mod:`tether.memory.blobs`): a reply's files, stored
    before the checkpoint commits the outbox rows that name them."""

    @abc.abstractmethod
    async def put_blob(self, data: bytes) -> str:
        """Store ``data`` (once per content); its key, the sha256 in hex."""

    @abc.abstractmethod
    async def blob(self, key: str) -> bytes | None: ...


class ReminderStore(Protocol):
    """Reminders and recurring jobs made from chat (:mod:`tether.memory.reminders`)."""

    @abc.abstractmethod
    async def add_reminder(self, reminder: Reminder) -> Reminder:
        """Insert ``reminder`` unless its id exists; the stored row either way."""

    @abc.abstractmethod
    async def reminder(self, reminder_id: str) -> Reminder | None: ...

    @abc.abstractmethod
    async def reminders(
        self, conversation: str | None = None, *, active: bool = True, target: str | None = None
    ) -> list[Reminder]:
        """Oldest first; of one conversation and/or one chat (``target``; None: all),
        only active ones unless not ``active``."""

    @abc.abstractmethod
    async def count_reminders(
        self, *, target: str | None = None, sender: str | None = None, limit: int | None = None
    ) -> int:
        """How many active reminders post into chat ``target``, or were made by
        ``sender`` (exactly one of the two), counting no further than ``limit``: read
        from an index up to the cap being checked, so checking it on every add costs
        the same with 20 reminders or 20,000."""

    @abc.abstractmethod
    async def finish_reminder(self, reminder_id: str, status: ReminderStatus) -> bool:
        """Mark an active reminder ``done`` or ``cancelled``; False if it was not active."""


class TaskStore(Protocol):
    """Background tasks and sub-agents (:mod:`tether.memory.tasks`)."""

    @abc.abstractmethod
    async def add_task(self, task: Task) -> Task:
        """Insert ``task`` unless its id exists; the stored row either way."""

    @abc.abstractmethod
    async def task(self, task_id: str) -> Task | None: ...

    @abc.abstractmethod
    async def tasks(self, parent: str | None = None, *, limit: int = 50) -> list[Task]:
        """Newest first: of one parent (a conversation, or ``task:{id}``), or all."""

    @abc.abstractmethod
    async def open_tasks(self) -> list[Task]:
        """The running ones, oldest first."""

    @abc.abstractmethod
    async def count_open_tasks(self, parent: str | None = None) -> int:
        """How many are running: of one parent, or in all (the bounds, from an index)."""

    @abc.abstractmethod
    async def task_counts(self) -> dict[str, int]:
        """How many tasks are in each status (``tether status``, the console)."""

    @abc.abstractmethod
    async def end_task(self, task_id: str, status: TaskStatus, result: str) -> bool:
        """End a running task (a cancel); False if it had ended already."""


class RecallStore(PeopleStore, Protocol):
    """Past turns by what they said (:mod:`tether.memory.recall`); who is one person."""

    @abc.abstractmethod
    async def search(self, query: str, scope: Scope, limit: int = 8) -> list[Hit]:
        """The best ``limit`` turns matching ``query`` that ``scope`` may see, best
        first; the scope is this query's own ``WHERE``, not a filter after it."""


# -- what one consumer sees when it needs more than one role ---------------------------


class HandlerStore(
    StepStore, ConversationStore, WaitStore, OutboxStore, TaskStore, RecallStore, Protocol
):
    """What a :class:`~tether.gateway.handler.context.Context` reads: steps, memory, waits."""


class EventStore(InboxStore, HandlerStore, Protocol):
    """One event's run in the pipeline: its inbox transitions and its handler's roles."""
