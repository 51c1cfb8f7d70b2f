"""What ``tether restore`` refuses, and that a refusal leaves the store as it was.

Every check of the backup comes before anything of the store is touched: a file that is
not SQLite, an empty one, a damaged one, a SQLite file that is not a Tether store, one a
newer Tether wrote. While a gateway holds the store's lock (the lock a ``tether run``
takes, gateway/ops/lockfile.py; the live test refuses beside a real one) nothing is
replaced. A restore over a store whose last writer died leaves its WAL with it: the
kept file holds every committed row, and no ``-wal`` is left for the restored file.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.config import write_config
from tether.gateway.cli import main
from tether.gateway.inspection.backup import pg_target
from tether.gateway.ops.lockfile import StoreLock
from tether.memory.sqlite import SqliteStore
from tether.memory.sqlite.schema import MIGRATIONS, migrate

NEWEST = len(MIGRATIONS)


def fingerprint(db: Path) -> tuple[int, str, list[str]]:
    """Which file the store is, what it holds, and what lies beside it."""
    return (
        db.stat().st_ino,
        hashlib.sha256(db.read_bytes()).hexdigest(),
        sorted(p.name for p in db.parent.iterdir()),
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A current store with one row, and a good backup of it at ``saved.db``."""
    db = tmp_path / "tether.db"
    migrate(str(db), "NORMAL", str(db))
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute(
            "INSERT INTO inbox (key, conversation, payload, status, created, updated)"
            " VALUES ('tg:1:upd:1', 'telegram:1', '{}', 'done', 0, 0)"
        )  # closed: checkpointed into the file, which nothing of this test then changes
    write_config(tmp_path)
    assert main(["backup", str(tmp_path / "saved.db"), "-c", str(tmp_path / "tether.yaml")]) == 0
    return db


def restore(db: Path, backup: Path) -> int:
    return main(["restore", str(backup), "-c", str(db.parent / "tether.yaml")])


def damaged(good: Path, into: Path) -> Path:
    """``good`` with a page in its middle overwritten."""
    data = bytearray(good.read_bytes())
    middle = len(data) // 2 // 4096 * 4096
    data[middle : middle + 4096] = b"\xa5" * 4096
    into.write_bytes(bytes(data))
    return into


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda d: d.write_text("hello, not a database\n" * 50), "is not a SQLite database"),
        (lambda d: d.write_bytes(b""), "is an empty file"),
        (lambda d: damaged(d.parent / "saved.db", d), ""),
        (
            lambda d: sqlite3.connect(d).execute("CREATE TABLE t (x)").connection.close(),
            "not a Tether store",
        ),
    ],
    ids=["text", "empty", "damaged", "not-tether"],
)
def test_a_file_that_is_no_good_backup_is_refused_and_the_store_untouched(
    store: Path, make: object, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = store.parent / "bad.db"
    make(bad)  # type: ignore[operator]
    before = fingerprint(store)
    capsys.readouterr()
    assert restore(store, bad) == 1
    said = capsys.readouterr().err
    assert f"tether restore: {bad}" in said and reason in said, said
    assert "the store was not touched" in said
    assert fingerprint(store) == before
    assert main(["backup", "--check", str(bad), "-c", str(store.parent / "tether.yaml")]) == 1


def test_a_backup_from_a_newer_tether_is_refused(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    newer = store.parent / "saved.db"
    with sqlite3.connect(newer) as conn:
        conn.execute(f"PRAGMA user_version={NEWEST + 1}")
    before = fingerprint(store)
    assert restore(store, newer) == 1
    assert f"newer than this Tether ({NEWEST})" in capsys.readouterr().err
    assert fingerprint(store) == before


def test_restore_is_refused_while_a_gateway_holds_the_store(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gateway = StoreLock(SqliteStore(str(store)))
    gateway.take()
    try:
        before = fingerprint(store)
        assert restore(store, store.parent / "saved.db") == 1
        assert fingerprint(store) == before
    finally:
        gateway.release()
    said = capsys.readouterr().err
    assert f"a tether process is running on {store}; stop it first" in said
    assert restore(store, store.parent / "saved.db") == 0  # once it has stopped


def test_backing_up_onto_the_store_itself_is_refused(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = fingerprint(store)
    assert main(["backup", str(store), "-c", str(store.parent / "tether.yaml")]) == 2
    assert "is the store itself" in capsys.readouterr().err
    assert fingerprint(store) == before


#: A writer that commits in WAL mode and dies before any checkpoint.
DIES_WITH_ITS_WAL = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA wal_autocheckpoint=0")
for n in range(50):
    db.execute(
        "INSERT INTO inbox (key, conversation, payload, status, created, updated)"
        " VALUES (?, 'telegram:2', '{}', 'done', 0, 0)", (f"tg:2:upd:{n}",),
    )
os._exit(0)
"""


def test_a_store_left_with_its_wal_is_kept_whole_and_no_wal_meets_the_restored_file(
    store: Path,
) -> None:
    subprocess.run([sys.executable, "-c", DIES_WITH_ITS_WAL, str(store)], check=True)
    assert Path(f"{store}-wal").stat().st_size > 0
    assert restore(store, store.parent / "saved.db") == 0
    (kept,) = store.parent.glob("tether.db.before-restore-*[!l]")
    with sqlite3.connect(kept) as conn:
        assert conn.execute("SELECT count(*) FROM inbox").fetchone() == (51,)
    with sqlite3.connect(store) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT key FROM inbox").fetchall() == [("tg:1:upd:1",)]


def test_on_postgresql_backup_and_restore_print_the_command_with_the_password_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = "postgresql://tether:hunter2secret@db.example:5432/tether?search_path=bot"
    config = write_config(tmp_path, memory={"store": dsn})
    assert main(["backup", "/backups/t.dump", "-c", str(config)]) == 1
    said = capsys.readouterr().err
    assert "pg_dump --format=custom --schema=bot --file=/backups/t.dump" in said
    assert "db.example:5432/tether'" in said and "hunter2secret" not in said
    assert "tether backup --check /backups/t.dump" in said
    assert main(["restore", "/backups/t.dump", "-c", str(config)]) == 1
    said = capsys.readouterr().err
    assert "pg_restore --clean --if-exists --no-owner --schema=bot" in said
    assert "hunter2secret" not in said
    assert pg_target("postgresql://u@h/d?search_path=s&x=1") == ("postgresql://u@h/d", "s")
