"""Chaos: three `tether run` processes on one PostgreSQL, one of them killed mid-stream.

2,000 Telegram updates over 50 chats arrive by webhook, spread over the three processes as
a load balancer would (each chat's updates in order, one after the other, as Telegram
sends them). One process is SIGKILLed after 600 updates and started again after 1,200.
Every update must be handled exactly once (one user turn in memory each), in order per
chat, and every reply sent.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from pathlib import Path

import asyncpg
import pytest

from tests.fakes.cluster import Cluster, Instance
from tests.fakes.telegram_api import FakeTelegram

#: Every test here kills a real tether process with SIGKILL.
pytestmark = [pytest.mark.crash, pytest.mark.slow]

CHATS = 50
PER_CHAT = 40


async def test_three_instances_one_killed_every_update_once_in_order(
    tmp_path: Path, pg_dsn: str, fake: FakeTelegram
) -> None:
    # A send cut off by SIGKILL may have reached Telegram or not: resend it (a possible
    # duplicate, checked below) rather than leave a reply unsent.
    telegram = {"token": fake.token, "base_url": fake.base_url, "resend_unknown": True}
    expected = {f"c{c}-m{n}" for c in range(1, CHATS + 1) for n in range(PER_CHAT)}
    posted = 0
    killed = asyncio.Event()
    restarted = asyncio.Event()

    plugins = ["tests.plugins.slow_echo:router"]  # handlers in flight at any instant
    async with Cluster(tmp_path, 3, pg_dsn, telegram, plugins) as cluster:
        victim = cluster.instances[0]

        def busiest() -> Instance:
            # Lanes stay with the process that took them first: kill the one doing the
            # most work, so the kill surely cuts events off mid-handling.
            return max(cluster.instances, key=lambda i: i.log.read_text().count("event.started"))

        async def chat(chat_id: int) -> None:
            nonlocal posted, victim
            for n in range(PER_CHAT):
                message = fake.message(chat_id, f"c{chat_id}-m{n}")
                await cluster.post({"update_id": chat_id * 1000 + n, "message": message})
                posted += 1
                if posted >= 600 and not killed.is_set():
                    killed.set()
                    victim = busiest()
                    assert victim.proc is not None
                    victim.proc.send_signal(signal.SIGKILL)
                    await victim.proc.wait()
                if posted >= 1200 and not restarted.is_set():
                    restarted.set()
                    await victim.start()

        await asyncio.gather(*(chat(c) for c in range(1, CHATS + 1)))
        await cluster.wait_ready(victim)
        await fake.wait_for(lambda: expected <= {s["text"] for s in fake.sent}, timeout=180)
        for instance in cluster.instances:
            assert instance.proc is not None
            instance.proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(instance.proc.wait(), 60) == 0
        took_over = sum(
            1
            for i in cluster.instances
            if i is not victim
            for line in i.log.read_text().splitlines()
            if line.startswith("{") and json.loads(line).get("attempt") == 2
        )

    assert killed.is_set() and restarted.is_set()
    db = await asyncpg.connect(pg_dsn)
    try:
        turns = await db.fetch(
            "SELECT conversation, text, event_key FROM messages WHERE role = 'user' ORDER BY id"
        )
        statuses = await db.fetch("SELECT status, count(*) FROM inbox GROUP BY status")
        resent = {
            json.loads(row["payload"])["text"]
            for row in await db.fetch("SELECT payload FROM outbox WHERE attempts > 1")
        }
    finally:
        await db.close()

    # Handled exactly once: one user turn per update, every inbox row done.
    assert len(turns) == CHATS * PER_CHAT
    assert len({row["event_key"] for row in turns}) == CHATS * PER_CHAT
    assert [tuple(row) for row in statuses] == [("done", CHATS * PER_CHAT)]
    # In order per chat, in memory and in the replies.
    for c in range(1, CHATS + 1):
        in_memory = [row["text"] for row in turns if row["conversation"] == f"telegram:{c}"]
        assert in_memory == [f"c{c}-m{n}" for n in range(PER_CHAT)]
        replies = [s["text"] for s in fake.sent if s["chat_id"] == c]
        assert list(dict.fromkeys(replies)) == [f"c{c}-m{n}" for n in range(PER_CHAT)]
    # Every reply sent; a second copy only of a send that SIGKILL interrupted.
    copies = Counter(s["text"] for s in fake.sent)
    assert set(copies) == expected
    assert {text for text, n in copies.items() if n > 1} <= resent
    # The kill really cut events off mid-handling, and the survivors finished them.
    assert took_over > 0
