"""The tools and the command of the task crash tests (test_task_crash.py), loaded by a
``tether run`` subprocess: ``look``, a read without a side effect, so a task makes one
model call before the one that does the work; ``bump`` (tests/plugins/tools_counter.py),
the side effect on the fake counter service at ``$TETHER_TEST_COUNTER``, the proof; and
``/research``, a handler that starts a task with ``ctx.spawn`` and then waits on the
test's Unix socket (``$TETHER_TEST_SOCKET``) before its checkpoint, so the test can kill
the process after the task was started and before the starting turn was committed.
"""

from __future__ import annotations

import asyncio
import os

from tests.plugins.tools_counter import router as counter_tools
from tether import Context, Router

#: The goal of every task these tests start.
GOAL = "Look up the counter service, bump it once, and report its count."

router = Router("task-crash")
router.include(counter_tools)


@router.tool(idempotent=True)
async def look(topic: str) -> str:
    """Read what is known about a topic (no side effect).

    Args:
        topic: What to look up.
    """
    return f"{topic}: the counter service counts bumps"


@router.command("research")
async def research(ctx: Context) -> None:
    """Start the task, answer, then block until the test says go (or the process dies)."""
    task = await ctx.spawn(GOAL)
    await ctx.reply(f"On it: {task.id}")
    reader, writer = await asyncio.open_unix_connection(os.environ["TETHER_TEST_SOCKET"])
    writer.write(f"entered {ctx.attempt}\n".encode())
    await writer.drain()
    await reader.readline()
    writer.close()
