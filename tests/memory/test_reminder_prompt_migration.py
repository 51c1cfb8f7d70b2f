"""A database made before reminders could be prompts: its reminders read as text
reminders after the migration that adds ``reminders.prompt`` (SQLite and PostgreSQL),
and a prompt one can be added beside them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tether.memory.postgres import schema as pg_schema
from tether.memory.reminders import Reminder
from tether.memory.sqlite import SqliteStore
from tether.memory.sqlite import schema as sqlite_schema
from tether.memory.stores import open_store
from tether.scheduler.reminders import new_reminder

#: A row as the schema before the ``prompt`` column holds it.
OLD = (
    "INSERT INTO reminders (id, conversation, target, text, cron, at, timezone, status,"
    " event_key, created, updated, sender) VALUES ('r-old', 'test:c1', 'test:c1',"
    " 'send the report', '0 9 * * 1-5', NULL, 'UTC', 'active', 'e1', 1.0, 1.0, 'test:u1')"
)


def before_prompts(migrations: list[str]) -> list[str]:
    """The migrations up to the one that adds the column."""
    [index] = [i for i, script in enumerate(migrations) if "ADD COLUMN prompt" in script]
    return migrations[:index]


def prompt_one() -> Reminder:
    return new_reminder(
        reminder_id="r-new",
        conversation="test:c1",
        target="test:c1",
        text="check the weather",
        cron="0 8 * * *",
        at=None,
        timezone="UTC",
        event_key="e2",
        prompt=True,
    )


async def test_sqlite_reminders_from_before_prompts_are_text_reminders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "old.db"
    with monkeypatch.context() as patched:
        patched.setattr(sqlite_schema, "MIGRATIONS", before_prompts(sqlite_schema.MIGRATIONS))
        sqlite_schema.migrate(str(file), "normal", str(file))
    with sqlite3.connect(file) as db:
        db.execute(OLD)
    store = SqliteStore(str(file))
    await store.open()
    try:
        old = await store.reminder("r-old")
        assert old is not None and old.prompt is False and old.sender == "test:u1"
        new = await store.add_reminder(prompt_one())
        assert new.prompt is True
    finally:
        await store.close()


@pytest.mark.postgres
async def test_postgres_reminders_from_before_prompts_are_text_reminders(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncpg

    with monkeypatch.context() as patched:
        patched.setattr(pg_schema, "MIGRATIONS", before_prompts(pg_schema.MIGRATIONS))
        early = open_store(pg_dsn)
        await early.open()
        await early.close()
    schema = pg_dsn.rpartition("search_path=")[2]
    conn = await asyncpg.connect(pg_dsn.partition("?")[0])
    try:
        await conn.execute(OLD.replace("INTO reminders", f'INTO "{schema}".reminders'))
    finally:
        await conn.close()
    store = open_store(pg_dsn)
    await store.open()
    try:
        old = await store.reminder("r-old")
        assert old is not None and old.prompt is False and old.sender == "test:u1"
        new = await store.add_reminder(prompt_one())
        assert new.prompt is True
    finally:
        await store.close()
