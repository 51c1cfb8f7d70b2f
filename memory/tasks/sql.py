"""The tasks role over SQL (SQLite and PostgreSQL), for
:class:`~tether.memory.sql.store.SqlStore`."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from tether.memory.records import TaskEnd, TaskStatus
from tether.memory.sql.statements import ACCEPT, end_statement
from tether.memory.tasks.record import Task

COLUMNS = (
    "id, event_key, parent, target, parent_task, depth, goal, agent, sender, status,"
    " deadline, budget, result, started_by, created, updated"
)
ADD = (
    f"INSERT INTO tasks ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (id) DO NOTHING"
)
ONE = f"SELECT {COLUMNS} FROM tasks WHERE id = ?"
OF_PARENT = f"SELECT {COLUMNS} FROM tasks WHERE parent = ? ORDER BY created DESC, id LIMIT ?"
NEWEST = f"SELECT {COLUMNS} FROM tasks ORDER BY created DESC, id LIMIT ?"
OPEN = f"SELECT {COLUMNS} FROM tasks WHERE status = 'running' ORDER BY created, id"
COUNT_OPEN_OF = "SELECT count(*) FROM tasks WHERE parent = ? AND status = 'running'"
COUNT_OPEN = "SELECT count(*) FROM tasks WHERE status = 'running'"
BY_STATUS = "SELECT status, count(*) FROM tasks GROUP BY status"


def _task(row: Sequence[Any]) -> Task:
    from tether.memory.tasks.record import Task

    return Task(
        id=str(row[0]),
        event_key=str(row[1]),
        parent=str(row[2]),
        target=str(row[3]),
        parent_task=None if row[4] is None else str(row[4]),
        depth=int(row[5]),
        goal=str(row[6]),
        agent=None if row[7] is None else str(row[7]),
        sender=str(row[8]),
        status=row[9],
        deadline=float(row[10]),
        budget=None if row[11] is None else int(row[11]),
        result=None if row[12] is None else str(row[12]),
        started_by=str(row[13]),
        created=float(row[14]),
        updated=float(row[15]),
    )


def _values(task: Task) -> tuple[Any, ...]:
    t = task
    return (t.id, t.event_key, t.parent, t.target, t.parent_task, t.depth, t.goal, t.agent,
            t.sender, t.status, t.deadline, t.budget, t.result, t.started_by, t.created,
            t.updated)  # fmt: skip


class SqlTasks:
    """The tasks role over SQL, for :class:`~tether.memory.sql.store.SqlStore`."""

    if TYPE_CHECKING:  # provided by SqlStore and its engine

        async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Any]: ...

        _write: Callable[..., Awaitable[None]]

    async def add_task(self, task: Task) -> Task:
        await self._write(ACCEPT, (ADD, _values(task)))
        found = await self.task(task.id)
        assert found is not None
        return found

    async def task(self, task_id: str) -> Task | None:
        rows = await self._rows(ONE, (task_id,))
        return _task(rows[0]) if rows else None

    async def tasks(self, parent: str | None = None, *, limit: int = 50) -> list[Task]:
        if parent is None:
            return [_task(row) for row in await self._rows(NEWEST, (limit,))]
        return [_task(row) for row in await self._rows(OF_PARENT, (parent, limit))]

    async def open_tasks(self) -> list[Task]:
        return [_task(row) for row in await self._rows(OPEN)]

    async def count_open_tasks(self, parent: str | None = None) -> int:
        if parent is None:
            [(count,)] = await self._rows(COUNT_OPEN)
        else:
            [(count,)] = await self._rows(COUNT_OPEN_OF, (parent,))
        return int(count)

    async def task_counts(self) -> dict[str, int]:
        return {str(status): int(n) for status, n in await self._rows(BY_STATUS)}

    async def end_task(self, task_id: str, status: TaskStatus, result: str) -> bool:
        before = await self.task(task_id)
        if before is None or not before.open:
            return False
        await self._write(ACCEPT, end_statement(TaskEnd(task_id, status, result), time.time()))
        after = await self.task(task_id)
        return after is not None and after.status == status and after.updated != before.updated
