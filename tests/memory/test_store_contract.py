"""One contract for every store: the same test runs against each implementation."""

from __future__ import annotations

import asyncio
import hashlib
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.config import ROOT, event
from tether.events import OutMessage, Target
from tether.memory.blobs import MAX_BLOB_BYTES, BlobTooLarge
from tether.memory.sqlite import SqliteStore
from tether.memory.store import (
    ConversationState,
    DeadLetter,
    MemoryChanges,
    Store,
    Turn,
    UsageRecord,
)
from tether.memory.stores import open_store


def out(key: str, text: str = "reply") -> OutMessage:
    return OutMessage(key=key, target=Target(platform="test", chat_id="c1"), text=text)


async def test_accept_inserts_once_and_reports_duplicates(store: Store) -> None:
    rows = await store.accept([(event("a"), "c1"), (event("b"), "c1"), (event("a"), "c1")])
    assert [r.key if r else None for r in rows] == ["a", "b", None]
    assert rows[0] is not None and rows[1] is not None and rows[0].seq < rows[1].seq
    assert await store.accept([(event("b"), "c1")]) == [None]
    assert (await store.counts())["inbox"] == {"received": 2}


async def test_concurrent_accepts_of_one_key_insert_it_once(store: Store) -> None:
    results = await asyncio.gather(*(store.accept([(event("same"), "c1")]) for _ in range(20)))
    assert sum(1 for [row] in results if row is not None) == 1


async def test_an_accept_whose_caller_is_cancelled_does_not_stall_the_store(
    store: Store,
) -> None:
    """An adapter stopping mid-backfill cancels its accept while the commit is in flight.
    The store must settle every later call and close; the SQLite link's reply reader
    once died on the cancelled future, and ``tether run`` then hung at SIGTERM."""
    pending = asyncio.create_task(store.accept([(event("k-cancelled"), "c1")]))
    await asyncio.sleep(0)  # queued (and, for SQLite, on its way to the writer)
    pending.cancel()
    async with asyncio.timeout(30):  # a guard against a hang, not a speed check
        assert [row is not None for row in await store.accept([(event("k-after"), "c1")])] == [True]
        await store.save_step("k-after", "s", "1")  # a write after it settles too
        assert await store.step("k-after", "s") == "1"


async def test_accept_commits_cursor_with_the_events(store: Store) -> None:
    await store.accept([(event("u1"), "c1")], cursors={"telegram:1:offset": "41"})
    assert await store.cursor("telegram:1:offset") == "41"
    await store.accept([], cursors={"telegram:1:offset": "42"})
    assert await store.cursor("telegram:1:offset") == "42"
    await store.set_cursor("other", "x")
    assert await store.cursor("other") == "x"
    assert await store.cursor("missing") is None


async def test_recent_cursors_by_prefix_and_update_time(store: Store) -> None:
    await store.accept([], cursors={"dc:chan:1": "10", "dc:chan:2": "20", "tg:1": "5"})
    await store.set_cursor("dc:chan:3", "30")
    await store.set_cursor("a_b:1", "x")
    await store.set_cursor("aXb:2", "y")  # a prefix is literal: "_" and "%" match nothing else
    found = await store.recent_cursors("dc:chan:", time.time() - 60)
    assert found == {"dc:chan:1": "10", "dc:chan:2": "20", "dc:chan:3": "30"}
    assert await store.recent_cursors("a_b:", 0) == {"a_b:1": "x"}
    assert await store.recent_cursors("dc:chan:", time.time() + 60) == {}
    assert await store.recent_cursors("nothing:", 0) == {}


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
    stale = "running" if store.shared else "received"
    assert [(r.key, r.status, r.attempts) for r in recovered] == [("k", stale, 1)]


async def test_lanes_list_unfinished_events_per_conversation(store: Store) -> None:
    for key, conversation in (("a1", "A"), ("b1", "B"), ("a2", "A")):
        await store.accept([(event(key), conversation)])
    await store.checkpoint("b1", [out("b1#0")], [])
    assert [r.key for r in await store.lane("A")] == ["a1", "a2"]
    assert await store.lane("B") == []
    assert sorted(await store.busy_conversations()) == ["A"]
    assert [r.key for r in await store.unsent_for("test:c1")] == ["b1#0"]
    assert await store.busy_targets() == ["test:c1"]


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


