"""The store protocol: every durable fact Tether keeps goes through these methods.

Implementations (SQLite, in-memory, PostgreSQL) share one contract test suite. Methods
are shaped around the pipeline's transitions, not around tables, so that a backend can
batch them (SQLite's group commit) or lock them (PostgreSQL's SKIP LOCKED) as it needs.

Inbox statuses:  received → running → done | retry_wait | dead
Outbox statuses: pending → sending → sent | retry_wait | dead | unknown
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.events import Event, OutMessage

InboxStatus = Literal["received", "running", "done", "retry_wait", "dead"]
OutboxStatus = Literal["pending", "sending", "sent", "retry_wait", "dead", "unknown"]
UNFINISHED_INBOX: tuple[InboxStatus, ...] = ("received", "running", "retry_wait")
UNSENT_OUTBOX: tuple[OutboxStatus, ...] = ("pending", "sending", "retry_wait")


@dataclass(slots=True)
class InboxRow:
    seq: int
    key: str
    conversation: str
    event: Event
    status: InboxStatus = "received"
    attempts: int = 0
    retry_at: float | None = None
    error: str | None = None


@dataclass(slots=True)
class OutboxRow:
    seq: int
    key: str
    event_key: str
    message: OutMessage
    status: OutboxStatus = "pending"
    attempts: int = 0
    next_at: float | None = None
    platform_id: str | None = None
    error: str | None = None

    @property
    def platform(self) -> str:
        return self.message.target.platform


@dataclass(slots=True)
class Turn:
    """One line of conversation history; ``tokens`` is counted once, when it is written."""

    conversation: str
    role: str
    text: str
    event_key: str = ""
    tokens: int | None = None
    created: float = 0.0
    summarized: bool = False
    #: The row id, increasing in write order (0 until stored); history windows page on it.
    id: int = 0


@dataclass(slots=True)
class ConversationState:
    """A conversation's own settings and its compacted past (the ``conversations`` row)."""

    conversation: str
    #: Overrides ``agent.persona`` for this conversation (``/persona``); None: the default.
    persona: str | None = None
    #: The running summary of every turn marked ``summarized``.
    summary: str = ""
    summary_tokens: int = 0
    #: The newest message id the summary covers.
    summarized_upto: int = 0
    #: Messages with an id up to this one are archive, out of the context (``/reset``).
    context_from: int = 0
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Fact:
    """Long-term memory: something the user or the agent asked to remember."""

    id: int
    conversation: str
    text: str
    tokens: int
    created: float = 0.0


@dataclass(slots=True)
class UsageRecord:
    """One LLM call's spend. ``name`` is unique within its event, so recording is idempotent."""

    name: str
    model: str
    #: The UTC day the call was made, ``YYYY-MM-DD``.
    day: str
    prompt_tokens: int
    completion_tokens: int
    cost: float = 0.0


@dataclass(slots=True)
class Usage:
    """Spend per conversation, model and day."""

    conversation: str
    model: str
    day: str
    prompt_tokens: int
    completion_tokens: int
    cost: float
    calls: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class Window:
    """The newest unsummarized turns that fit a token budget, oldest first."""

    turns: list[Turn]
    tokens: int
    #: Older unsummarized turns exist that did not fit: time to compact.
    more: bool


@dataclass(slots=True)
class MemoryChanges:
    """What one event changes in its conversation's memory besides new turns.

    Committed in the event's checkpoint transaction, so a crash never applies half of it
    and a repeated checkpoint applies nothing twice.
    """

    conversation: str
    #: The whole new ``conversations`` row, when persona, summary or context changed.
    state: ConversationState | None = None
    #: New facts as ``(text, tokens)``.
    facts: list[tuple[str, int]] = field(default_factory=list)
    #: Ids of facts to forget.
    forget: list[int] = field(default_factory=list)
    #: ``(first, last)`` message ids the new summary covers; they are marked, never deleted.
    summarized: tuple[int, int] | None = None
    usage: list[UsageRecord] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.state or self.facts or self.forget or self.summarized or self.usage)


@dataclass(slots=True)
class DeadLetter:
    key: str
    conversation: str
    event: Event
    error: str
    traceback: str
    snapshot: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0


@dataclass(slots=True)
class Pairing:
    """A sender who asked to talk to the bot; ``approved`` once the owner said yes."""

    platform: str
    user_id: str
    name: str
    code: str
    status: Literal["pending", "approved"]
    created: float
    updated: float


