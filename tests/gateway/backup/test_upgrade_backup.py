"""The automatic backup before a schema migration, and the way back it offers.

A store made by an older Tether (the first ``k`` migrations, ``user_version`` ``k``, a
row of its own) is opened by this one: it is migrated, and beside it is
``<file>.pre-v<k>.bak``, intact, at version ``k``, holding that row and none of the
later tables. A store a newer Tether migrated is refused, the message naming that
backup and how to restore it; ``tether restore`` then brings it back.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.support.config import write_config
from tether.gateway.cli import main
from tether.memory.sqlite.backup import newest_usable_backup
from tether.memory.sqlite.schema import MIGRATIONS, migrate

NEWEST = len(MIGRATIONS)


def older_store(db: Path, version: int) -> None:
    """A store as the Tether with the first ``version`` migrations left it."""
    with sqlite3.connect(db) as conn:
        for script in MIGRATIONS[:version]:
            conn.executescript(script)
        conn.execute(
            "INSERT INTO inbox (key, conversation, payload, status, created, updated)"
            " VALUES ('tg:1:upd:1', 'telegram:1', '{}', 'done', 0, 0)"
        )
        conn.execute(f"PRAGMA user_version={version}")


def tables(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


@pytest.mark.parametrize("version", [1, NEWEST // 2, NEWEST - 1])
def test_opening_an_older_store_backs_it_up_before_migrating(
    tmp_path: Path, version: int, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "tether.db"
    older_store(db, version)
    before = tables(db)
    config = write_config(tmp_path)

    assert main(["status", "-c", str(config)]) == 0  # opens, so migrates
    said = capsys.readouterr()
    assert f"schema   version {NEWEST} (this Tether: {NEWEST})" in said.out
    assert "store.backed_up_before_migration" in said.err  # logged, with its path

    saved = tmp_path / f"tether.db.pre-v{version}.bak"
    assert newest_usable_backup(str(db), NEWEST) == (version, str(saved))
    with sqlite3.connect(saved) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("PRAGMA user_version").fetchone() == (version,)
        assert conn.execute("SELECT key FROM inbox").fetchall() == [("tg:1:upd:1",)]
    assert tables(saved) == before  # the store as it was, not as migrated
    assert not Path(f"{saved}-wal").exists()  # one self-contained file
    assert main(["backup", "--check", str(saved), "-c", str(config)]) == 0
    assert "restorable by this Tether" in capsys.readouterr().out
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (NEWEST,)


def test_a_new_or_current_store_gets_no_backup(tmp_path: Path) -> None:
    db = str(tmp_path / "tether.db")
    migrate(db, "NORMAL", db)  # a new file: nothing to keep
    migrate(db, "NORMAL", db)  # at the newest version: nothing changes
    assert not list(tmp_path.glob("*.bak"))


def test_a_newer_store_is_refused_naming_the_backup_and_restore_brings_it_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "tether.db"
    older_store(db, NEWEST - 1)
    config = write_config(tmp_path)
    assert main(["status", "-c", str(config)]) == 0  # this Tether migrates it, backs it up
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version={NEWEST + 1}")  # as a newer Tether would leave it
    capsys.readouterr()

    assert main(["status", "-c", str(config)]) == 1
    refusal = capsys.readouterr().err
    saved = tmp_path / f"tether.db.pre-v{NEWEST - 1}.bak"
    assert f"schema version {NEWEST + 1} is newer than this Tether ({NEWEST})" in refusal
    assert f"tether restore {saved}" in refusal, refusal

    assert main(["restore", str(saved), "-c", str(config)]) == 0
    said = capsys.readouterr().out
    assert f"schema version {NEWEST - 1}" in said and "before-restore-" in said
    (kept,) = tmp_path.glob("tether.db.before-restore-*")
    with sqlite3.connect(kept) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (NEWEST + 1,)  # kept as it was
    assert main(["status", "-c", str(config)]) == 0  # migrated again, and backed up again
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT key FROM inbox").fetchall() == [("tg:1:upd:1",)]


def test_a_newer_store_without_a_backup_says_there_is_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "tether.db"
    older_store(db, NEWEST)
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version={NEWEST + 3}")
    assert main(["status", "-c", str(write_config(tmp_path))]) == 1
    refusal = capsys.readouterr().err
    assert "upgrade Tether (no backup from before the migration is beside it)" in refusal


def test_no_migration_runs_when_its_backup_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "tether.db"
    older_store(db, NEWEST - 1)
    (tmp_path / f"tether.db.pre-v{NEWEST - 1}.bak").mkdir()  # in the way, as a full disk is
    assert main(["status", "-c", str(write_config(tmp_path))]) == 1
    assert "pre-v" in capsys.readouterr().err
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (NEWEST - 1,)  # not migrated
