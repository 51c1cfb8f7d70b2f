"""The SQLite store's writer: a child process that runs each group commit it is sent.

Why a process: in one process the gateway's event loop and a writer thread fight over
the GIL — ``sqlite3`` releases it around every row's step and has to win it back from
the busy loop — and inline on the loop the writes take a fifth of the loop's time. Here
they run on the machine's other core, and nothing the writer waits for (another
process's write lock, an fsync, a WAL checkpoint) can stall the loop.

The protocol on stdin/stdout is a frame per message: a 4-byte big-endian length, then a
codec byte and the message: ``marshal`` (built into the interpreter) for what it can
encode — every request and reply of a working store: strings, numbers, bytes, None,
tuples, lists, dicts — else ``pickle`` (exceptions, a parameter of another type), which
the writer imports only when a message needs it: ``pickle`` and the ``re`` it brings are
0.7 MB of the writer's resident memory for its whole life. The first reply is
``(True, READY)``, or ``(False, exception)`` when the database cannot be opened; then
each request is ``(accepts, groups, probe)`` and its reply ``(True, results)`` after
COMMIT or ``(False, exception)`` after ROLLBACK.
EOF on stdin — the gateway closed the store, or died — ends the process after the batch
in hand; SIGINT and SIGTERM do not. Only the standard library is imported, so the
process starts in a few milliseconds (``python -I -S``), and not ``typing`` either (the
annotations are for mypy; it would be 0.5 MB more, bench/idle.py).

The writer never creates a database: the store creates and migrates the file before the
first writer starts, and every writer opens it read-write only, and only if it is still
that file (its device and inode, given on the command line). A writer started after the
file was deleted — or the directory removed and made again — would otherwise make an
empty database without tables, and every write would fail until a restart. After each
commit it checks the file is still there: SQLite goes on writing to a deleted file's
open descriptor without a word, and a commit that reached no file must not be
acknowledged. Anything it cannot answer through the pipe it reports as one JSON line on
stderr, which the gateway relays into its own log.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import signal
import sqlite3
import struct
import sys
import time
from collections.abc import Sequence

#: ``typing.TYPE_CHECKING`` without importing ``typing`` (mypy reads this name as True).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any

    #: One accept call: its ``(key, conversation, payload)`` items and the cursors it moves.
    Accept = tuple[Sequence[tuple[str, str, str]], dict[str, str]]
    #: One statement and the parameter rows it runs with, in commit order.
    Group = tuple[str, Sequence[Sequence[Any]]]

HEADER = struct.Struct("!I")
#: The first byte of a frame's body: how the rest is encoded.
_MARSHAL, _PICKLE = b"m", b"p"
#: The first reply: signals are set and the database is open.
READY = "ready"
#: Most keys one ``IN (...)`` lookup binds.
_MAX_KEYS_PER_QUERY = 500


class DatabaseMoved(Exception):
    """The database file was deleted or replaced since the gateway opened it."""


def connect(
    path: str, synchronous: str, busy_timeout_ms: int = 10_000, *, create: bool = True
) -> sqlite3.Connection:
    """Open ``path``; with ``create=False`` only an existing file, read-write."""
    if create:
        db = sqlite3.connect(path, isolation_level=None)
        # Before WAL: a new file's header is written then, with this; an existing file
        # keeps its own mode (converting one takes a VACUUM: memory/retention/sizes.py).
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")
    else:
        db = sqlite3.connect(_uri(path) + "?mode=rw", isolation_level=None, uri=True)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
    return db


def _uri(path: str) -> str:
    """``file:`` URI of ``path``, escaping what a URI would read as its own syntax
    (not through ``urllib.parse``: it costs the writer's start 25 ms of imports)."""
    escaped = os.path.abspath(path).replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    return "file:" + escaped


def identity(path: str) -> str:
    """Which file ``path`` is now: ``device:inode`` (raises if there is none)."""
    stat = os.stat(path)
    return f"{stat.st_dev}:{stat.st_ino}"


def check_same_file(path: str, expected: str) -> None:
    """Raise :class:`DatabaseMoved` unless ``path`` is still the file ``expected`` names."""
    try:
        found = identity(path)
    except FileNotFoundError:
        found = None
    if found != expected:
        what = "deleted" if found is None else "replaced"
        raise DatabaseMoved(
            f"{path} was {what} while the gateway was running; restore it and restart"
        )


def commit(
    db: sqlite3.Connection,
    accepts: Sequence[Accept],
    groups: Sequence[Group],
    probe: bool = False,
) -> list[list[int | None]]:
    """Everything in ONE transaction; the inbox sequence numbers of accepted events
    (None for a key already there), per accept call. ``probe`` also rewrites a page that
    always reaches the disk (the header's ``user_version``, unchanged), so that a batch
    with nothing else in it still finds out whether the database can be written."""
    db.execute("BEGIN IMMEDIATE")
    try:
        newest = newest_turn(db)
        results = insert_accepts(db, accepts) if accepts else []
        for sql, rows in groups:
            db.executemany(sql, rows)
        index_turns(db, newest)
        if probe:
            (version,) = db.execute("PRAGMA user_version").fetchone()
            db.execute(f"PRAGMA user_version={int(version)}")
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):  # the original error is what matters
            db.execute("ROLLBACK")
        raise
    return results


