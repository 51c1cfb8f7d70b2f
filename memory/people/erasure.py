"""Erasure of a person: every row that holds what they said or what was said to them,
removed or anonymized in one transaction (GDPR Art. 17; ``tether forget``, ``/forgetme``).

What is a person's, for identities ``platform:user`` (the one asked for and every
identity linked with it, :mod:`tether.memory.people`):

- **their events**: inbox rows whose stored event has that platform and sender id;
- **their conversations**: those whose turns they own (``messages.owner``: their DMs and
  their own sessions in groups), and the DMs their events came in;
- **the events of their conversations** (a reminder fired into their DM, a task's turn):
  with their own events, the *erased keys*.

For those: turns (``messages``, and so the full-text index, whose triggers follow),
steps (model outputs, tool results), outbox rows (what the bot said to them), dead
letters, waits and tasks they started or that ran there, reminders they made or that
post there, facts about them or said in their conversations, their conversations' rows
(persona, summary), usage rows of their conversations, cursors named after them, their
pairing rows, their links and link codes, and the files only those outbox rows named.
A shared chat they wrote in loses its running summary (it may quote them); the other
people's turns there stay. Inbox rows are **kept as tombstones** (the key, an empty
event in a conversation named ``erased``): dedup keeps its promise, and a platform's
redelivery of an erased message is still refused, not answered again.

What is left is an :class:`Erased` record: counts per table, no text and no identity,
which the store keeps (``erasures``) and ``tether forget`` prints. On SQLite the
full-text index is optimized afterwards (its segments would otherwise keep the erased
terms until their next merge), and ``tether forget`` vacuums the file so the bytes are
gone from it, not only unreachable (:func:`compact_sqlite`).
"""

from __future__ import annotations

import abc
import hashlib
import json
import sqlite3
import time
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tether.events import Conversation, Event, OutMessage
from tether.memory.sql.statements import FINISH, Statement
from tether.memory.state.data import chat_scope, user_scope

#: The conversation erased inbox rows are moved to.
ERASED = "erased"
#: Values per ``IN (...)`` list: well under both engines' limits on parameters.
_CHUNK = 400


@dataclass(slots=True)
class Erased:
    """What an erasure removed: rows per table (``inbox`` counts tombstoned rows)."""

    identities: int
    rows: dict[str, int] = field(default_factory=dict)
    at: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.rows.values())

    def as_json(self) -> str:
        return json.dumps({"identities": self.identities, "rows": self.rows, "at": self.at})


class ErasureStore(Protocol):
    """Forgetting a person (see the module)."""

    @abc.abstractmethod
    async def erase_person(self, identities: Sequence[str], keep: Sequence[str] = ()) -> Erased:
        """Erase everything of ``identities`` (``platform:user``); ``keep``: event keys
        left alone (the ``/forgetme`` turn that asks, still running)."""


class _Sql(Protocol):
    #: The dialect's SQL for the platform and the sender id of ``inbox.payload``.
    _payload_platform: str
    _payload_sender: str
    #: The dialect's statements run after an erasure (SQLite: optimize the FTS index).
    _after_erasure: tuple[str, ...]

    def _write(self, phase: int, *statements: Statement) -> Awaitable[None]: ...

    async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]: ...


def _chunks(values: Iterable[str]) -> list[list[str]]:
    ordered = sorted(set(values))
    return [ordered[i : i + _CHUNK] for i in range(0, len(ordered), _CHUNK)]


def _marks(values: Sequence[str]) -> str:
    return ", ".join("?" for _ in values)


def tombstone(payload: str) -> str:
    """The stored event of an erased inbox row: its key, platform and kind, nothing else."""
    try:
        event = Event.from_json(payload)
    except ValueError:
        return payload  # not an event we can read: not one of theirs either
    empty = Event(
        key=event.key,
        platform=event.platform,
        kind=event.kind,
        conversation=Conversation(
            platform=event.conversation.platform,
            chat_id=ERASED,
            chat_type=event.conversation.chat_type,
        ),
        timestamp=event.timestamp,
        meta={"erased": True},
    )
    return empty.model_dump_json()


def blobs_named(payload: str) -> set[str]:
    """The blobs an outbox row's message names (its files)."""
    try:
        message = OutMessage.from_json(payload)
    except ValueError:
        return set()
    return {file.blob for file in message.files if file.blob}


