"""A handler that wedges the event loop: ``block`` sleeps on the loop's own thread.

Before and after the sleep it marks the moment in ``$TETHER_TEST_NOTIFY``, the test's
fake systemd socket, from the same process and thread as the watchdog pings: datagrams
from one sender arrive in order, so the test knows which pings fell inside the block.
"""

from __future__ import annotations

import os
import socket
import time

from tether import Context, Router

router = Router("service_block")


def _mark(what: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(f"X_TEST={what}".encode(), os.environ["TETHER_TEST_NOTIFY"])


@router.text(r"^block$")
async def block(ctx: Context) -> None:
    _mark("blocked")
    time.sleep(float(os.environ["TETHER_TEST_BLOCK_S"]))  # noqa: ASYNC251 - the point
    _mark("unblocked")
    await ctx.reply("unblocked")
