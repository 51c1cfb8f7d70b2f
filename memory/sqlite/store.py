"""The embedded store: SQLite in WAL mode, its writes committed in groups by one writer
process (:mod:`tether.memory.sqlite.link`), its reads on a connection of this process.

Reads go through aiosqlite and see committed state (WAL), after the writes this store
posted without waiting (:meth:`WriterLink.settled`): the store reads its own writes.
What is the same in PostgreSQL is :class:`tether.memory.sql.store.SqlStore`; here is only
what the writer process changes.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from tether.events import Event, OutMessage
from tether.memory.embeddings import SqliteEmbeddings
from tether.memory.recall import SqliteRecall
from tether.memory.records import InboxRow, MemoryChanges, OutboxRow, OutboxStatus, Turn
from tether.memory.sql import statements as sql
from tether.memory.sql.rows import Row
from tether.memory.sql.statements import FINISH, OUTBOX, Statement
from tether.memory.sql.store import SqlStore
from tether.memory.sqlite.link import WriterLink
from tether.memory.sqlite.schema import migrate
from tether.memory.sqlite.writer import check_same_file, identity
from tether.memory.store import WritesFailing

_INSERT_OUTBOX = (
    "INSERT INTO outbox (key, event_key, platform, payload, status, created, updated)"
    " VALUES (?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT DO NOTHING"
)


class SqliteStore(SqliteEmbeddings, SqliteRecall, SqlStore):
    _newest_unsummarized, _oldest_unsummarized = sql.unsummarized_pages(
        "messages INDEXED BY messages_unsummarized"
    )
    _last_received = sql.last_received("substr(conversation, 1, instr(conversation, ':') - 1)")
    _payload_platform = "json_extract(payload, '$.platform')"
    _payload_sender = "json_extract(payload, '$.sender.id')"
    #: The erased terms leave the FTS5 index's segments at once, not at their next merge.
    _after_erasure = ("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')",)

    def __init__(self, path: str, *, synchronous: str = "normal") -> None:
        self.path = path
        self.synchronous = synchronous.upper()
        #: The database file; for ``:memory:`` a temporary one, removed at close (the
        #: writer is another process, which cannot share an in-memory database).
        self._file = path
        self._scratch: str | None = None
        self._link = WriterLink(path, self.synchronous)
        self._identity = ""  # the file's device:inode once open (see the writer)
        self._write = self._link.write
        self._reader: aiosqlite.Connection | None = None

    # -- lifecycle ------------------------------------------------------------------

    @property
    def lock_file(self) -> str | None:
        """The database file itself: a gateway locks the file, which every name of it
        shares (gateway/ops/lockfile.py), not a ``.lock`` named after one path."""
        return None if self.path == ":memory:" else self.path

    def open_problem(self, exc: BaseException) -> str:
        reason = _unusable_directory(self.path) or f"{type(exc).__name__}: {exc}"
        return f"cannot open the SQLite database {self.path}: {reason}"

    async def open(self) -> None:
        if self.path == ":memory:":
            self._scratch = tempfile.mkdtemp(prefix="tether-")
            self._file = str(Path(self._scratch) / "store.db")
        await asyncio.to_thread(migrate, self._file, self.synchronous, self.path)
        self._identity = identity(self._file)
        await self._link.open(self._file, self._identity)
        self._reader = await aiosqlite.connect(self._file)
        await self._reader.execute("PRAGMA busy_timeout=10000")

    async def close(self) -> None:
        await self._link.close()
        if self._reader:
            await self._reader.close()
            self._reader = None
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    async def ping(self) -> None:
        """Also raise when writes would not be durable: the file was deleted or replaced
        (this process's connections would go on using the old one), or the last write
        failed and a probe write fails too. A probe, so that readiness comes back by
        itself once the disk has room again, without waiting for traffic that a load
        balancer keeps away from an instance that is not ready."""
        if self._reader is None:
            raise RuntimeError("store is closed")
        check_same_file(self._file, self._identity)
        if self._link.problem is not None:
            try:
                await self._link.probe()
            except Exception as exc:
                raise WritesFailing(f"writes to {self.path} fail: {self._link.problem}") from exc
        await self._rows("SELECT 1")

    async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Row]:
        if self._reader is None:
            raise RuntimeError("store is closed")
        await self._link.settled()
        return list(await self._reader.execute_fetchall(text, params))

    async def _peek(self, text: str, params: Sequence[Any] = ()) -> list[Row]:
        """A read that does not wait for the writes posted before it: the pruner's
        (memory/retention), whose own writes are awaited and which must not queue behind
        the traffic's."""
        if self._reader is None:
            raise RuntimeError("store is closed")
        return list(await self._reader.execute_fetchall(text, params))

    # -- inbox ----------------------------------------------------------------------

    async def accept(
        self, items: Sequence[tuple[Event, str]], cursors: Mapping[str, str] | None = None
    ) -> list[InboxRow | None]:
        if not items and not cursors:
            return []
        # Serialize here, on the event loop, so the writer process only runs SQL.
        prepared = [(event, conversation, event.to_json()) for event, conversation in items]
        return await self._link.accept(prepared, dict(cursors or {}))

    async def recover(self) -> list[InboxRow]:
        """One process owns this file: 'running' rows are a crash's leftovers."""
        await self._write(
            FINISH,
            ("UPDATE inbox SET status = 'received', updated = ? WHERE status = 'running'",
             (time.time(),)),
        )  # fmt: skip
        return await super().recover()

    async def begin(self, row: InboxRow) -> None:
        # Not awaited: the handler may start before this commits. A crash before it
        # leaves the row 'received' with one attempt fewer, which recovery runs anyway.
        row.attempts += 1
        row.status = "running"
        self._link.begin(row.key, (sql.RUNNING, (row.attempts, time.time(), row.key)))

    async def checkpoint(
        self,
        key: str,
        outbox: Sequence[OutMessage],
        turns: Sequence[Turn],
        changes: MemoryChanges | None = None,
    ) -> list[OutboxRow]:
        now = time.time()
        # A 'running' mark still queued is dropped; this write sets its attempts instead.
        running = self._link.take_begin(key)
        attempts = None if running is None else int(running[0])
        statements: list[Statement] = [(sql.FINISHED, (attempts, now, key))]
        rows: list[OutboxRow] = []
        for message in outbox:
            statements.append(self._outbox_saved(key, message, now))
            rows.append(OutboxRow(seq=0, key=message.key, event_key=key, message=message))
        statements += sql.turns_and_memory(key, turns, changes, now)
        await self._write(FINISH, *statements)
        return rows

    def _outbox_saved(self, event_key: str, message: OutMessage, now: float) -> Statement:
        row = (message.key, event_key, message.target.platform, message.to_json(), now, now)
        return (_INSERT_OUTBOX, row)

    async def requeue(self, key: str) -> bool:
        now = time.time()
        if await self._rows(sql.REQUEUEABLE_EVENT, (key,)):
            await self._write(
                FINISH, (sql.EVENT_REQUEUED, (now, key)), (sql.DEAD_LETTER_DROPPED, (key,))
            )
            return True
        if await self._rows(sql.DEAD_REPLY, (key,)):
            await self._write(OUTBOX, (sql.REPLY_REQUEUED, (now, key)))
            return True
        return False

    # -- outbox ---------------------------------------------------------------------

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
        statement = (
            sql.OUTBOX_MARKED,
            (status, attempts, next_at, platform_id, error, time.time(), key),
        )
        if durable:
            await self._write(OUTBOX, statement)
        else:
            self._link.post(OUTBOX, statement, must_land=True)


def _unusable_directory(path: str) -> str | None:
    """Why the database's directory cannot hold it, or None when it looks fine."""
    if path == ":memory:":
        return None
    directory = Path(path).parent
    if not directory.exists():
        return f"directory {directory} does not exist"
    if not directory.is_dir():
        return f"{directory} is not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"directory {directory} is not writable"
    if Path(path).exists() and not os.access(path, os.R_OK | os.W_OK):
        return f"{path} is not readable and writable by this user"
    return None
