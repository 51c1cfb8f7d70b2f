"""The tasks ledger's contract, on every store (the ``store`` fixture runs each).

What the gateway leans on: adding is idempotent on the id (a re-run of the starting
turn finds the task it started), the bounds count running tasks per conversation and in
all, an end is conditional (a task cancelled first stays cancelled when its checkpoint
commits ``done``, and a second cancel reports it changed nothing), and the end a task's
checkpoint carries commits with that checkpoint's outbox rows, or not at all.
"""

from __future__ import annotations

from dataclasses import replace

from tests.support.config import event
from tether.events import OutMessage, Target
from tether.memory.records import MemoryChanges, TaskEnd
from tether.memory.store import Store
from tether.memory.tasks import Task


def task(task_id: str, parent: str = "test:c1", created: float = 100.0, **more: object) -> Task:
    base = Task(
        id=task_id,
        event_key=f"task:{task_id}",
        parent=parent,
        target=parent,
        parent_task=None,
        depth=1,
        goal=f"goal of {task_id}",
        agent=None,
        sender="test:u1",
        status="running",
        deadline=created + 3600,
        budget=1000,
        result=None,
        started_by="test:c1:m1",
        created=created,
        updated=created,
    )
    return replace(base, **more)  # type: ignore[arg-type]


async def test_add_task_is_idempotent_on_its_id(store: Store) -> None:
    first = await store.add_task(task("t-1"))
    again = await store.add_task(task("t-1", goal="another goal", budget=5))
    assert first == again
    assert again.goal == "goal of t-1" and again.budget == 1000  # the first one stays
    assert await store.task("t-1") == first
    assert await store.task("t-none") is None


async def test_every_field_roundtrips(store: Store) -> None:
    sub = task(
        "t-sub",
        parent="task:t-1",
        target="",
        parent_task="t-1",
        depth=2,
        agent="researcher",
        budget=None,
        goal="Ünïcode goal 🧪",
    )
    assert await store.add_task(sub) == sub


async def test_listing_is_newest_first_per_parent_or_in_all(store: Store) -> None:
    for n, parent in enumerate(["test:c1", "test:c2", "test:c1", "test:c1"]):
        await store.add_task(task(f"t-{n}", parent=parent, created=100.0 + n))
    assert [t.id for t in await store.tasks("test:c1")] == ["t-3", "t-2", "t-0"]
    assert [t.id for t in await store.tasks("test:c1", limit=2)] == ["t-3", "t-2"]
    assert [t.id for t in await store.tasks()] == ["t-3", "t-2", "t-1", "t-0"]
    assert await store.tasks("test:nobody") == []


async def test_counts_of_running_tasks_feed_the_bounds(store: Store) -> None:
    for n, parent in enumerate(["test:c1", "test:c1", "test:c2"]):
        await store.add_task(task(f"t-{n}", parent=parent, created=100.0 + n))
    assert await store.count_open_tasks("test:c1") == 2
    assert await store.count_open_tasks() == 3
    assert await store.end_task("t-0", "cancelled", "cancelled by test:u1")
    assert await store.count_open_tasks("test:c1") == 1
    assert await store.count_open_tasks() == 2
    assert [t.id for t in await store.open_tasks()] == ["t-1", "t-2"]  # oldest first
    assert await store.task_counts() == {"running": 2, "cancelled": 1}


async def test_an_end_is_conditional_on_the_task_running(store: Store) -> None:
    await store.add_task(task("t-1"))
    assert await store.end_task("t-1", "cancelled", "cancelled by the operator")
    assert not await store.end_task("t-1", "cancelled", "cancelled by someone else")
    assert not await store.end_task("t-none", "cancelled", "x")
    ended = await store.task("t-1")
    assert ended is not None and not ended.open
    assert (ended.status, ended.result) == ("cancelled", "cancelled by the operator")


async def test_the_end_commits_with_the_task_events_checkpoint(store: Store) -> None:
    await store.add_task(task("t-1"))
    [row] = await store.accept([(event("task:t-1"), "task:t-1")])
    assert row is not None
    await store.begin(row)
    result = OutMessage(
        key="task:t-1#0", target=Target(platform="test", chat_id="c1"), text="found it"
    )
    changes = MemoryChanges("task:t-1", task=TaskEnd("t-1", "done", "found it"))
    await store.checkpoint("task:t-1", [result], [], changes)
    ended = await store.task("t-1")
    assert ended is not None and (ended.status, ended.result) == ("done", "found it")
    assert [r.key for r in await store.outbox_rows("task:t-1")] == ["task:t-1#0"]
    assert await store.task_counts() == {"done": 1}


async def test_a_checkpoint_does_not_overwrite_a_cancel(store: Store) -> None:
    await store.add_task(task("t-1"))
    [row] = await store.accept([(event("task:t-1"), "task:t-1")])
    assert row is not None
    await store.begin(row)
    assert await store.end_task("t-1", "cancelled", "cancelled by test:u1")
    changes = MemoryChanges("task:t-1", task=TaskEnd("t-1", "done", "late answer"))
    await store.checkpoint("task:t-1", [], [], changes)
    ended = await store.task("t-1")
    assert ended is not None and (ended.status, ended.result) == (
        "cancelled",
        "cancelled by test:u1",
    )
