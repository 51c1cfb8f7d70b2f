"""The lane engine on its own: order within a key, keys side by side up to the limit, the
shared store's lock and re-read, idle, and the two ways to stop.

Rows are real inbox rows of the in-memory store; an attempt finishes a row by
checkpointing it there, as the pipeline does, so a shared lane's re-read sees it gone.
Holds are events the test sets, so every step waits for what it needs, not for time.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tether.adapters.loopback import LoopbackAdapter
from tether.gateway.core.lanes import Lanes, SharedStore
from tether.memory.inmemory import MemoryStore
from tether.memory.store import InboxRow

EVENTS = LoopbackAdapter()


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    store = MemoryStore()
    await store.open()
    yield store
    await store.close()


async def accept(store: MemoryStore, conversation: str, *texts: str) -> list[InboxRow]:
    """Commit events to the store's inbox, as the inbox does; their keys are their texts."""
    rows = await store.accept(
        [(EVENTS.event(text, chat=conversation, key=text), conversation) for text in texts]
    )
    return [row for row in rows if row is not None]


class Work:
    """The attempt callback: records what ran, holds rows until released, retries once."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.ran: list[str] = []
        self.finished: list[str] = []
        self.failed: list[str] = []
        self.entered: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.holds: dict[str, asyncio.Event] = {}
        self.retry_once: set[str] = set()
        self.inside = 0
        self.most_inside = 0

    def hold(self, *keys: str) -> None:
        for key in keys:
            self.holds[key] = asyncio.Event()

    async def __call__(self, lane: str, row: InboxRow) -> bool:
        self.ran.append(row.key)
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        self.entered[row.key].set()
        try:
            if row.key in self.holds:
                await self.holds[row.key].wait()
        finally:
            self.inside -= 1
        if row.key in self.retry_once:
            self.retry_once.discard(row.key)
            row.retry_at = time.time() + 0.05  # waits in its lane; the next row waits too
            return False
        await self.store.begin(row)
        await self.store.checkpoint(row.key, [], [])
        return True

    def lanes(
        self, concurrency: int = 8, shared: SharedStore[InboxRow] | None = None
    ) -> Lanes[InboxRow]:
        return Lanes(
            self,
            due=lambda row: row.retry_at,
            concurrency=concurrency,
            task="lane",
            failed=self.failed.append,
            shared=shared,
            finished=lambda row: self.finished.append(row.key),
        )


def task_named(name: str) -> asyncio.Task[object]:
    (task,) = [t for t in asyncio.all_tasks() if t.get_name() == name]
    return task


def workers() -> list[str]:
    return sorted(t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("lane:"))


async def test_a_keys_rows_run_in_order_and_a_retry_holds_its_place(store: MemoryStore) -> None:
    work = Work(store)
    work.retry_once.add("a1")
    lanes = work.lanes()
    for row in await accept(store, "a", "a1", "a2", "a3") + await accept(store, "b", "b1"):
        lanes.add(row.conversation, row)
    assert workers() == ["lane:a", "lane:b"]  # one worker per busy key
    assert await lanes.idle(5)
    assert [key for key in work.ran if key.startswith("a")] == ["a1", "a1", "a2", "a3"]
    assert work.ran.index("b1") < work.ran.index("a2")  # b did not wait for a's retry
    assert sorted(work.finished) == ["a1", "a2", "a3", "b1"]
    assert workers() == [] and await store.lane("a") == []


async def test_keys_run_side_by_side_up_to_the_limit(store: MemoryStore) -> None:
    work = Work(store)
    work.hold("k0", "k1", "k2", "k3")
    lanes = work.lanes(concurrency=2)
    for n in range(4):
        for row in await accept(store, f"c{n}", f"k{n}"):
            lanes.add(row.conversation, row)
    await work.entered["k0"].wait()
    await work.entered["k1"].wait()
    assert work.inside == 2 and not work.entered["k2"].is_set()  # k2, k3 wait for a slot
    work.holds["k0"].set()
    await work.entered["k2"].wait()  # k0's slot went to the next lane
    for hold in work.holds.values():
        hold.set()
    assert await lanes.idle(5)
    assert sorted(work.ran) == ["k0", "k1", "k2", "k3"] and work.most_inside == 2


async def test_idle_waits_until_every_lane_is_done(store: MemoryStore) -> None:
    work = Work(store)
    lanes = work.lanes()
    assert await lanes.idle(5)  # nothing queued: idle at once
    work.hold("slow")
    for row in await accept(store, "c", "slow", "next"):
        lanes.add("c", row)
    await work.entered["slow"].wait()
    assert not await lanes.idle(0.05)  # the timeout runs out while a row is held
    waiting = asyncio.create_task(lanes.idle(5))
    work.holds["slow"].set()
    assert await waiting
    assert work.ran == ["slow", "next"]


async def held_in_a_shared_lane(work: Work, conversation: str, key: str) -> Lanes[InboxRow]:
    """Shared lanes whose worker for ``conversation`` is inside ``key``'s held attempt."""
    work.hold(key)
    lanes = work.lanes(shared=SharedStore(work.store, "lane", work.store.lane))
    await accept(work.store, conversation, key)
    lanes.poke(conversation)
    await work.entered[key].wait()
    return lanes


