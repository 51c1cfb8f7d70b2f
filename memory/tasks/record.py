"""The task record: one piece of background work and what became of it (see the
package's docstring for its life)."""

from __future__ import annotations

from dataclasses import dataclass

from tether.memory.records import TaskStatus

#: The statuses a task ends in.
ENDED: tuple[TaskStatus, ...] = ("done", "failed", "expired", "cancelled")


@dataclass(frozen=True, slots=True)
class Task:
    """One piece of background work and what became of it."""

    #: ``t-`` and a short hash of the starting event and its place in that turn.
    id: str
    #: The task's own event (``task:{id}``): its lane, its steps, its checkpoint.
    event_key: str
    #: The session that started it (or the parent task's ``task:{id}``): told the result.
    parent: str
    #: The chat the result is posted in (``platform:chat[:thread]``); "" for a sub-task.
    target: str
    #: The parent task's id, for a sub-agent; None for a task a conversation started.
    parent_task: str | None
    #: 1 for a conversation's task, 2 for its sub-agent, …
    depth: int
    goal: str
    #: The configured agent (``agents:``) it runs as, or None for the parent's.
    agent: str | None
    #: Who started it, ``platform:user`` ("" for a cron fire or the operator).
    sender: str
    status: TaskStatus
    #: Epoch seconds after which it is not run (reported ``expired`` instead).
    deadline: float
    #: Its token budget (prompt + completion over all its model calls).
    budget: int | None
    #: The answer it ended with, or why it ended otherwise.
    result: str | None
    #: The event whose turn started it.
    started_by: str
    created: float
    updated: float

    @property
    def open(self) -> bool:
        return self.status == "running"
