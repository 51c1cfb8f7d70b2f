"""The web console's reads and fact edits, for both SQL stores (a mixin of
:class:`~tether.memory.sql.store.SqlStore`).

Everything here is SQL both dialects run alike, except how a timestamp falls into a
time bucket: ``_bucket`` is the dialect's expression (SQLite truncates with ``CAST``;
PostgreSQL's ``CAST`` to an integer would round, so it says ``floor``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from tether.events import Event, OutMessage
from tether.memory.console import (
    ChatLine,
    ConversationInfo,
    EventInfo,
    Moved,
    SendInfo,
    StepInfo,
    Timeline,
    empty_series,
    like_pattern,
)
from tether.memory.records import DeadLetter, Fact
from tether.memory.sql import statements as sql
from tether.memory.sql.rows import FACT_COLUMNS, Row, fact_row

_EVENT_COLUMNS = "key, conversation, payload, status, attempts, error, created, updated"
_FIND = (
    f"SELECT {_EVENT_COLUMNS} FROM inbox"
    " WHERE (? = '' OR key LIKE ? ESCAPE '\\') AND (? = '' OR conversation LIKE ? ESCAPE '\\')"
    " AND (? = '' OR status = ?) ORDER BY seq DESC LIMIT ?"
)
_EVENT = f"SELECT {_EVENT_COLUMNS} FROM inbox WHERE key = ?"
_STEPS = "SELECT name, result, created FROM steps WHERE event_key = ? ORDER BY created, name"
_USAGE = (
    "SELECT name, model, prompt_tokens + completion_tokens, cost, created FROM usage_calls"
    " WHERE event_key = ? ORDER BY created, name"
)
_MOVES = (
    "SELECT status, before, attempts, error, retry_at, at FROM inbox_history"
    " WHERE key = ? ORDER BY at, seq"
)
_SENDS = (
    "SELECT key, payload, status, attempts, platform_id, error, created, updated"
    " FROM outbox WHERE event_key = ? ORDER BY seq"
)
_CONVERSATIONS = (
    "SELECT conversation, count(*), max(created) FROM inbox"
    " GROUP BY conversation ORDER BY 3 DESC LIMIT ?"
)
_CHAT_EVENTS = (
    "SELECT seq, key, payload, created FROM inbox WHERE conversation = ? ORDER BY seq DESC LIMIT ?"
)
_CHAT_REPLIES = (
    "SELECT o.seq, o.key, o.payload, o.updated FROM outbox o JOIN inbox i ON i.key = o.event_key"
    " WHERE i.conversation = ? AND i.seq >= ? AND o.status = 'sent' ORDER BY o.seq"
)
_FAILED_SENDS = (
    "SELECT key, payload, status, attempts, platform_id, error, created, updated"
    " FROM outbox WHERE status IN ('dead', 'unknown') ORDER BY seq DESC LIMIT ?"
)
_FACTS_SAID = (
    f"SELECT {FACT_COLUMNS} FROM facts WHERE conversation = ? AND retired IS NULL ORDER BY id"
)
_FACT = "SELECT 1 FROM facts WHERE id = ? AND conversation = ? AND retired IS NULL"
_FACT_EDITED = (
    "UPDATE facts SET text = ?, tokens = ? WHERE id = ? AND conversation = ? AND retired IS NULL"
)
_FACT_FORGOTTEN = "DELETE FROM facts WHERE id = ? AND conversation = ?"


def _series_queries(bucket: str) -> dict[str, str]:
    """Per series, ``(since, bucket seconds, since)`` → rows of (bucket index, value[, value])."""

    def at(column: str) -> str:
        return bucket.format(column=column)

    return {
        "received": f"SELECT {at('created')}, count(*) FROM inbox WHERE created >= ? GROUP BY 1",
        "replies": f"SELECT {at('updated')}, count(*) FROM outbox"
        " WHERE status = 'sent' AND updated >= ? GROUP BY 1",
        "retried": f"SELECT {at('created')}, count(*) FROM inbox"
        " WHERE attempts > 1 AND created >= ? GROUP BY 1",
        "dead": f"SELECT {at('updated')}, count(*) FROM inbox"
        " WHERE status = 'dead' AND updated >= ? GROUP BY 1",
        "tokens": f"SELECT {at('created')}, sum(prompt_tokens + completion_tokens), sum(cost)"
        " FROM usage_calls WHERE created >= ? GROUP BY 1",
    }


class ConsoleSql:
    """:class:`~tether.memory.operator.ConsoleStore` over ``_rows`` and ``_write``."""

    #: How a timestamp column falls into a bucket: ``(column - since) / bucket``, truncated.
    _bucket = "CAST(({column} - ?) / ? AS INTEGER)"

    # Declared, not defined: the store's own (SqlStore) are found first.
    _rows: Callable[..., Awaitable[list[Row]]]
    _write: Callable[..., Awaitable[None]]
    dead_letter: Callable[[str], Awaitable[DeadLetter | None]]

    async def series(self, since: float, bucket: float, count: int) -> dict[str, list[float]]:
        out = empty_series(count)
        for name, text in _series_queries(self._bucket).items():
            for row in await self._rows(text, (float(since), float(bucket), float(since))):
                index = int(row[0])
                if 0 <= index < count:
                    out[name][index] += float(row[1] or 0)
                    if name == "tokens":
                        out["cost"][index] += float(row[2] or 0)
        return out

    async def find_events(
        self, *, key: str = "", conversation: str = "", status: str = "", limit: int = 50
    ) -> list[EventInfo]:
        params = (
            key,
            like_pattern(key),
            conversation,
            like_pattern(conversation),
            status,
            status,
            limit,
        )
        return [_event_info(row) for row in await self._rows(_FIND, params)]

    async def timeline(self, key: str) -> Timeline | None:
        rows = await self._rows(_EVENT, (key,))
        if not rows:
            return None
        steps = [
            StepInfo(str(name), float(created), str(result))
            for name, result, created in await self._rows(_STEPS, (key,))
        ]
        usage = [
            (str(name), str(model), int(tokens), float(cost), float(created))
            for name, model, tokens, cost, created in await self._rows(_USAGE, (key,))
        ]
        sends = [_send_info(row) for row in await self._rows(_SENDS, (key,))]
        dead = await self.dead_letter(key)
        moves = [
            Moved(str(status), str(before), int(attempts), error, retry_at, float(at))
            for status, before, attempts, error, retry_at, at in await self._rows(_MOVES, (key,))
        ]
        return Timeline(_event_info(rows[0]), steps, usage, sends, dead, moves)

    async def conversation_list(self, limit: int = 100) -> list[ConversationInfo]:
        rows = await self._rows(_CONVERSATIONS, (limit,))
        return [ConversationInfo(str(c), int(n), float(last)) for c, n, last in rows]

    async def chat_log(self, conversation: str, limit: int = 200) -> list[ChatLine]:
        events = await self._rows(_CHAT_EVENTS, (conversation, limit))
        if not events:
            return []
        first = min(int(row[0]) for row in events)
        lines = [
            ChatLine(int(seq), str(key), "user", Event.from_json(payload).text, float(created))
            for seq, key, payload, created in events
        ]
        replies = await self._rows(_CHAT_REPLIES, (conversation, first))
        lines += [
            ChatLine(int(seq), str(key), "agent", OutMessage.from_json(payload).text, float(at))
            for seq, key, payload, at in replies
        ]
        return sorted(lines, key=lambda line: (line.at, line.role != "user", line.seq))

    async def failed_sends(self, limit: int = 100) -> list[SendInfo]:
        return [_send_info(row) for row in await self._rows(_FAILED_SENDS, (limit,))]

    async def facts_said(self, conversation: str) -> list[Fact]:
        return [fact_row(row) for row in await self._rows(_FACTS_SAID, (conversation,))]

    async def edit_fact(self, conversation: str, fact_id: int, text: str, tokens: int) -> bool:
        if not await self._rows(_FACT, (fact_id, conversation)):
            return False
        await self._write(sql.FINISH, (_FACT_EDITED, (text, tokens, fact_id, conversation)))
        return True

    async def forget_fact(self, conversation: str, fact_id: int) -> bool:
        if not await self._rows(_FACT, (fact_id, conversation)):
            return False
        await self._write(sql.FINISH, (_FACT_FORGOTTEN, (fact_id, conversation)))
        return True


def _event_info(row: Row) -> EventInfo:
    key, conversation, payload, status, attempts, error, created, updated = row
    return EventInfo(
        key=str(key),
        conversation=str(conversation),
        event=Event.from_json(payload),
        status=status,
        attempts=int(attempts),
        error=error,
        created=float(created),
        updated=float(updated),
    )


def _send_info(row: Row) -> SendInfo:
    key, payload, status, attempts, platform_id, error, created, updated = row
    try:
        text = OutMessage.from_json(payload).text
    except ValueError:
        text = str(json.loads(payload).get("text", ""))
    return SendInfo(
        str(key),
        text,
        str(status),
        int(attempts),
        platform_id,
        error,
        float(created),
        float(updated),
    )
