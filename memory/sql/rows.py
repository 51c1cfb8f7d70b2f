"""What the SQL stores share about rows: the column lists they select, how a row is
decoded, and the budget walks over pages of history and facts.

SQLite and PostgreSQL differ in placeholders and in how they commit, not in what a row
means; keeping that here means a new column is added in one place. (The statements
themselves are :mod:`tether.memory.sql.statements`.)
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from tether.events import Event, OutMessage
from tether.memory.records import (
    ConversationState,
    DeadLetter,
    Fact,
    InboxRow,
    OutboxRow,
    Turn,
)

INBOX_COLUMNS = "seq, key, conversation, payload, status, attempts, retry_at, error"
OUTBOX_COLUMNS = "seq, key, event_key, payload, status, attempts, next_at, platform_id, error"
#: A turn without a stored count (rows from before token counting) costs its length.
TURN_COLUMNS = (
    "id, conversation, role, text, event_key, coalesce(tokens, length(text) + 4),"
    " created, summarized"
)
FACT_COLUMNS = "id, conversation, text, tokens, created, owner, in_dm"
CONVERSATION_COLUMNS = (
    "conversation, persona, summary, summary_tokens, summarized_upto, context_from, settings"
)
USAGE_COLUMNS = "conversation, model, day, prompt_tokens, completion_tokens, cost, calls"
PAIRING_COLUMNS = "platform, user_id, name, code, status, created, updated"
DEAD_COLUMNS = "key, conversation, event, error, traceback, snapshot, created"
MAX_ID = 2**62

#: A row as a driver returns it: a tuple (sqlite3) or a ``Record`` (asyncpg).
Row = Sequence[Any]
#: Reads one page, newest or oldest first: ``(after_id, before_id, limit)`` → rows whose
#: first column is the id.
PageReader = Callable[[int, int, int], Awaitable[Sequence[Row]]]


def inbox_row(row: Row) -> InboxRow:
    seq, key, conversation, payload, status, attempts, retry_at, error = row
    return InboxRow(
        seq=seq,
        key=key,
        conversation=conversation,
        event=Event.from_json(payload),
        status=status,
        attempts=attempts,
        retry_at=retry_at,
        error=error,
    )


def outbox_row(row: Row) -> OutboxRow:
    seq, key, event_key, payload, status, attempts, next_at, platform_id, error = row
    return OutboxRow(
        seq=seq,
        key=key,
        event_key=event_key,
        message=OutMessage.from_json(payload),
        status=status,
        attempts=attempts,
        next_at=next_at,
        platform_id=platform_id,
        error=error,
    )


def turn_row(row: Row) -> Turn:
    id_, conversation, role, text, event_key, tokens, created, summarized = row
    return Turn(
        conversation=conversation,
        role=role,
        text=text,
        event_key=event_key,
        tokens=tokens,
        created=created,
        summarized=bool(summarized),
        id=id_,
    )


def fact_row(row: Row) -> Fact:
    fact_id, conversation, text, tokens, created, owner, in_dm = row
    return Fact(fact_id, conversation, text, tokens, created, owner, bool(in_dm))


def conversation_row(row: Row) -> ConversationState:
    conversation, persona, summary, summary_tokens, upto, context_from, settings = row
    return ConversationState(
        conversation, persona, summary, summary_tokens, upto, context_from, json.loads(settings)
    )


def dead_letter_row(row: Row) -> DeadLetter:
    key, conversation, event, error, traceback, snapshot, created = row
    return DeadLetter(
        key=key,
        conversation=conversation,
        event=Event.from_json(event),
        error=error,
        traceback=traceback,
        snapshot=json.loads(snapshot),
        created=created,
    )


class _Costed(Protocol):
    """A turn or a fact: what a budget walk counts."""

    @property
    def tokens(self) -> int | None: ...


Costed = TypeVar("Costed", bound=_Costed)


def _first_page(budget: int) -> int:
    return max(16, min(budget // 16, 512))  # about a page of typical turns per read


async def newest_within(
    read_newest: PageReader, decode: Callable[[Row], Costed], budget: int, after_id: int
) -> tuple[list[Costed], int, bool]:
    """Newest-first pages until an item does not fit ``budget``: cost follows the budget.

    The items that fit, oldest first; the tokens they use; whether older ones were left.
    """
    items: list[Costed] = []
    used = 0
    before = MAX_ID
    page = _first_page(budget)
    while True:
        rows = await read_newest(after_id, before, page)
        for row in rows:
            item = decode(row)
            tokens = item.tokens
            assert tokens is not None
            if used + tokens > budget:
                items.reverse()
                return items, used, True
            items.append(item)
            used += tokens
        if len(rows) < page:
            items.reverse()
            return items, used, False
        before = rows[-1][0]
        page = min(page * 2, 2048)


async def oldest_within(
    read_oldest: PageReader, budget: int, after_id: int, before_id: int | None
) -> list[Turn]:
    """Oldest-first pages while turns fit ``budget`` (at least one, however large)."""
    turns: list[Turn] = []
    used = 0
    after = after_id
    before = MAX_ID if before_id is None else before_id
    page = _first_page(budget)
    while True:
        rows = await read_oldest(after, before, page)
        for row in rows:
            turn = turn_row(row)
            assert turn.tokens is not None
            if turns and used + turn.tokens > budget:
                return turns
            turns.append(turn)
            used += turn.tokens
        if len(rows) < page:
            return turns
        after = rows[-1][0]
        page = min(page * 2, 2048)