def newest_turn(db: sqlite3.Connection) -> int:
    """The newest turn's id (a lookup at the end of the primary key)."""
    return int(db.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0])


def index_turns(db: sqlite3.Connection, newest: int) -> None:
    """Index for search (``messages_fts``) the turns written after ``newest``, in the
    transaction that wrote them: every turn is written through :func:`commit`, and a new
    turn's id is above every id there was (``INTEGER PRIMARY KEY`` takes the largest plus
    one). One statement for the batch costs FTS5 a third of what a trigger a row did."""
    if newest_turn(db) > newest:
        db.execute(
            "INSERT INTO messages_fts(rowid, text) SELECT id, text FROM messages WHERE id > ?",
            (newest,),
        )


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
    return decode(stream.read(size))


def frame(message: Any) -> bytes:
    """``message`` as one frame: marshalled when marshal can, else pickled."""
    try:
        data = _MARSHAL + marshal.dumps(message)
    except ValueError:  # "unmarshallable object": an exception, a subclass, anything else
        import pickle

        data = _PICKLE + pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


def decode(data: bytes) -> Any:
    """The message of a frame's body (what follows its length)."""
    codec, body = data[:1], memoryview(data)[1:]
    if codec == _MARSHAL:
        return marshal.loads(body)
    if codec != _PICKLE:
        raise ValueError(f"not a frame of this protocol (codec {codec!r})")
    import pickle

    return pickle.loads(body)


def reply_frame(ok: bool, result: Any) -> bytes:
    try:
        return frame((ok, result))
    except Exception:  # an exception that does not pickle: keep its type's name and text
        return frame((False, RuntimeError(f"{type(result).__name__}: {result}")))


def open_database(path: str, synchronous: str, expected: str) -> sqlite3.Connection:
    """The gateway's database, read-write, only if it is still the file it opened."""
    check_same_file(path, expected)
    db = connect(path, synchronous, create=False)
    try:
        check_same_file(path, expected)  # not swapped between the check and the open
    except DatabaseMoved:
        db.close()
        raise
    return db


def main(argv: Sequence[str]) -> None:
    # Ctrl-C reaches the whole process group and systemd signals the whole cgroup: the
    # gateway drains on those signals and still needs its writer. EOF ends the writer.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _script, path, expected, synchronous = argv
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    try:
        db = open_database(path, synchronous, expected)
    except (OSError, sqlite3.Error, DatabaseMoved) as exc:
        replies.write(reply_frame(False, _portable(exc)))
        replies.flush()
        return
    replies.write(reply_frame(True, READY))
    replies.flush()
    while (request := read_frame(requests)) is not None:
        moved = None
        try:
            results = commit(db, *request)
            check_same_file(path, expected)
            reply = reply_frame(True, results)
        except DatabaseMoved as exc:  # committed to a file that is gone: not durable
            reply, moved = reply_frame(False, _portable(exc)), exc
        except Exception as exc:
            reply = reply_frame(False, exc)
        replies.write(reply)
        replies.flush()
        if moved:
            break  # every later commit would reach no file; a new writer will say so
    db.close()


def _portable(exc: Exception) -> Exception:
    """``exc`` as the gateway can unpickle it: this module runs as ``__main__`` here, so
    its own exception classes would not resolve there."""
    return RuntimeError(str(exc)) if isinstance(exc, DatabaseMoved) else exc


def report(exc: BaseException) -> None:
    """What ended the writer, as one JSON line on stderr (the gateway relays it)."""
    import json
    import traceback

    line = json.dumps(
        {
            "event": "store.writer_crashed",
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": "".join(traceback.format_exception(exc)),
        }
    )
    with contextlib.suppress(OSError):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


if __name__ == "__main__":
    try:
        main(sys.argv)
    except (BrokenPipeError, KeyboardInterrupt):  # the gateway is gone
        pass
    except BaseException as exc:
        report(exc)
        sys.exit(1)
