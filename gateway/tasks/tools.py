"""The model's tools for background work: ``start_task`` and ``task_status``.

``start_task`` hands a goal to a task (:meth:`~.start.Tasks.spawn`): the chat stays
responsive, the result is posted there when it is ready, and the model reads a refusal
(a bound of ``agent.tasks``) as the call's result. Inside a task it starts a sub-agent,
one level deeper, whose result comes back to the task rather than to the chat.

``task_status`` is how a parent learns what its children did: the status and result of
each id, and — with ``wait_seconds``, inside a task — it waits for them to end, reading
the ledger every second. A wait is durable in the way a task is: a crash mid-wait runs
the task again, and the call, not yet finished, waits again for the same ledger rows.

Both are built-ins (``source="builtin"``), offered while ``agent.tasks.enabled``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import TYPE_CHECKING

from tether.errors import TaskRefused, ToolError
from tether.events import Kind
from tether.gateway.handler.context import turn_of
from tether.gateway.handler.python_tool import python_tool
from tether.gateway.handler.spawn import SpawnRequest
from tether.gateway.handler.tool import Tool
from tether.gateway.tasks.spec import short, spec_of
from tether.gateway.tasks.start import Tasks
from tether.memory.tasks import Task

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context

NAMES = ("start_task", "task_status")
#: Seconds between ledger reads while ``task_status`` waits.
POLL = 1.0


class TaskTools:
    """``start_task`` and ``task_status`` over :class:`~.start.Tasks`."""

    label = "task tools"

    def __init__(self, tasks: Tasks) -> None:
        self.tasks = tasks
        self._tools = [self._start(), self._status()]

    def names(self) -> list[str]:
        return list(NAMES) if self.tasks.config().enabled else []

    async def tools(self, ctx: Context) -> list[Tool]:
        """``start_task`` while tasks are on; ``task_status`` inside a task only (a chat
        is told each result anyway, and every schema offered costs prompt tokens)."""
        switches = ctx.llm.settings.agent.tools if ctx.llm.configured else None
        if not self.tasks.config(ctx).enabled or (switches and not switches.start_task):
            return []
        return list(self._tools) if ctx.event.kind is Kind.TASK else self._tools[:1]

    def _start(self) -> Tool:
        tasks = self.tasks

        async def start_task(
            ctx: Context,
            goal: str,
            agent: str | None = None,
            persona: str | None = None,
            deadline_minutes: float | None = None,
        ) -> str:
            """Hand work that takes a while to a background task; its result is posted
            here when ready. Tell the person; do not wait for it.

            Args:
                goal: The whole job, complete: the task sees only this.
                agent: A configured agent to run it as (default: you).
                persona: A role of its own.
                deadline_minutes: Its time limit (default: the configured one).
            """
            deadline = None if deadline_minutes is None else float(deadline_minutes) * 60
            position = ctx_position(ctx)
            request = SpawnRequest(
                goal=goal, agent=agent, persona=persona, deadline=deadline, position=position
            )
            try:
                task = await tasks.spawn(ctx, request)
            except TaskRefused as exc:
                raise ToolError(f"not started: {exc}") from None
            where = "it reports back to you" if task.parent_task else "its result is posted here"
            return f"started task {task.id}: {short(task.goal)} ({where} when it ends)"

        return _builtin(python_tool(start_task, idempotent=True))

    def _status(self) -> Tool:
        tasks = self.tasks

        async def task_status(ctx: Context, ids: list[str], wait_seconds: float = 0) -> str:
            """The status and result of tasks you started, by id; with wait_seconds,
            wait up to that long for all of them to end (inside a task only).

            Args:
                ids: Task ids as start_task returned them (t-...).
                wait_seconds: Seconds to wait for them to end; 0 reads them now.
            """
            wanted = [i.strip() for i in ids if i.strip()][:20]
            if not wanted:
                raise ToolError("give the ids of the tasks, as start_task returned them")
            found = await _mine(tasks, ctx, wanted)
            if ctx.event.kind is Kind.TASK and wait_seconds > 0:
                until = min(time.time() + float(wait_seconds), spec_of(ctx.event).deadline)
                while any(t.open for t in found) and time.time() < until:
                    await asyncio.sleep(min(POLL, max(0.0, until - time.time())))
                    found = await _mine(tasks, ctx, wanted)
            return "\n".join(_line(task) for task in found)

        return _builtin(python_tool(task_status, idempotent=True))


async def _mine(tasks: Tasks, ctx: Context, ids: list[str]) -> list[Task]:
    """The tasks ``ids`` that this conversation started (others are not its to read)."""
    out: list[Task] = []
    for task_id in ids:
        task = await tasks.store.task(task_id)
        if task is None or task.parent != ctx.conversation:
            raise ToolError(f"no task {task_id!r} started here")
        out.append(task)
    return out


def _line(task: Task) -> str:
    if task.open:
        return f"{task.id}: running — {short(task.goal)}"
    return f"{task.id}: {task.status} — {short(task.goal)}\n{task.result or ''}".rstrip()


def ctx_position(ctx: Context) -> str:
    """The call's place in the turn (``tool:R:I``): with the event key, the task's id."""
    return turn_of(ctx).tool_step or "tool"


def _builtin(tool: Tool) -> Tool:
    return dataclasses.replace(tool, source="builtin")
