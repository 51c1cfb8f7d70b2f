"""Semantic recall across a SIGKILL: no turn that had its vector is paid for again.

A real ``tether run`` on SQLite takes Telegram updates by webhook (the echo agent: two
turns an update) and embeds its turns through the fake server's ``/v1/embeddings``, four
a request. It is SIGKILLed while the indexer is at work and started again. Every
request after the restart asks only for texts that had no vector when the process died
(a batch cut off between its call and its write is the only thing sent twice), and in
the end every turn has exactly one vector.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from pathlib import Path

import pytest
import yaml

from tests.fakes.cluster import Cluster
from tests.fakes.telegram_api import FakeTelegram
from tether.testing.model import FakeModel

pytestmark = [pytest.mark.crash, pytest.mark.slow]

MODEL = "embed-small"
UPDATES = 60


def vectored(db_path: Path) -> set[str]:
    """The texts every turn of which has a vector now (the echo agent's reply repeats the
    message, so a text is two turns; one of them alone may still be sent again)."""
    with sqlite3.connect(db_path) as db:
        rows = db.execute(
            "SELECT m.text, count(v.message_id) = count(*) FROM messages m"
            " LEFT JOIN message_vectors v ON v.message_id = m.id GROUP BY m.text"
        ).fetchall()
    return {text for text, complete in rows if complete}


async def until_all_vectored(db_path: Path, turns: int) -> None:
    """Until every one of ``turns`` turns has its vector (another process writes them:
    there is nothing to await but the file)."""
    for _ in range(1200):
        with sqlite3.connect(db_path) as db:
            (vectors,) = db.execute("SELECT count(*) FROM message_vectors").fetchone()
            (stored,) = db.execute("SELECT count(*) FROM messages").fetchone()
        if stored == turns and vectors == turns:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{vectors} vectors for {stored} of {turns} turns")


async def test_a_sigkill_mid_indexing_pays_again_only_for_what_had_no_vector(
    tmp_path: Path, fake: FakeTelegram, model: FakeModel
) -> None:
    db_path = tmp_path / "tether.db"
    telegram = {"token": fake.token, "base_url": fake.base_url, "resend_unknown": True}
    cluster = Cluster(tmp_path, 1, f"sqlite:///{db_path}", telegram)
    (instance,) = cluster.instances
    config = yaml.safe_load(instance.config.read_text())
    config["memory"]["embeddings"] = {"base_url": model.url, "model": MODEL, "batch": 4}
    instance.config.write_text(yaml.safe_dump(config))
    said = [f"note {n}: the quarterly figures for region {n % 7}" for n in range(UPDATES)]
    async with cluster:
        for n, text in enumerate(said[: UPDATES // 2]):
            await cluster.post({"update_id": 5000 + n, "message": fake.message(42, text)})
        await model.wait_for_embedded(12, timeout=60)  # the indexer is at work
        assert instance.proc is not None
        instance.proc.send_signal(signal.SIGKILL)
        await instance.proc.wait()
        had = vectored(db_path)
        asked_before = len(model.embedding_requests)

        await instance.start()
        await cluster.wait_ready(instance)
        for n, text in enumerate(said[UPDATES // 2 :], start=UPDATES // 2):
            await cluster.post({"update_id": 5000 + n, "message": fake.message(42, text)})
        await fake.wait_for(lambda: set(said) <= {s["text"] for s in fake.sent}, timeout=120)
        await until_all_vectored(db_path, 2 * UPDATES)

    assert had, "the kill came before any vector was written: nothing was tested"
    again = [
        text
        for request in model.embedding_requests[asked_before:]
        for text in request.body["input"]
    ]
    assert again and not set(again) & had  # nothing that had its vector was sent again
    with sqlite3.connect(db_path) as db:
        per_turn = db.execute(
            "SELECT count(*) FROM messages m LEFT JOIN message_vectors v ON v.message_id = m.id"
            " GROUP BY m.id HAVING count(v.message_id) != 1"
        ).fetchall()
    assert per_turn == []  # every turn exactly one vector
