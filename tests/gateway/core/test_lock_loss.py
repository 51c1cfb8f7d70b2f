"""A lost lane-lock connection never lets two instances run one conversation.

A conversation's lane is a session advisory lock on one connection of its instance
(memory/postgres/locks.py). When PostgreSQL ends that session — a restart, a failover,
``pg_terminate_backend``, a proxy cutting idle connections — every lock it held is gone
at once, and another instance's sweep takes those lanes over. The instance that lost them
used to carry on running them, and reconnected for its next lock as if nothing had
happened: two processes ran one conversation side by side.

Two real ``tether run`` processes answer Telegram webhooks with a handler that records
every turn's start and end (tests/plugins/turn_log.py); mid-traffic, the test terminates
the backend that holds the lane of a turn in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path

import asyncpg
import pytest

from tests.fakes.cluster import Cluster
from tests.fakes.telegram_api import FakeTelegram
from tests.support.advisory import end_session_holding

pytestmark = pytest.mark.slow

#: Chat ids far from other tests' (lane lock names are the database's, not a schema's).
FIRST_CHAT = 9_310_000
CHATS = 6
PER_CHAT = 6


def read_turns(path: Path) -> tuple[list[list[str]], list[list[str]]]:
    """The ``start`` lines and the ``turn`` lines the handlers wrote so far."""
    lines = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
    return [f for f in lines if f[0] == "start"], [f for f in lines if f[0] == "turn"]


async def in_flight(path: Path, timeout: float = 30) -> tuple[int, str, str]:
    """(pid, conversation, event key) of a turn that started and has not ended yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        starts, turns = read_turns(path)
        ended = {(f[1], f[3], f[4]) for f in turns}
        for _, pid, conversation, key, started in reversed(starts):
            if (pid, key, started) not in ended:
                return int(pid), conversation, key
        await asyncio.sleep(0.02)  # another process's file: nothing to await but its lines
    raise TimeoutError("no turn in flight")


async def test_a_lost_lock_connection_never_lets_two_instances_run_one_conversation(
    tmp_path: Path, pg_dsn: str, fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_TEST_DIR", str(tmp_path))
    turns_file = tmp_path / "turns"
    telegram = {"token": fake.token, "base_url": fake.base_url, "resend_unknown": True}
    chats = [FIRST_CHAT + c for c in range(CHATS)]
    expected = {f"c{chat}-m{n}" for chat in chats for n in range(PER_CHAT)}
    plugins = ["tests.plugins.turn_log:router"]
    async with Cluster(tmp_path, 2, pg_dsn, telegram, plugins) as cluster:
        pids = {instance.proc.pid: instance for instance in cluster.instances if instance.proc}

        async def chat(chat_id: int, numbers: range) -> None:
            for n in numbers:
                message = fake.message(chat_id, f"c{chat_id}-m{n}")
                await cluster.post({"update_id": chat_id * 100 + n, "message": message})

        half = PER_CHAT // 2
        await asyncio.gather(*(chat(c, range(half)) for c in chats))
        victim_pid, conversation, cut_key = await in_flight(turns_file)
        await end_session_holding(pg_dsn, f"lane:{conversation}")  # the lane's instance's
        await asyncio.gather(*(chat(c, range(half, PER_CHAT)) for c in chats))
        await fake.wait_for(lambda: expected <= {s["text"] for s in fake.sent}, timeout=120)
        for instance in cluster.instances:
            assert instance.proc is not None
            instance.proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(instance.proc.wait(), 60) == 0
        victim_log = pids[victim_pid].log.read_text()

    _, turns = read_turns(turns_file)
    by_conversation: defaultdict[str, list[tuple[float, float, str, str]]] = defaultdict(list)
    for _, pid, conv, key, started, ended, _outcome in turns:
        by_conversation[conv].append((float(started), float(ended), pid, key))
    overlaps = []  # sorted by start, any two turns at once make two neighbours overlap
    for conv, spans in by_conversation.items():
        spans.sort()
        for before, after in itertools.pairwise(spans):
            if after[0] < before[1]:
                overlaps.append((conv, before, after))
    assert overlaps == [], f"turns of one conversation ran at once: {overlaps[:5]}"
    # The kill cut a turn off on the victim; the lanes it lost were run again, once.
    cut = [t for t in turns if t[1] == str(victim_pid) and t[6] == "cancelled"]
    assert cut_key in {t[3] for t in cut}
    # ... and it took lanes again once it had a new session.
    lost_at = max(float(t[5]) for t in cut)
    assert any(t[1] == str(victim_pid) and float(t[4]) > lost_at for t in turns)
    lost = [json.loads(line) for line in victim_log.splitlines() if "store.lane_locks_lost" in line]
    assert len(lost) == 1 and lost[0]["locks"] >= 1
    copies = Counter(s["text"] for s in fake.sent)
    assert set(copies) == expected
    db = await asyncpg.connect(pg_dsn)
    try:
        statuses = await db.fetch("SELECT status, count(*) FROM inbox GROUP BY status")
        resent = {
            json.loads(row["payload"])["text"]
            for row in await db.fetch("SELECT payload FROM outbox WHERE attempts > 1")
        }
    finally:
        await db.close()
    assert [tuple(row) for row in statuses] == [("done", CHATS * PER_CHAT)]
    assert {text for text, n in copies.items() if n > 1} <= resent  # only a send cut off
