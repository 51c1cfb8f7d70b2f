"""A handler that runs one LLM agent turn, then blocks until the test releases it.

The model's answer is a memoized step, saved the moment it returns; the turn itself
(reply, history rows, usage) is only committed at the checkpoint after this handler
returns. Killing the process while it blocks tests that a restart reuses the saved
answer instead of calling the model again. The test's Unix socket server is at
``$TETHER_TEST_SOCKET``; the handler says ``entered <attempt>`` and waits for a line.
"""

from __future__ import annotations

import asyncio
import os

from tether import Context, Router
from tether.gateway.agent.chat import converse

router = Router("llm-block")


@router.text(r"^block")
async def block(ctx: Context) -> None:
    await converse(ctx)
    reader, writer = await asyncio.open_unix_connection(os.environ["TETHER_TEST_SOCKET"])
    writer.write(f"entered {ctx.attempt}\n".encode())
    await writer.drain()
    await reader.readline()  # blocks until the test says go (or the process dies)
    writer.close()
