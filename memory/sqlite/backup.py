"""A SQLite store's backups: taken online, checked before they are trusted, restored by
a rename that leaves the replaced file beside it.

Why the backup API and not ``cp``: a running gateway's writer commits into the WAL, so
the database file alone is not the store, and a copy of the file and its WAL taken one
after the other is not one moment of it. :meth:`sqlite3.Connection.backup` in a single
step (``pages=-1``) copies every page inside one read transaction of its own connection:
a snapshot, taken beside a gateway that goes on writing (a WAL reader blocks no writer),
and never a half-committed turn. A stepwise copy would start over each time the
gateway committed, forever under steady traffic. The source is opened read-only and
this module never takes the gateway's lock: a backup is a reader like any other.

A backup is written beside its target, switched to a rollback journal (one
self-contained file, no ``-wal`` to lose on the way to another disk), fsynced and
renamed into place, so a backup path holds a whole backup or the one before it.

Restore is the reverse, with two hazards of its own. A ``-wal`` left beside the store
would be replayed into the restored file at its first open, and be corruption; so the
old store is checkpointed first (its WAL folded in and emptied), and what cannot be
folded in goes with the old file under its new name. And the swap is one ``rename``:
at every instant the store's name holds the old database or the restored one. Whoever
calls :func:`replace_store` holds the gateway's lock on the store (gateway/ops/lockfile.py):
this floor cannot import it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import glob
import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import structlog

log = structlog.get_logger("tether.sqlite")

#: The first 16 bytes of every SQLite 3 database file.
MAGIC = b"SQLite format 3\x00"
#: The tables whose row counts a check reports (those the file has).
COUNTED = ("inbox", "outbox", "messages", "facts", "steps", "dead_letters", "reminders")
_PRE_MIGRATION = re.compile(r"\.pre-v(\d+)\.bak$")


class BackupError(Exception):
    """A file that cannot be trusted as a backup (or a store), in one line saying why."""


@dataclass(frozen=True)
class Inspection:
    """What a check of a database file found."""

    path: str
    bytes: int
    version: int
    integrity: list[str]
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def intact(self) -> bool:
        return self.integrity == ["ok"]


@dataclass(frozen=True)
class Restored:
    version: int
    kept: str | None  # the replaced store's new name; None when there was none


def copy(source: str, target: str) -> Inspection:
    """An online, consistent copy of the database ``source`` at ``target`` (replaced
    atomically if it exists); its path, size and schema version, no integrity check."""
    partial = f"{target}.partial-{os.getpid()}"
    try:
        with contextlib.closing(_read_only(source)) as src:
            src.execute("PRAGMA busy_timeout=10000")
            _copy_into(src, partial)
        _durable_rename(partial, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)
        raise
    with contextlib.closing(_read_only(target)) as db:
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
    return Inspection(target, os.path.getsize(target), version, integrity=[])


def _copy_into(src: sqlite3.Connection, path: str) -> None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as dst:
        src.backup(dst)  # pages=-1: one step, one read transaction, one moment
        dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file


def pre_migration(file: str, version: int) -> str:
    """Back ``file`` (at schema ``version``) up as ``<file>.pre-v<version>.bak`` before
    a migration changes it; called while the migration holds the write lock, so the copy
    is exactly what the migration starts from."""
    target = f"{file}.pre-v{version}.bak"
    copied = copy(file, target)
    log.warning(
        "store.backed_up_before_migration",
        path=target,
        bytes=copied.bytes,
        version=version,
        why="a schema migration changes the file: this is the store as it was",
    )
    return target


def pre_migration_backups(file: str) -> list[tuple[int, str]]:
    """The automatic backups beside ``file``: (schema version, path), oldest version first."""
    folder = Path(file).parent
    prefix = Path(file).name + ".pre-v"
    found = []
    for entry in folder.glob(glob.escape(prefix) + "*.bak"):
        matched = _PRE_MIGRATION.search(entry.name)
        if matched and entry.name.startswith(prefix):
            found.append((int(matched.group(1)), str(entry)))
    return sorted(found)


def newest_usable_backup(file: str, newest: int) -> tuple[int, str] | None:
    """The pre-migration backup of ``file`` a program at schema ``newest`` can open, the
    latest such; None if there is none."""
    usable = [found for found in pre_migration_backups(file) if found[0] <= newest]
    return usable[-1] if usable else None


def too_new(file: str, label: str, version: int, newest: int) -> str:
    """Why a store at schema ``version`` is refused by a program at ``newest``, and the
    way back: the newest automatic backup this program can open, when there is one (a
    downgrade after an upgrade migrated the file)."""
    problem = f"{label}: schema version {version} is newer than this Tether ({newest})"
    found = newest_usable_backup(file, newest)
    if found is None:
        return f"{problem}; upgrade Tether (no backup from before the migration is beside it)"
    backup_version, path = found
    return (
        f"{problem}; upgrade Tether, or go back to the backup taken before the migration:"
        f" tether restore {path} (schema version {backup_version}; what was written"
        " after it is not in it)"
    )


def inspect(path: str) -> Inspection:
    """Open ``path`` read-only and check it: integrity, schema version, row counts.

    Raises :class:`BackupError` for what is no SQLite database at all."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(MAGIC))
    except OSError as exc:
        raise BackupError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if head != MAGIC:
        what = "an empty file" if not head else "not a SQLite database"
        raise BackupError(f"{path} is {what}")
    try:
        with contextlib.closing(_read_only(path)) as db:
            integrity = [row[0] for row in db.execute("PRAGMA integrity_check")]
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
            counts = {
                table: int(db.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
                for table in COUNTED
                if table in tables
            }
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"{path} is not a readable SQLite database: {exc}") from exc
    return Inspection(path, os.path.getsize(path), version, integrity, counts)


