"""The statements both SQL stores run, written once.

Texts use ``?`` placeholders (SQLite's); the PostgreSQL store numbers them ``$1, $2, ...``
with :func:`numbered`, once per text. Only SQL that both dialects run alike is here:
``ON CONFLICT`` upserts (SQLite has them since 3.24), ``coalesce``, ``substr``. What one
dialect says its own way — the DDL, a column or an index only one schema has — lives
in that dialect's package.

Phases: every write belongs to one transition of an event, in this order. SQLite's
group commit sorts a batch by phase (a write may depend on an earlier phase's rows in
the same batch, never on a later one's); so does PostgreSQL's (memory/postgres/batch.py).
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Sequence
from typing import Any

from tether.memory.records import MemoryChanges, TaskEnd, Turn
from tether.memory.sql.rows import (
    CONVERSATION_COLUMNS,
    DEAD_COLUMNS,
    FACT_COLUMNS,
    INBOX_COLUMNS,
    OUTBOX_COLUMNS,
    PAIRING_COLUMNS,
    TURN_COLUMNS,
    USAGE_COLUMNS,
)

ACCEPT, BEGIN, STEP, FINISH, OUTBOX = range(5)

#: One statement and its parameters.
Statement = tuple[str, Sequence[Any]]

# The WHERE of the partial indexes on unfinished work: spelled exactly so, or SQLite's
# planner does not see that a query's rows are all in the index.
IS_UNFINISHED = "status IN ('received', 'running', 'retry_wait')"
IS_UNSENT = "status IN ('pending', 'sending', 'retry_wait')"

# -- inbox --------------------------------------------------------------------------

UNFINISHED = f"SELECT {INBOX_COLUMNS} FROM inbox WHERE {IS_UNFINISHED} ORDER BY seq"
LANE = f"SELECT {INBOX_COLUMNS} FROM inbox WHERE {IS_UNFINISHED} AND conversation = ? ORDER BY seq"
BUSY_CONVERSATIONS = f"SELECT DISTINCT conversation FROM inbox WHERE {IS_UNFINISHED}"
PENDING = (
    f"SELECT {INBOX_COLUMNS} FROM inbox WHERE status = 'received' AND updated < ? ORDER BY seq"
)
INBOX_ROW = f"SELECT {INBOX_COLUMNS} FROM inbox WHERE key = ?"
#: ``(attempts, now, key)``: the store keeps this order (SQLite reads the attempts back).
RUNNING = "UPDATE inbox SET status = 'running', attempts = ?, updated = ? WHERE key = ?"
#: ``(attempts or None, now, key)``: None keeps the attempts the 'running' mark set.
FINISHED = (
    "UPDATE inbox SET status = 'done', attempts = coalesce(?, attempts),"
    " error = NULL, retry_at = NULL, updated = ? WHERE key = ?"
)
RETRY = "UPDATE inbox SET status = 'retry_wait', retry_at = ?, error = ?, updated = ? WHERE key = ?"
BURIED = "UPDATE inbox SET status = 'dead', error = ?, retry_at = NULL, updated = ? WHERE key = ?"
DEAD_LETTER_SAVED = (
    f"INSERT INTO dead_letters ({DEAD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (key) DO UPDATE SET conversation = excluded.conversation,"
    " event = excluded.event, error = excluded.error, traceback = excluded.traceback,"
    " snapshot = excluded.snapshot, created = excluded.created"
)
DEAD_LETTERS = f"SELECT {DEAD_COLUMNS} FROM dead_letters ORDER BY created"
DEAD_LETTER = f"SELECT {DEAD_COLUMNS} FROM dead_letters WHERE key = ?"
#: Events ``tether dead retry`` sends round again: dead ones, and those waiting to retry.
REQUEUEABLE = "status IN ('dead', 'retry_wait')"
REQUEUEABLE_EVENT = f"SELECT 1 FROM inbox WHERE key = ? AND {REQUEUEABLE}"
EVENT_REQUEUED = (
    "UPDATE inbox SET status = 'received', attempts = 0, retry_at = NULL,"
    f" updated = ? WHERE key = ? AND {REQUEUEABLE}"
)
DEAD_LETTER_DROPPED = "DELETE FROM dead_letters WHERE key = ?"
DEAD_REPLY = "SELECT 1 FROM outbox WHERE key = ? AND status IN ('dead', 'unknown')"
REPLY_REQUEUED = (
    "UPDATE outbox SET status = 'pending', attempts = 0, next_at = NULL,"
    " updated = ? WHERE key = ? AND status IN ('dead', 'unknown')"
)

# -- steps --------------------------------------------------------------------------

STEP_RESULT = "SELECT result FROM steps WHERE event_key = ? AND name = ?"
STEP_SAVED = (
    "INSERT INTO steps (event_key, name, result, created) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (event_key, name) DO UPDATE"
    " SET result = excluded.result, created = excluded.created"
)
STEP_RESULTS = "SELECT name, result FROM steps WHERE event_key = ?"

# -- outbox -------------------------------------------------------------------------

UNSENT = f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE {IS_UNSENT} ORDER BY seq"
UNSENT_KEYS = f"SELECT key FROM outbox WHERE {IS_UNSENT} ORDER BY seq"
OUTBOX_ROWS = f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE event_key = ? ORDER BY seq"
#: ``(status, attempts, next_at, platform_id, error, now, key)``; None keeps attempts and id.
OUTBOX_MARKED = (
    "UPDATE outbox SET status = ?, attempts = coalesce(?, attempts), next_at = ?,"
    " platform_id = coalesce(?, platform_id), error = ?, updated = ? WHERE key = ?"
)

# -- conversation memory ------------------------------------------------------------

HISTORY = f"SELECT {TURN_COLUMNS} FROM messages WHERE conversation = ? ORDER BY id DESC LIMIT ?"
LAST_MESSAGE_ID = "SELECT coalesce(max(id), 0) FROM messages WHERE conversation = ?"
CONVERSATION = f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE conversation = ?"


def facts_query(owners: int, newest: bool, in_dm: bool) -> str:
    """The facts one turn sees: the chat's (said here, about no one) and those about any of
    ``owners`` identities (the person writing, wherever they said them; those said in a
    DM only when ``in_dm``, a turn in a DM); ``newest``: a page of them newest first
    (``id > ? AND id < ? LIMIT ?``), for the budget's walk."""
    private = "" if in_dm else " AND in_dm = 0"
    marks = ", ".join("?" for _ in range(owners))
    mine = f" OR (owner IN ({marks}){private})" if owners else ""
    seen = f"(conversation = ? AND owner IS NULL{mine}) AND retired IS NULL"
    if newest:
        page = "AND id > ? AND id < ? ORDER BY id DESC LIMIT ?"
        return f"SELECT {FACT_COLUMNS} FROM facts WHERE {seen} {page}"
    return f"SELECT {FACT_COLUMNS} FROM facts WHERE {seen} ORDER BY id"


