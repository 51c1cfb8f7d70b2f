"""``tether backup PATH``, ``tether backup --check FILE`` and ``tether restore FILE``.

The operator's half of :mod:`tether.memory.sqlite.backup`. A backup never opens the store
as a gateway would (no migration, no writer process, no lock): it is a read-only reader
beside a running gateway, so it can run from cron while traffic flows. A restore is the
one command here that refuses to run beside a gateway — the gateway's writer would go on
writing to the replaced file — so it takes the gateway's own lock on the store for the
swap (gateway/ops/lockfile.py), and every check of the backup comes before anything of
the store is touched.

PostgreSQL has its own tools for this, better than any Tether could wrap: ``backup`` and
``restore`` print the ``pg_dump`` / ``pg_restore`` command for the configured database,
its password masked, and do nothing (exit 1): a cron line should call ``pg_dump`` itself,
with the password in ``~/.pgpass`` rather than on a command line. ``--check`` of a
``pg_dump`` archive lists it with ``pg_restore --list`` when that is on the PATH.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

from tether.config import Settings
from tether.errors import GatewayError
from tether.gateway.inspection.store import EXIT_CONFIG
from tether.gateway.ops.lockfile import StoreLock
from tether.memory.sqlite import SqliteStore
from tether.memory.sqlite import backup as sqlite_backup
from tether.memory.sqlite.schema import MIGRATIONS
from tether.memory.stores import missing, sqlite_path

#: The first bytes of a ``pg_dump --format=custom`` archive.
PG_ARCHIVE = b"PGDMP"


def backup(settings: Settings, args: argparse.Namespace) -> int:
    url = settings.memory.store
    if args.check:
        return _check(str(args.path))
    if url.startswith(("postgresql://", "postgres://")):
        return _postgres_advice(settings, "pg_dump", str(args.path))
    store = _sqlite_file(url, "backup")
    if store is None:
        return EXIT_CONFIG
    target = _target(store, Path(args.path))
    if target.exists() and os.path.samefile(target, store):
        print(f"tether backup: {target} is the store itself; name another file", file=sys.stderr)
        return EXIT_CONFIG
    try:
        copied = sqlite_backup.copy(store, str(target))
        found = sqlite_backup.inspect(copied.path)
    except (sqlite_backup.BackupError, OSError) as exc:
        raise GatewayError(f"tether backup: {exc}") from exc
    print(
        f"backed up {store} to {copied.path}: {copied.bytes:,} bytes,"
        f" schema version {copied.version}, integrity {_integrity(found)}"
    )
    print("  " + _counts(found))
    return 0 if found.intact else 1


def _target(store: str, given: Path) -> Path:
    """``given``, or in a directory a file named after the store and the time."""
    if not given.is_dir():
        return given
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return given / f"{Path(store).stem}-{stamp}.db"


def _check(path: str) -> int:
    """What a restore would find: integrity, schema version against this program's,
    row counts; exit 0 only for a backup this Tether would restore."""
    if _is_pg_archive(path):
        return _check_pg_archive(path)
    try:
        found = sqlite_backup.inspect(path)
    except sqlite_backup.BackupError as exc:
        print(f"tether backup --check: {exc}", file=sys.stderr)
        return 1
    newest = len(MIGRATIONS)
    print(f"{path}: {found.bytes:,} bytes")
    print(f"  integrity       {_integrity(found)}")
    print(f"  schema version  {found.version} (this Tether: {newest})")
    print("  " + _counts(found))
    try:
        sqlite_backup.verify(path, newest)
    except sqlite_backup.BackupError as exc:
        print(f"tether backup --check: {exc}", file=sys.stderr)
        return 1
    print("  restorable by this Tether")
    return 0


def restore(settings: Settings, args: argparse.Namespace) -> int:
    url = settings.memory.store
    if url.startswith(("postgresql://", "postgres://")):
        return _postgres_advice(settings, "pg_restore", str(args.path))
    store = _sqlite_file(url, "restore", must_exist=False)
    if store is None:
        return EXIT_CONFIG
    backup_file = str(args.path)
    try:
        found = sqlite_backup.verify(backup_file, len(MIGRATIONS))
    except sqlite_backup.BackupError as exc:
        print(f"tether restore: {exc}; the store was not touched", file=sys.stderr)
        return 1
    if os.path.exists(store) and os.path.samefile(store, backup_file):
        print(f"tether restore: {backup_file} is the store itself", file=sys.stderr)
        return EXIT_CONFIG
    folder = Path(store).resolve().parent
    if not folder.is_dir():
        raise GatewayError(f"tether restore: no directory {folder} for the store {store}")
    lock = StoreLock(SqliteStore(store))
    try:
        lock.take()
    except GatewayError as exc:
        if "another tether process" not in str(exc):
            raise  # the store's file would not open: StoreLock said why
        print(
            f"tether restore: a tether process is running on {store}; stop it first"
            " (systemctl stop tether, or Ctrl-C), then restore. The store was not touched.",
            file=sys.stderr,
        )
        return 1
    try:
        restored = sqlite_backup.replace_store(store, backup_file)
    except (sqlite_backup.BackupError, OSError) as exc:
        raise GatewayError(f"tether restore: {exc}") from exc
    finally:
        lock.release()
    print(f"restored {backup_file} into {store}: schema version {restored.version}")
    print("  " + _counts(found))
    if restored.kept:
        print(f"  the replaced store is kept as {restored.kept}")
    if restored.version < len(MIGRATIONS):
        print(
            f"  the next start migrates it to schema version {len(MIGRATIONS)}"
            " (and backs it up first)"
        )
    return 0


def _sqlite_file(url: str, command: str, *, must_exist: bool = True) -> str | None:
    """The configured SQLite database file, or None (said why) for a store without one."""
    if not url.startswith("sqlite://"):
        print(f"tether {command}: {url.split(':', 1)[0]}:// keeps nothing to back up")
        return None
    path = sqlite_path(url)
    if path == ":memory:":
        print(f"tether {command}: sqlite:///:memory: keeps nothing across restarts")
        return None
    absent = missing(url) if must_exist else None
    if absent is not None:
        raise GatewayError(f"no store at {absent}")
    return path


def _integrity(found: sqlite_backup.Inspection) -> str:
    return "ok" if found.intact else "FAILED: " + "; ".join(found.integrity[:3])


def _counts(found: sqlite_backup.Inspection) -> str:
    return "  ".join(f"{table} {n:,}" for table, n in found.counts.items()) or "no Tether tables"


# -- PostgreSQL --------------------------------------------------------------------


def _postgres_advice(settings: Settings, tool: str, path: str) -> int:
    """The command that does it, with the password masked; Tether does not run it."""
    dsn, schema = pg_target(str(settings.masked()["memory"]["store"]))
    scope = f" --schema={schema}" if schema else ""
    if tool == "pg_dump":
        command = f"pg_dump --format=custom{scope} --file={path} '{dsn}'"
        then = f"check it with: tether backup --check {path}"
    else:
        command = f"pg_restore --clean --if-exists --no-owner{scope} --dbname='{dsn}' {path}"
        then = "stop every tether process on the database first"
    print(
        f"tether: on PostgreSQL use {tool} (the password from ~/.pgpass or PGPASSWORD):\n"
        f"  {command}\n{then}; Tether did not run it (docs/operations.md)",
        file=sys.stderr,
    )
    return 1


def pg_target(dsn: str) -> tuple[str, str | None]:
    """The DSN libpq reads (without the query parameters asyncpg takes and libpq would
    refuse), and the schema a ``search_path`` parameter names."""
    parts = urlsplit(dsn)
    search_path = parse_qs(parts.query).get("search_path", [None])[0]
    return urlunsplit(parts._replace(query="")), search_path


def _is_pg_archive(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(PG_ARCHIVE)) == PG_ARCHIVE
    except OSError:
        return False


def _check_pg_archive(path: str) -> int:
    """A ``pg_dump`` archive: readable by ``pg_restore``, and with Tether's tables."""
    tool = shutil.which("pg_restore")
    if tool is None:
        print(f"{path} is a pg_dump archive; check it with: pg_restore --list {path}")
        return 1
    listed = subprocess.run([tool, "--list", path], capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        print(f"tether backup --check: pg_restore cannot read {path}: {listed.stderr.strip()}")
        return 1
    data = [line for line in listed.stdout.splitlines() if " TABLE DATA " in line]
    tables = {line.split()[-2] for line in data}
    print(f"{path}: a pg_dump archive, {len(data)} tables with data")
    missing_tables = {"inbox", "outbox", "messages", "tether_schema"} - tables
    if missing_tables:
        print(
            f"tether backup --check: not a Tether database (no {', '.join(sorted(missing_tables))})"
        )
        return 1
    print("  holds Tether's tables (inbox, outbox, messages, tether_schema)")
    return 0
