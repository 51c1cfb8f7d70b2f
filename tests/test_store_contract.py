"""One contract for every store: the same test runs against each implementation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.events import Conversation, Event, OutMessage, Target
from memory.inmemory import MemoryStore
from memory.sqlite import SqliteStore
from memory.store import DeadLetter, Store, Turn, open_store

CHAT = Conversation(platform="test", chat_id="c1")


def event(key: str, text: str = "hi") -> Event:
    return Event(key=key, platform="test", conversation=CHAT, text=text)


def out(key: str, text: str = "reply") -> OutMessage:
    return OutMessage(key=key, target=Target(platform="test", chat_id="c1"), text=text)


@pytest.fixture(params=["sqlite", "memory"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        s: Store = SqliteStore(str(tmp_path / "contract.db"))
    else:
        s = MemoryStore()
    await s.open()
    try:
        yield s
    finally:
        await s.close()


async def test_accept_inserts_once_and_reports_duplicates(store: Store) -> None:
    rows = await store.accept([(event("a"), "c1"), (event("b"), "c1"), (event("a"), "c1")])
    assert [r.key if r else None for r in rows] == ["a", "b", None]
    assert rows[0] is not None and rows[1] is not None and rows[0].seq < rows[1].seq
    assert await store.accept([(event("b"), "c1")]) == [None]
    assert (await store.counts())["inbox"] == {"received": 2}


async def test_concurrent_accepts_of_one_key_insert_it_once(store: Store) -> None:
    results = await asyncio.gather(*(store.accept([(event("same"), "c1")]) for _ in range(20)))
    assert sum(1 for [row] in results if row is not None) == 1


async def test_accept_commits_cursor_with_the_events(store: Store) -> None:
    await store.accept([(event("u1"), "c1")], cursors={"telegram:1:offset": "41"})
    assert await store.cursor("telegram:1:offset") == "41"
    await store.accept([], cursors={"telegram:1:offset": "42"})
    assert await store.cursor("telegram:1:offset") == "42"
    await store.set_cursor("other", "x")
    assert await store.cursor("other") == "x"
    assert await store.cursor("missing") is None


async def test_event_roundtrips_through_the_store(store: Store) -> None:
    original = event("rt", "text with ünïcode ✓").model_copy(update={"meta": {"n": 1}})
    await store.accept([(original, "c1")])
    row = await store.inbox_row("rt")
    assert row is not None and row.event == original and row.conversation == "c1"


async def test_begin_counts_attempts_and_recover_resets_running(store: Store) -> None:
    [row] = await store.accept([(event("k"), "c1")])
    assert row is not None
    await store.begin(row)
    assert row.attempts == 1 and row.status == "running"
    recovered = await store.recover()
    assert [(r.key, r.status, r.attempts) for r in recovered] == [("k", "received", 1)]


async def test_checkpoint_is_atomic_and_idempotent(store: Store) -> None:
    [row] = await store.accept([(event("k"), "c1")])
    assert row is not None
    await store.begin(row)
    turns = [Turn("c1", "user", "hi"), Turn("c1", "assistant", "reply")]
    first = await store.checkpoint("k", [out("k#0"), out("k#1", "more")], turns)
    assert [r.key for r in first] == ["k#0", "k#1"]
    await store.checkpoint("k", [out("k#0"), out("k#1", "more")], turns)  # a repeat adds nothing
    assert [r.key for r in await store.outbox_rows("k")] == ["k#0", "k#1"]
    assert [(t.role, t.text) for t in await store.history("c1", 10)] == [
        ("user", "hi"),
        ("assistant", "reply"),
    ]
    assert (await store.inbox_row("k")).status == "done"  # type: ignore[union-attr]
    assert await store.recover() == []


async def test_history_returns_the_newest_turns_oldest_first(store: Store) -> None:
    for i in range(5):
        await store.accept([(event(f"e{i}"), "c1")])
        await store.checkpoint(f"e{i}", [], [Turn("c1", "user", f"m{i}")])
    assert [t.text for t in await store.history("c1", 3)] == ["m2", "m3", "m4"]
    assert await store.history("other", 3) == []


async def test_retry_and_pending(store: Store) -> None:
    [row] = await store.accept([(event("k"), "c1")])
    assert row is not None
    assert [r.key for r in await store.pending(time.time() + 1)] == ["k"]
    assert await store.pending(time.time() - 60) == []
    await store.begin(row)
    await store.retry_later("k", 123.0, "Retryable: later")
    again = await store.inbox_row("k")
    assert again is not None
    assert (again.status, again.retry_at, again.error) == ("retry_wait", 123.0, "Retryable: later")
    assert [r.key for r in await store.recover()] == ["k"]


async def test_bury_requeue_roundtrip(store: Store) -> None:
    original = event("k")
    await store.accept([(original, "c1")])
    letter = DeadLetter(
        key="k",
        conversation="c1",
        event=original,
        error="Fatal: no",
        traceback="tb",
        snapshot={"history": [1, 2]},
    )
    await store.bury(letter)
    [stored] = await store.dead_letters()
    assert (stored.key, stored.error, stored.snapshot, stored.event) == (
        "k",
        "Fatal: no",
        {"history": [1, 2]},
        original,
    )
    assert (await store.inbox_row("k")).status == "dead"  # type: ignore[union-attr]
    assert await store.requeue("k") is True
    row = await store.inbox_row("k")
    assert row is not None and (row.status, row.attempts) == ("received", 0)
    assert await store.dead_letter("k") is None
    assert await store.requeue("k") is False


async def test_steps_are_memoized_per_event(store: Store) -> None:
    assert await store.step("k", "llm") is None
    await store.save_step("k", "llm", '{"a": 1}')
    await store.save_step("k", "other", "2")
    assert await store.step("k", "llm") == '{"a": 1}'
    assert await store.steps("k") == {"llm": '{"a": 1}', "other": "2"}
    assert await store.steps("j") == {}


async def test_outbox_status_transitions(store: Store) -> None:
    await store.accept([(event("k"), "c1")])
    await store.checkpoint("k", [out("k#0"), out("k#1")], [])
    assert [(r.key, r.status) for r in await store.unsent()] == [
        ("k#0", "pending"),
        ("k#1", "pending"),
    ]
    await store.mark_outbox("k#0", "sending", attempts=1)
    await store.mark_outbox("k#0", "sent", platform_id="m-1")
    await store.mark_outbox("k#1", "unknown", error="ambiguous: timeout")
    rows = {r.key: r for r in await store.outbox_rows("k")}
    assert (rows["k#0"].status, rows["k#0"].platform_id, rows["k#0"].attempts) == ("sent", "m-1", 1)
    assert rows["k#1"].status == "unknown" and rows["k#1"].error == "ambiguous: timeout"
    assert await store.unsent() == []
    assert await store.requeue("k#1") is True
    assert [r.key for r in await store.unsent()] == ["k#1"]
    assert (await store.counts())["outbox"] == {"sent": 1, "pending": 1}


async def test_closed_store_refuses_work(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/x.db")
    await store.open()
    await store.close()
    with pytest.raises(RuntimeError):
        await store.accept([(event("k"), "c1")])


async def test_sqlite_schema_survives_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "reopen.db")
    first = SqliteStore(path)
    await first.open()
    await first.accept([(event("k"), "c1")])
    await first.close()
    second = SqliteStore(path)
    await second.open()
    try:
        assert [r.key for r in await second.recover()] == ["k"]
    finally:
        await second.close()