def verify(path: str, newest: int) -> Inspection:
    """:func:`inspect`, and raise :class:`BackupError` unless ``path`` is an intact Tether
    store this program (schema ``newest``) can open."""
    found = inspect(path)
    if not found.intact:
        first = "; ".join(found.integrity[:3])
        raise BackupError(f"{path} fails PRAGMA integrity_check: {first}")
    if found.version == 0 or "inbox" not in found.counts:
        raise BackupError(f"{path} is a SQLite database but not a Tether store")
    if found.version > newest:
        raise BackupError(
            f"{path} is at schema version {found.version}, newer than this Tether"
            f" ({newest}); restore it with the Tether that wrote it"
        )
    return found


def replace_store(store: str, backup: str, *, now: dt.datetime | None = None) -> Restored:
    """Put a verified ``backup`` in place of the database ``store``, keeping the replaced
    file as ``<store>.before-restore-<stamp>``. The caller holds the store's lock and has
    run :func:`verify` (the copy is checked again, as written)."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    staged = f"{store}.restore-{stamp}.partial"
    try:
        with contextlib.closing(_read_only(backup)) as src:
            _copy_into(src, staged)
        version = inspect(staged).version
        _fsync(staged)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(staged)
        raise
    kept = _set_aside(store, _free_name(f"{store}.before-restore-{stamp}"))
    os.replace(staged, store)
    _fsync_directory(store)
    return Restored(version, kept)


def _set_aside(store: str, kept: str) -> str | None:
    """Give the store a second name, ``kept``, with everything its WAL held, and leave no
    ``-wal`` or ``-shm`` under the store's name for the restored file to meet."""
    if not os.path.exists(store) or os.path.getsize(store) == 0:
        _remove_sidecars(store)
        return None
    folded = contextlib.closing(sqlite3.connect(store, isolation_level=None))
    with contextlib.suppress(sqlite3.DatabaseError), folded as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    os.link(store, kept)
    wal = f"{store}-wal"
    if os.path.exists(wal) and os.path.getsize(wal) > 0:
        os.replace(wal, f"{kept}-wal")  # not folded in: it goes with its database
    _remove_sidecars(store)
    _fsync_directory(store)
    return kept


def _free_name(wanted: str) -> str:
    """``wanted``, or ``wanted-2``, ``-3``...: a second restore in the same second keeps
    the file the first one restored."""
    name, n = wanted, 1
    while os.path.exists(name):
        n += 1
        name = f"{wanted}-{n}"
    return name


def _remove_sidecars(store: str) -> None:
    for suffix in ("-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(store + suffix)


def schema_version(path: str) -> int:
    """The schema version ``path`` records (``PRAGMA user_version``), read-only."""
    with contextlib.closing(_read_only(path)) as db:
        db.execute("PRAGMA busy_timeout=10000")
        return int(db.execute("PRAGMA user_version").fetchone()[0])


def _read_only(path: str) -> sqlite3.Connection:
    uri = "file:" + quote(os.path.abspath(path)) + "?mode=ro"
    return sqlite3.connect(uri, uri=True, isolation_level=None)


def _durable_rename(partial: str, target: str) -> None:
    _fsync(partial)
    os.replace(partial, target)
    _fsync_directory(target)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_directory(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
