"""What an export holds: the rows of a person, or of one conversation, read from any
store (``tether export``, ``/export``; GDPR Art. 15 and 20). How they are written is
:mod:`.archive`.

A person is their identity and every identity linked with it (:mod:`.links`). What is
theirs is found the way the erasure finds it (:mod:`.erasure`), so an export holds what
``tether forget`` would remove:

- **their conversations**, every turn: those whose turns they own (``messages.owner``:
  their DMs, their own sessions in groups) and the DMs their events came in;
- in a chat they **share** with others (``group_sessions: shared``), the turns of their
  own events only: what they said and what the bot answered them there. Another
  person's turns, and another person's DM, are never in it;
- the **facts** about them, wherever said, and the chat's facts said in their
  conversations; the **reminders** they made or that post into their conversations;
- the **files** of the replies in their conversations and to their own events (the
  reply blobs, with their bytes). An export sent with ``/export`` is itself such a
  file; it is left out of the next one (:data:`EXPORT_PREFIX`), or each export would
  hold all the earlier ones;
- the **attachments** they sent, as the platform described them (kind, name, type,
  size): Tether keeps no bytes of an inbound file (a handler downloads one when it
  needs it), so there are none to give.

A conversation's export (the operator's) holds every turn, fact, reminder, reply file
and attachment of that conversation, whoever wrote them; a group's holds each person's
own session in it too (``agent.group_sessions: per_user`` keeps them as conversations
``{group}:u{user}``, :meth:`~tether.events.Event.session`), as the operator asking for
the group means the whole of it.

Which conversations and events are the person's needs a query that no store role
answers (events by sender, conversations by owner); it is the one part written per
store: SQL on both SQL stores (as the erasure's), and a scan of the in-memory store's
tables (which has no erasure: nothing of it outlives the process, but a running bot
on it has a person's data to give). The rest is read through the store's roles.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tether.events import Attachment, Event, OutMessage
from tether.files import OutFile
from tether.keys import sender_name
from tether.memory.inmemory.store import MemoryStore
from tether.memory.people.erasure import ERASED
from tether.memory.records import Fact, Turn
from tether.memory.reminders import Reminder
from tether.memory.sql.store import SqlStore
from tether.memory.store import Store

#: The name of the zip ``/export`` sends starts so (gateway/builtin/export.py); a reply
#: file named so is not exported again.
EXPORT_PREFIX = "tether-export-"
_CHUNK = 400
#: What follows a group's key in a person's own session of it (``Event.session``).
SESSION = ":u"


@dataclass(frozen=True, slots=True)
class Subject:
    """Whose export: a person's ``identities`` (the one asked for first), or one
    ``conversation``."""

    identities: tuple[str, ...] = ()
    conversation: str | None = None

    @property
    def name(self) -> str:
        return self.conversation or (self.identities[0] if self.identities else "")

    def as_json(self) -> dict[str, Any]:
        if self.conversation is not None:
            return {"kind": "conversation", "conversation": self.conversation}
        return {"kind": "person", "identities": list(self.identities)}


@dataclass(frozen=True, slots=True)
class ReplyFile:
    """A file of one of the bot's replies, and where it was sent."""

    conversation: str
    event: str
    file: OutFile


@dataclass(frozen=True, slots=True)
class Sent:
    """An attachment a person sent (its platform's description, no bytes)."""

    conversation: str
    event: str
    #: ``platform:user``; None for an event without a sender.
    sender: str | None
    created: float
    attachment: Attachment


@dataclass(slots=True)
class Export:
    """Every row of an export, each list oldest first."""

    subject: Subject
    turns: list[Turn] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    reminders: list[Reminder] = field(default_factory=list)
    files: list[ReplyFile] = field(default_factory=list)
    attachments: list[Sent] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {
            "turn": len(self.turns),
            "fact": len(self.facts),
            "reminder": len(self.reminders),
            "file": len(self.files),
            "attachment": len(self.attachments),
        }


