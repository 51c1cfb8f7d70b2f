"""The rows the web console reads: an event with its timestamps, its timeline, a
conversation in a list, a line of the web chat, and the dashboard's time series.

Plain dataclasses like :mod:`tether.memory.records`; the reads that fill them are the
:class:`~tether.memory.operator.ConsoleStore` role (``sql/console.py`` for SQLite and
PostgreSQL, ``inmemory/console.py`` for the in-memory store).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.events import Event
from tether.memory.records import DeadLetter, InboxStatus

#: The dashboard's series, in the order they are drawn.
SERIES = ("received", "replies", "retried", "dead", "tokens", "cost")


@dataclass(slots=True)
class EventInfo:
    """An inbox row with when it came in and when it last changed (epoch seconds)."""

    key: str
    conversation: str
    event: Event
    status: InboxStatus
    attempts: int
    error: str | None
    created: float
    updated: float


@dataclass(slots=True)
class StepInfo:
    """A memoized ``ctx.step`` result, or (``usage`` set) one LLM call's spend."""

    name: str
    created: float
    result: str = ""


@dataclass(slots=True)
class SendInfo:
    """One outbox row of an event: a reply and what became of it."""

    key: str
    text: str
    status: str
    attempts: int
    platform_id: str | None
    error: str | None
    created: float
    updated: float


@dataclass(slots=True)
class Moved:
    """One move of an event's inbox row off the plain path (received → running → done):
    an attempt that failed (``retry_wait``, with its error and when it runs again), one
    begun again, a death, a requeue (``received`` after ``dead`` or ``retry_wait``), a
    run cut off by a restart (``received`` after ``running``).

    The SQL stores write these from a trigger on the inbox (``inbox_history``), in the
    transaction of the move itself: the pipeline writes nothing more, and an event that
    went the plain way costs no row. A requeue resets the attempts and drops the dead
    letter; the history is what still says it died, and why."""

    status: str
    before: str
    attempts: int
    error: str | None
    retry_at: float | None
    at: float


@dataclass(slots=True)
class Timeline:
    """Everything the store knows about one event: received → steps → done | dead → sends."""

    event: EventInfo
    steps: list[StepInfo] = field(default_factory=list)
    #: ``(call name, model, tokens, cost, when)`` per LLM call the event paid for.
    usage: list[tuple[str, str, int, float, float]] = field(default_factory=list)
    sends: list[SendInfo] = field(default_factory=list)
    dead: DeadLetter | None = None
    #: Its moves off the plain path, oldest first (:class:`Moved`).
    moves: list[Moved] = field(default_factory=list)


def off_the_plain_path(before: str, status: str, attempts: int) -> bool:
    """Whether a move from ``before`` to ``status`` is kept in the history: every move
    but a first attempt begun (``received`` → ``running``, attempt 1) and a finish
    (``received`` or ``running`` → ``done``), which the inbox row itself tells. The SQL
    triggers say the same in SQL (``memory/sqlite/schema.py``, ``memory/postgres/schema.py``)."""
    if before == status:
        return False
    if before == "received" and status == "running":
        return attempts > 1
    return not (before in ("received", "running") and status == "done")


@dataclass(slots=True)
class ConversationInfo:
    conversation: str
    events: int
    last: float


@dataclass(slots=True)
class ChatLine:
    """One line of the web chat: the person's message (``user``) or a delivered reply."""

    seq: int
    key: str
    role: str
    text: str
    at: float


def empty_series(count: int) -> dict[str, list[float]]:
    return {name: [0.0] * count for name in SERIES}


def like_pattern(text: str) -> str:
    """``text`` anywhere, for ``LIKE ? ESCAPE '\\'``: its own ``%`` and ``_`` are literal."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"
