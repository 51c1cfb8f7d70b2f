"""The PostgreSQL dialect's schema: every table, index, function and trigger, and how a
database is brought up to date.

Migrations are append-only: the ``tether_schema`` table records the numbers a database
has run, and an existing entry is never edited. Several instances may start at once;
one migrates while the others wait on an advisory lock.
"""

from __future__ import annotations

import asyncpg

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
    # 2: usage totals kept by a trigger, as SQLite's schema keeps them: a call is added
    # to its day once, when its usage_calls row is first inserted
    """
    CREATE FUNCTION usage_calls_sum() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO usage
            (conversation, day, model, prompt_tokens, completion_tokens, cost, calls)
        VALUES
            (NEW.conversation, NEW.day, NEW.model, NEW.prompt_tokens, NEW.completion_tokens,
             NEW.cost, 1)
        ON CONFLICT (conversation, day, model) DO UPDATE SET
            prompt_tokens = usage.prompt_tokens + excluded.prompt_tokens,
            completion_tokens = usage.completion_tokens + excluded.completion_tokens,
            cost = usage.cost + excluded.cost,
            calls = usage.calls + 1;
        RETURN NULL;
    END;
    $$;
    CREATE TRIGGER usage_calls_sum AFTER INSERT ON usage_calls
        FOR EACH ROW EXECUTE FUNCTION usage_calls_sum();
    """,
    # 3: a fact retired by reflection is marked (when), kept out of prompts, not deleted
    """
    ALTER TABLE facts ADD COLUMN retired DOUBLE PRECISION;
    """,
    # 4: the files of replies, by sha256, stored before the outbox rows naming them
    """
    CREATE TABLE blobs (
        sha256  TEXT PRIMARY KEY,
        data    BYTEA NOT NULL,
        size    BIGINT NOT NULL,
        created DOUBLE PRECISION NOT NULL
    );
    """,
    # reminders and recurring jobs made from chat (memory/reminders.py)
    """
    CREATE TABLE reminders (
        id           TEXT PRIMARY KEY,
        conversation TEXT NOT NULL,
        target       TEXT NOT NULL,
        text         TEXT NOT NULL,
        cron         TEXT,
        at           TEXT,
        timezone     TEXT NOT NULL,
        status       TEXT NOT NULL,
        event_key    TEXT NOT NULL,
        created      DOUBLE PRECISION NOT NULL,
        updated      DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX reminders_conversation ON reminders(conversation, status);
    """,
    # who made a reminder (its maker may cancel it, and it counts against their cap);
    # the caps count a chat's and a person's active ones from these indexes
    """
    ALTER TABLE reminders ADD COLUMN sender TEXT NOT NULL DEFAULT '';
    CREATE INDEX reminders_target ON reminders(target, status);
    CREATE INDEX reminders_sender ON reminders(sender, status);
    """,
    # the console: spent tokens (logouts, used login forms) for every instance and
    # restart (memory/revocations.py); each event's moves off the plain path, written by
    # the inbox itself in the move's own transaction (memory/console.py, Moved). The
    # trigger's WHEN is checked without calling the function, so the plain path pays
    # no PL/pgSQL call.
    """
    CREATE TABLE console_revoked (
        id    TEXT PRIMARY KEY,
        until DOUBLE PRECISION NOT NULL,
        claim TEXT NOT NULL
    );
    CREATE TABLE inbox_history (
        seq      BIGSERIAL PRIMARY KEY,
        key      TEXT NOT NULL,
        status   TEXT NOT NULL,
        before   TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        error    TEXT,
        retry_at DOUBLE PRECISION,
        at       DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX inbox_history_key ON inbox_history(key, at);
    CREATE FUNCTION inbox_moved() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO inbox_history (key, status, before, attempts, error, retry_at, at)
        VALUES (NEW.key, NEW.status, OLD.status, NEW.attempts, NEW.error, NEW.retry_at,
                NEW.updated);
        RETURN NULL;
    END;
    $$;
    CREATE TRIGGER inbox_moved AFTER UPDATE OF status ON inbox FOR EACH ROW
    WHEN (OLD.status <> NEW.status
        AND NOT (OLD.status = 'received' AND NEW.status = 'running' AND NEW.attempts <= 1)
        AND NOT (OLD.status IN ('received', 'running') AND NEW.status = 'done'))
    EXECUTE FUNCTION inbox_moved();
    """,
    # turns that wait (memory/waits.py): what each suspended turn waits for, kept
    # after it ends (an approval's audit); open ones by conversation and by deadline
    """
    CREATE TABLE waits (
        id           TEXT PRIMARY KEY,
        event_key    TEXT NOT NULL,
        position     INTEGER NOT NULL,
        conversation TEXT NOT NULL,
        kind         TEXT NOT NULL,
        chat         TEXT NOT NULL,
        token        TEXT NOT NULL UNIQUE,
        sender       TEXT,
        deadline     DOUBLE PRECISION,
        status       TEXT NOT NULL,
        question     TEXT NOT NULL,
        detail       TEXT NOT NULL,
        answer       TEXT,
        answered_by  TEXT,
        created      DOUBLE PRECISION NOT NULL,
        resolved     DOUBLE PRECISION
    );
    CREATE INDEX waits_event ON waits(event_key, position);
    CREATE INDEX waits_open ON waits(conversation, created) WHERE status = 'open';
    CREATE INDEX waits_due ON waits(deadline) WHERE status = 'open';
    CREATE INDEX waits_kind ON waits(kind, created);
    CREATE INDEX waits_ended_by ON waits(answered_by);
    """,
    # a reminder made from chat may be a prompt for the agent instead of a text to post
    # (memory/reminders.py); the rows before it are text reminders
    """
    ALTER TABLE reminders ADD COLUMN prompt INTEGER NOT NULL DEFAULT 0;
    """,
    # background tasks and sub-agents (memory/tasks.py): the ledger of each task's
    # course; the running ones by parent and in all (the bounds' counts)
    """
    CREATE TABLE tasks (
        id          TEXT PRIMARY KEY,
        event_key   TEXT NOT NULL,
        parent      TEXT NOT NULL,
        target      TEXT NOT NULL,
        parent_task TEXT,
        depth       INTEGER NOT NULL,
        goal        TEXT NOT NULL,
        agent       TEXT,
        sender      TEXT NOT NULL,
        status      TEXT NOT NULL,
        deadline    DOUBLE PRECISION NOT NULL,
        budget      INTEGER,
        result      TEXT,
        started_by  TEXT NOT NULL,
        created     DOUBLE PRECISION NOT NULL,
        updated     DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX tasks_parent ON tasks(parent, created);
    CREATE INDEX tasks_open ON tasks(parent) WHERE status = 'running';
    CREATE INDEX tasks_created ON tasks(created);
    """,
    # recall (memory/recall): whose conversation each turn is in (the person of a DM or
    # of a per-user group session; NULL for a shared chat, and for the rows before it),
    # and the full-text index of every turn: an expression index, so PostgreSQL keeps it
    # in the transaction that writes the turn. Words by the 'simple' configuration (no
    # language's stemming); text without spaces (Chinese, Japanese) is matched as a
    # substring within the search's scope (memory/recall/postgres.py)
    """
    ALTER TABLE messages ADD COLUMN owner TEXT;
    CREATE INDEX messages_owner ON messages (owner, id) WHERE owner IS NOT NULL;
    CREATE INDEX messages_search ON messages USING gin (to_tsvector('simple', text));
    """,
    # one person across chats and platforms (memory/people/links.py): each linked identity
    # (``platform:user``) names its person (the identity that issued the first link
    # code); the pending one-time link codes; whom a fact is about (NULL: the chat it
    # was said in, as every fact before it), and whether it was said in a DM (then it is
    # shown in the person's DMs only, never in a group where others read the answer)
    """
    CREATE TABLE people (
        identity TEXT PRIMARY KEY,
        person   TEXT NOT NULL,
        linked   DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX people_person ON people(person);
    CREATE TABLE link_codes (
        code     TEXT PRIMARY KEY,
        identity TEXT NOT NULL,
        expires  DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX link_codes_identity ON link_codes(identity);
    ALTER TABLE facts ADD COLUMN owner TEXT;
    ALTER TABLE facts ADD COLUMN in_dm INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX facts_owner ON facts(owner, id) WHERE owner IS NOT NULL;
    """,
    # erasures of a person (memory/people/erasure.py): when, a hash of the identities (not
    # them), and how many rows each table lost; never what they said
    """
    CREATE TABLE erasures (
        at          DOUBLE PRECISION NOT NULL,
        fingerprint TEXT NOT NULL,
        identities  INTEGER NOT NULL,
        counts      TEXT NOT NULL
    );
    """,
    # semantic recall (memory/embeddings): each turn's vector of an embedding model
    # (pgvector is not assumed: an array, compared by the server in a scan of the
    # search's scope), written once by the indexer and removed with its turn
    """
    CREATE TABLE message_vectors (
        message_id BIGINT NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        model      TEXT NOT NULL,
        vector     REAL[] NOT NULL,
        PRIMARY KEY (message_id, model)
    );
    """,
    # handler state (memory/state): a key of a chat's or a person's, written by checkpoints
    """
    CREATE TABLE handler_state (
        scope   TEXT NOT NULL,
        name    TEXT NOT NULL,
        value   TEXT NOT NULL,
        updated DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (scope, name)
    );
    """,
]


async def migrate(pool: asyncpg.Pool) -> None:
    """Run the migrations the database has not run yet, in one transaction."""
    async with pool.acquire() as db, db.transaction():
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
