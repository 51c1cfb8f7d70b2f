"""Chaos for the search index: SIGKILLs during traffic leave it agreeing with the history.

The recall index (SQLite: the FTS5 table ``messages_fts``, kept by triggers on
``messages``) is written in the transaction that writes the turns it indexes, so a kill
at any instant leaves both or neither. A real ``tether run`` on a SQLite file takes 300
Telegram updates by webhook over 10 chats (mixed English and Chinese text); it is
SIGKILLed three times mid-stream, handlers in flight, and started again each time. After
the last reply: the index holds exactly the rows of ``messages`` (the same row ids,
FTS5's own integrity check against its content table passes), and every turn is found
by a search for its own words, through the store's ``search``.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from pathlib import Path

import pytest

from tests.fakes.cluster import Cluster
from tests.fakes.telegram_api import FakeTelegram
from tether.memory.recall import Scope
from tether.memory.stores import open_store

#: Every test here kills a real tether process with SIGKILL.
pytestmark = [pytest.mark.crash, pytest.mark.slow]

CHATS = 10
PER_CHAT = 30
KILLS = (60, 140, 220)  # after so many updates were taken


def words(chat: int, n: int) -> str:
    """A message unique to its chat and number, half of them Chinese."""
    if n % 2:
        return f"c{chat}m{n} 第{chat}组的会议记录第{n}条"
    return f"c{chat}m{n} minutes of meeting {n} in room {chat}"


async def test_after_sigkills_during_traffic_the_index_and_the_history_agree(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    db_path = tmp_path / "tether.db"
    telegram = {"token": fake.token, "base_url": fake.base_url, "resend_unknown": True}
    expected = {words(c, n) for c in range(1, CHATS + 1) for n in range(PER_CHAT)}
    posted = 0
    kills = 0
    plugins = ["tests.plugins.slow_echo:router"]  # handlers in flight at any instant
    async with Cluster(tmp_path, 1, f"sqlite:///{db_path}", telegram, plugins) as cluster:
        (instance,) = cluster.instances
        lock = asyncio.Lock()  # one kill and restart at a time

        async def chat(chat_id: int) -> None:
            nonlocal posted, kills
            for n in range(PER_CHAT):
                message = fake.message(chat_id, words(chat_id, n))
                await cluster.post({"update_id": chat_id * 1000 + n, "message": message})
                posted += 1
                async with lock:
                    if kills < len(KILLS) and posted >= KILLS[kills]:
                        kills += 1
                        assert instance.proc is not None
                        instance.proc.send_signal(signal.SIGKILL)
                        await instance.proc.wait()
                        await instance.start()
                        await cluster.wait_ready(instance)

        await asyncio.gather(*(chat(c) for c in range(1, CHATS + 1)))
        await fake.wait_for(lambda: expected <= {s["text"] for s in fake.sent}, timeout=120)
        assert instance.proc is not None
        instance.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(instance.proc.wait(), 60) == 0

    assert kills == len(KILLS)
    log = instance.log.read_text()
    assert log.count('"gateway.started"') == len(KILLS) + 1
    assert '"attempt":2' in log  # a kill cut an event off mid-handling; the restart redid it
    with sqlite3.connect(db_path) as db:
        rows = dict(db.execute("SELECT id, text FROM messages").fetchall())
        indexed = {row for (row,) in db.execute("SELECT id FROM messages_fts_docsize")}
        # FTS5 compares every indexed term with the content table's rows: raises if not
        db.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")
        users = [t for (t,) in db.execute("SELECT text FROM messages WHERE role = 'user'")]
    assert sorted(users) == sorted(expected)  # each update one turn: nothing lost or doubled
    assert set(rows) == indexed and len(rows) == 2 * len(expected)

    store = open_store(f"sqlite:///{db_path}")
    await store.open()
    try:
        for chat_id in range(1, CHATS + 1):
            for n in range(PER_CHAT):
                marker = f"c{chat_id}m{n} "
                hits = await store.search(marker.strip(), Scope.operator(), 30)
                found = {hit.text for hit in hits if hit.text.startswith(marker)}
                assert found == {words(chat_id, n)}, marker
        chinese = await store.search(f"第{3}组的会议记录第{7}条", Scope.operator(), 3)
        assert chinese and chinese[0].text == words(3, 7)
    finally:
        await store.close()
