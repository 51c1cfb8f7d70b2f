"""The embedded store: SQLite in WAL mode, one writer process with group commit.

Every write goes through a single writer task that gathers whatever is queued and sends
it, as ONE message, to a child process (:mod:`tether.memory.sqlite_writer`) that commits it as
ONE transaction: ``executemany`` per statement shape, one commit. The process keeps the
SQL off the event loop and on the machine's other core, where a thread could not (see
that module for why). Callers still get their own future back, resolved only after that
commit: durable-before-ack holds for each of them. Reads go through aiosqlite on a
connection of this process and see committed state (WAL).

Write ordering inside a batch is by *phase* (accept, begin, step, finish, outbox). A
write is only ever submitted after the writes it depends on have committed, or sits in
a later phase of the same batch, so grouping statements by shape never reorders
dependent writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pickle
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite
import structlog

from tether.events import Event, OutMessage
from tether.memory import sqlite_writer
from tether.memory.rows import (
    MAX_ID,
    PAIRING_COLUMNS,
    TURN_COLUMNS,
    dead_letter_row,
    inbox_row,
    newest_within,
    oldest_within,
    outbox_row,
    turn_row,
)
from tether.memory.store import (
    ConversationState,
    DeadLetter,
    Fact,
    InboxRow,
    MemoryChanges,
    OutboxRow,
    OutboxStatus,
    Pairing,
    Store,
    Turn,
    Usage,
    Window,
)

ACCEPT, BEGIN, STEP, FINISH, OUTBOX = range(5)
log = structlog.get_logger("tether.sqlite")
#: How long ``close`` waits for the writer process to finish before killing it.
_WRITER_EXIT_S = 10.0
#: Batches at the writer at once: the next one gathers while the last one commits.
IN_FLIGHT = 4

MIGRATIONS: list[str] = [
    # 1: the core pipeline
    """
    CREATE TABLE inbox (
        seq          INTEGER PRIMARY KEY,
        key          TEXT NOT NULL UNIQUE,
        conversation TEXT NOT NULL,
        payload      TEXT NOT NULL,
        status       TEXT NOT NULL,
        attempts     INTEGER NOT NULL DEFAULT 0,
        retry_at     REAL,
        error        TEXT,
        created      REAL NOT NULL,
        updated      REAL NOT NULL
    );
    CREATE INDEX inbox_unfinished ON inbox(status, seq)
        WHERE status IN ('received', 'running', 'retry_wait');
    CREATE TABLE steps (
        event_key TEXT NOT NULL,
        name      TEXT NOT NULL,
        result    TEXT NOT NULL,
        created   REAL NOT NULL,
        PRIMARY KEY (event_key, name)
    ) WITHOUT ROWID;
    CREATE TABLE outbox (
        seq         INTEGER PRIMARY KEY,
        key         TEXT NOT NULL UNIQUE,
        event_key   TEXT NOT NULL,
        platform    TEXT NOT NULL,
        payload     TEXT NOT NULL,
        status      TEXT NOT NULL,
        attempts    INTEGER NOT NULL DEFAULT 0,
        next_at     REAL,
        platform_id TEXT,
        error       TEXT,
        created     REAL NOT NULL,
        updated     REAL NOT NULL
    );
    CREATE INDEX outbox_event ON outbox(event_key);
    CREATE INDEX outbox_unsent ON outbox(status, seq)
        WHERE status IN ('pending', 'sending', 'retry_wait');
    CREATE TABLE messages (
        id           INTEGER PRIMARY KEY,
        conversation TEXT NOT NULL,
        role         TEXT NOT NULL,
        text         TEXT NOT NULL,
        tokens       INTEGER,
        event_key    TEXT NOT NULL,
        position     INTEGER NOT NULL,
        summarized   INTEGER NOT NULL DEFAULT 0,
        created      REAL NOT NULL,
        UNIQUE (event_key, position)
    );
    CREATE INDEX messages_conversation ON messages(conversation, id);
    CREATE TABLE dead_letters (
        key          TEXT PRIMARY KEY,
        conversation TEXT NOT NULL,
        event        TEXT NOT NULL,
        error        TEXT NOT NULL,
        traceback    TEXT NOT NULL,
        snapshot     TEXT NOT NULL,
        created      REAL NOT NULL
    );
    CREATE TABLE cursors (
        name    TEXT PRIMARY KEY,
        value   TEXT NOT NULL,
        updated REAL NOT NULL
    );
    """,
    # access: senders admitted by pairing
    """
    CREATE TABLE pairings (
        platform TEXT NOT NULL,
        user_id  TEXT NOT NULL,
        name     TEXT NOT NULL,
        code     TEXT NOT NULL UNIQUE,
        status   TEXT NOT NULL,
        created  REAL NOT NULL,
        updated  REAL NOT NULL,
        PRIMARY KEY (platform, user_id)
    );
    """,
    # memory: conversations, facts, usage; a partial index for compaction's reads
    """
    CREATE TABLE conversations (
        conversation    TEXT PRIMARY KEY,
        persona         TEXT,
        summary         TEXT NOT NULL DEFAULT '',
        summary_tokens  INTEGER NOT NULL DEFAULT 0,
        summarized_upto INTEGER NOT NULL DEFAULT 0,
        context_from    INTEGER NOT NULL DEFAULT 0,
        settings        TEXT NOT NULL DEFAULT '{}',
        updated         REAL NOT NULL
    );
    CREATE TABLE facts (
        id           INTEGER PRIMARY KEY,
        conversation TEXT NOT NULL,
        text         TEXT NOT NULL,
        tokens       INTEGER NOT NULL,
        event_key    TEXT NOT NULL,
        position     INTEGER NOT NULL,
        created      REAL NOT NULL,
        UNIQUE (event_key, position)
    );
    CREATE INDEX facts_conversation ON facts(conversation, id);
    CREATE TABLE usage_calls (
        event_key         TEXT NOT NULL,
        name              TEXT NOT NULL,
        conversation      TEXT NOT NULL,
        model             TEXT NOT NULL,
        day               TEXT NOT NULL,
        prompt_tokens     INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        cost              REAL NOT NULL,
        created           REAL NOT NULL,
        PRIMARY KEY (event_key, name)
    ) WITHOUT ROWID;
    CREATE TABLE usage (
        conversation      TEXT NOT NULL,
        day               TEXT NOT NULL,
        model             TEXT NOT NULL,
        prompt_tokens     INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        cost              REAL NOT NULL,
        calls             INTEGER NOT NULL,
        PRIMARY KEY (conversation, day, model)
    ) WITHOUT ROWID;
    CREATE TRIGGER usage_calls_sum AFTER INSERT ON usage_calls BEGIN
        INSERT INTO usage
            (conversation, day, model, prompt_tokens, completion_tokens, cost, calls)
        VALUES
            (NEW.conversation, NEW.day, NEW.model, NEW.prompt_tokens, NEW.completion_tokens,
             NEW.cost, 1)
        ON CONFLICT (conversation, day, model) DO UPDATE SET
            prompt_tokens = prompt_tokens + excluded.prompt_tokens,
            completion_tokens = completion_tokens + excluded.completion_tokens,
            cost = cost + excluded.cost,
            calls = calls + 1;
    END;
    CREATE INDEX messages_unsummarized ON messages(conversation, id) WHERE summarized = 0;
    """,
]


@dataclass(slots=True)
class _Accept:
    items: Sequence[tuple[Event, str, str]]  # event, conversation, serialized payload
    cursors: Mapping[str, str]
    future: asyncio.Future[list[InboxRow | None]]


@dataclass(slots=True)
class _Write:
    phase: int
    statements: list[tuple[str, Sequence[Any]]]
    future: asyncio.Future[None] | None  # None: posted, nobody waits for it


@dataclass(slots=True)
class _Queue:
    accepts: list[_Accept] = field(default_factory=list)
    writes: list[_Write] = field(default_factory=list)
    #: Posted writes in this batch, and a future for readers waiting for them.
    posted: int = 0
    settled: asyncio.Future[None] | None = None

    def __bool__(self) -> bool:
        return bool(self.accepts or self.writes)


class SqliteStore(Store):
    def __init__(self, path: str, *, synchronous: str = "normal") -> None:
        self.path = path
        self.synchronous = synchronous.upper()
        #: The database file; for ``:memory:`` a temporary one, removed at close (the
        #: writer is another process, which cannot share an in-memory database).
        self._file = path
        self._scratch: str | None = None
        self._writer: asyncio.subprocess.Process | None = None
        self._replies: asyncio.Task[None] | None = None
        #: Batches sent to the current writer and not answered yet, oldest first (each
        #: writer has its own: a dead one's reader fails only what that one held).
        self._inflight: deque[_Queue] = deque()
        self._room = asyncio.Semaphore(IN_FLIGHT)
        self._reader: aiosqlite.Connection | None = None
        self._queue = _Queue()
        #: Events whose 'running' mark still waits in the queue (see :meth:`_absorb_begin`).
        self._begun: dict[str, _Write] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    # -- lifecycle ------------------------------------------------------------------

    async def open(self) -> None:
        if self.path == ":memory:":
            self._scratch = tempfile.mkdtemp(prefix="tether-")
            self._file = str(Path(self._scratch) / "store.db")
        await asyncio.to_thread(self._migrate)
        await self._start_writer()
        self._reader = await aiosqlite.connect(self._file)
        await self._reader.execute("PRAGMA busy_timeout=10000")
        self._closing = False
        self._task = asyncio.create_task(self._write_loop(), name="sqlite-writer")

    def _migrate(self) -> None:
        db = sqlite_writer.connect(self._file, self.synchronous)
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version > len(MIGRATIONS):
                    raise RuntimeError(
                        f"{self.path}: schema version {version} is newer than this Tether "
                        f"({len(MIGRATIONS)}); upgrade Tether"
                    )
                for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                    for statement in _statements(script):
                        db.execute(statement)
                    db.execute(f"PRAGMA user_version={number}")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        finally:
            db.close()

    async def _start_writer(self) -> asyncio.subprocess.Process:
        writer = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", sqlite_writer.__file__, self._file, self.synchronous,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            ready = await _read_reply(writer)
        except asyncio.IncompleteReadError:
            code = await writer.wait()  # its traceback went to our stderr
            raise RuntimeError(f"the SQLite writer for {self.path} failed ({code})") from None
        assert ready == (True, sqlite_writer.READY), ready
        self._writer, self._inflight = writer, deque()
        self._replies = asyncio.create_task(
            self._read_replies(writer, self._inflight), name="sqlite-replies"
        )
        return writer

    async def _stop_writer(self) -> None:
        """EOF to the writer: it answers what it was sent, then exits."""
        writer, replies = self._writer, self._replies
        if writer is None:
            return
        assert writer.stdin is not None
        writer.stdin.close()
        try:
            await asyncio.wait_for(writer.wait(), _WRITER_EXIT_S)
        except TimeoutError:
            writer.kill()
        if replies:
            await replies
        self._writer = self._replies = None

    async def close(self) -> None:
        if self._task:
            self._closing = True
            self._wake.set()
            await self._task
            self._task = None
        await self._stop_writer()
        if self._reader:
            await self._reader.close()
            self._reader = None
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    async def ping(self) -> None:
        await self._read("SELECT 1")

    # -- the writer -----------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._room.acquire()
            batch, self._queue = self._queue, _Queue()
            self._begun.clear()
            try:
                await self._send(batch)
            except Exception as exc:
                self._room.release()
                _settle(batch, exc)

    async def _send(self, batch: _Queue) -> None:
        """Hand a batch to the writer process: its statements grouped by (phase, SQL), so
        the writer runs one ``executemany`` per shape, in phase order."""
        groups: dict[tuple[int, str], list[Sequence[Any]]] = {}
        for write in sorted(batch.writes, key=lambda w: w.phase):
            for sql, params in write.statements:
                groups.setdefault((write.phase, sql), []).append(params)
        accepts = [
            ([(event.key, conversation, payload) for event, conversation, payload in a.items],
             a.cursors)
            for a in batch.accepts
        ]  # fmt: skip
        data = sqlite_writer.frame((accepts, [(sql, rows) for (_, sql), rows in groups.items()]))
        writer = self._writer
        if writer is None or writer.returncode is not None:
            writer = await self._start_writer()
        assert writer.stdin is not None
        self._inflight.append(batch)
        writer.stdin.write(data)
        try:
            await writer.stdin.drain()
        except OSError:
            # The writer is gone; its reply reader fails everything in flight, this too.
            with contextlib.suppress(ProcessLookupError):
                writer.kill()

    async def _read_replies(
        self, writer: asyncio.subprocess.Process, inflight: deque[_Queue]
    ) -> None:
        """Settle each batch as the writer answers it, in the order they were sent."""
        try:
            while True:
                ok, result = await _read_reply(writer)
                batch = inflight.popleft()
                self._room.release()
                if not ok:
                    _settle(batch, result)
                    continue
                for accept, seqs in zip(batch.accepts, result, strict=True):
                    accept.future.set_result(_accepted(accept, seqs))
                _settle(batch, None)
        except (asyncio.IncompleteReadError, OSError):
            pass  # EOF: the writer exited, after a close or on its own
        if self._writer is writer:
            self._writer = None
        code = await writer.wait()
        if inflight:
            log.error("store.writer_exited", path=self.path, code=code)
            # Not known to be committed: callers retry, and every write is idempotent.
            error = RuntimeError(f"the SQLite writer process for {self.path} exited ({code})")
            while inflight:
                self._room.release()
                _settle(inflight.popleft(), error)

    def _submit_accept(self, accept: _Accept) -> None:
        self._check_open()
        self._queue.accepts.append(accept)
        self._wake.set()

    async def _write(self, phase: int, *statements: tuple[str, Sequence[Any]]) -> None:
        """Queue statements for the next group commit and wait until it has committed."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueue(_Write(phase, list(statements), future))
        await future

    def _post(self, phase: int, *statements: tuple[str, Sequence[Any]]) -> _Write:
        """Queue statements for the next group commit without waiting for it.

        For writes that need not be durable before the caller goes on: the writer keeps
        them ordered before anything submitted later, and a crash before the commit
        leaves the row as it was, which recovery already handles. Reads wait for them,
        so this store still reads its own writes; a failure is logged with its batch.
        """
        write = _Write(phase, list(statements), None)
        self._enqueue(write)
        self._queue.posted += 1
        return write

    def _enqueue(self, write: _Write) -> None:
        self._check_open()
        self._queue.writes.append(write)
        self._wake.set()

    def _check_open(self) -> None:
        if self._task is None or self._closing:
            raise RuntimeError("store is closed")

    async def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        if self._reader is None:
            raise RuntimeError("store is closed")
        await self._posted_settled()
        return list(await self._reader.execute_fetchall(sql, params))

    async def _posted_settled(self) -> None:
        """Wait for the newest batch with posted writes (batches settle in order)."""
        batch = self._queue if self._queue.posted else None
        if batch is None:
            batch = next((b for b in reversed(self._inflight) if b.posted), None)
        if batch is None:
            return
        if batch.settled is None:
            batch.settled = asyncio.get_running_loop().create_future()
        await asyncio.wait([batch.settled])  # a cancelled reader leaves it to the others

    # -- inbox ----------------------------------------------------------------------

    async def accept(
        self, items: Sequence[tuple[Event, str]], cursors: Mapping[str, str] | None = None
    ) -> list[InboxRow | None]:
        if not items and not cursors:
            return []
        future: asyncio.Future[list[InboxRow | None]] = asyncio.get_running_loop().create_future()
        # Serialize here, on the event loop, so the writer thread only runs SQL.
        prepared = [(event, conversation, event.to_json()) for event, conversation in items]
        self._submit_accept(_Accept(prepared, dict(cursors or {}), future))
        return await future

    async def recover(self) -> list[InboxRow]:
        await self._write(
            FINISH,
            (
                "UPDATE inbox SET status = 'received', updated = ? WHERE status = 'running'",
                (time.time(),),
            ),
        )
        rows = await self._read(
            "SELECT seq, key, conversation, payload, status, attempts, retry_at, error FROM inbox"
            " WHERE status IN ('received', 'running', 'retry_wait') ORDER BY seq"
        )
        return [inbox_row(row) for row in rows]

    async def lane(self, conversation: str) -> list[InboxRow]:
        rows = await self._read(
            "SELECT seq, key, conversation, payload, status, attempts, retry_at, error FROM inbox"
            " WHERE status IN ('received', 'running', 'retry_wait') AND conversation = ?"
            " ORDER BY seq",
            (conversation,),
        )
        return [inbox_row(row) for row in rows]

    async def busy_conversations(self) -> list[str]:
        rows = await self._read(
            "SELECT DISTINCT conversation FROM inbox"
            " WHERE status IN ('received', 'running', 'retry_wait')"
        )
        return [str(row[0]) for row in rows]

    async def pending(self, older_than: float) -> list[InboxRow]:
        rows = await self._read(
            "SELECT seq, key, conversation, payload, status, attempts, retry_at, error FROM inbox"
            " WHERE status = 'received' AND updated < ? ORDER BY seq",
            (older_than,),
        )
        return [inbox_row(row) for row in rows]

    async def begin(self, row: InboxRow) -> None:
        # Not awaited: the handler may start before this commits. A crash before it
        # leaves the row 'received' with one attempt fewer, which recovery runs anyway.
        row.attempts += 1
        row.status = "running"
        self._begun[row.key] = self._post(
            BEGIN,
            (
                "UPDATE inbox SET status = 'running', attempts = ?, updated = ? WHERE key = ?",
                (row.attempts, time.time(), row.key),
            ),
        )

    def _absorb_begin(self, key: str) -> int | None:
        """The attempt number of ``key``'s 'running' mark, if that mark has not reached
        the writer yet: then it is dropped, and the finishing write sets the attempts
        instead. A quick handler finishes within the batch that would have marked it
        running; that row is one of eight an event writes."""
        write = self._begun.pop(key, None)
        if write is None:
            return None
        (_sql, (attempts, _updated, _key)), *_ = write.statements
        write.statements.clear()
        return int(attempts)

    async def checkpoint(
        self,
        key: str,
        outbox: Sequence[OutMessage],
        turns: Sequence[Turn],
        changes: MemoryChanges | None = None,
    ) -> list[OutboxRow]:
        now = time.time()
        statements: list[tuple[str, Sequence[Any]]] = [
            (
                "UPDATE inbox SET status = 'done', attempts = coalesce(?, attempts),"
                " error = NULL, retry_at = NULL, updated = ? WHERE key = ?",
                (self._absorb_begin(key), now, key),
            )
        ]
        rows: list[OutboxRow] = []
        for message in outbox:
            statements.append(
                (
                    "INSERT OR IGNORE INTO outbox"
                    " (key, event_key, platform, payload, status, created, updated)"
                    " VALUES (?, ?, ?, ?, 'pending', ?, ?)",
                    (message.key, key, message.target.platform, message.to_json(), now, now),
                )
            )
            rows.append(OutboxRow(seq=0, key=message.key, event_key=key, message=message))
        for position, turn in enumerate(turns):
            statements.append(
                (
                    "INSERT OR IGNORE INTO messages"
                    " (conversation, role, text, tokens, event_key, position, created)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (turn.conversation, turn.role, turn.text, turn.tokens, key, position, now),
                )
            )
        if changes:
            statements += _memory_statements(key, changes, now)
        await self._write(FINISH, *statements)
        return rows

    async def retry_later(self, key: str, retry_at: float, error: str) -> None:
        await self._write(
            FINISH,
            (
                "UPDATE inbox SET status = 'retry_wait', retry_at = ?, error = ?, updated = ?"
                " WHERE key = ?",
                (retry_at, error, time.time(), key),
            ),
        )

    async def bury(self, letter: DeadLetter) -> None:
        now = time.time()
        await self._write(
            FINISH,
            (
                "UPDATE inbox SET status = 'dead', error = ?, retry_at = NULL, updated = ?"
                " WHERE key = ?",
                (letter.error, now, letter.key),
            ),
            (
                "INSERT OR REPLACE INTO dead_letters"
                " (key, conversation, event, error, traceback, snapshot, created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    letter.key,
                    letter.conversation,
                    letter.event.to_json(),
                    letter.error,
                    letter.traceback,
                    json.dumps(letter.snapshot, default=str),
                    now,
                ),
            ),
        )

    async def dead_letters(self) -> list[DeadLetter]:
        rows = await self._read(
            "SELECT key, conversation, event, error, traceback, snapshot, created"
            " FROM dead_letters ORDER BY created"
        )
        return [dead_letter_row(row) for row in rows]

    async def dead_letter(self, key: str) -> DeadLetter | None:
        rows = await self._read(
            "SELECT key, conversation, event, error, traceback, snapshot, created"
            " FROM dead_letters WHERE key = ?",
            (key,),
        )
        return dead_letter_row(rows[0]) if rows else None

    async def requeue(self, key: str) -> bool:
        now = time.time()
        if await self._read("SELECT 1 FROM inbox WHERE key = ? AND status = 'dead'", (key,)):
            await self._write(
                FINISH,
                (
                    "UPDATE inbox SET status = 'received', attempts = 0, retry_at = NULL,"
                    " updated = ? WHERE key = ? AND status = 'dead'",
                    (now, key),
                ),
                ("DELETE FROM dead_letters WHERE key = ?", (key,)),
            )
            return True
        if await self._read(
            "SELECT 1 FROM outbox WHERE key = ? AND status IN ('dead', 'unknown')", (key,)
        ):
            await self._write(
                OUTBOX,
                (
                    "UPDATE outbox SET status = 'pending', attempts = 0, next_at = NULL,"
                    " updated = ? WHERE key = ? AND status IN ('dead', 'unknown')",
                    (now, key),
                ),
            )
            return True
        return False

    async def inbox_row(self, key: str) -> InboxRow | None:
        rows = await self._read(
            "SELECT seq, key, conversation, payload, status, attempts, retry_at, error FROM inbox"
            " WHERE key = ?",
            (key,),
        )
        return inbox_row(rows[0]) if rows else None

    # -- steps ----------------------------------------------------------------------

    async def step(self, key: str, name: str) -> str | None:
        rows = await self._read(
            "SELECT result FROM steps WHERE event_key = ? AND name = ?", (key, name)
        )
        return str(rows[0][0]) if rows else None

    async def save_step(self, key: str, name: str, result: str) -> None:
        await self._write(
            STEP,
            (
                "INSERT OR REPLACE INTO steps (event_key, name, result, created)"
                " VALUES (?, ?, ?, ?)",
                (key, name, result, time.time()),
            ),
        )

    async def steps(self, key: str) -> dict[str, str]:
        rows = await self._read("SELECT name, result FROM steps WHERE event_key = ?", (key,))
        return {str(name): str(result) for name, result in rows}

    # -- outbox ---------------------------------------------------------------------

    async def unsent(self) -> list[OutboxRow]:
        rows = await self._read(
            "SELECT seq, key, event_key, payload, status, attempts, next_at, platform_id, error"
            " FROM outbox WHERE status IN ('pending', 'sending', 'retry_wait') ORDER BY seq"
        )
        return [outbox_row(row) for row in rows]

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
            "UPDATE outbox SET status = ?, attempts = coalesce(?, attempts), next_at = ?,"
            " platform_id = coalesce(?, platform_id), error = ?, updated = ? WHERE key = ?",
            (status, attempts, next_at, platform_id, error, time.time(), key),
        )
        if durable:
            await self._write(OUTBOX, statement)
        else:
            self._post(OUTBOX, statement)

    async def outbox_rows(self, event_key: str) -> list[OutboxRow]:
        rows = await self._read(
            "SELECT seq, key, event_key, payload, status, attempts, next_at, platform_id, error"
            " FROM outbox WHERE event_key = ? ORDER BY seq",
            (event_key,),
        )
        return [outbox_row(row) for row in rows]

    # -- memory ---------------------------------------------------------------------

    async def history(self, conversation: str, limit: int) -> list[Turn]:
        rows = await self._read(
            f"SELECT {TURN_COLUMNS} FROM messages WHERE conversation = ? ORDER BY id DESC LIMIT ?",
            (conversation, limit),
        )
        return [turn_row(row) for row in reversed(rows)]

    async def recent(self, conversation: str, budget: int, *, after_id: int = 0) -> Window:
        async def page(after: int, before: int, limit: int) -> list[Any]:
            return await self._read(
                f"SELECT {TURN_COLUMNS} FROM messages INDEXED BY messages_unsummarized"
                " WHERE conversation = ? AND summarized = 0 AND id > ? AND id < ?"
                " ORDER BY id DESC LIMIT ?",
                (conversation, after, before, limit),
            )

        return await newest_within(page, budget, after_id)

    async def oldest_unsummarized(
        self, conversation: str, budget: int, *, after_id: int = 0, before_id: int | None = None
    ) -> list[Turn]:
        async def page(after: int, before: int, limit: int) -> list[Any]:
            return await self._read(
                f"SELECT {TURN_COLUMNS} FROM messages INDEXED BY messages_unsummarized"
                " WHERE conversation = ? AND summarized = 0 AND id > ? AND id < ?"
                " ORDER BY id LIMIT ?",
                (conversation, after, before, limit),
            )

        return await oldest_within(page, budget, after_id, before_id)

    async def last_message_id(self, conversation: str) -> int:
        rows = await self._read(
            "SELECT coalesce(max(id), 0) FROM messages WHERE conversation = ?", (conversation,)
        )
        return int(rows[0][0])

    async def conversation(self, conversation: str) -> ConversationState:
        rows = await self._read(
            "SELECT persona, summary, summary_tokens, summarized_upto, context_from, settings"
            " FROM conversations WHERE conversation = ?",
            (conversation,),
        )
        if not rows:
            return ConversationState(conversation)
        persona, summary, summary_tokens, upto, context_from, settings = rows[0]
        return ConversationState(
            conversation, persona, summary, summary_tokens, upto, context_from, json.loads(settings)
        )

    async def facts(self, conversation: str, budget: int | None = None) -> list[Fact]:
        if budget is None:
            rows = await self._read(
                "SELECT id, conversation, text, tokens, created FROM facts"
                " WHERE conversation = ? ORDER BY id",
                (conversation,),
            )
            return [Fact(*row) for row in rows]
        facts: list[Fact] = []
        used = 0
        before = MAX_ID
        while True:
            rows = await self._read(
                "SELECT id, conversation, text, tokens, created FROM facts"
                " WHERE conversation = ? AND id < ? ORDER BY id DESC LIMIT 64",
                (conversation, before),
            )
            for row in rows:
                fact = Fact(*row)
                if used + fact.tokens > budget:
                    facts.reverse()
                    return facts
                facts.append(fact)
                used += fact.tokens
            if len(rows) < 64:
                facts.reverse()
                return facts
            before = rows[-1][0]

    async def usage(self, conversation: str, since: str = "") -> list[Usage]:
        rows = await self._read(
            "SELECT conversation, model, day, prompt_tokens, completion_tokens, cost, calls"
            " FROM usage WHERE conversation = ? AND day >= ? ORDER BY day, model",
            (conversation, since),
        )
        return [Usage(*row) for row in rows]

    # -- cursors --------------------------------------------------------------------

    async def cursor(self, name: str) -> str | None:
        rows = await self._read("SELECT value FROM cursors WHERE name = ?", (name,))
        return str(rows[0][0]) if rows else None

    async def set_cursor(self, name: str, value: str) -> None:
        await self._write(
            ACCEPT,
            (
                "INSERT INTO cursors (name, value, updated) VALUES (?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE"
                " SET value = excluded.value, updated = excluded.updated",
                (name, value, time.time()),
            ),
        )

    async def recent_cursors(self, prefix: str, since: float) -> dict[str, str]:
        rows = await self._read(
            "SELECT name, value FROM cursors"
            " WHERE substr(name, 1, length(?)) = ? AND updated >= ? ORDER BY name",
            (prefix, prefix, since),
        )
        return {str(name): str(value) for name, value in rows}

    # -- pairing --------------------------------------------------------------------

    async def pairing(self, platform: str, user_id: str) -> Pairing | None:
        rows = await self._read(
            f"SELECT {PAIRING_COLUMNS} FROM pairings WHERE platform = ? AND user_id = ?",
            (platform, user_id),
        )
        return Pairing(*rows[0]) if rows else None

    async def request_pairing(self, platform: str, user_id: str, name: str, code: str) -> Pairing:
        now = time.time()
        await self._write(
            ACCEPT,
            (
                "INSERT OR IGNORE INTO pairings"
                " (platform, user_id, name, code, status, created, updated)"
                " VALUES (?, ?, ?, ?, 'pending', ?, ?)",
                (platform, user_id, name, code, now, now),
            ),
        )
        found = await self.pairing(platform, user_id)
        assert found is not None
        return found

    async def approve_pairing(self, code: str) -> Pairing | None:
        code = code.strip().upper()
        await self._write(
            ACCEPT,
            (
                "UPDATE pairings SET status = 'approved', updated = ? WHERE code = ?",
                (time.time(), code),
            ),
        )
        rows = await self._read(f"SELECT {PAIRING_COLUMNS} FROM pairings WHERE code = ?", (code,))
        return Pairing(*rows[0]) if rows else None

    async def revoke_pairing(self, platform: str, user_id: str) -> bool:
        found = await self.pairing(platform, user_id)
        await self._write(
            ACCEPT,
            ("DELETE FROM pairings WHERE platform = ? AND user_id = ?", (platform, user_id)),
        )
        return found is not None

    async def pairings(self) -> list[Pairing]:
        rows = await self._read(f"SELECT {PAIRING_COLUMNS} FROM pairings ORDER BY created")
        return [Pairing(*row) for row in rows]

    async def spend(self, since: str) -> dict[str, tuple[int, float]]:
        rows = await self._read(
            "SELECT model, sum(prompt_tokens + completion_tokens), sum(cost) FROM usage"
            " WHERE day >= ? GROUP BY model ORDER BY model",
            (since,),
        )
        return {str(model): (int(tokens), float(cost)) for model, tokens, cost in rows}

    async def activity(self) -> dict[str, dict[str, float]]:
        received = await self._read(
            "SELECT substr(conversation, 1, instr(conversation, ':') - 1), max(created)"
            " FROM inbox GROUP BY 1"
        )
        sent = await self._read(
            "SELECT platform, max(updated) FROM outbox WHERE status = 'sent' GROUP BY platform"
        )
        out: dict[str, dict[str, float]] = {}
        for kind, rows in (("received", received), ("sent", sent)):
            for platform, when in rows:
                out.setdefault(str(platform), {})[kind] = float(when)
        return out

    async def counts(self) -> dict[str, dict[str, int]]:
        inbox = await self._read("SELECT status, count(*) FROM inbox GROUP BY status")
        outbox = await self._read("SELECT status, count(*) FROM outbox GROUP BY status")
        return {
            "inbox": {str(s): int(n) for s, n in inbox},
            "outbox": {str(s): int(n) for s, n in outbox},
        }