async def test_requeue_sends_an_event_waiting_in_retry_wait_round_now(store: Store) -> None:
    """``tether dead retry`` on an event that waits (a provider asked for a day, a handler
    for an hour): received now, its attempts and wait cleared; a running or done one is
    left alone."""
    rows = await store.accept([(event("k"), "c1"), (event("running"), "c1")])
    waiting, running = rows
    assert waiting is not None and running is not None
    await store.begin(waiting)
    await store.retry_later("k", time.time() + 86400, "ModelBusy: HTTP 429")
    await store.begin(running)
    assert await store.requeue("k") is True
    row = await store.inbox_row("k")
    assert row is not None
    assert (row.status, row.attempts, row.retry_at) == ("received", 0, None)
    assert [r.key for r in await store.pending(time.time() + 1)] == ["k"]
    assert await store.dead_letters() == []
    assert await store.requeue("running") is False
    assert (await store.inbox_row("running")).status == "running"  # type: ignore[union-attr]
    await store.checkpoint("k", [], [])
    assert await store.requeue("k") is False


async def test_steps_are_memoized_per_event(store: Store) -> None:
    assert await store.step("k", "llm") is None
    await store.save_step("k", "llm", '{"a": 1}')
    await store.save_step("k", "other", "2")
    assert await store.step("k", "llm") == '{"a": 1}'
    assert await store.steps("k") == {"llm": '{"a": 1}', "other": "2"}
    assert await store.steps("j") == {}


async def test_blobs_are_stored_once_by_their_sha256(store: Store) -> None:
    data = bytes(range(256)) * 5  # every byte value, NUL included
    key = await store.put_blob(data)
    assert key == hashlib.sha256(data).hexdigest()
    assert await store.put_blob(data) == key  # the same bytes again: the same blob
    assert await store.blob(key) == data
    assert await store.blob("0" * 64) is None
    with pytest.raises(BlobTooLarge):
        await store.put_blob(b"x" * (MAX_BLOB_BYTES + 1))


async def test_outbox_status_transitions(store: Store) -> None:
    await store.accept([(event("k"), "c1")])
    await store.checkpoint("k", [out("k#0"), out("k#1")], [])
    assert [(r.key, r.status) for r in await store.unsent()] == [
        ("k#0", "pending"),
        ("k#1", "pending"),
    ]
    assert await store.unsent_keys() == ["k#0", "k#1"]
    await store.mark_outbox("k#0", "sending", attempts=1)
    assert await store.unsent_keys() == ["k#0", "k#1"]  # sending is not sent yet
    await store.mark_outbox("k#0", "sent", platform_id="m-1")
    assert await store.unsent_keys() == ["k#1"]
    await store.mark_outbox("k#1", "unknown", error="ambiguous: timeout")
    rows = {r.key: r for r in await store.outbox_rows("k")}
    assert (rows["k#0"].status, rows["k#0"].platform_id, rows["k#0"].attempts) == ("sent", "m-1", 1)
    assert rows["k#1"].status == "unknown" and rows["k#1"].error == "ambiguous: timeout"
    assert await store.unsent() == [] and await store.unsent_keys() == []
    assert await store.requeue("k#1") is True
    assert [r.key for r in await store.unsent()] == await store.unsent_keys() == ["k#1"]
    assert (await store.counts())["outbox"] == {"sent": 1, "pending": 1}


async def test_locks_are_exclusive_across_processes_and_released(pg_dsn: str) -> None:
    first, second = open_store(pg_dsn), open_store(pg_dsn)
    await first.open()
    await second.open()
    try:
        assert await first.try_lock("lane:c1")
        assert not await second.try_lock("lane:c1")
        assert await second.try_lock("lane:c2")
        await first.unlock("lane:c1")
        assert await second.try_lock("lane:c1")
        await second.close()  # a dead process's locks go with its connection
        assert await first.try_lock("lane:c1") and await first.try_lock("lane:c2")
    finally:
        await first.close()
        await second.close()


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


async def test_sqlite_waits_for_another_writer_without_blocking_the_loop(tmp_path: Path) -> None:
    """A ``tether`` CLI call holding the write lock delays commits, not the event loop."""
    path = str(tmp_path / "locked.db")
    store = SqliteStore(path)
    await store.open()
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # what another process's write transaction holds
        accepting = asyncio.create_task(store.accept([(event("k"), "c1")]))
        ticks = 0
        while ticks < 20:  # the loop keeps turning while the commit waits for the lock
            await asyncio.sleep(0.005)
            ticks += 1
        assert not accepting.done()
        other.execute("COMMIT")
        assert [row.key for row in await accepting if row] == ["k"]
    finally:
        other.close()
        await store.close()