USAGE = f"SELECT {USAGE_COLUMNS} FROM usage WHERE conversation = ? AND day >= ? ORDER BY day, model"
TURNS_AFTER = (
    f"SELECT {TURN_COLUMNS} FROM messages WHERE conversation = ? AND id > ? AND id <= ? ORDER BY id"
)
NEWEST_MESSAGES = "SELECT conversation, max(id) FROM messages GROUP BY conversation"


def unsummarized_pages(messages: str) -> tuple[str, str]:
    """The newest-first and oldest-first page reads of unsummarized turns, both
    ``(conversation, after_id, before_id, limit)``; ``messages`` is the table as the
    dialect names it (SQLite's planner is told which index to use)."""
    where = f"FROM {messages} WHERE conversation = ? AND summarized = 0 AND id > ? AND id < ?"
    return (
        f"SELECT {TURN_COLUMNS} {where} ORDER BY id DESC LIMIT ?",
        f"SELECT {TURN_COLUMNS} {where} ORDER BY id LIMIT ?",
    )


MESSAGE_SAVED = (
    "INSERT INTO messages (conversation, role, text, tokens, event_key, position,"
    " created, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)


#: Ends a running task: a task event's checkpoint (:class:`TaskEnd`), or a cancel.
TASK_ENDED = (
    "UPDATE tasks SET status = ?, result = ?, updated = ? WHERE id = ? AND status = 'running'"
)


def end_statement(end: TaskEnd, now: float) -> Statement:
    return (TASK_ENDED, (end.status, end.result, now, end.id))


def turns_and_memory(
    key: str, turns: Sequence[Turn], changes: MemoryChanges | None, now: float
) -> list[Statement]:
    """A checkpoint's history rows and its other memory changes, each write idempotent
    and none depending on another's order (both stores group statements by shape).

    Usage totals are the ``usage_calls_sum`` trigger's work, in either schema: a call
    counts once, when its ``usage_calls`` row is first inserted.
    """
    out: list[Statement] = [
        (
            MESSAGE_SAVED,
            (turn.conversation, turn.role, turn.text, turn.tokens, key, position, now, turn.owner),
        )
        for position, turn in enumerate(turns)
    ]
    if not changes:
        return out
    position = 0  # facts are unique by (event key, position) across conversations
    for part in (changes, *changes.elsewhere):
        out += _memory(key, part, now, position)
        position += len(part.facts) + len(part.person_facts)
    out += [(CURSOR_SET, (name, value, now)) for name, value in changes.cursors.items()]
    out += state_statements(changes.handler_state, now)
    if changes.task is not None:
        out.append(end_statement(changes.task, now))
    return out


STATE_SET = (
    "INSERT INTO handler_state (scope, name, value, updated) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (scope, name) DO UPDATE SET value = excluded.value, updated = excluded.updated"
)
STATE_UNSET = "DELETE FROM handler_state WHERE scope = ? AND name = ?"


def state_statements(changes: Sequence[tuple[str, str, str | None]], now: float) -> list[Statement]:
    """A checkpoint's writes of handler state (:mod:`tether.memory.state`): a key's new
    JSON value, or its removal."""
    return [
        (STATE_UNSET, (scope, name)) if value is None else (STATE_SET, (scope, name, value, now))
        for scope, name, value in changes
    ]


def _memory(key: str, changes: MemoryChanges, now: float, first: int) -> list[Statement]:
    """One conversation's part of a checkpoint; its facts numbered from ``first``."""
    out: list[Statement] = []
    conversation = changes.conversation
    if changes.state is not None:
        state = changes.state
        out.append(
            (
                f"INSERT INTO conversations ({CONVERSATION_COLUMNS}, updated)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (conversation) DO UPDATE SET persona = excluded.persona,"
                " summary = excluded.summary, summary_tokens = excluded.summary_tokens,"
                " summarized_upto = excluded.summarized_upto,"
                " context_from = excluded.context_from, settings = excluded.settings,"
                " updated = excluded.updated",
                (
                    conversation,
                    state.persona,
                    state.summary,
                    state.summary_tokens,
                    state.summarized_upto,
                    state.context_from,
                    json.dumps(state.settings),
                    now,
                ),
            )
        )
    new = [(text, tokens, None, False) for text, tokens in changes.facts]
    for position, (text, tokens, owner, in_dm) in enumerate(
        [*new, *changes.person_facts], start=first
    ):
        out.append(
            (
                "INSERT INTO facts (conversation, text, tokens, event_key, position, created,"
                " owner, in_dm) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (conversation, text, tokens, key, position, now, owner, int(in_dm)),
            )
        )
    for fact_id in changes.forget:
        out.append(("DELETE FROM facts WHERE id = ? AND conversation = ?", (fact_id, conversation)))
    for fact_id, owner in changes.forget_owned:
        out.append(("DELETE FROM facts WHERE id = ? AND owner = ?", (fact_id, owner)))
    for fact_id in changes.retire:
        out.append(
            (
                "UPDATE facts SET retired = ?"
                " WHERE id = ? AND conversation = ? AND retired IS NULL",
                (now, fact_id, conversation),
            )
        )
    if changes.summarized is not None:
        first, last = changes.summarized
        out.append(
            (
                "UPDATE messages SET summarized = 1"
                " WHERE conversation = ? AND summarized = 0 AND id BETWEEN ? AND ?",
                (conversation, first, last),
            )
        )
    for call in changes.usage:
        out.append(
            (
                "INSERT INTO usage_calls (event_key, name, conversation, model, day,"
                " prompt_tokens, completion_tokens, cost, created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (
                    key,
                    call.name,
                    conversation,
                    call.model,
                    call.day,
                    call.prompt_tokens,
                    call.completion_tokens,
                    call.cost,
                    now,
                ),
            )
        )
    return out


