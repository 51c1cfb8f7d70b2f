"""The SQLite dialect's schema: every table, index and trigger, and how a file is
brought up to date.

Migrations are append-only: a file records the number it has run in ``PRAGMA
user_version``, and an existing entry is never edited (a file that ran it would never
see the edit). A new table or column is a new entry at the end.
"""

from __future__ import annotations

import sqlite3

from tether.memory.sqlite import backup
from tether.memory.sqlite.writer import connect

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
    # 2: a fact retired by reflection is marked (when), kept out of prompts, not deleted
    """
    ALTER TABLE facts ADD COLUMN retired REAL;
    """,
    # 3: the files of replies, by sha256, stored before the outbox rows naming them
    """
    CREATE TABLE blobs (
        sha256  TEXT PRIMARY KEY,
        data    BLOB NOT NULL,
        size    INTEGER NOT NULL,
        created REAL NOT NULL
    ) WITHOUT ROWID;
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
        created      REAL NOT NULL,
        updated      REAL NOT NULL
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
    # the inbox itself in the move's own transaction (memory/console.py, Moved)
    """
    CREATE TABLE console_revoked (
        id    TEXT PRIMARY KEY,
        until REAL NOT NULL,
        claim TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE inbox_history (
        seq      INTEGER PRIMARY KEY,
        key      TEXT NOT NULL,
        status   TEXT NOT NULL,
        before   TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        error    TEXT,
        retry_at REAL,
        at       REAL NOT NULL
    );
    CREATE INDEX inbox_history_key ON inbox_history(key, at);
    CREATE TRIGGER inbox_moved AFTER UPDATE OF status ON inbox
    WHEN OLD.status <> NEW.status
        AND NOT (OLD.status = 'received' AND NEW.status = 'running' AND NEW.attempts <= 1)
        AND NOT (OLD.status IN ('received', 'running') AND NEW.status = 'done')
    BEGIN
        INSERT INTO inbox_history (key, status, before, attempts, error, retry_at, at)
        VALUES (NEW.key, NEW.status, OLD.status, NEW.attempts, NEW.error, NEW.retry_at,
                NEW.updated);
    END;
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
        deadline     REAL,
        status       TEXT NOT NULL,
        question     TEXT NOT NULL,
        detail       TEXT NOT NULL,
        answer       TEXT,
        answered_by  TEXT,
        created      REAL NOT NULL,
        resolved     REAL
    ) WITHOUT ROWID;
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
        deadline    REAL NOT NULL,
        budget      INTEGER,
        result      TEXT,
        started_by  TEXT NOT NULL,
        created     REAL NOT NULL,
        updated     REAL NOT NULL
    );
    CREATE INDEX tasks_parent ON tasks(parent, created);
    CREATE INDEX tasks_open ON tasks(parent) WHERE status = 'running';
    CREATE INDEX tasks_created ON tasks(created);
    """,
    # recall (memory/recall): whose conversation each turn is in (the person of a DM or
    # of a per-user group session; NULL for a shared chat, and for the rows before it),
    # and the full-text index of every turn, kept by triggers in the transaction that
    # writes the turn, so it can never disagree with the history; trigram, so Chinese,
    # Japanese and Korean are found as well as any substring of three characters
    """
    ALTER TABLE messages ADD COLUMN owner TEXT;
    CREATE INDEX messages_owner ON messages(owner, id) WHERE owner IS NOT NULL;
    CREATE VIRTUAL TABLE messages_fts USING fts5(
        text, content='messages', content_rowid='id', tokenize='trigram'
    );
    CREATE TRIGGER messages_fts_added AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, text) VALUES (new.id, new.text);
    END;
    CREATE TRIGGER messages_fts_removed AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
    END;
    CREATE TRIGGER messages_fts_changed AFTER UPDATE OF text ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO messages_fts(rowid, text) VALUES (new.id, new.text);
    END;
    INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
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
        linked   REAL NOT NULL
    );
    CREATE INDEX people_person ON people(person);
    CREATE TABLE link_codes (
        code     TEXT PRIMARY KEY,
        identity TEXT NOT NULL,
        expires  REAL NOT NULL
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
        at          REAL NOT NULL,
        fingerprint TEXT NOT NULL,
        identities  INTEGER NOT NULL,
        counts      TEXT NOT NULL
    );
    """,
    # semantic recall (memory/embeddings): each turn's vector of an embedding model, a
    # float32 BLOB, written once by the indexer and removed with its turn
    """
    CREATE TABLE message_vectors (
        message_id INTEGER NOT NULL,
        model      TEXT NOT NULL,
        vector     BLOB NOT NULL,
        PRIMARY KEY (message_id, model)
    );
    CREATE TRIGGER message_vectors_removed AFTER DELETE ON messages BEGIN
        DELETE FROM message_vectors WHERE message_id = old.id;
    END;
    """,
    # handler state (memory/state): a key of a chat's or a person's, written by checkpoints
    """CREATE TABLE handler_state (scope TEXT NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL,
        updated REAL NOT NULL, PRIMARY KEY (scope, name)) WITHOUT ROWID;""",
    # the recall index's new turns written by the writer's commit, one statement for the
    # batch (writer.index_turns), not a trigger a row: FTS5 costs a third as much a row
    # so (bench/NOTES.md); in the same transaction, so the index still cannot disagree
    "DROP TRIGGER messages_fts_added;",
]


def migrate(file: str, synchronous: str, label: str) -> None:
    """Run the migrations ``file`` has not run yet, all in one transaction.

    Blocking (the store runs it in a thread before its writer process starts); ``label``
    is the path the user configured, for the error message.
    """
    db = connect(file, synchronous)
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > len(MIGRATIONS):
                raise RuntimeError(backup.too_new(file, label, version, len(MIGRATIONS)))
            if 0 < version < len(MIGRATIONS):
                backup.pre_migration(file, version)  # under the write lock: this moment
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
