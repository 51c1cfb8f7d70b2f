"""An example plugin: a command, a memoized step, and a middleware."""

from __future__ import annotations

import time
from typing import Any

from tether import Context, Event, NextHandler, Router

router = Router("mybot")


@router.middleware
async def timing(handler: NextHandler, event: Event, data: dict[str, Any]) -> Any:
    started = time.monotonic()
    try:
        return await handler(event, data)
    finally:
        data["ctx"].log.info("mybot.handled", seconds=round(time.monotonic() - started, 4))


@router.command("roll")
async def roll(ctx: Context) -> None:
    """/roll 20 — a die roll that stays the same if the event is re-run after a crash."""
    import random

    sides = int(ctx.event.args) if ctx.event.args.isdigit() else 6
    value = await ctx.step("roll", lambda: random.randint(1, sides))
    await ctx.reply(f"🎲 {value} (d{sides})")


@router.command("history")
async def history(ctx: Context) -> None:
    turns = await ctx.memory.history(5)
    lines = [f"{t.role}: {t.text}" for t in turns] or ["(nothing yet)"]
    await ctx.reply("\n".join(lines))