# -- cursors ------------------------------------------------------------------------

CURSOR = "SELECT value FROM cursors WHERE name = ?"
CURSOR_SET = (
    "INSERT INTO cursors (name, value, updated) VALUES (?, ?, ?)"
    " ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated = excluded.updated"
)
#: ``(prefix, prefix, since)``.
RECENT_CURSORS = (
    "SELECT name, value FROM cursors"
    " WHERE substr(name, 1, length(?)) = ? AND updated >= ? ORDER BY name"
)

# -- pairing ------------------------------------------------------------------------

PAIRING = f"SELECT {PAIRING_COLUMNS} FROM pairings WHERE platform = ? AND user_id = ?"
PAIRING_BY_CODE = f"SELECT {PAIRING_COLUMNS} FROM pairings WHERE code = ?"
PAIRINGS = f"SELECT {PAIRING_COLUMNS} FROM pairings ORDER BY created"
PAIRING_REQUESTED = (
    f"INSERT INTO pairings ({PAIRING_COLUMNS}) VALUES (?, ?, ?, ?, 'pending', ?, ?)"
    " ON CONFLICT DO NOTHING"
)
PAIRING_APPROVED = "UPDATE pairings SET status = 'approved', updated = ? WHERE code = ?"
PAIRING_REVOKED = "DELETE FROM pairings WHERE platform = ? AND user_id = ?"

