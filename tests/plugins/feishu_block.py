"""A Feishu test handler that holds every message until the test lets it go.

The test runs a Unix socket server at ``$TETHER_TEST_SOCKET``. For each message the
handler connects, says ``entered <event key> <attempt>``, and waits for a line back
before replying ``handled:<text>``. Killing the process while it waits leaves the
event committed (the webhook was answered 200) but unhandled: the state the crash
test needs.
"""

from __future__ import annotations

import asyncio
import os

from tether import Context, Router

router = Router("feishu_block")


@router.text()
async def hold(ctx: Context) -> None:
    reader, writer = await asyncio.open_unix_connection(os.environ["TETHER_TEST_SOCKET"])
    writer.write(f"entered {ctx.event.key} {ctx.attempt}\n".encode())
    await writer.drain()
    await reader.readline()  # blocks until the test says go (or the process dies)
    writer.close()
    await ctx.reply(f"handled:{ctx.event.text}")
