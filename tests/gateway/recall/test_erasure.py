"""Erasure of a person (``tether forget``, ``/forgetme``): a unique marker planted in each
place a person's data lands, through the real pipeline, is gone from the database
file's bytes after the erasure, while another person's marker stays.

PTB against the fake Telegram and discord.py against the fake Discord in one gateway;
the LLM agent on the real ``openai`` client against the fake model, whose script makes
it save a reminder and call ``search_memory`` (a tool result in the steps); a model
refusing one message makes a dead letter.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path

import pytest

from tests.fakes.discord_api import DM_CHANNEL_ID, FakeDiscord
from tests.fakes.telegram_api import USERNAME, FakeTelegram
from tests.gateway.recall.test_people_agent import ADA, ADA_DC, ADA_TG, BEN, GROUP, both_running
from tests.support.config import write_config
from tether.gateway.cli import main
from tether.testing.model import Body, FakeModel, asks_for, tool_call

ADA_MARKS = ("zqxadasaid", "zqxadafile", "zqxadafact", "zqxadaremind", "zqxadadead", "zqxadadm")
BEN_MARKS = ("zqxbensaid", "zqxbenfact")


def script(body: Body) -> object:
    messages = body.get("messages", [])
    if messages and messages[-1].get("role") == "tool":
        return "Done."
    said = str(messages[-1].get("content", "")) if messages else ""
    if "remind me" in said:
        at = {"text": "zqxadaremind stretch", "at": "2027-06-01T09:00"}
        return asks_for(tool_call("schedule", at))
    if "look up" in said:
        return asks_for(tool_call("search_memory", {"query": "zqxadasaid"}))
    return "Noted."


def file_bytes(db: Path) -> bytes:
    found = db.read_bytes()
    for extra in (Path(f"{db}-wal"), Path(f"{db}-journal")):
        if extra.exists():
            found += extra.read_bytes()
    return found


async def plant(
    tmp_path: Path,
    telegram: FakeTelegram,
    discord_fake: FakeDiscord,
    model: FakeModel,
    store: str | None = None,
) -> None:
    """Each of Ada's markers where her data lands, and Ben's beside them."""
    model.fail(400, times=1, when=lambda body: "zqxadadead" in json.dumps(body))
    async with both_running(tmp_path, telegram, discord_fake, model, store) as chat:
        model.reply = script
        await chat.telegram_says(ADA, "I said zqxadasaid today")
        await chat.telegram_says(ADA, "/remember I'm zqxadafact")
        await chat.telegram_says(ADA, "please remind me to stretch")
        await chat.telegram_says(ADA, "look up what I said")
        offer, _ = await chat.telegram_says(ADA, "/link")
        code = re.search(r"/link (\S+)", offer)
        assert code
        await chat.discord_says(f"/link {code.group(1)}")
        attachment = {
            "id": "5151",
            "filename": "zqxadafile.txt",
            "size": 12,
            "url": "https://cdn.example/zqxadafile.txt",
            "proxy_url": "https://media.example/zqxadafile.txt",
            "content_type": "text/plain",
        }
        sent = len(discord_fake.sent)
        await discord_fake.say(DM_CHANNEL_ID, "here is the file zqxadadm", attachments=[attachment])
        await discord_fake.wait_for(lambda: len(discord_fake.sent) > sent, timeout=15)
        telegram.push(message=telegram.message(ADA, "zqxadadead please", user_id=ADA))
        await chat.gateway.drain()
        mention = f"@{USERNAME}"
        await chat.telegram_says(GROUP, f"{mention} zqxbensaid here", user=BEN)
        await chat.telegram_says(GROUP, "/remember I'm zqxbenfact", user=BEN)
        await chat.telegram_says(GROUP, f"{mention} me too, zqxadasaid", user=ADA)
        assert await chat.gateway.store.dead_letters()  # the refused one


async def test_tether_forget_leaves_no_byte_of_the_person_and_every_byte_of_another(
    tmp_path: Path,
    telegram: FakeTelegram,
    discord_fake: FakeDiscord,
    model: FakeModel,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await plant(tmp_path, telegram, discord_fake, model)
    db = tmp_path / "tether.db"
    planted = file_bytes(db)
    for mark in ADA_MARKS + BEN_MARKS:
        assert mark.encode() in planted, mark  # each was really stored somewhere

    config = write_config(tmp_path)
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["forget", ADA_TG, "-c", str(config)]) != 0
    assert "--yes" in capsys.readouterr().out  # asked first, nothing erased
    assert b"zqxadafact" in file_bytes(db)
    assert await asyncio.to_thread(main, ["forget", ADA_TG, "-c", str(config), "--yes"]) == 0
    report = capsys.readouterr().out
    assert f"erased {ADA_TG}, {ADA_DC}" in report
    for table in ("messages", "facts", "reminders", "steps", "dead_letters", "outbox"):
        assert re.search(rf"^\s+{table}\s+\d+$", report, re.MULTILINE), (table, report)
    assert "zqx" not in report

    left = file_bytes(db)
    for mark in ADA_MARKS:
        assert mark.encode() not in left, f"{mark} survived the erasure"
    for mark in BEN_MARKS:
        assert mark.encode() in left, f"{mark} (another person's) was erased"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM people").fetchone() == (0,)
        [(counts,)] = conn.execute("SELECT counts FROM erasures").fetchall()
        assert json.loads(counts)["messages"] > 0 and "zqx" not in counts
        erased_keys = conn.execute(
            "SELECT count(*) FROM inbox WHERE conversation = 'erased'"
        ).fetchone()[0]
        assert erased_keys > 0  # kept as tombstones: a redelivery is still refused
        hits = conn.execute(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH '\"zqxbensaid\"'"
        ).fetchone()[0]
        assert hits == 1  # the index agrees with what is left


def erase_report(report: str) -> None:
    assert f"erased {ADA_TG}, {ADA_DC}" in report
    for table in ("messages", "facts", "reminders", "steps", "dead_letters", "outbox"):
        assert re.search(rf"^\s+{table}\s+\d+$", report, re.MULTILINE), (table, report)
    assert "zqx" not in report


@pytest.mark.postgres
async def test_tether_forget_on_postgresql_leaves_the_person_in_no_table(
    tmp_path: Path,
    telegram: FakeTelegram,
    discord_fake: FakeDiscord,
    model: FakeModel,
    pg_dsn: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await plant(tmp_path, telegram, discord_fake, model, store=pg_dsn)
    config = write_config(tmp_path, memory={"store": pg_dsn})
    assert {m for m in ADA_MARKS + BEN_MARKS if await holding(pg_dsn, m)} == set(
        ADA_MARKS + BEN_MARKS
    )
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["forget", ADA_TG, "-c", str(config), "--yes"]) == 0
    erase_report(capsys.readouterr().out)
    for mark in ADA_MARKS:
        assert not await holding(pg_dsn, mark), f"{mark} survived the erasure"
    for mark in BEN_MARKS:
        assert await holding(pg_dsn, mark), f"{mark} (another person's) was erased"


async def holding(dsn: str, mark: str) -> list[str]:
    """The tables of ``dsn``'s schema with a row whose text holds ``mark``: every table,
    each row read whole as text."""
    import asyncpg

    conn = await asyncpg.connect(
        dsn.split("?")[0], server_settings={"search_path": dsn.split("search_path=")[1]}
    )
    try:
        tables = [
            r["table_name"]
            for r in await conn.fetch(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            )
        ]
        found = []
        for table in tables:
            query = f'SELECT 1 FROM "{table}" t WHERE t::text LIKE $1 LIMIT 1'
            if await conn.fetchval(query, f"%{mark}%"):
                found.append(table)
        return found
    finally:
        await conn.close()


async def test_forgetme_asks_first_then_erases_the_person_and_not_the_other(
    tmp_path: Path, telegram: FakeTelegram, discord_fake: FakeDiscord, model: FakeModel
) -> None:
    async with both_running(tmp_path, telegram, discord_fake, model) as chat:
        await chat.telegram_says(ADA, "/remember I'm zqxadafact")
        await chat.telegram_says(BEN, "/remember I'm zqxbenfact", user=BEN)
        asked, _ = await chat.telegram_says(ADA, "/forgetme")
        assert asked.endswith("Send /forgetme yes to erase.")
        _, still = await chat.telegram_says(ADA, "hello")
        assert "zqxadafact" in still  # nothing erased by the question
        done, _ = await chat.telegram_says(ADA, "/forgetme yes")
        assert done.startswith("Done: I erased ")
        _, after = await chat.telegram_says(ADA, "hello again")
        _, bens = await chat.telegram_says(BEN, "hello", user=BEN)
    assert "zqxadafact" not in after and "I said" not in after
    assert "zqxbenfact" in bens
    with sqlite3.connect(tmp_path / "tether.db") as conn:
        texts = [row[0] for row in conn.execute("SELECT text FROM facts")]
    assert texts == ["I'm zqxbenfact"]
