"""Tools with an external side effect (tests/fakes/counter.py at ``$TETHER_TEST_COUNTER``)
for the tool crash tests, and a handler that blocks after the agent's answer.

``bump`` is not idempotent: run twice, the counter says 2. ``peek`` is idempotent. A
message starting ``block`` runs one agent turn (tools included), then waits on the test's
Unix socket (``$TETHER_TEST_SOCKET``) before the checkpoint, so the test can kill the
process after the final answer and before the checkpoint.
"""

from __future__ import annotations

import asyncio
import os

import aiohttp

from tether import Context, Router
from tether.gateway.agent.chat import converse

router = Router("tools-counter")


@router.tool
async def bump(label: str) -> str:
    """Add one to the shared counter (an external side effect).

    Args:
        label: What the bump is for.
    """
    url = os.environ["TETHER_TEST_COUNTER"] + "/inc"
    async with aiohttp.ClientSession() as http, http.post(url) as response:
        count = (await response.json())["count"]
    return f"{label}: counter is {count}"


@router.text(r"^block")
async def block(ctx: Context) -> None:
    await converse(ctx)
    reader, writer = await asyncio.open_unix_connection(os.environ["TETHER_TEST_SOCKET"])
    writer.write(f"entered {ctx.attempt}\n".encode())
    await writer.drain()
    await reader.readline()  # blocks until the test says go (or the process dies)
    writer.close()