@dataclass(slots=True)
class _Found:
    #: Conversations exported whole.
    whole: set[str] = field(default_factory=set)
    #: The person's own event keys (their turns in a shared chat).
    own: set[str] = field(default_factory=set)
    #: Every exported event: key → (conversation, the event if it reads).
    events: dict[str, tuple[str, Event | None]] = field(default_factory=dict)


async def read_export(store: Store, subject: Subject) -> Export:
    """Every row of ``subject`` in ``store`` (see the module)."""
    found = await _found(store, subject)
    person = set(subject.identities)
    export = Export(subject)
    shared = {conversation for key, (conversation, _e) in found.events.items() if key in found.own}
    for conversation in sorted(found.whole | shared):
        turns = await all_turns(store, conversation)
        if conversation not in found.whole:
            turns = [turn for turn in turns if turn.event_key in found.own]
        export.turns += turns
    export.turns.sort(key=lambda turn: turn.id)
    export.facts = await _facts(store, found.whole, subject.identities)
    export.reminders = [
        r
        for r in await store.reminders(active=False)
        if r.sender in person or r.conversation in found.whole or r.target in found.whole
    ]
    for key, message in await _replies(store, sorted(found.events)):
        where = found.events[key][0]
        export.files += [
            ReplyFile(where, key, file)
            for file in message.files
            if not file.name.startswith(EXPORT_PREFIX)
        ]
    for key, (conversation, event) in sorted(found.events.items()):
        if event is None or not event.attachments:
            continue
        who = sender_name(event) if event.sender is not None else None
        if subject.conversation is None and who not in person:
            continue
        created = event.timestamp.timestamp()
        export.attachments += [
            Sent(conversation, key, who, created, attachment) for attachment in event.attachments
        ]
    export.attachments.sort(key=lambda sent: (sent.created, sent.event))
    return export


async def all_turns(store: Store, conversation: str) -> list[Turn]:
    """Every turn of ``conversation``, summarized, archived (``/reset``) or not."""
    newest = await store.last_message_id(conversation)
    return await store.turns_after(conversation, 0, newest) if newest else []


async def _facts(
    store: Store, conversations: Iterable[str], identities: Sequence[str]
) -> list[Fact]:
    """The facts about ``identities`` and those said in ``conversations`` (a person's:
    the chat's and theirs, never one about someone else)."""
    facts = {f.id: f for f in await store.facts("", None, identities)} if identities else {}
    for conversation in conversations:
        for fact in await store.facts_said(conversation):
            if not identities or fact.owner is None or fact.owner in identities:
                facts.setdefault(fact.id, fact)
    return sorted(facts.values(), key=lambda fact: fact.id)


# -- finding the rows: the part written per store ----------------------------------------


def exportable(store: object) -> Store | None:
    """``store`` if it can say whose rows are whose (every store of Tether's), else None."""
    return store if isinstance(store, SqlStore | MemoryStore) else None


async def _found(store: Store, subject: Subject) -> _Found:
    if isinstance(store, SqlStore):
        return await _sql_found(store, subject)
    if isinstance(store, MemoryStore):
        return _memory_found(store, subject)
    raise TypeError(f"{type(store).__name__} cannot say whose rows are whose: no export")


async def _replies(store: Store, keys: Sequence[str]) -> list[tuple[str, OutMessage]]:
    """The messages the bot sent for ``keys``, by event key and outbox order."""
    if isinstance(store, SqlStore):
        found: list[tuple[str, OutMessage]] = []
        for chunk in _chunks(keys):
            rows = await store._rows(
                f"SELECT event_key, payload FROM outbox WHERE event_key IN ({_marks(chunk)})"
                " ORDER BY event_key, seq",
                chunk,
            )
            for key, payload in rows:
                message = _message(str(payload))
                if message is not None:
                    found.append((str(key), message))
        return found
    return [(key, row.message) for key in keys for row in await store.outbox_rows(key)]