async def test_a_poke_during_work_is_seen_by_the_running_worker(store: MemoryStore) -> None:
    work = Work(store)
    lanes = await held_in_a_shared_lane(work, "c", "c1")
    await accept(store, "c", "c2")
    lanes.poke("c")  # the worker is busy: it looks again, no second worker starts
    assert workers() == ["lane:c"]
    work.holds["c1"].set()
    assert await lanes.idle(5)
    assert work.ran == ["c1", "c2"] and await store.lane("c") == []
    assert work.finished == []  # told only of rows a local lane finished


class StoreLocks:
    """The store's locks, with a lane held by "another process" and a hook at unlock."""

    shared = True

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.foreign: set[str] = set()
        self.unlocked: list[str] = []
        self.on_unlock: list[Callable[[], Awaitable[None]]] = []
        self.told: list[Callable[[frozenset[str]], None]] = []

    async def try_lock(self, name: str) -> bool:
        return name not in self.foreign and await self.store.try_lock(name)

    async def unlock(self, name: str) -> None:
        await self.store.unlock(name)
        self.unlocked.append(name)
        if self.on_unlock:
            await self.on_unlock.pop(0)()

    def on_locks_lost(self, callback: Callable[[frozenset[str]], None]) -> None:
        self.told.append(callback)

    def lose(self, *names: str) -> None:
        """The session that held ``names`` ended (PostgreSQL: memory/postgres/locks.py)."""
        for callback in self.told:
            callback(frozenset(names))


async def test_a_row_landing_as_the_lane_lets_go_is_still_run(store: MemoryStore) -> None:
    work = Work(store)
    locks = StoreLocks(store)
    lanes = work.lanes(shared=SharedStore(locks, "lane", store.lane))

    async def land() -> None:  # between the worker's last read and its unlock
        await accept(store, "c", "late")
        lanes.poke("c")

    locks.on_unlock.append(land)
    await accept(store, "c", "early")
    lanes.poke("c")
    assert await lanes.idle(5)
    assert work.ran == ["early", "late"]
    assert locks.unlocked == ["lane:c", "lane:c"]  # let go, took the lane again, let go


async def test_a_lane_locked_by_another_process_is_left_alone(store: MemoryStore) -> None:
    work = Work(store)
    locks = StoreLocks(store)
    locks.foreign.add("lane:c")
    lanes = work.lanes(shared=SharedStore(locks, "lane", store.lane))
    await accept(store, "c", "c1")
    lanes.poke("c")
    assert await lanes.idle(5)
    assert work.ran == [] and locks.unlocked == []
    locks.foreign.clear()  # the other process let go; the sweep pokes again
    lanes.poke("c")
    assert await lanes.idle(5)
    assert work.ran == ["c1"]


async def lost_while_held(
    store: MemoryStore, *, taken_over: bool = False
) -> tuple[Work, Lanes[InboxRow]]:
    """Lanes c (rows c1, c2) and d (d1), each worker inside its held first row, when
    the store loses the locks of lane c and of a lane of the outbox's (and, with
    ``taken_over``, another process takes lane c the moment they are gone)."""
    work, locks = Work(store), StoreLocks(store)
    lanes = work.lanes(shared=SharedStore(locks, "lane", store.lane))
    work.hold("c1", "d1")
    await accept(store, "c", "c1", "c2")
    await accept(store, "d", "d1")
    lanes.poke("c")
    lanes.poke("d")
    await work.entered["c1"].wait()
    await work.entered["d1"].wait()
    held = task_named("lane:c")
    work.entered["c1"].clear()
    locks.lose("lane:c", "out:d")
    if taken_over:
        locks.foreign.add("lane:c")
    await asyncio.wait([held], timeout=5)
    assert held.cancelled()  # the row in its slot was cut off, as by a crash
    assert not task_named("lane:d").done()  # d's lock was not lost: d runs on
    return work, lanes


