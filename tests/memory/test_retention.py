"""Retention on both SQL stores: each class loses its old rows, keeps its fresh ones, and
never touches what is in flight (memory/retention/prune.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.config import event
from tether.events import OutMessage, Target
from tether.memory.retention import PruneStore, reduced_payload
from tether.memory.sqlite import SqliteStore
from tether.memory.store import ConversationState, DeadLetter, MemoryChanges, Store, Turn

BATCH = 2  # small, so every walk crosses several batches


def out(key: str) -> OutMessage:
    return OutMessage(key=key, target=Target(platform="test", chat_id="c1"), text="reply")


async def finished(store: Store, key: str, turns: list[Turn] | None = None) -> None:
    """An event answered: its step, a reply (sent), a turn, done."""
    await store.accept([(event(key, text=f"secret of {key}"), "c1")])
    await store.save_step(key, "s", "1")
    await store.checkpoint(key, [out(f"{key}:r")], turns or [Turn("c1", "user", key, tokens=1)])
    await store.mark_outbox(f"{key}:r", "sent")


async def buried(store: Store, key: str) -> None:
    [row] = await store.accept([(event(key), "c1")])
    assert row is not None
    await store.bury(DeadLetter(key, "c1", row.event, "boom", "tb"))


@pytest.fixture
def prunable(store: Store) -> Store:
    if not isinstance(store, PruneStore):
        pytest.skip("the in-memory store keeps nothing past its process")
    return store


async def prune(store: Store, kind: str, before: float) -> int:
    assert isinstance(store, PruneStore)
    return await store.prune(kind, before, BATCH)


async def test_each_class_goes_when_old_and_stays_when_fresh_or_in_flight(
    prunable: Store,
) -> None:
    store = prunable
    for n in range(5):
        await finished(store, f"old{n}")
    await buried(store, "dead-lettered")
    await store.accept([(event("in-flight"), "c1")])
    await store.save_step("in-flight", "s", "1")  # a running turn's progress
    await store.checkpoint("in-flight-reply", [], [])  # no such event: nothing
    await store.accept([(event("waits-reply"), "c1")])
    await store.checkpoint("waits-reply", [out("unsent")], [])  # a reply not sent yet
    cutoff = time.time()
    await finished(store, "fresh")

    assert await prune(store, "payloads", cutoff) == 6  # old0..4 and waits-reply
    row = await store.inbox_row("old0")
    assert row is not None and row.event.text == "" and row.event.meta == {"reduced": True}
    assert row.event.key == "old0" and row.event.conversation.chat_id == "c1"
    fresh = await store.inbox_row("fresh")
    assert fresh is not None and fresh.event.text == "secret of fresh"
    assert await prune(store, "payloads", cutoff) == 0  # reduced once

    assert await prune(store, "steps", cutoff) == 5
    assert await store.steps("old0") == {}
    assert await store.steps("in-flight") == {"s": "1"}
    assert await store.steps("fresh") == {"s": "1"}

    assert await prune(store, "outbox", cutoff) == 5
    assert await store.outbox_rows("old0") == []
    assert [r.key for r in await store.unsent()] == ["unsent"]
    assert len(await store.outbox_rows("fresh")) == 1

    # a dead event's row stays while its dead letter does (``tether dead retry``)
    assert await prune(store, "inbox", cutoff) == 6
    assert await store.inbox_row("old0") is None
    assert await store.inbox_row("dead-lettered") is not None
    assert await store.inbox_row("in-flight") is not None
    assert await store.inbox_row("fresh") is not None
    assert await prune(store, "dead_letters", cutoff) == 1
    assert await store.dead_letter("dead-lettered") is None
    assert await prune(store, "inbox", time.time()) == 2  # now letterless; fresh is done
    assert await store.inbox_row("in-flight") is not None
    assert (await store.accept([(event("old0"), "c1")]))[0] is not None  # the key is gone


async def test_history_goes_only_where_summarized_and_the_summary_stays(prunable: Store) -> None:
    store = prunable
    for n in range(4):
        await store.accept([(event(f"e{n}"), "c1")])
        await store.checkpoint(f"e{n}", [], [Turn("c1", "user", f"m{n}", tokens=1)])
    turns = await store.history("c1", 10)
    state = ConversationState("c1", summary="m0 and m1", summarized_upto=turns[1].id)
    await store.accept([(event("compact"), "c1")])
    changes = MemoryChanges("c1", state=state, summarized=(turns[0].id, turns[1].id))
    await store.checkpoint("compact", [], [], changes)
    assert await prune(store, "history", time.time()) == 2
    assert [t.text for t in await store.history("c1", 10)] == ["m2", "m3"]
    assert (await store.conversation("c1")).summary == "m0 and m1"


async def test_a_blob_goes_only_when_old_and_named_by_no_row(prunable: Store) -> None:
    store = prunable
    kept = await store.put_blob(b"named by a reply")
    gone = await store.put_blob(b"named by nothing")
    await store.accept([(event("k"), "c1")])
    message = out("k:r").model_copy(update={"files": [_file(kept)]})
    await store.checkpoint("k", [message], [])
    cutoff = time.time()
    young = await store.put_blob(b"stored after the cutoff")
    assert await prune(store, "blobs", cutoff) == 1
    assert await store.blob(gone) is None
    assert await store.blob(kept) is not None and await store.blob(young) is not None


async def test_audit_goes_when_old(prunable: Store) -> None:
    store = prunable
    await buried(store, "k")
    await store.requeue("k")  # a move: an inbox_history row
    assert await prune(store, "audit", time.time()) >= 1
    sizes = await store.class_sizes()  # type: ignore[attr-defined]
    assert sizes["audit"].rows == 0


async def test_an_inbox_row_goes_with_its_steps(prunable: Store) -> None:
    await finished(prunable, "k")
    assert await prune(prunable, "inbox", time.time()) == 1
    assert await prunable.steps("k") == {}


def _file(blob: str) -> object:
    from tether.files import OutFile

    return OutFile(blob=blob, name="f.txt", kind="document", mime="text/plain", size=1)


async def test_a_new_sqlite_file_gives_pages_back(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "t.db"))
    await store.open()
    try:
        assert await store.vacuum_mode() == "incremental"
        for n in range(40):
            await store.accept([(event(f"k{n}", text="x" * 8000), "c1")])
            await store.checkpoint(f"k{n}", [], [])
        assert await store.prune("inbox", time.time(), 500) == 40
        assert await store.reclaim() > 0
        sizes = await store.class_sizes()
        assert sizes["inbox"].rows == 0
    finally:
        await store.close()


def test_a_payload_is_reduced_to_what_dedup_and_reports_read() -> None:
    payload = event("k", text="my phone is 555").model_copy(update={"raw": {"x": 1}}).to_json()
    reduced = reduced_payload(payload)
    assert reduced is not None and "555" not in reduced and '"raw":null' in reduced
    assert reduced_payload(reduced) is None


async def test_the_size_report_has_every_class(prunable: Store) -> None:
    from tether.memory.retention.sizes import size_lines, size_report

    await finished(prunable, "k")
    report = await size_report(prunable)
    assert report is not None and report["classes"]["inbox"]["rows"] == 1
    assert set(report["classes"]) >= {"payloads", "steps", "outbox", "blobs", "history", "audit"}
    lines = size_lines(report)
    assert any(line.split()[1:3] == ["inbox", "1"] for line in lines)