class _SqlFinder(Protocol):
    _payload_platform: str
    _payload_sender: str

    async def _rows(self, text: str, params: Sequence[Any] = ()) -> Sequence[Sequence[Any]]: ...


async def _sql_found(store: _SqlFinder, subject: Subject) -> _Found:
    found = _Found()
    if subject.conversation is not None:
        group, sessions = subject.conversation, session_pattern(subject.conversation)
        where = "conversation = ? OR conversation LIKE ? ESCAPE '\\'"
        rows = await store._rows(
            f"SELECT key, conversation, payload FROM inbox WHERE {where}", (group, sessions)
        )
        found.events = {str(k): (str(c), _event(str(p))) for k, c, p in rows}
        said = await store._rows(
            f"SELECT DISTINCT conversation FROM messages WHERE {where}", (group, sessions)
        )
        found.whole = {group, *(c for c, _ in found.events.values()), *(str(r[0]) for r in said)}
        return found
    for identity in subject.identities:
        platform, _, user = identity.partition(":")
        rows = await store._rows(
            f"SELECT key, conversation, payload FROM inbox"
            f" WHERE {store._payload_platform} = ? AND {store._payload_sender} = ?",
            (platform, user),
        )
        for key, conversation, payload in rows:
            event = _event(str(payload))
            found.own.add(str(key))
            found.events[str(key)] = (str(conversation), event)
            if event is not None and event.conversation.chat_type == "dm":
                found.whole.add(str(conversation))
    for chunk in _chunks(subject.identities):
        rows = await store._rows(
            f"SELECT DISTINCT conversation FROM messages WHERE owner IN ({_marks(chunk)})", chunk
        )
        found.whole |= {str(row[0]) for row in rows}
    found.whole.discard(ERASED)
    for chunk in _chunks(found.whole):
        rows = await store._rows(
            f"SELECT key, conversation, payload FROM inbox WHERE conversation IN ({_marks(chunk)})",
            chunk,
        )
        for key, conversation, payload in rows:
            found.events.setdefault(str(key), (str(conversation), _event(str(payload))))
    return found


def _memory_found(store: MemoryStore, subject: Subject) -> _Found:
    """The same finding over the in-memory store's own tables."""
    found = _Found()
    rows = list(store._inbox.values())
    if subject.conversation is not None:
        group = subject.conversation
        found.whole = {
            c
            for c in {*(row.conversation for row in rows), *store._turns}
            if c == group or c.startswith(group + SESSION)
        } | {group}
    else:
        person = set(subject.identities)
        for row in rows:
            if row.event.sender is not None and sender_name(row.event) in person:
                found.own.add(row.key)
                if row.event.conversation.chat_type == "dm":
                    found.whole.add(row.conversation)
        for conversation, turns in store._turns.items():
            if any(turn.owner in person for turn in turns):
                found.whole.add(conversation)
        found.whole.discard(ERASED)
    for row in rows:
        if row.key in found.own or row.conversation in found.whole:
            found.events[row.key] = (row.conversation, row.event)
    return found


def session_pattern(conversation: str) -> str:
    """A ``LIKE`` pattern (``\\`` escapes) of the per-person sessions of ``conversation``."""
    escaped = conversation.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"{escaped}{SESSION}%"


def _event(payload: str) -> Event | None:
    try:
        return Event.from_json(payload)
    except ValueError:
        return None


def _message(payload: str) -> OutMessage | None:
    try:
        return OutMessage.from_json(payload)
    except ValueError:
        return None


def _chunks(values: Iterable[str]) -> list[list[str]]:
    ordered = sorted(set(values))
    return [ordered[i : i + _CHUNK] for i in range(0, len(ordered), _CHUNK)]


def _marks(values: Sequence[str]) -> str:
    return ", ".join("?" for _ in values)