class SentToWriter:
    """From now on, the SQL of each batch a SqliteStore hands its writer process."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import tether.memory.sqlite.writer

        self.sql: list[str] = []
        self.sent = asyncio.Event()
        frame = tether.memory.sqlite.writer.frame

        def recording(request: Any) -> bytes:
            self.sql.extend(sql for sql, _rows in request[1])
            self.sent.set()
            return frame(request)

        monkeypatch.setattr(tether.memory.sqlite.writer, "frame", recording)


@pytest.mark.crash
async def test_sqlite_a_dead_writer_fails_what_it_held_and_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteStore(str(tmp_path / "writer.db"))
    await store.open()
    try:
        await store.accept([(event("before"), "c1")])
        writer = store._link.process
        assert writer is not None
        writer.send_signal(signal.SIGSTOP)  # mid-commit, as far as the store can tell
        batches = SentToWriter(monkeypatch)
        held = asyncio.create_task(store.accept([(event("held"), "c1")]))
        await batches.sent.wait()
        writer.kill()
        with pytest.raises(RuntimeError, match="writer process"):
            await asyncio.wait_for(held, 30)  # failed, not hung: the caller retries
        [again] = await store.accept([(event("held"), "c1")])  # a new writer takes over
        assert again is not None and store._link.process is not writer
        assert [r.key for r in await store.recover()] == ["before", "held"]
    finally:
        await store.close()


async def test_sqlite_writer_outlives_signals_meant_for_the_gateway(tmp_path: Path) -> None:
    """Ctrl-C and systemd's SIGTERM reach the writer too; the draining gateway needs it."""
    store = SqliteStore(str(tmp_path / "signals.db"))
    await store.open()
    try:
        writer = store._link.process
        assert writer is not None
        writer.send_signal(signal.SIGINT)
        writer.send_signal(signal.SIGTERM)
        await store.accept([(event("k"), "c1")])
        assert store._link.process is writer and writer.returncode is None
    finally:
        await store.close()


