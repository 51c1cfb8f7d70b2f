"""Handler state across SIGKILLs: every committed change is there after a restart, and a
turn cut off mid-handling, run again, counts once.

A real ``tether run`` on SQLite counts a chat's Telegram messages in ``ctx.chat_data()``
(tests/plugins/state/counter.py) and replies with the count; it is SIGKILLed twice while
updates arrive and started again each time. In the end the replies count 1 to N, each
number once, and the state holds N and every message once: no change was lost, and none
applied twice.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import pytest

from tests.fakes.cluster import Cluster
from tests.fakes.telegram_api import FakeTelegram

pytestmark = [pytest.mark.crash, pytest.mark.slow]

UPDATES = 60
KILLS = (20, 40)


async def test_state_survives_sigkills_and_counts_each_turn_once(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    db_path = tmp_path / "tether.db"
    telegram = {"token": fake.token, "base_url": fake.base_url, "resend_unknown": True}
    plugins = ["tests.plugins.state.counter:router"]
    said = [f"message {n}" for n in range(UPDATES)]
    async with Cluster(tmp_path, 1, f"sqlite:///{db_path}", telegram, plugins) as cluster:
        (instance,) = cluster.instances
        for n, text in enumerate(said):
            if n in KILLS:
                assert instance.proc is not None
                instance.proc.send_signal(signal.SIGKILL)
                await instance.proc.wait()
                await instance.start()
                await cluster.wait_ready(instance)
            await cluster.post({"update_id": 7000 + n, "message": fake.message(31, text)})
        want = {f"n={n}" for n in range(1, UPDATES + 1)}
        await fake.wait_for(lambda: want <= {s["text"] for s in fake.sent}, timeout=120)
    log = instance.log.read_text()
    assert log.count('"gateway.started"') == len(KILLS) + 1
    assert {s["text"] for s in fake.sent} == want  # each count once: none lost, none twice
    with sqlite3.connect(db_path) as db:
        state = dict(db.execute("SELECT name, value FROM handler_state"))
    assert json.loads(state["n"]) == UPDATES
    assert json.loads(state["seen"]) == said  # every message once, in order