# -- reports ------------------------------------------------------------------------

INBOX_COUNTS = "SELECT status, count(*) FROM inbox GROUP BY status"
OUTBOX_COUNTS = "SELECT status, count(*) FROM outbox GROUP BY status"
SPEND = (
    "SELECT model, sum(prompt_tokens + completion_tokens), sum(cost) FROM usage"
    " WHERE day >= ? GROUP BY model ORDER BY model"
)
SPEND_BY_CONVERSATION = (
    "SELECT conversation, sum(prompt_tokens + completion_tokens), sum(cost) FROM usage"
    " WHERE day >= ? GROUP BY conversation ORDER BY conversation"
)
LAST_SENT = "SELECT platform, max(updated) FROM outbox WHERE status = 'sent' GROUP BY platform"


def last_received(platform_of_conversation: str) -> str:
    """When each platform's newest event came in; the dialect says how a conversation
    key's platform prefix (``telegram:...``) is cut off."""
    return f"SELECT {platform_of_conversation}, max(created) FROM inbox GROUP BY 1"


@functools.cache
def numbered(text: str) -> str:
    """``?`` placeholders as PostgreSQL's ``$1, $2, ...`` (no text here has a literal ``?``)."""
    counter = itertools.count(1)
    return re.sub(r"\?", lambda _: f"${next(counter)}", text)
