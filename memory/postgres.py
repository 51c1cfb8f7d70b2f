"""The scale-out store: PostgreSQL through asyncpg, shared by several gateway processes.

Same contract as the SQLite store (one contract suite runs against both). What differs is
how concurrency is made safe: every write is its own transaction (PostgreSQL commits
concurrently, so no group-commit writer is needed), dedup is ``ON CONFLICT DO NOTHING``
on the unique key, and a conversation's events are run by one process at a time because
its lane is a session-level advisory lock (``pg_try_advisory_lock``) held on one
dedicated connection: a crashed process's connection closes and its locks go with it, so
another instance takes the lane over at once.

``postgresql://user@host:port/db?search_path=schema`` picks a schema (asyncpg passes
unknown query parameters on as server settings), which is how the tests isolate a run.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
import structlog

from tether.events import Event, OutMessage
from tether.memory.rows import (
    DEAD_COLUMNS,
    INBOX_COLUMNS,
    OUTBOX_COLUMNS,
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

log = structlog.get_logger("tether.postgres")


MIGRATIONS: list[str] = [
    # 1: the core pipeline, pairing, and conversation memory
    """
    CREATE TABLE inbox (
        seq          BIGSERIAL PRIMARY KEY,
        key          TEXT NOT NULL UNIQUE,
        conversation TEXT NOT NULL,
        payload      TEXT NOT NULL,
        status       TEXT NOT NULL,
        attempts     INTEGER NOT NULL DEFAULT 0,
        retry_at     DOUBLE PRECISION,
        error        TEXT,
        created      DOUBLE PRECISION NOT NULL,
        updated      DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX inbox_unfinished ON inbox (conversation, seq)
        WHERE status IN ('received', 'running', 'retry_wait');
    CREATE TABLE steps (
        event_key TEXT NOT NULL,
        name      TEXT NOT NULL,
        result    TEXT NOT NULL,
        created   DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (event_key, name)
    );
    CREATE TABLE outbox (
        seq         BIGSERIAL PRIMARY KEY,
        key         TEXT NOT NULL UNIQUE,
        event_key   TEXT NOT NULL,
        platform    TEXT NOT NULL,
        target      TEXT NOT NULL,
        payload     TEXT NOT NULL,
        status      TEXT NOT NULL,
        attempts    INTEGER NOT NULL DEFAULT 0,
        next_at     DOUBLE PRECISION,
        platform_id TEXT,
        error       TEXT,
        created     DOUBLE PRECISION NOT NULL,
        updated     DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX outbox_event ON outbox (event_key);
    CREATE INDEX outbox_unsent ON outbox (target, seq)
        WHERE status IN ('pending', 'sending', 'retry_wait');
    CREATE TABLE messages (
        id           BIGSERIAL PRIMARY KEY,
        conversation TEXT NOT NULL,
        role         TEXT NOT NULL,
        text         TEXT NOT NULL,
        tokens       INTEGER,
        event_key    TEXT NOT NULL,
        position     INTEGER NOT NULL,
        summarized   INTEGER NOT NULL DEFAULT 0,
        created      DOUBLE PRECISION NOT NULL,
        UNIQUE (event_key, position)
    );
    CREATE INDEX messages_conversation ON messages (conversation, id);
    CREATE INDEX messages_unsummarized ON messages (conversation, id) WHERE summarized = 0;
    CREATE TABLE dead_letters (
        key          TEXT PRIMARY KEY,
        conversation TEXT NOT NULL,
        event        TEXT NOT NULL,
        error        TEXT NOT NULL,
        traceback    TEXT NOT NULL,
        snapshot     TEXT NOT NULL,
        created      DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE cursors (
        name    TEXT PRIMARY KEY,
        value   TEXT NOT NULL,
        updated DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE pairings (
        platform TEXT NOT NULL,
        user_id  TEXT NOT NULL,
        name     TEXT NOT NULL,
        code     TEXT NOT NULL UNIQUE,
        status   TEXT NOT NULL,
        created  DOUBLE PRECISION NOT NULL,
        updated  DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (platform, user_id)
    );
    CREATE TABLE conversations (
        conversation    TEXT PRIMARY KEY,
        persona         TEXT,
        summary         TEXT NOT NULL DEFAULT '',
        summary_tokens  INTEGER NOT NULL DEFAULT 0,
        summarized_upto BIGINT NOT NULL DEFAULT 0,
        context_from    BIGINT NOT NULL DEFAULT 0,
        settings        TEXT NOT NULL DEFAULT '{}',
        updated         DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE facts (
        id           BIGSERIAL PRIMARY KEY,
        conversation TEXT NOT NULL,
        text         TEXT NOT NULL,
        tokens       INTEGER NOT NULL,
        event_key    TEXT NOT NULL,
        position     INTEGER NOT NULL,
        created      DOUBLE PRECISION NOT NULL,
        UNIQUE (event_key, position)
    );
    CREATE INDEX facts_conversation ON facts (conversation, id);
    CREATE TABLE usage_calls (
        event_key         TEXT NOT NULL,
        name              TEXT NOT NULL,
        conversation      TEXT NOT NULL,
        model             TEXT NOT NULL,
        day               TEXT NOT NULL,
        prompt_tokens     INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        cost              DOUBLE PRECISION NOT NULL,
        created           DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (event_key, name)
    );
    CREATE TABLE usage (
        conversation      TEXT NOT NULL,
        day               TEXT NOT NULL,
        model             TEXT NOT NULL,
        prompt_tokens     BIGINT NOT NULL,
        completion_tokens BIGINT NOT NULL,
        cost              DOUBLE PRECISION NOT NULL,
        calls             BIGINT NOT NULL,
        PRIMARY KEY (conversation, day, model)
    );
    """,
]


class PostgresStore(Store):
    shared = True

    def __init__(self, dsn: str, *, pool_size: int = 10) -> None:
        self.dsn = dsn
        self.pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self._locks: asyncpg.Connection | None = None
        self._lock_guard = asyncio.Lock()

    # -- lifecycle ------------------------------------------------------------------

    async def open(self) -> None:
        self._pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=self.pool_size)
        async with self._pool.acquire() as db, db.transaction():
            # One migrator at a time, even when several instances start together.
            await db.execute("SELECT pg_advisory_xact_lock(hashtextextended('tether:migrate', 0))")
            await db.execute("CREATE TABLE IF NOT EXISTS tether_schema (version INTEGER NOT NULL)")
            version = await db.fetchval("SELECT max(version) FROM tether_schema") or 0
            if version > len(MIGRATIONS):
                raise RuntimeError(
                    f"schema version {version} is newer than this Tether ({len(MIGRATIONS)})"
                )
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                await db.execute(script)
                await db.execute("INSERT INTO tether_schema (version) VALUES ($1)", number)

    async def close(self) -> None:
        if self._locks is not None:
            await self._locks.close()
            self._locks = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("store is closed")
        return self._pool

    async def ping(self) -> None:
        await self.pool.fetchval("SELECT 1")

    # -- lanes: one process per conversation at a time ------------------------------

    async def try_lock(self, name: str) -> bool:
        """Take the session-level advisory lock ``name``; False if another process holds it.

        Held on one dedicated connection until :meth:`unlock` or until this process dies.
        """
        async with self._lock_guard:
            if self._locks is None or self._locks.is_closed():
                self._locks = await asyncpg.connect(self.dsn)
            return bool(
                await self._locks.fetchval(
                    "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", name
                )
            )

    async def unlock(self, name: str) -> None:
        async with self._lock_guard:
            if self._locks is not None and not self._locks.is_closed():
                await self._locks.fetchval(
                    "SELECT pg_advisory_unlock(hashtextextended($1, 0))", name
                )

    async def lane(self, conversation: str) -> list[InboxRow]:
        """The conversation's unfinished events in order (call only while holding its lane)."""
        rows = await self.pool.fetch(
            f"SELECT {INBOX_COLUMNS} FROM inbox WHERE conversation = $1"
            " AND status IN ('received', 'running', 'retry_wait') ORDER BY seq",
            conversation,
        )
        return [inbox_row(row) for row in rows]

    async def busy_conversations(self) -> list[str]:
        rows = await self.pool.fetch(
            "SELECT DISTINCT conversation FROM inbox"
            " WHERE status IN ('received', 'running', 'retry_wait')"
        )
        return [row[0] for row in rows]

    async def unsent_for(self, target: str) -> list[OutboxRow]:  # indexed, unlike the default
        rows = await self.pool.fetch(
            f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE target = $1"
            " AND status IN ('pending', 'sending', 'retry_wait') ORDER BY seq",
            target,
        )
        return [outbox_row(row) for row in rows]

    async def busy_targets(self) -> list[str]:  # indexed, unlike the default
        rows = await self.pool.fetch(
            "SELECT DISTINCT target FROM outbox"
            " WHERE status IN ('pending', 'sending', 'retry_wait')"
        )
        return [row[0] for row in rows]

    # -- inbox ----------------------------------------------------------------------

    async def accept(
        self, items: Sequence[tuple[Event, str]], cursors: Mapping[str, str] | None = None
    ) -> list[InboxRow | None]:
        if not items and not cursors:
            return []
        now = time.time()
        first: dict[str, int] = {}
        for index, (event, _conversation) in enumerate(items):
            first.setdefault(event.key, index)
        keys = list(first)
        conversations = [items[i][1] for i in first.values()]
        payloads = [items[i][0].to_json() for i in first.values()]
        async with self.pool.acquire() as db, db.transaction():
            inserted = await db.fetch(
                "INSERT INTO inbox (key, conversation, payload, status, created, updated)"
                " SELECT k, c, p, 'received', $4, $4 FROM unnest($1::text[], $2::text[],"
                " $3::text[]) WITH ORDINALITY AS t(k, c, p, n) ORDER BY n"
                " ON CONFLICT (key) DO NOTHING RETURNING seq, key",
                keys,
                conversations,
                payloads,
                now,
            )
            if cursors:
                await db.execute(
                    "INSERT INTO cursors (name, value, updated)"
                    " SELECT n, v, $3 FROM unnest($1::text[], $2::text[]) AS t(n, v)"
                    " ON CONFLICT (name) DO UPDATE"
                    " SET value = excluded.value, updated = excluded.updated",
                    list(cursors),
                    list(cursors.values()),
                    now,
                )
        seqs = {row["key"]: row["seq"] for row in inserted}
        out: list[InboxRow | None] = []
        for index, (event, conversation) in enumerate(items):
            if first[event.key] == index and event.key in seqs:
                out.append(
                    InboxRow(
                        seq=seqs[event.key], key=event.key, conversation=conversation, event=event
                    )
                )
            else:
                out.append(None)
        return out

    async def recover(self) -> list[InboxRow]:
        # Another instance may be running these: 'running' rows are taken back only by
        # whoever acquires their lane (see Dispatcher), never reset wholesale here.
        rows = await self.pool.fetch(
            f"SELECT {INBOX_COLUMNS} FROM inbox"
            " WHERE status IN ('received', 'running', 'retry_wait') ORDER BY seq"
        )
        return [inbox_row(row) for row in rows]

    async def pending(self, older_than: float) -> list[InboxRow]:
        rows = await self.pool.fetch(
            f"SELECT {INBOX_COLUMNS} FROM inbox"
            " WHERE status = 'received' AND updated < $1 ORDER BY seq",
            older_than,
        )
        return [inbox_row(row) for row in rows]

    async def begin(self, row: InboxRow) -> None:
        row.attempts += 1
        row.status = "running"
        await self.pool.execute(
            "UPDATE inbox SET status = 'running', attempts = $1, updated = $2 WHERE key = $3",
            row.attempts,
            time.time(),
            row.key,
        )

    async def checkpoint(
        self,
        key: str,
        outbox: Sequence[OutMessage],
        turns: Sequence[Turn],
        changes: MemoryChanges | None = None,
    ) -> list[OutboxRow]:
        now = time.time()
        async with self.pool.acquire() as db, db.transaction():
            await db.execute(
                "UPDATE inbox SET status = 'done', error = NULL, retry_at = NULL, updated = $1"
                " WHERE key = $2",
                now,
                key,
            )
            if outbox:
                await db.executemany(
                    "INSERT INTO outbox (key, event_key, platform, target, payload, status,"
                    " created, updated) VALUES ($1, $2, $3, $4, $5, 'pending', $6, $6)"
                    " ON CONFLICT (key) DO NOTHING",
                    [
                        (m.key, key, m.target.platform, m.target.key, m.to_json(), now)
                        for m in outbox
                    ],
                )
            if turns:
                await db.executemany(
                    "INSERT INTO messages (conversation, role, text, tokens, event_key, position,"
                    " created) VALUES ($1, $2, $3, $4, $5, $6, $7)"
                    " ON CONFLICT (event_key, position) DO NOTHING",
                    [
                        (t.conversation, t.role, t.text, t.tokens, key, position, now)
                        for position, t in enumerate(turns)
                    ],
                )
            if changes:
                await _apply_memory(db, key, changes, now)
        return [OutboxRow(seq=0, key=m.key, event_key=key, message=m) for m in outbox]

    async def retry_later(self, key: str, retry_at: float, error: str) -> None:
        await self.pool.execute(
            "UPDATE inbox SET status = 'retry_wait', retry_at = $1, error = $2, updated = $3"
            " WHERE key = $4",
            retry_at,
            error,
            time.time(),
            key,
        )

    async def bury(self, letter: DeadLetter) -> None:
        now = time.time()
        async with self.pool.acquire() as db, db.transaction():
            await db.execute(
                "UPDATE inbox SET status = 'dead', error = $1, retry_at = NULL, updated = $2"
                " WHERE key = $3",
                letter.error,
                now,
                letter.key,
            )
            await db.execute(
                f"INSERT INTO dead_letters ({DEAD_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
                " ON CONFLICT (key) DO UPDATE SET conversation = excluded.conversation,"
                " event = excluded.event, error = excluded.error,"
                " traceback = excluded.traceback, snapshot = excluded.snapshot,"
                " created = excluded.created",
                letter.key,
                letter.conversation,
                letter.event.to_json(),
                letter.error,
                letter.traceback,
                json.dumps(letter.snapshot, default=str),
                now,
            )

    async def dead_letters(self) -> list[DeadLetter]:
        rows = await self.pool.fetch(f"SELECT {DEAD_COLUMNS} FROM dead_letters ORDER BY created")
        return [dead_letter_row(row) for row in rows]

    async def dead_letter(self, key: str) -> DeadLetter | None:
        row = await self.pool.fetchrow(
            f"SELECT {DEAD_COLUMNS} FROM dead_letters WHERE key = $1", key
        )
        return dead_letter_row(row) if row else None

    async def requeue(self, key: str) -> bool:
        now = time.time()
        async with self.pool.acquire() as db, db.transaction():
            done = await db.execute(
                "UPDATE inbox SET status = 'received', attempts = 0, retry_at = NULL,"
                " updated = $1 WHERE key = $2 AND status = 'dead'",
                now,
                key,
            )
            if done != "UPDATE 0":
                await db.execute("DELETE FROM dead_letters WHERE key = $1", key)
                return True
            done = await db.execute(
                "UPDATE outbox SET status = 'pending', attempts = 0, next_at = NULL,"
                " updated = $1 WHERE key = $2 AND status IN ('dead', 'unknown')",
                now,
                key,
            )
            return bool(done != "UPDATE 0")

    async def inbox_row(self, key: str) -> InboxRow | None:
        row = await self.pool.fetchrow(f"SELECT {INBOX_COLUMNS} FROM inbox WHERE key = $1", key)
        return inbox_row(row) if row else None

    # -- steps ----------------------------------------------------------------------

    async def step(self, key: str, name: str) -> str | None:
        value = await self.pool.fetchval(
            "SELECT result FROM steps WHERE event_key = $1 AND name = $2", key, name
        )
        return str(value) if value is not None else None

    async def save_step(self, key: str, name: str, result: str) -> None:
        await self.pool.execute(
            "INSERT INTO steps (event_key, name, result, created) VALUES ($1, $2, $3, $4)"
            " ON CONFLICT (event_key, name) DO UPDATE SET result = excluded.result,"
            " created = excluded.created",
            key,
            name,
            result,
            time.time(),
        )

    async def steps(self, key: str) -> dict[str, str]:
        rows = await self.pool.fetch("SELECT name, result FROM steps WHERE event_key = $1", key)
        return {row["name"]: row["result"] for row in rows}

    # -- outbox ---------------------------------------------------------------------

    async def unsent(self) -> list[OutboxRow]:
        rows = await self.pool.fetch(
            f"SELECT {OUTBOX_COLUMNS} FROM outbox"
            " WHERE status IN ('pending', 'sending', 'retry_wait') ORDER BY seq"
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
        await self.pool.execute(
            "UPDATE outbox SET status = $1, attempts = coalesce($2, attempts), next_at = $3,"
            " platform_id = coalesce($4, platform_id), error = $5, updated = $6 WHERE key = $7",
            status,
            attempts,
            next_at,
            platform_id,
            error,
            time.time(),
            key,
        )

    async def outbox_rows(self, event_key: str) -> list[OutboxRow]:
        rows = await self.pool.fetch(
            f"SELECT {OUTBOX_COLUMNS} FROM outbox WHERE event_key = $1 ORDER BY seq", event_key
        )
        return [outbox_row(row) for row in rows]

    # -- memory ---------------------------------------------------------------------

    async def history(self, conversation: str, limit: int) -> list[Turn]:
        rows = await self.pool.fetch(
            f"SELECT {TURN_COLUMNS} FROM messages WHERE conversation = $1"
            " ORDER BY id DESC LIMIT $2",
            conversation,
            limit,
        )
        return [turn_row(row) for row in reversed(rows)]

    async def recent(self, conversation: str, budget: int, *, after_id: int = 0) -> Window:
        async def page(after: int, before: int, limit: int) -> list[Any]:
            return list(
                await self.pool.fetch(
                    f"SELECT {TURN_COLUMNS} FROM messages WHERE conversation = $1"
                    " AND summarized = 0 AND id > $2 AND id < $3 ORDER BY id DESC LIMIT $4",
                    conversation, after, before, limit,
                )
            )  # fmt: skip

        return await newest_within(page, budget, after_id)

    async def oldest_unsummarized(
        self, conversation: str, budget: int, *, after_id: int = 0, before_id: int | None = None
    ) -> list[Turn]:
        async def page(after: int, before: int, limit: int) -> list[Any]:
            return list(
                await self.pool.fetch(
                    f"SELECT {TURN_COLUMNS} FROM messages WHERE conversation = $1"
                    " AND summarized = 0 AND id > $2 AND id < $3 ORDER BY id LIMIT $4",
                    conversation, after, before, limit,
                )
            )  # fmt: skip

        return await oldest_within(page, budget, after_id, before_id)

    async def last_message_id(self, conversation: str) -> int:
        value = await self.pool.fetchval(
            "SELECT coalesce(max(id), 0) FROM messages WHERE conversation = $1", conversation
        )
        return int(value)

    async def conversation(self, conversation: str) -> ConversationState:
        row = await self.pool.fetchrow(
            "SELECT persona, summary, summary_tokens, summarized_upto, context_from, settings"
            " FROM conversations WHERE conversation = $1",
            conversation,
        )
        if row is None:
            return ConversationState(conversation)
        persona, summary, summary_tokens, upto, context_from, settings = row
        return ConversationState(
            conversation, persona, summary, summary_tokens, upto, context_from, json.loads(settings)
        )

    async def facts(self, conversation: str, budget: int | None = None) -> list[Fact]:
        rows = await self.pool.fetch(
            "SELECT id, conversation, text, tokens, created FROM facts"
            " WHERE conversation = $1 ORDER BY id DESC",
            conversation,
        )
        facts: list[Fact] = []
        used = 0
        for row in rows:
            fact = Fact(*row)
            if budget is not None and used + fact.tokens > budget:
                break
            facts.append(fact)
            used += fact.tokens
        facts.reverse()
        return facts

    async def usage(self, conversation: str, since: str = "") -> list[Usage]:
        rows = await self.pool.fetch(
            "SELECT conversation, model, day, prompt_tokens, completion_tokens, cost, calls"
            " FROM usage WHERE conversation = $1 AND day >= $2 ORDER BY day, model",
            conversation,
            since,
        )
        return [Usage(*row) for row in rows]

    # -- cursors --------------------------------------------------------------------

    async def cursor(self, name: str) -> str | None:
        value = await self.pool.fetchval("SELECT value FROM cursors WHERE name = $1", name)
        return str(value) if value is not None else None

    async def set_cursor(self, name: str, value: str) -> None:
        await self.pool.execute(
            "INSERT INTO cursors (name, value, updated) VALUES ($1, $2, $3)"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated = excluded.updated",
            name,
            value,
            time.time(),
        )

    async def recent_cursors(self, prefix: str, since: float) -> dict[str, str]:
        rows = await self.pool.fetch(
            "SELECT name, value FROM cursors"
            " WHERE left(name, length($1)) = $1 AND updated >= $2 ORDER BY name",
            prefix,
            since,
        )
        return {str(row[0]): str(row[1]) for row in rows}

    # -- pairing --------------------------------------------------------------------

    async def pairing(self, platform: str, user_id: str) -> Pairing | None:
        row = await self.pool.fetchrow(
            f"SELECT {PAIRING_COLUMNS} FROM pairings WHERE platform = $1 AND user_id = $2",
            platform,
            user_id,
        )
        return Pairing(*row) if row else None

    async def request_pairing(self, platform: str, user_id: str, name: str, code: str) -> Pairing:
        now = time.time()
        await self.pool.execute(
            f"INSERT INTO pairings ({PAIRING_COLUMNS}) VALUES ($1, $2, $3, $4, 'pending', $5, $5)"
            " ON CONFLICT (platform, user_id) DO NOTHING",
            platform,
            user_id,
            name,
            code,
            now,
        )
        found = await self.pairing(platform, user_id)
        assert found is not None
        return found

    async def approve_pairing(self, code: str) -> Pairing | None:
        row = await self.pool.fetchrow(
            f"UPDATE pairings SET status = 'approved', updated = $1 WHERE code = $2"
            f" RETURNING {PAIRING_COLUMNS}",
            time.time(),
            code.strip().upper(),
        )
        return Pairing(*row) if row else None

    async def revoke_pairing(self, platform: str, user_id: str) -> bool:
        done = await self.pool.execute(
            "DELETE FROM pairings WHERE platform = $1 AND user_id = $2", platform, user_id
        )
        return bool(done != "DELETE 0")

    async def pairings(self) -> list[Pairing]:
        rows = await self.pool.fetch(f"SELECT {PAIRING_COLUMNS} FROM pairings ORDER BY created")
        return [Pairing(*row) for row in rows]

    # -- counts ---------------------------------------------------------------------

    async def counts(self) -> dict[str, dict[str, int]]:
        inbox = await self.pool.fetch("SELECT status, count(*) FROM inbox GROUP BY status")
        outbox = await self.pool.fetch("SELECT status, count(*) FROM outbox GROUP BY status")
        return {
            "inbox": {row[0]: int(row[1]) for row in inbox},
            "outbox": {row[0]: int(row[1]) for row in outbox},
        }

    async def spend(self, since: str) -> dict[str, tuple[int, float]]:
        rows = await self.pool.fetch(
            "SELECT model, sum(prompt_tokens + completion_tokens), sum(cost) FROM usage"
            " WHERE day >= $1 GROUP BY model ORDER BY model",
            since,
        )
        return {str(row[0]): (int(row[1]), float(row[2])) for row in rows}

    async def activity(self) -> dict[str, dict[str, float]]:
        received = await self.pool.fetch(
            "SELECT split_part(conversation, ':', 1), max(created) FROM inbox GROUP BY 1"
        )
        sent = await self.pool.fetch(
            "SELECT platform, max(updated) FROM outbox WHERE status = 'sent' GROUP BY platform"
        )
        out: dict[str, dict[str, float]] = {}
        for kind, rows in (("received", received), ("sent", sent)):
            for platform, when in rows:
                out.setdefault(str(platform), {})[kind] = float(when)
        return out


async def _apply_memory(
    db: asyncpg.Connection, key: str, changes: MemoryChanges, now: float
) -> None:
    """The checkpoint's memory writes, inside its transaction; each one idempotent."""
    conversation = changes.conversation
    if changes.state is not None:
        s = changes.state
        await db.execute(
            "INSERT INTO conversations (conversation, persona, summary, summary_tokens,"
            " summarized_upto, context_from, settings, updated)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
            " ON CONFLICT (conversation) DO UPDATE SET persona = excluded.persona,"
            " summary = excluded.summary, summary_tokens = excluded.summary_tokens,"
            " summarized_upto = excluded.summarized_upto, context_from = excluded.context_from,"
            " settings = excluded.settings, updated = excluded.updated",
            conversation,
            s.persona,
            s.summary,
            s.summary_tokens,
            s.summarized_upto,
            s.context_from,
            json.dumps(s.settings),
            now,
        )
    if changes.facts:
        await db.executemany(
            "INSERT INTO facts (conversation, text, tokens, event_key, position, created)"
            " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (event_key, position) DO NOTHING",
            [
                (conversation, text, tokens, key, position, now)
                for position, (text, tokens) in enumerate(changes.facts)
            ],
        )
    if changes.forget:
        await db.execute(
            "DELETE FROM facts WHERE conversation = $1 AND id = ANY($2::bigint[])",
            conversation,
            list(changes.forget),
        )
    if changes.summarized is not None:
        first, last = changes.summarized
        await db.execute(
            "UPDATE messages SET summarized = 1"
            " WHERE conversation = $1 AND summarized = 0 AND id BETWEEN $2 AND $3",
            conversation,
            first,
            last,
        )
    for call in changes.usage:
        inserted = await db.fetchval(
            "INSERT INTO usage_calls (event_key, name, conversation, model, day, prompt_tokens,"
            " completion_tokens, cost, created) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            " ON CONFLICT (event_key, name) DO NOTHING RETURNING 1",
            key,
            call.name,
            conversation,
            call.model,
            call.day,
            call.prompt_tokens,
            call.completion_tokens,
            call.cost,
            now,
        )
        if inserted:  # count a call in the day's totals once, however often we checkpoint
            await db.execute(
                "INSERT INTO usage (conversation, day, model, prompt_tokens, completion_tokens,"
                " cost, calls) VALUES ($1, $2, $3, $4, $5, $6, 1)"
                " ON CONFLICT (conversation, day, model) DO UPDATE SET"
                " prompt_tokens = usage.prompt_tokens + excluded.prompt_tokens,"
                " completion_tokens = usage.completion_tokens + excluded.completion_tokens,"
                " cost = usage.cost + excluded.cost, calls = usage.calls + 1",
                conversation,
                call.day,
                call.model,
                call.prompt_tokens,
                call.completion_tokens,
                call.cost,
            )