class Store(abc.ABC):
    """Durable state behind one small interface. All methods are safe to call concurrently."""

    #: Several gateway processes may use this store at once (PostgreSQL). They then take a
    #: conversation's lane with :meth:`try_lock` before running its events.
    shared: bool = False

    async def try_lock(self, name: str) -> bool:
        """Take the cross-process lock ``name``; stores used by one process always succeed."""
        return True

    async def unlock(self, name: str) -> None:  # noqa: B027 - nothing to release by default
        """Release :meth:`try_lock`'s lock."""

    @abc.abstractmethod
    async def lane(self, conversation: str) -> list[InboxRow]:
        """The conversation's unfinished events by seq (read while holding its lane)."""

    @abc.abstractmethod
    async def busy_conversations(self) -> list[str]:
        """Conversations with unfinished events."""

    async def unsent_for(self, target: str) -> list[OutboxRow]:
        """Unsent outbox rows for one chat (``Target.key``), by seq."""
        return [row for row in await self.unsent() if row.message.target.key == target]

    async def busy_targets(self) -> list[str]:
        """Chats with unsent outbox rows."""
        return list(dict.fromkeys(row.message.target.key for row in await self.unsent()))

    # -- lifecycle ------------------------------------------------------------------

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and migrate the schema to the current version."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise if the store cannot answer a trivial query (for readiness probes)."""

    # -- inbox ----------------------------------------------------------------------

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
    async def bury(self, letter: DeadLetter) -> None:
        """Mark the event dead and keep its snapshot in ``dead_letters``."""

    @abc.abstractmethod
    async def dead_letters(self) -> list[DeadLetter]: ...

    @abc.abstractmethod
    async def dead_letter(self, key: str) -> DeadLetter | None: ...

    @abc.abstractmethod
    async def requeue(self, key: str) -> bool:
        """Send a dead event (or a dead/unknown outbox row) round again; False if none."""

    @abc.abstractmethod
    async def inbox_row(self, key: str) -> InboxRow | None: ...

    # -- memoized steps -------------------------------------------------------------

    @abc.abstractmethod
    async def step(self, key: str, name: str) -> str | None:
        """The stored JSON result of step ``name`` of event ``key``, if it completed."""

    @abc.abstractmethod
    async def save_step(self, key: str, name: str, result: str) -> None: ...

    @abc.abstractmethod
    async def steps(self, key: str) -> dict[str, str]: ...

    # -- outbox ---------------------------------------------------------------------

    @abc.abstractmethod
    async def unsent(self) -> list[OutboxRow]:
        """Outbox rows not yet in a final state, by seq (``sending`` ones included)."""

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
        """Set a row's status. ``durable=False`` may return before the write commits (it
        is still ordered before every later write): for ``sent``, where a crash in
        between leaves the row ``sending``, which recovery treats as ambiguous."""

    @abc.abstractmethod
    async def outbox_rows(self, event_key: str) -> list[OutboxRow]: ...

    # -- memory ---------------------------------------------------------------------

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
    async def facts(self, conversation: str, budget: int | None = None) -> list[Fact]:
        """The conversation's facts, oldest first: all, or the newest that fit ``budget``."""

    @abc.abstractmethod
    async def usage(self, conversation: str, since: str = "") -> list[Usage]:
        """Spend of ``conversation`` per model and day from UTC day ``since`` on, by day."""

    # -- cursors --------------------------------------------------------------------

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

    # -- pairing (access control) ---------------------------------------------------

    @abc.abstractmethod
    async def pairing(self, platform: str, user_id: str) -> Pairing | None: ...

    @abc.abstractmethod
    async def request_pairing(self, platform: str, user_id: str, name: str, code: str) -> Pairing:
        """Record a pending request with ``code``, or return the sender's existing one."""

    @abc.abstractmethod
    async def approve_pairing(self, code: str) -> Pairing | None:
        """Approve the request with ``code`` (case-insensitive); None if there is none."""

    @abc.abstractmethod
    async def revoke_pairing(self, platform: str, user_id: str) -> bool: ...

    @abc.abstractmethod
    async def pairings(self) -> list[Pairing]: ...

    # -- counts (status, metrics) ---------------------------------------------------

    @abc.abstractmethod
    async def counts(self) -> dict[str, dict[str, int]]:
        """``{"inbox": {status: n}, "outbox": {status: n}}``."""

    @abc.abstractmethod
    async def spend(self, since: str) -> dict[str, tuple[int, float]]:
        """LLM spend of every conversation from UTC day ``since`` on: model → (tokens, cost)."""

    @abc.abstractmethod
    async def activity(self) -> dict[str, dict[str, float]]:
        """Per platform: ``{"received": last inbound time, "sent": last delivery time}``."""


def open_store(url: str, *, synchronous: str = "normal") -> Store:
    """The store for ``tether.memory.store``, picked by the URL's scheme."""
    if url.startswith("sqlite://"):
        from tether.memory.sqlite import SqliteStore

        return SqliteStore(sqlite_path(url), synchronous=synchronous)
    if url.startswith(("postgresql://", "postgres://")):
        from tether.memory.postgres import PostgresStore

        return PostgresStore(url)
    if url.startswith("memory://"):
        from tether.memory.inmemory import MemoryStore

        return MemoryStore()
    raise ValueError(f"memory.store: unsupported store {url.split(':', 1)[0]!r}")


def sqlite_path(url: str) -> str:
    """``sqlite:///rel.db`` → ``rel.db``; ``sqlite:////abs.db`` → ``/abs.db``."""
    path = url.removeprefix("sqlite://")
    if path.startswith("/"):
        path = path[1:]
    return path or ":memory:"
