"""``/tasks`` and ``/cancel ID``: a conversation's background tasks, for the person.

``/tasks`` lists the conversation's tasks, newest first, running ones with how long they
have left. ``/cancel ID`` cancels one of them: the ledger ends it at once, and its runner
stops within a second (:mod:`.run`), keeping the steps it finished. Only tasks this
conversation started are listed or cancelled from it. ``/cancel`` without an id still
ends a question the conversation waits on (``gateway/core/waits.py`` takes it first);
with nothing to cancel it says so, naming the running tasks.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tether.gateway.handler.context import turn_of
from tether.gateway.handler.routing import Router
from tether.gateway.tasks.spec import short
from tether.gateway.tasks.start import Tasks
from tether.keys import sender_name
from tether.memory.tasks import Task
from tether.messages import say

if TYPE_CHECKING:
    from tether.gateway.handler.context import Context

LISTED = 10


def task_commands() -> Router:
    router = Router("tasks-commands")

    @router.command("tasks")
    async def tasks_(ctx: Context) -> None:
        """List this chat's background tasks."""
        found = await turn_of(ctx).store.tasks(ctx.conversation, limit=LISTED)
        if not found:
            await ctx.reply(say(ctx.event, "no_tasks"), quote=False)
            return
        lines = [describe(task) for task in found]
        await ctx.reply(say(ctx.event, "tasks", tasks="\n".join(lines)), quote=False)

    @router.command("cancel")
    async def cancel(ctx: Context) -> None:
        """Cancel a background task: /cancel ID."""
        store = turn_of(ctx).store
        wanted = ctx.event.args.strip().split()
        if not wanted:
            running = [t for t in await store.tasks(ctx.conversation, limit=LISTED) if t.open]
            if not running:
                await ctx.reply(say(ctx.event, "nothing_to_cancel"), quote=False)
                return
            ids = ", ".join(t.id for t in running)
            await ctx.reply(say(ctx.event, "cancel_which", ids=ids), quote=False)
            return
        task = await store.task(wanted[0])
        if task is None or task.parent != ctx.conversation:
            await ctx.reply(say(ctx.event, "no_such_task", id=wanted[0]), quote=False)
            return
        spawner = turn_of(ctx).tasks
        if not task.open or not isinstance(spawner, Tasks):
            ended_text = say(ctx.event, "task_ended", id=task.id, status=task.status)
            await ctx.reply(ended_text, quote=False)
            return
        task_now, ended = await spawner.cancel(task.id, sender_name(ctx.event))
        if not ended:
            status = task_now.status if task_now else "gone"
            await ctx.reply(say(ctx.event, "task_ended", id=task.id, status=status), quote=False)
            return
        goal = short(task.goal, 60)
        await ctx.reply(say(ctx.event, "task_cancelled", id=task.id, goal=goal), quote=False)

    return router


def describe(task: Task, now: float | None = None) -> str:
    """One line of ``/tasks`` (and ``tether tasks list``)."""
    now = time.time() if now is None else now
    if task.open:
        left = max(0, int(task.deadline - now))
        state = f"running, {left // 60}m {left % 60:02d}s left"
    else:
        state = task.status
    return f"{task.id} [{state}] {short(task.goal, 60)}"