def fingerprint(identities: Sequence[str]) -> str:
    """Not the identity: a hash that lets an operator who knows it confirm an erasure
    happened, and lets no one read it back."""
    return hashlib.sha256("\n".join(sorted(identities)).encode()).hexdigest()[:16]


class SqlErasure:
    """:class:`ErasureStore` for both SQL stores."""

    async def erase_person(
        self: _Sql, identities: Sequence[str], keep: Sequence[str] = ()
    ) -> Erased:
        ids = sorted(set(identities))
        erased = Erased(identities=len(ids), at=time.time())
        own_events: set[str] = set()
        dm_conversations: set[str] = set()
        for identity in ids:
            platform, _, user = identity.partition(":")
            rows = await self._rows(
                f"SELECT key, conversation, payload FROM inbox"
                f" WHERE {self._payload_platform} = ? AND {self._payload_sender} = ?",
                (platform, user),
            )
            for key, conversation, payload in rows:
                own_events.add(str(key))
                if _in_dm(str(payload)):
                    dm_conversations.add(str(conversation))
        conversations = set(dm_conversations)
        for chunk in _chunks(ids):
            rows = await self._rows(
                f"SELECT DISTINCT conversation FROM messages WHERE owner IN ({_marks(chunk)})",
                chunk,
            )
            conversations |= {str(row[0]) for row in rows}
        conversations.discard(ERASED)
        keys = set(own_events)
        shared: set[str] = set()
        for chunk in _chunks(conversations):
            rows = await self._rows(
                f"SELECT key FROM inbox WHERE conversation IN ({_marks(chunk)})", chunk
            )
            keys |= {str(row[0]) for row in rows}
        for chunk in _chunks(own_events):
            rows = await self._rows(
                f"SELECT DISTINCT conversation FROM inbox WHERE key IN ({_marks(chunk)})", chunk
            )
            shared |= {str(row[0]) for row in rows}
        shared -= conversations
        keys -= set(keep)

        named: set[str] = set()
        statements: list[tuple[str, Statement]] = []

        def add(table: str, text: str, params: Sequence[Any]) -> None:
            statements.append((table, (text, tuple(params))))

        for chunk in _chunks(keys):
            marks = _marks(chunk)
            for _key, payload in await self._rows(
                f"SELECT key, payload FROM outbox WHERE event_key IN ({marks})", chunk
            ):
                named |= blobs_named(str(payload))
            for key, payload in await self._rows(
                f"SELECT key, payload FROM inbox WHERE key IN ({marks})", chunk
            ):
                add(
                    "inbox",
                    "UPDATE inbox SET payload = ?, conversation = ?, error = NULL,"
                    " status = 'done' WHERE key = ?",
                    (tombstone(str(payload)), ERASED, str(key)),
                )
            add("messages", f"DELETE FROM messages WHERE event_key IN ({marks})", chunk)
            add("steps", f"DELETE FROM steps WHERE event_key IN ({marks})", chunk)
            add("outbox", f"DELETE FROM outbox WHERE event_key IN ({marks})", chunk)
            add("dead_letters", f"DELETE FROM dead_letters WHERE key IN ({marks})", chunk)
            add(
                "inbox_history",
                f"UPDATE inbox_history SET error = NULL WHERE key IN ({marks})",
                chunk,
            )
            add("waits", f"DELETE FROM waits WHERE event_key IN ({marks})", chunk)
            add("tasks", f"DELETE FROM tasks WHERE event_key IN ({marks})", chunk)
            add("usage_calls", f"DELETE FROM usage_calls WHERE event_key IN ({marks})", chunk)
        for chunk in _chunks(conversations):
            marks = _marks(chunk)
            add("messages", f"DELETE FROM messages WHERE conversation IN ({marks})", chunk)
            add("facts", f"DELETE FROM facts WHERE conversation IN ({marks})", chunk)
            add(
                "conversations", f"DELETE FROM conversations WHERE conversation IN ({marks})", chunk
            )
            add("dead_letters", f"DELETE FROM dead_letters WHERE conversation IN ({marks})", chunk)
            add(
                "reminders",
                f"DELETE FROM reminders WHERE conversation IN ({marks}) OR target IN ({marks})",
                [*chunk, *chunk],
            )
            add("waits", f"DELETE FROM waits WHERE conversation IN ({marks})", chunk)
            add("tasks", f"DELETE FROM tasks WHERE parent IN ({marks})", chunk)
            add("usage_calls", f"DELETE FROM usage_calls WHERE conversation IN ({marks})", chunk)
            add("usage", f"DELETE FROM usage WHERE conversation IN ({marks})", chunk)
        for chunk in _chunks(shared):
            add(
                "conversations",
                "UPDATE conversations SET summary = '', summary_tokens = 0"
                f" WHERE conversation IN ({_marks(chunk)}) AND summary <> ''",
                chunk,
            )
        for chunk in _chunks(ids):
            marks = _marks(chunk)
            add("messages", f"DELETE FROM messages WHERE owner IN ({marks})", chunk)
            add("facts", f"DELETE FROM facts WHERE owner IN ({marks})", chunk)
            add("reminders", f"DELETE FROM reminders WHERE sender IN ({marks})", chunk)
            add("waits", f"DELETE FROM waits WHERE sender IN ({marks})", chunk)
            add(
                "waits",
                f"UPDATE waits SET answered_by = '{ERASED}' WHERE answered_by IN ({marks})",
                chunk,
            )
            add(
                "tasks",
                f"DELETE FROM tasks WHERE sender IN ({marks}) OR started_by IN ({marks})",
                [*chunk, *chunk],
            )
            add("pairings", f"DELETE FROM pairings WHERE user_id IN ({marks})", chunk)
            add("people", f"DELETE FROM people WHERE identity IN ({marks})", chunk)
            add("link_codes", f"DELETE FROM link_codes WHERE identity IN ({marks})", chunk)
        for identity in ids:
            platform, _, user = identity.partition(":")
            add(
                "pairings",
                "DELETE FROM pairings WHERE platform = ? AND user_id = ?",
                (platform, user),
            )
        scopes = [user_scope(i) for i in ids] + [chat_scope(c) for c in sorted(conversations)]
        for chunk in _chunks(scopes):  # handler state (memory/state): theirs, their chats'
            add(
                "handler_state",
                f"DELETE FROM handler_state WHERE scope IN ({_marks(chunk)})",
                chunk,
            )
        cursors = [str(row[0]) for row in await self._rows("SELECT name FROM cursors")]
        gone = [name for name in cursors if any(name.endswith(c) for c in conversations)]
        for chunk in _chunks(gone):
            add("cursors", f"DELETE FROM cursors WHERE name IN ({_marks(chunk)})", chunk)

        tables = sorted({table for table, _ in statements} | {"blobs"})
        before = await _sizes(self, tables)
        await self._write(FINISH, *(statement for _table, statement in statements))
        # files only the erased replies named (content-addressed: another reply may share one)
        for key in sorted(named):
            if not await self._rows(
                "SELECT 1 FROM outbox WHERE payload LIKE ? LIMIT 1", (f"%{key}%",)
            ):
                await self._write(FINISH, ("DELETE FROM blobs WHERE sha256 = ?", (key,)))
        after = await _sizes(self, tables)
        counts = {table: max(0, before[table] - after[table]) for table in tables}
        counts["inbox"] = sum(1 for table, _ in statements if table == "inbox")
        erased.rows = {table: n for table, n in counts.items() if n}
        await self._write(
            FINISH,
            *((text, ()) for text in self._after_erasure),
            (
                "INSERT INTO erasures (at, fingerprint, identities, counts) VALUES (?, ?, ?, ?)",
                (erased.at, fingerprint(ids), len(ids), json.dumps(erased.rows)),
            ),
        )
        return erased


def _in_dm(payload: str) -> bool:
    try:
        return Event.from_json(payload).conversation.chat_type == "dm"
    except ValueError:
        return False


async def _sizes(store: _Sql, tables: Sequence[str]) -> dict[str, int]:
    """Rows per table: read before and after the erasure's write for its report (the
    writer's batches return no row counts, and statements overlap: a turn may be both
    an erased event's and in an erased conversation)."""
    sizes = {}
    for table in tables:
        sizes[table] = int((await store._rows(f"SELECT count(*) FROM {table}"))[0][0])
    return sizes


def compact_sqlite(path: str) -> None:
    """Make erased bytes unreadable in the file itself: the WAL checkpointed into it and
    truncated, then the file rewritten (``VACUUM``), so no free page keeps them. Runs on
    a connection of its own (beside a running gateway it waits for the writer's lock)."""
    db = sqlite3.connect(path, timeout=60)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
