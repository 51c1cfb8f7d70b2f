"""Echo that takes a few milliseconds, so that at any instant some handlers are running:
a SIGKILL then surely cuts events off mid-handling (the chaos test relies on it)."""

from __future__ import annotations

import asyncio

from tether import Context, Router

router = Router("slow-echo")


@router.text()
async def slow_echo(ctx: Context) -> None:
    ctx.memory.add("user", ctx.event.text)
    await asyncio.sleep(0.005)
    await ctx.reply(ctx.event.text)
    ctx.memory.add("assistant", ctx.event.text)
