"""An example plugin: commands, a memoized step, buttons, a dialog that asks and waits,
a tool for the agent, one that needs a person's approval, and a middleware. Its tests
are ``examples/test_mybot.py``, written with ``tether.testing``."""

from __future__ import annotations

import random
import time
from typing import Any

from tether import Button, Context, Event, NextHandler, Router, WaitExpired

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
    sides = int(ctx.event.args) if ctx.event.args.isdigit() else 6
    value = await ctx.step("roll", lambda: random.randint(1, sides))
    await ctx.reply(f"🎲 {value} (d{sides})")


@router.command("history")
async def history(ctx: Context) -> None:
    turns = await ctx.memory.history(5)
    lines = [f"{t.role}: {t.text}" for t in turns] or ["(nothing yet)"]
    await ctx.reply("\n".join(lines))


@router.command("lunch")
async def lunch(ctx: Context) -> None:
    """/lunch — a question with two buttons; a press comes back as a callback."""
    await ctx.reply(
        "Lunch at noon?",
        buttons=[[Button("Yes", data="lunch:yes"), Button("No", data="lunch:no")]],
    )


@router.callback("lunch:")
async def lunch_answer(ctx: Context) -> None:
    answer = ctx.event.text.removeprefix("lunch:")
    ctx.memory.remember(f"{ctx.event.sender.name if ctx.event.sender else 'someone'} said {answer}")
    await ctx.reply("See you at noon." if answer == "yes" else "Maybe next time.")


@router.command("book")
async def book(ctx: Context) -> None:
    """/book — a table for lunch: three questions, each answer waited for durably."""
    where = await ctx.ask("Where?", buttons=["canteen", "cafe"])
    when = await ctx.ask(f"At what time at the {where.data}?")
    try:
        people = await ctx.ask("For how many people?", timeout=15 * 60)
    except WaitExpired:
        await ctx.reply("No answer in 15 minutes; nothing was booked.")
        return
    ticket = await ctx.step("ticket", lambda: random.randint(1000, 9999))
    await ctx.reply(f"Booked the {where.data} at {when.text} for {people.text} (#{ticket}).")


@router.tool(approval=True)
async def order_cake(ctx: Context, flavour: str) -> str:
    """Order a cake from the bakery for the office (someone must approve it first).

    Args:
        flavour: e.g. "lemon".
    """
    return f"ordered a {flavour} cake"


@router.tool(idempotent=True)
async def opening_hours(place: str) -> str:
    """When a place near the office is open.

    Args:
        place: The place's name, e.g. "canteen".
    """
    hours = {"canteen": "11:30-14:00", "cafe": "08:00-18:00"}
    return hours.get(place.lower(), f"I do not know {place!r}")
