"""A handler that records a memoized side effect, then blocks until the test releases it.

The test runs a Unix socket server at ``$TETHER_TEST_SOCKET``; the handler connects, says
``entered <attempt>``, and waits for a line back. The side effect (a line appended to
``$TETHER_TEST_DIR/side_effects``) happens inside ``ctx.step``, so a re-run after a
crash must reuse its result instead of appending again.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tether import Context, Router

router = Router("blocking")


def _side_effect() -> str:
    path = Path(os.environ["TETHER_TEST_DIR"]) / "side_effects"
    with path.open("a") as handle:
        handle.write("ran\n")
    return "value-from-step"


@router.text(r"^block$")
async def block(ctx: Context) -> None:
    value = await ctx.step("side-effect", _side_effect)
    reader, writer = await asyncio.open_unix_connection(os.environ["TETHER_TEST_SOCKET"])
    writer.write(f"entered {ctx.attempt}\n".encode())
    await writer.drain()
    await reader.readline()  # blocks until the test says go (or the process dies)
    writer.close()
    await ctx.reply(f"done:{value}")
