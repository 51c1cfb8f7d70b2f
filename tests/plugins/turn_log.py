"""An echo that records when each turn starts and ends, per conversation and process.

Every gateway of a test appends to one file, ``$TETHER_TEST_DIR/turns``: ``start`` when a
turn begins, then ``turn`` with its start, its end and how it ended (``done``, or
``cancelled`` when the gateway stopped it). Times are ``time.monotonic()``, one clock for
every process on the machine, so the test can tell whether two processes ever ran one
conversation at the same moment. A turn holds on for :data:`HOLD` seconds, so that at
any instant some are in flight.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from tether import Context, Router

router = Router("turn-log")
HOLD = 0.3


def _append(line: str) -> None:
    """One ``write`` per line on an ``O_APPEND`` file: lines of several processes never mix."""
    path = Path(os.environ["TETHER_TEST_DIR"]) / "turns"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@router.text()
async def logged_echo(ctx: Context) -> None:
    me, started = os.getpid(), time.monotonic()
    _append(f"start {me} {ctx.conversation} {ctx.event.key} {started}")
    outcome = "cancelled"
    try:
        await asyncio.sleep(HOLD)
        await ctx.reply(ctx.event.text)
        outcome = "done"
    finally:
        ended = time.monotonic()
        _append(f"turn {me} {ctx.conversation} {ctx.event.key} {started} {ended} {outcome}")