async def test_a_lane_whose_lock_is_lost_stops_and_runs_again_once_taken_anew(
    store: MemoryStore,
) -> None:
    work, lanes = await lost_while_held(store)
    await work.entered["c1"].wait()  # the lane looked again, took the lock, reran c1
    work.holds["c1"].set()
    work.holds["d1"].set()
    assert await lanes.idle(5)
    assert work.ran == ["c1", "d1", "c1", "c2"]
    assert await store.lane("c") == [] and await store.lane("d") == []


async def test_a_lost_lane_another_process_took_is_left_to_it(store: MemoryStore) -> None:
    work, lanes = await lost_while_held(store, taken_over=True)
    work.holds["d1"].set()
    assert await lanes.idle(5)
    assert work.ran == ["c1", "d1"]
    assert [row.key for row in await store.lane("c")] == ["c1", "c2"]  # the other one's


async def test_a_row_that_is_not_usable_is_skipped(store: MemoryStore) -> None:
    work = Work(store)

    async def usable(row: InboxRow) -> bool:
        if row.key != "bad":
            return True
        await store.checkpoint(row.key, [], [])  # set aside: the store no longer lists it
        return False

    lanes = work.lanes(shared=SharedStore(store, "lane", store.lane, usable))
    await accept(store, "c", "good", "bad", "fine")
    lanes.poke("c")
    assert await lanes.idle(5)
    assert work.ran == ["good", "fine"]


async def test_a_failing_store_ends_the_shared_worker_and_is_reported(store: MemoryStore) -> None:
    work = Work(store)
    lanes = work.lanes(shared=SharedStore(store, "lane", store.lane))
    await store.close()  # every read now raises
    lanes.poke("c")
    assert await lanes.idle(5)
    assert work.failed == ["c"] and workers() == []


async def test_poke_needs_a_shared_store(store: MemoryStore) -> None:
    with pytest.raises(RuntimeError, match="shared store"):
        Work(store).lanes().poke("c")


async def test_stop_with_grace_lets_running_rows_finish_and_cancels_waiting_lanes(
    store: MemoryStore,
) -> None:
    work = Work(store)
    work.hold("running")
    lanes = work.lanes(concurrency=1)
    (running,) = await accept(store, "a", "running")
    (queued,) = await accept(store, "b", "queued")  # waits for the one slot
    (later,) = await accept(store, "c", "later")
    later.retry_at = time.time() + 60  # waits for its time
    for row in (running, queued, later):
        lanes.add(row.conversation, row)
    await work.entered["running"].wait()
    waiting = [task_named("lane:b"), task_named("lane:c")]
    stopping = asyncio.create_task(lanes.stop(grace=5))
    await asyncio.wait(waiting)
    assert all(task.cancelled() for task in waiting)
    assert not stopping.done() and not task_named("lane:a").done()
    work.holds["running"].set()
    await stopping
    assert work.ran == ["running"] and work.finished == ["running"]
    (after,) = await accept(store, "d", "after")
    lanes.add("d", after)  # kept in the store for the next start; no worker starts
    assert workers() == [] and work.ran == ["running"]


async def test_stop_cancels_a_running_row_when_its_grace_runs_out(store: MemoryStore) -> None:
    work = Work(store)
    work.hold("stuck")
    lanes = work.lanes()
    for row in await accept(store, "a", "stuck"):
        lanes.add("a", row)
    await work.entered["stuck"].wait()
    worker = task_named("lane:a")
    await lanes.stop(grace=0.05)
    assert worker.cancelled() and work.finished == []
    assert [row.key for row in await store.lane("a")] == ["stuck"]  # left for the next start


async def test_stop_without_grace_cancels_every_worker_at_once(store: MemoryStore) -> None:
    work = Work(store)
    lanes = await held_in_a_shared_lane(work, "a", "sending")
    worker = task_named("lane:a")
    await lanes.stop()
    assert worker.cancelled() and workers() == []
    lanes.poke("a")  # stopped: a poke starts nothing
    assert workers() == [] and work.ran == ["sending"]