def _memory_statements(
    key: str, changes: MemoryChanges, now: float
) -> list[tuple[str, Sequence[Any]]]:
    """The checkpoint's memory writes, each idempotent, none depending on another's order
    (the group commit batches statements by shape across events)."""
    conversation = changes.conversation
    out: list[tuple[str, Sequence[Any]]] = []
    if changes.state is not None:
        state = changes.state
        out.append(
            (
                "INSERT OR REPLACE INTO conversations (conversation, persona, summary,"
                " summary_tokens, summarized_upto, context_from, settings, updated)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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
    for position, (text, tokens) in enumerate(changes.facts):
        out.append(
            (
                "INSERT OR IGNORE INTO facts"
                " (conversation, text, tokens, event_key, position, created)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (conversation, text, tokens, key, position, now),
            )
        )
    for fact_id in changes.forget:
        out.append(("DELETE FROM facts WHERE id = ? AND conversation = ?", (fact_id, conversation)))
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
        # The usage_calls_sum trigger adds a newly inserted call to the per-day totals.
        out.append(
            (
                "INSERT OR IGNORE INTO usage_calls (event_key, name, conversation, model, day,"
                " prompt_tokens, completion_tokens, cost, created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
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


def _statements(script: str) -> list[str]:
    """Split a migration into statements; a trigger body's inner ``;`` stays inside it.

    (``executescript`` would commit the migration's transaction halfway.)
    """
    statements, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n\t;"):
                statements.append(pending)
            pending = ""
    return statements


async def _read_reply(writer: asyncio.subprocess.Process) -> tuple[bool, Any]:
    assert writer.stdout is not None
    header = await writer.stdout.readexactly(sqlite_writer.HEADER.size)
    (size,) = sqlite_writer.HEADER.unpack(header)
    reply: tuple[bool, Any] = pickle.loads(await writer.stdout.readexactly(size))
    return reply


def _accepted(accept: _Accept, seqs: Sequence[int | None]) -> list[InboxRow | None]:
    return [
        None if seq is None else InboxRow(seq, event.key, conversation, event)
        for (event, conversation, _payload), seq in zip(accept.items, seqs, strict=True)
    ]


def _settle(batch: _Queue, error: BaseException | None) -> None:
    """Resolve every future of ``batch``: with ``error``, or done (accepts already are)."""
    futures: list[asyncio.Future[Any]] = [a.future for a in batch.accepts]
    futures += [w.future for w in batch.writes if w.future is not None]
    for future in futures:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
    if error is not None and batch.posted:
        log.error("store.write_failed", error=repr(error), posted=batch.posted)
    if batch.settled is not None and not batch.settled.done():
        batch.settled.set_result(None)
