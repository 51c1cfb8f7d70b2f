"""The tasks role in a dict, for :class:`~tether.memory.inmemory.store.MemoryStore`."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tether.memory.records import TaskEnd, TaskStatus
    from tether.memory.tasks.record import Task


class MemoryTasks:
    """The tasks role in a dict, for :class:`~tether.memory.inmemory.store.MemoryStore`."""

    _task_rows: dict[str, Task] | None = None

    @property
    def _kept_tasks(self) -> dict[str, Task]:
        if self._task_rows is None:
            self._task_rows = {}
        return self._task_rows

    async def add_task(self, task: Task) -> Task:
        return self._kept_tasks.setdefault(task.id, task)

    async def task(self, task_id: str) -> Task | None:
        return self._kept_tasks.get(task_id)

    async def tasks(self, parent: str | None = None, *, limit: int = 50) -> list[Task]:
        rows = [t for t in self._kept_tasks.values() if parent is None or t.parent == parent]
        rows.sort(key=lambda t: t.id)
        rows.sort(key=lambda t: t.created, reverse=True)
        return rows[:limit]

    async def open_tasks(self) -> list[Task]:
        return sorted((t for t in self._kept_tasks.values() if t.open), key=lambda t: t.created)

    async def count_open_tasks(self, parent: str | None = None) -> int:
        rows = self._kept_tasks.values()
        return sum(1 for t in rows if t.open and (parent is None or t.parent == parent))

    async def task_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for task in self._kept_tasks.values():
            counts[task.status] = counts.get(task.status, 0) + 1
        return counts

    async def end_task(self, task_id: str, status: TaskStatus, result: str) -> bool:
        found = self._kept_tasks.get(task_id)
        if found is None or not found.open:
            return False
        self._kept_tasks[task_id] = replace(
            found, status=status, result=result, updated=time.time()
        )
        return True

    def _ended(self, end: TaskEnd | None) -> None:
        """A checkpoint's :class:`TaskEnd`, if any (the in-memory store's transaction)."""
        if end is None:
            return
        found = self._kept_tasks.get(end.id)
        if found is not None and found.open:
            self._kept_tasks[end.id] = replace(
                found, status=end.status, result=end.result, updated=time.time()
            )
