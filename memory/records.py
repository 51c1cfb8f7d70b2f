"""The rows the store hands out and takes in: plain dataclasses, nothing that does I/O.

They live apart from the role protocols (:mod:`tether.memory.roles`) so that a module
that only reads a :class:`Turn` or builds a :class:`MemoryChanges` does not depend on
the store's whole interface. (``tether.memory.sql.rows`` is something else: the SQL stores'
decoders from database rows to these.)

Inbox statuses:  received → running → done | retry_wait | dead
Outbox statuses: pending → sending → sent | retry_wait | dead | unknown
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tether.events import Event, OutMessage

#: ``waiting``: suspended by ``ctx.ask`` until its wait ends (memory/waits.py).
InboxStatus = Literal["received", "running", "done", "retry_wait", "dead", "waiting"]
OutboxStatus = Literal["pending", "sending", "sent", "retry_wait", "dead", "unknown"]
UNFINISHED_INBOX: tuple[InboxStatus, ...] = ("received", "running", "retry_wait")
UNSENT_OUTBOX: tuple[OutboxStatus, ...] = ("pending", "sending", "retry_wait")


@dataclass(slots=True)
class InboxRow:
    """An accepted event and where it is in its life; ``seq`` orders its conversation's lane."""

    seq: int
    key: str
    conversation: str
    event: Event
    status: InboxStatus = "received"
    attempts: int = 0
    retry_at: float | None = None
    error: str | None = None
    #: Read with a shared store's lane: its conversation had an open wait then
    #: (memory/waits.py). A hint that spares the pipeline a read per message.
    waits_open: bool = False


@dataclass(slots=True)
class OutboxRow:
    """One message to send, written by its event's checkpoint; ``seq`` orders its chat's lane."""

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
    #: Whose conversation it is in (``platform:user``: a DM's person, a per-user group
    #: session's): who may find it by search from elsewhere (memory/recall). None: only
    #: from within its own conversation (a shared chat, the operator's).
    owner: str | None = None


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
    #: Where it was said.
    conversation: str
    text: str
    tokens: int
    created: float = 0.0
    #: Whom it is about (``platform:user``): a person's fact, shown in that person's own
    #: turns wherever they write (their linked identities too, :mod:`tether.memory.people`);
    #: None for a fact about the chat, shown in that chat only.
    owner: str | None = None
    #: Said in a DM: a private person-fact, shown in that person's DMs only (any linked
    #: platform), never in a group, where others read what the agent answers.
    in_dm: bool = False


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


TaskStatus = Literal["running", "done", "failed", "expired", "cancelled"]


@dataclass(frozen=True, slots=True)
class TaskEnd:
    """How a task event's checkpoint ends its task (:mod:`tether.memory.tasks`): applied
    only to a task still running, so a cancel that came first stays."""

    id: str
    status: TaskStatus
    result: str


@dataclass(slots=True)
class MemoryChanges:
    """What one event changes in its conversation's memory besides new turns.

    Committed in the event's checkpoint transaction, so a crash never applies half of it
    and a repeated checkpoint applies nothing twice.
    """

    conversation: str
    #: The whole new ``conversations`` row, when persona, summary or context changed.
    state: ConversationState | None = None
    #: New facts about the chat as ``(text, tokens)``.
    facts: list[tuple[str, int]] = field(default_factory=list)
    #: New facts about a person as ``(text, tokens, owner, said in a DM)``, numbered
    #: after ``facts``.
    person_facts: list[tuple[str, int, str, bool]] = field(default_factory=list)
    #: Ids of facts to forget.
    forget: list[int] = field(default_factory=list)
    #: A person's facts to forget, as ``(id, owner)``: they may have been said in another
    #: conversation, so the owner, not the conversation, is what the delete is bound to.
    forget_owned: list[tuple[int, str]] = field(default_factory=list)
    #: Ids of facts to retire: marked, out of prompts and listings, kept in the store.
    retire: list[int] = field(default_factory=list)
    #: ``(first, last)`` message ids the new summary covers; they are marked, never deleted.
    summarized: tuple[int, int] | None = None
    usage: list[UsageRecord] = field(default_factory=list)
    #: Cursors set in the same transaction (reflection's "reflected up to" per conversation).
    cursors: dict[str, str] = field(default_factory=dict)
    #: Facts and forgets of OTHER conversations, committed with this event (reflection
    #: learns about many conversations in one run, and must apply all of it or none).
    elsewhere: list[MemoryChanges] = field(default_factory=list)
    #: Handler state the turn changed (:mod:`tether.memory.state`): (scope, key, JSON
    #: value, or None for a removed key).
    handler_state: list[tuple[str, str, str | None]] = field(default_factory=list)
    #: The task this event ends (a task event's own checkpoint, :mod:`tether.memory.tasks`):
    #: its status and result committed with the result's outbox row.
    task: TaskEnd | None = None

    def __bool__(self) -> bool:
        return bool(
            self.task
            or self.handler_state
            or self.state
            or self.facts
            or self.person_facts
            or self.forget
            or self.forget_owned
            or self.retire
            or self.summarized
            or self.usage
            or self.cursors
            or self.elsewhere
        )


@dataclass(slots=True)
class DeadLetter:
    """A buried event with what it saw (``snapshot``), kept so an operator can look and retry."""

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
