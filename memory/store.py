"""The store: every durable fact Tether keeps goes through it.

:class:`Store` is the composition of the role protocols in :mod:`tether.memory.roles`
plus its lifecycle (open, close, ping). The three implementations (SQLite, PostgreSQL,
in-memory) subclass it and share one contract test suite; code that uses a store asks
for the role it needs instead (a handler's context takes a ``HandlerStore``, the access
middleware a ``PairingStore``), so it reads as what it touches. Which implementation a
URL names is :func:`tether.memory.stores.open_store`: kept out of this module so that
it does not import its own implementations.

The rows and role names are re-exported here, so ``from tether.memory.store import
InboxRow, Store`` keeps working; new code imports rows from :mod:`tether.memory.records`.
"""

from __future__ import annotations

import abc
from typing import Protocol

from tether.memory.embeddings.store import EmbeddingStore
from tether.memory.operator import ConsoleStore, PairingStore, ReportStore
from tether.memory.people import PeopleStore
from tether.memory.records import (
    UNFINISHED_INBOX,
    UNSENT_OUTBOX,
    ConversationState,
    DeadLetter,
    Fact,
    InboxRow,
    InboxStatus,
    MemoryChanges,
    OutboxRow,
    OutboxStatus,
    Pairing,
    Turn,
    Usage,
    UsageRecord,
    Window,
)
from tether.memory.revocations import RevocationStore
from tether.memory.roles import (
    BlobStore,
    ConversationStore,
    CursorStore,
    EventStore,
    HandlerStore,
    InboxStore,
    LaneLocks,
    OutboxStore,
    ReminderStore,
    StepStore,
)
from tether.memory.waits import WaitStore

__all__ = [
    "UNFINISHED_INBOX",
    "UNSENT_OUTBOX",
    "BlobStore",
    "ConsoleStore",
    "ConversationState",
    "ConversationStore",
    "CursorStore",
    "DeadLetter",
    "EventStore",
    "Fact",
    "HandlerStore",
    "InboxRow",
    "InboxStatus",
    "InboxStore",
    "LaneLocks",
    "MemoryChanges",
    "OutboxRow",
    "OutboxStatus",
    "OutboxStore",
    "Pairing",
    "PairingStore",
    "PeopleStore",
    "ReportStore",
    "RevocationStore",
    "StepStore",
    "Store",
    "Turn",
    "Usage",
    "UsageRecord",
    "WaitStore",
    "Window",
    "WritesFailing",
]


class WritesFailing(RuntimeError):
    """The store answers reads, but its writes fail (a full disk, a database file that
    is gone, write privileges revoked): what :meth:`Store.ping` raises, so that
    readiness does not report a store that would lose what it is given."""


class Store(
    EventStore,
    OutboxStore,
    PairingStore,
    ReportStore,
    ReminderStore,
    ConsoleStore,
    RevocationStore,
    PeopleStore,
    BlobStore,
    EmbeddingStore,
    Protocol,
):
    """Durable state behind every role. All methods are safe to call concurrently."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and migrate the schema to the current version."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @property
    def lock_file(self) -> str | None:
        """The file one processing gateway holds locked while it runs on this store, or
        None where the store keeps processes apart itself. Two gateways on one SQLite
        file would each recover the other's running events."""
        return None

    def open_problem(self, exc: BaseException) -> str:
        """Why :meth:`open` (or taking :attr:`lock_file`) failed, in one line that
        follows ``memory.store:`` where ``tether run`` prints it: no password, no
        traceback."""
        return f"cannot open the store: {type(exc).__name__}: {exc}"

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise if the store cannot answer a trivial query, or — :class:`WritesFailing`
        — its last write failed and a probe write fails too (for readiness probes)."""
