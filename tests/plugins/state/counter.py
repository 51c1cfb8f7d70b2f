"""Counts a chat's messages in its handler state (``ctx.chat_data``), a few milliseconds a
turn, so that a SIGKILL cuts some off mid-handling (the state crash test relies on it)."""

from __future__ import annotations

import asyncio

from tether import Context, Router

router = Router("state-counter")


@router.text()
async def count(ctx: Context) -> None:
    chat = await ctx.chat_data()
    chat["n"] = chat.get("n", 0) + 1
    chat.setdefault("seen", []).append(ctx.event.text)
    await asyncio.sleep(0.005)
    await ctx.reply(f"n={chat['n']}")
