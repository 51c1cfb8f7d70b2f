"""Job handlers for tests/scheduler/test_scheduler.py (``handler: tests.plugins.cron_jobs:…``).

They record what ran in :data:`state`, which the tests reset, so a test can tell a job
that ran once from one that ran again, and hold a run open to see what overlaps it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from tether import Context


@dataclass
class State:
    runs: list[str] = field(default_factory=list)
    active: int = 0
    max_active: int = 0
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)


state = State()


def reset() -> State:
    global state
    state = State()
    return state


async def report(ctx: Context) -> None:
    """Counts its runs and replies once."""
    state.runs.append(ctx.event.meta["scheduled"])
    await ctx.reply(f"report for {ctx.event.meta['scheduled']}")


async def slow(ctx: Context) -> None:
    """Holds every run until the test opens the gate; records how many ran at once."""
    state.runs.append(ctx.event.meta["scheduled"])
    state.active += 1
    state.max_active = max(state.max_active, state.active)
    state.entered.set()
    try:
        await state.gate.wait()
    finally:
        state.active -= 1
    await ctx.reply(f"done {ctx.event.meta['scheduled']}")