@pytest.mark.crash
def test_sqlite_writer_exits_when_the_gateway_is_killed(tmp_path: Path) -> None:
    """No orphan: the writer reads EOF when its parent dies, whatever killed it."""
    script = f"""
import asyncio, sys
sys.path.insert(0, {str(ROOT)!r})
from tether.memory.sqlite import SqliteStore
async def main():
    store = SqliteStore({str(tmp_path / "orphan.db")!r})
    await store.open()
    print(store._link.process.pid, flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    writer_pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 30
    while _alive(writer_pid):
        assert time.monotonic() < deadline, "the writer outlived its gateway"
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


async def test_sqlite_full_synchronous_commits_the_same(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "full.db"), synchronous="full")
    await store.open()
    try:
        assert store._link.process is not None  # the writer's connection is opened with FULL
        cmdline = Path(f"/proc/{store._link.process.pid}/cmdline")
        args = (await asyncio.to_thread(cmdline.read_bytes)).split(b"\0")
        assert args[-2:] == [b"FULL", b""]
        await store.accept([(event("k"), "c1")])
        await store.checkpoint("k", [out("k#0")], [said("hi")])
        assert (await store.inbox_row("k")).status == "done"  # type: ignore[union-attr]
        assert [r.key for r in await store.unsent()] == ["k#0"]
    finally:
        await store.close()


async def test_a_read_sees_the_writes_posted_before_it(store: Store) -> None:
    """begin and the 'sent' mark are not awaited, yet the store reads its own writes."""
    [row] = await store.accept([(event("k"), "c1")])
    assert row is not None
    await store.begin(row)
    running = await store.inbox_row("k")
    assert running is not None and running.status == "running"
    [sending] = await store.checkpoint("k", [out("k#0")], [])
    await store.mark_outbox(sending.key, "sent", platform_id="p1", durable=False)
    assert [(r.status, r.platform_id) for r in await store.outbox_rows("k")] == [("sent", "p1")]


async def test_sqlite_a_quick_event_skips_its_running_row_and_keeps_its_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """begin + checkpoint in one batch write 'done' with the attempts, no 'running' row."""
    store = SqliteStore(str(tmp_path / "quick.db"))
    await store.open()
    try:
        [row] = await store.accept([(event("k"), "c1")])
        assert row is not None
        await store.begin(row)
        await store.retry_later("k", time.time(), "once more")
        batches = SentToWriter(monkeypatch)
        await store.begin(row)  # attempt 2, finished before the writer ran
        await store.checkpoint("k", [], [])
        done = await store.inbox_row("k")
        assert done is not None and (done.status, done.attempts) == ("done", 2)
        assert batches.sql and not [sql for sql in batches.sql if "'running'" in sql]
    finally:
        await store.close()


# -- conversation memory ------------------------------------------------------------------


async def commit(
    store: Store, key: str, turns: list[Turn] | None = None, changes: MemoryChanges | None = None
) -> None:
    """Accept an event and checkpoint it with ``turns`` and ``changes``."""
    await store.accept([(event(key), "c1")])
    await store.checkpoint(key, [], turns or [], changes)


def said(text: str, tokens: int = 10, role: str = "user") -> Turn:
    return Turn("c1", role, text, tokens=tokens)


async def test_conversation_state_defaults_and_roundtrips(store: Store) -> None:
    assert await store.conversation("c1") == ConversationState("c1")
    state = ConversationState(
        "c1", persona="a pirate", summary="s", summary_tokens=5, summarized_upto=0,
        context_from=0, settings={"model": "fast"},
    )  # fmt: skip
    await commit(store, "k", changes=MemoryChanges("c1", state=state))
    assert await store.conversation("c1") == state
    assert await store.conversation("c2") == ConversationState("c2")
    state.persona = None
    await commit(store, "k2", changes=MemoryChanges("c1", state=state))
    assert (await store.conversation("c1")).persona is None


async def test_facts_are_added_listed_within_a_budget_and_forgotten(store: Store) -> None:
    changes = MemoryChanges(
        "c1", facts=[("likes tea", 5), ("lives in Lisbon", 6), ("has a cat", 7)]
    )
    await commit(store, "k", changes=changes)
    await store.checkpoint("k", [], [], changes)  # a repeated checkpoint adds nothing
    facts = await store.facts("c1")
    assert [(f.text, f.tokens) for f in facts] == [
        ("likes tea", 5),
        ("lives in Lisbon", 6),
        ("has a cat", 7),
    ]
    assert [f.text for f in await store.facts("c1", budget=13)] == ["lives in Lisbon", "has a cat"]
    assert await store.facts("c1", budget=3) == []
    assert await store.facts("c2") == []
    await commit(store, "k2", changes=MemoryChanges("c1", forget=[facts[0].id, facts[2].id]))
    assert [f.text for f in await store.facts("c1")] == ["lives in Lisbon"]


async def test_facts_within_a_budget_are_the_newest_across_pages(store: Store) -> None:
    """The SQL stores read facts newest first a page at a time; the pages join up."""
    many = [(f"fact {n}", 1 + n % 3) for n in range(120)]
    await commit(store, "k", changes=MemoryChanges("c1", facts=many))
    await commit(store, "other", changes=MemoryChanges("c2", facts=[("elsewhere", 1)]))
    budget = 150
    expected: list[str] = []
    used = 0
    for text, tokens in reversed(many):
        if used + tokens > budget:
            break
        expected.insert(0, text)
        used += tokens
    assert len(expected) > 32  # more than the first two pages
    assert [f.text for f in await store.facts("c1", budget=budget)] == expected
    assert [f.text for f in await store.facts("c1", budget=10_000)] == [t for t, _ in many]


async def test_usage_is_summed_per_conversation_model_and_day_once_per_call(store: Store) -> None:
    calls = [
        UsageRecord("llm:reply", "fast", "2030-01-01", 100, 10, 0.5),
        UsageRecord("llm:summary", "fast", "2030-01-01", 50, 5, 0.25),
        UsageRecord("llm:reply#2", "big", "2030-01-01", 7, 3, 1.0),
    ]
    await commit(store, "k", changes=MemoryChanges("c1", usage=calls))
    await store.checkpoint("k", [], [], MemoryChanges("c1", usage=calls))  # repeated: no-op
    later = UsageRecord("llm:reply", "fast", "2030-01-02", 1, 1)
    await commit(store, "k2", changes=MemoryChanges("c1", usage=[later]))
    rows = await store.usage("c1")
    assert [(u.day, u.model, u.prompt_tokens, u.completion_tokens, u.calls) for u in rows] == [
        ("2030-01-01", "big", 7, 3, 1),
        ("2030-01-01", "fast", 150, 15, 2),
        ("2030-01-02", "fast", 1, 1, 1),
    ]
    assert rows[1].cost == pytest.approx(0.75) and rows[1].tokens == 165
    assert [u.day for u in await store.usage("c1", since="2030-01-02")] == ["2030-01-02"]
    assert await store.usage("c2") == []
    await commit(store, "k3", changes=MemoryChanges("c2", usage=[later]))
    assert await store.spend("2030-01-02") == {"fast": (4, 0.0)}
    spent = await store.spend("2030-01-01")
    assert spent["big"] == (10, pytest.approx(1.0)) and spent["fast"][0] == 169
    by_conversation = await store.spend_by_conversation("2030-01-01")
    assert by_conversation["c1"][0] == 177 and by_conversation["c2"] == (2, 0.0)
    assert by_conversation["c1"][1] == pytest.approx(1.75)
    assert await store.spend_by_conversation("2030-01-02") == {"c1": (2, 0.0), "c2": (2, 0.0)}


async def test_recent_reads_the_newest_unsummarized_turns_within_the_budget(store: Store) -> None:
    for i in range(10):
        await commit(store, f"e{i}", [said(f"m{i}", tokens=10)])
    window = await store.recent("c1", 35)
    assert [t.text for t in window.turns] == ["m7", "m8", "m9"]
    assert (window.tokens, window.more) == (30, True)
    assert all(t.id > 0 for t in window.turns)
    whole = await store.recent("c1", 1000)
    assert len(whole.turns) == 10 and not whole.more
    assert await store.last_message_id("c1") == whole.turns[-1].id
    assert await store.last_message_id("c2") == 0
    # after_id: the context starts after a reset
    fresh = await store.recent("c1", 1000, after_id=whole.turns[7].id)
    assert [t.text for t in fresh.turns] == ["m8", "m9"] and not fresh.more
    # a newest turn bigger than the budget: nothing fits, and there is more
    await commit(store, "big", [said("huge", tokens=500)])
    assert (await store.recent("c1", 100)).turns == [] and (await store.recent("c1", 100)).more


async def test_summarized_turns_are_marked_kept_and_left_out_of_the_window(store: Store) -> None:
    for i in range(6):
        await commit(store, f"e{i}", [said(f"m{i}", tokens=10)])
    oldest = await store.oldest_unsummarized("c1", 25)
    assert [t.text for t in oldest] == ["m0", "m1"]
    state = ConversationState("c1", summary="m0 and m1", summarized_upto=oldest[-1].id)
    changes = MemoryChanges("c1", state=state, summarized=(oldest[0].id, oldest[-1].id))
    await commit(store, "compact", changes=changes)
    history = await store.history("c1", 100)
    assert [(t.text, t.summarized) for t in history] == [
        ("m0", True), ("m1", True), ("m2", False), ("m3", False), ("m4", False), ("m5", False),
    ]  # fmt: skip
    window = await store.recent("c1", 1000)
    assert [t.text for t in window.turns] == ["m2", "m3", "m4", "m5"] and not window.more
    ids = [t.id for t in history]
    assert [t.text for t in await store.oldest_unsummarized("c1", 1000)] == ["m2", "m3", "m4", "m5"]
    before = await store.oldest_unsummarized("c1", 1000, before_id=ids[4])
    assert [t.text for t in before] == ["m2", "m3"]
    after = await store.oldest_unsummarized("c1", 1000, after_id=ids[2])
    assert [t.text for t in after] == ["m3", "m4", "m5"]
    # at least one turn, however large, so compaction always makes progress
    assert [t.text for t in await store.oldest_unsummarized("c1", 1)] == ["m2"]


async def test_memory_changes_commit_with_the_checkpoint(store: Store) -> None:
    [row] = await store.accept([(event("k"), "c1")])
    assert row is not None
    await store.begin(row)
    changes = MemoryChanges(
        "c1",
        state=ConversationState("c1", persona="p"),
        facts=[("f", 2)],
        usage=[UsageRecord("llm:reply", "m", "2030-01-01", 3, 4)],
    )
    await store.checkpoint("k", [out("k#0")], [said("hi")], changes)
    assert (await store.inbox_row("k")).status == "done"  # type: ignore[union-attr]
    assert (await store.conversation("c1")).persona == "p"
    assert [f.text for f in await store.facts("c1")] == ["f"]
    assert [u.tokens for u in await store.usage("c1")] == [7]
    assert [t.text for t in await store.history("c1", 5)] == ["hi"]


async def test_sqlite_memory_changes_roll_back_with_a_failed_checkpoint(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "atomic.db"))
    await store.open()
    try:
        await store.accept([(event("k"), "c1")])
        changes = MemoryChanges(
            "c1",
            state=ConversationState("c1", persona="p"),
            usage=[UsageRecord("llm:reply", "m", "2030-01-01", 3, 4)],
            summarized=(object(), 2),  # type: ignore[arg-type]  # fails inside the transaction
        )
        with pytest.raises(sqlite3.ProgrammingError):
            await store.checkpoint("k", [], [said("hi")], changes)
        assert (await store.inbox_row("k")).status == "received"  # type: ignore[union-attr]
        assert (await store.conversation("c1")).persona is None
        assert await store.usage("c1") == [] and await store.history("c1", 5) == []
    finally:
        await store.close()


async def test_console_reads_series_events_timeline_chat_and_fact_edits(store: Store) -> None:
    """The web console's role (ConsoleStore): one event's life as the pages show it."""
    since = time.time() - 60
    await store.accept([(event("k", "hello"), "c1"), (event("other", "x_%"), "c2")])
    [row] = [r for r in await store.recover() if r.key == "k"]
    await store.begin(row)
    await store.save_step("k", "fetch", '"42"')
    changes = MemoryChanges(
        "c1", facts=[("likes tea", 3), ("lives in Oslo", 4)],
        usage=[UsageRecord("llm:reply", "m", "2030-01-01", 3, 4, 0.5)],
    )  # fmt: skip
    await store.checkpoint("k", [out("k#0", "hi there")], [said("hello")], changes)
    await store.mark_outbox("k#0", "sent", platform_id="m-1")

    series = await store.series(since, 3600.0, 2)
    assert series["received"][0] == 2 and series["replies"][0] == 1
    assert series["received"][1] == 0
    assert [e.key for e in await store.find_events()] == ["other", "k"]  # newest first
    assert [e.key for e in await store.find_events(key="oth")] == ["other"]
    assert [e.key for e in await store.find_events(conversation="c1")] == ["k"]
    assert [e.key for e in await store.find_events(status="done")] == ["k"]
    assert await store.find_events(key="%") == []  # LIKE wildcards are literal
    timeline = await store.timeline("k")
    assert timeline is not None and timeline.event.status == "done"
    assert [s.name for s in timeline.steps] == ["fetch"]
    assert [(s.text, s.status, s.platform_id) for s in timeline.sends] == [
        ("hi there", "sent", "m-1")
    ]
    assert await store.timeline("missing") is None
    assert {c.conversation: c.events for c in await store.conversation_list()} == {
        "c1": 1, "c2": 1,
    }  # fmt: skip
    assert [(line.role, line.text) for line in await store.chat_log("c1")] == [
        ("user", "hello"),
        ("agent", "hi there"),
    ]

    first, second = await store.facts("c1")
    assert await store.edit_fact("c1", first.id, "likes green tea", 4)
    assert await store.forget_fact("c1", second.id)
    assert not await store.forget_fact("c2", first.id)  # another conversation's fact
    assert not await store.edit_fact("c1", second.id, "gone", 1)
    assert [f.text for f in await store.facts("c1")] == ["likes green tea"]


async def test_console_lists_failed_sends_newest_first(store: Store) -> None:
    await store.accept([(event("k"), "c1")])
    await store.checkpoint("k", [out("k#0"), out("k#1"), out("k#2")], [])
    await store.mark_outbox("k#0", "dead", error="chat not found")
    await store.mark_outbox("k#1", "sent", platform_id="1")
    await store.mark_outbox("k#2", "unknown", error="timeout")
    failed = await store.failed_sends()
    assert [(s.key, s.status, s.error) for s in failed] == [
        ("k#2", "unknown", "timeout"),
        ("k#0", "dead", "chat not found"),
    ]
    assert await store.requeue("k#0")
    assert [s.key for s in await store.failed_sends()] == ["k#2"]


def reminder(rid: str, conversation: str = "c1", **extra: Any) -> Any:
    from tether.memory.reminders import Reminder

    fields: dict[str, Any] = {
        "id": rid,
        "conversation": conversation,
        "target": "test:c1",
        "text": "send the report",
        "cron": "0 9 * * 1-5",
        "at": None,
        "timezone": "Europe/Berlin",
        "status": "active",
        "event_key": "e1",
        "created": 100.0,
        "updated": 100.0,
    }
    return Reminder(**(fields | extra))


async def test_reminders_are_added_once_listed_by_owner_and_finished_once(store: Store) -> None:
    first = await store.add_reminder(reminder("r-1"))
    assert first == reminder("r-1")
    # A re-run adds the same id: ignored, the stored row answers (its text unchanged).
    assert await store.add_reminder(reminder("r-1", text="other")) == first
    once = reminder("r-2", cron=None, at="2026-12-01T08:00:00Z", created=200.0)
    await store.add_reminder(once)
    await store.add_reminder(reminder("r-3", conversation="c2", created=300.0))
    assert [r.id for r in await store.reminders()] == ["r-1", "r-2", "r-3"]
    assert [r.id for r in await store.reminders("c1")] == ["r-1", "r-2"]
    assert await store.reminder("r-2") == once
    assert await store.reminder("missing") is None
    assert await store.finish_reminder("r-2", "done")
    assert not await store.finish_reminder("r-2", "cancelled")  # only an active one
    assert not await store.finish_reminder("missing", "cancelled")
    assert [r.id for r in await store.reminders("c1")] == ["r-1"]
    kept = await store.reminders("c1", active=False)
    assert [(r.id, r.status) for r in kept] == [("r-1", "active"), ("r-2", "done")]


async def test_a_prompt_reminder_is_kept_as_one(store: Store) -> None:
    """``Reminder.prompt`` round-trips; a reminder made without it is a text reminder."""
    made = await store.add_reminder(reminder("r-p", prompt=True, text="check the weather"))
    assert made.prompt and made == reminder("r-p", prompt=True, text="check the weather")
    assert (await store.reminder("r-p")) == made
    plain = await store.add_reminder(reminder("r-t", created=200.0))
    assert plain.prompt is False
    assert [(r.id, r.prompt) for r in await store.reminders()] == [("r-p", True), ("r-t", False)]
    assert await store.finish_reminder("r-p", "done")
    [done, _] = await store.reminders(active=False)
    assert (done.id, done.status, done.prompt) == ("r-p", "done", True)


async def test_spent_console_tokens_are_spent_once_and_for_every_reader(store: Store) -> None:
    """RevocationStore: a logout or a used login form, for every instance and restart.
    Of many spends of one token at once, exactly one is the first; an expired one is
    forgotten and may be spent again (it is refused by its own expiry anyway)."""
    later = time.time() + 3600
    assert not await store.revoked("session:a")
    results = await asyncio.gather(*(store.revoke("login:n1", later) for _ in range(10)))
    assert sorted(results) == [False] * 9 + [True]
    assert await store.revoked("login:n1")
    assert await store.revoke("session:a", later) is True
    assert await store.revoked("session:a") and not await store.revoked("session:b")
    assert await store.revoke("session:a", later) is False  # a second logout: already spent
    assert await store.revoke("session:old", time.time() - 1) is False  # expired already
    assert not await store.revoked("session:old")


async def test_a_retried_dead_event_keeps_every_attempt_its_death_and_its_retry(
    store: Store,
) -> None:
    """ConsoleStore.timeline: the moves off the plain path, in time order; a requeue
    resets the attempts and drops the dead letter, and the history still says it died."""
    original = event("k")
    await store.accept([(original, "c1"), (event("plain"), "c1")])
    rows = {row.key: row for row in await store.recover()}
    row = rows["k"]
    await store.begin(row)
    await store.retry_later("k", time.time() + 5, "Retryable: the service is down")
    await store.begin(row)
    letter = DeadLetter("k", "c1", original, "Fatal: still down", "tb", {})
    await store.bury(letter)
    assert await store.requeue("k")
    [again] = [r for r in await store.recover() if r.key == "k"]
    await store.begin(again)
    await store.checkpoint("k", [], [])
    await store.begin(rows["plain"])
    await store.checkpoint("plain", [], [])

    timeline = await store.timeline("k")
    assert timeline is not None
    assert (timeline.event.status, timeline.event.attempts) == ("done", 1)
    assert [(m.before, m.status, m.attempts, m.error) for m in timeline.moves] == [
        ("running", "retry_wait", 1, "Retryable: the service is down"),
        ("retry_wait", "running", 2, "Retryable: the service is down"),
        ("running", "dead", 2, "Fatal: still down"),
        ("dead", "received", 0, "Fatal: still down"),
    ]
    assert timeline.moves[0].retry_at is not None
    times = [m.at for m in timeline.moves]
    assert times == sorted(times)
    plain = await store.timeline("plain")
    assert plain is not None and plain.moves == []  # the plain path costs no row


def _wait(key: str, position: int = 0, *, deadline: float | None = None, token: str = ""):
    from tether.memory.waits import Wait, wait_id

    ident = wait_id(key, position)
    return Wait(
        id=ident,
        event_key=key,
        position=position,
        conversation="c1",
        kind="ask",
        chat="test:c1",
        token=token or hashlib.sha256(ident.encode()).hexdigest()[:16],
        sender="test:u1",
        deadline=deadline,
        status="open",
        question="Which city?",
        detail={"trace": ["wait:0"], "digest": "d"},
        created=time.time(),
    )


async def test_a_suspended_turn_waits_until_one_answer_ends_its_wait(store: Store) -> None:
    """The suspend is one transaction (waiting row, question, wait); of many answers
    racing for the wait exactly one wins and requeues the turn, and the winner asking
    again (its event run twice) is told it won without requeueing a second time."""
    [row] = await store.accept([(event("t1"), "c1")])
    assert row is not None
    await store.begin(row)
    wait = _wait("t1")
    rows = await store.suspend("t1", [out("t1#0", "Which city?")], wait)
    assert [r.key for r in rows] == ["t1#0"]
    assert [r.key for r in await store.unsent()] == ["t1#0"]
    stored = await store.inbox_row("t1")
    assert stored is not None and stored.status == "waiting"
    assert [r.key for r in await store.recover()] == []  # recovery leaves it alone
    assert [w.id for w in await store.open_waits("c1")] == [wait.id]
    assert (await store.wait_by_token(wait.token)) == await store.wait(wait.id)
    # Suspending again (the same run after a crash) adds nothing.
    await store.suspend("t1", [out("t1#0", "Which city?")], wait)
    assert len(await store.outbox_rows("t1")) == 1 and len(await store.waits_of("t1")) == 1

    answers = [{"text": f"city {n}"} for n in range(8)]
    results = await asyncio.gather(
        *(store.resolve_wait(wait.id, "answered", a, f"answer-{n}") for n, a in enumerate(answers))
    )
    winners = [r for r in results if r.won]
    assert len(winners) == 1
    [winner] = winners
    assert winner.turn is not None and winner.turn.key == "t1" and winner.turn.attempts == 1
    ended = await store.wait(wait.id)
    assert ended is not None and ended.status == "answered"
    assert ended.answer == answers[int(str(ended.answered_by).split("-")[1])]
    assert await store.open_waits() == []
    again = await store.resolve_wait(wait.id, "expired", None, str(ended.answered_by))
    assert again.won and again.wait is not None and again.wait.status == "answered"
    row_after = await store.inbox_row("t1")
    assert row_after is not None and row_after.status == "received"
    winner_key = str(ended.answered_by)
    assert [w.id for w in await store.waits_ended_by(winner_key)] == [wait.id]
    assert await store.waits_ended_by("answer-never") == []
    assert [r.key for r in await store.recover()] == ["t1"]


async def test_due_waits_are_the_open_ones_past_their_deadline(store: Store) -> None:
    now = time.time()
    for n, (key, deadline) in enumerate([("d1", now - 5), ("d2", now + 3600), ("d3", now - 1)]):
        [row] = await store.accept([(event(key), "c1")])
        assert row is not None
        await store.suspend(key, [], _wait(key, deadline=deadline, token=f"{n:016d}"))
    due = await store.due_waits(now)
    assert [w.event_key for w in due] == ["d1", "d3"]
    assert (await store.resolve_wait(due[0].id, "expired", None, "expiry")).won
    assert [w.event_key for w in await store.due_waits(now)] == ["d3"]
    assert [w.event_key for w in await store.waits(limit=10)] == ["d3", "d2", "d1"]
    assert await store.waits("approval") == []
