"""The SQLite store's writer: a child process that runs each group commit it is sent.

Why a process: in one process the gateway's event loop and a writer thread fight over
the GIL — ``sqlite3`` releases it around every row's step and has to win it back from
the busy loop — and inline on the loop the writes take a fifth of the loop's time. Here
they run on the machine's other core, and nothing the writer waits for (another
process's write lock, an fsync, a WAL checkpoint) can stall the loop.

The protocol on stdin/stdout is a frame per message: a 4-byte big-endian length, then a
pickle. The first reply is ``(True, READY)``; then each request is ``(accepts, groups)``
and its reply ``(True, results)`` after COMMIT or ``(False, exception)`` after ROLLBACK.
EOF on stdin — the gateway closed the store, or died — ends the process after the batch
in hand; SIGINT and SIGTERM do not. Only the standard library is imported, so the
process starts in a few milliseconds (``python -I -S``).
"""

from __future__ import annotations

import contextlib
import pickle
import signal
import sqlite3
import struct
import sys
import time
from collections.abc import Sequence
from typing import IO, Any

HEADER = struct.Struct("!I")
#: The first reply: signals are set and the database is open.
READY = "ready"
#: Most keys one ``IN (...)`` lookup binds.
_MAX_KEYS_PER_QUERY = 500

#: One accept call: its ``(key, conversation, payload)`` items and the cursors it moves.
Accept = tuple[Sequence[tuple[str, str, str]], dict[str, str]]
#: One statement and the parameter rows it runs with, in commit order.
Group = tuple[str, Sequence[Sequence[Any]]]


def connect(path: str, synchronous: str, busy_timeout_ms: int = 10_000) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
    return db


def commit(
    db: sqlite3.Connection, accepts: Sequence[Accept], groups: Sequence[Group]
) -> list[list[int | None]]:
    """Everything in ONE transaction; the inbox sequence numbers of accepted events
    (None for a key already there), per accept call."""
    db.execute("BEGIN IMMEDIATE")
    try:
        results = insert_accepts(db, accepts) if accepts else []
        for sql, rows in groups:
            db.executemany(sql, rows)
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):  # the original error is what matters
            db.execute("ROLLBACK")
        raise
    return results


def insert_accepts(db: sqlite3.Connection, accepts: Sequence[Accept]) -> list[list[int | None]]:
    keys = [key for items, _cursors in accepts for key, _conversation, _payload in items]
    known: set[str] = set()
    for start in range(0, len(keys), _MAX_KEYS_PER_QUERY):
        chunk = keys[start : start + _MAX_KEYS_PER_QUERY]
        marks = ",".join("?" * len(chunk))
        rows = db.execute(f"SELECT key FROM inbox WHERE key IN ({marks})", chunk)
        known.update(key for (key,) in rows)
    seq = db.execute("SELECT coalesce(max(seq), 0) FROM inbox").fetchone()[0]
    now = time.time()
    inserts: list[tuple[Any, ...]] = []
    cursors: dict[str, str] = {}
    results: list[list[int | None]] = []
    for items, moved in accepts:
        seqs: list[int | None] = []
        for key, conversation, payload in items:
            if key in known:
                seqs.append(None)
                continue
            known.add(key)
            seq += 1
            inserts.append((seq, key, conversation, payload, now, now))
            seqs.append(seq)
        results.append(seqs)
        cursors.update(moved)
    if inserts:
        db.executemany(
            "INSERT INTO inbox (seq, key, conversation, payload, status, created, updated)"
            " VALUES (?, ?, ?, ?, 'received', ?, ?)",
            inserts,
        )
    if cursors:
        db.executemany(
            "INSERT INTO cursors (name, value, updated) VALUES (?, ?, ?)"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated = excluded.updated",
            [(name, value, now) for name, value in cursors.items()],
        )
    return results


def read_frame(stream: IO[bytes]) -> Any:
    """The next message, or None at EOF."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    return pickle.loads(stream.read(size))


def frame(message: Any) -> bytes:
    data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def reply_frame(ok: bool, result: Any) -> bytes:
    try:
        return frame((ok, result))
    except Exception:  # an exception that does not pickle: keep its type's name and text
        return frame((False, RuntimeError(f"{type(result).__name__}: {result}")))


def main(argv: Sequence[str]) -> None:
    # Ctrl-C reaches the whole process group and systemd signals the whole cgroup: the
    # gateway drains on those signals and still needs its writer. EOF ends the writer.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _script, path, synchronous = argv
    db = connect(path, synchronous)
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    replies.write(reply_frame(True, READY))
    replies.flush()
    while (request := read_frame(requests)) is not None:
        try:
            reply = reply_frame(True, commit(db, *request))
        except Exception as exc:
            reply = reply_frame(False, exc)
        replies.write(reply)
        replies.flush()
    db.close()


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):  # the gateway is gone
        main(sys.argv)
