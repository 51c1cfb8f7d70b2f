"""A three-question dialog and a question with a short deadline, for the crash tests of
durable waits (tests/gateway/waits/test_dialog_crash.py).

``/trip`` replies, then asks three questions — the second with buttons, so a press
answers it — and replies one summary naming all three answers: a wrong, lost or
doubled answer shows in that one line. ``/quick`` asks with a 2 s deadline and catches
:class:`~tether.errors.WaitExpired`, replying a text of its own, so "expired exactly
once" is a count of that text.

Every other message gets ``new turn: TEXT`` from the fallback: an answer that was taken
as a new turn (consumed twice) shows as such a reply.

When ``$TETHER_TEST_SOCKET`` is set, a middleware holds the first run of each event that
answered a wait *after* the wait's handler returned (the answer stored, the turn put
back to run) and before the answering event's checkpoint: it says ``answered <event
key>`` on the socket and waits for the process to die. That is the moment after an
answer was accepted and before the resumed turn replied, reached deterministically. The
middleware wraps what this router resolves, so presses on the questions' buttons
resolve here too (``tw:``): the gateway hands them to the wait, never to ``pressed``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from tether import Context, Router
from tether.errors import WaitExpired
from tether.events import Event
from tether.gateway.handler.routing import NextHandler

router = Router("dialog")

INTRO = "Let us plan a trip."
CITY = "Which city?"
SEATS = "How many seats?"
QUICK = "Quick, a number?"
EXPIRED = "Too slow: the question expired."
#: The ``/quick`` question's deadline, seconds.
QUICK_TIMEOUT = 2.0


def when_question(city: str) -> str:
    return f"When do you go to {city}?"


def summary(city: str, date: str, seats: str) -> str:
    return f"Booked {seats} seats to {city}, {date}."


@router.command("trip")
async def trip(ctx: Context) -> None:
    await ctx.reply(INTRO)
    city = await ctx.ask(CITY)
    date = await ctx.ask(when_question(city.text), buttons=["today", "tomorrow"])
    seats = await ctx.ask(SEATS)
    await ctx.reply(summary(city.text, str(date.data), seats.text))


@router.command("quick")
async def quick(ctx: Context) -> None:
    try:
        answer = await ctx.ask(QUICK, timeout=QUICK_TIMEOUT)
    except WaitExpired:
        await ctx.reply(EXPIRED)
        return
    await ctx.reply(f"got {answer.text}")


@router.fallback
async def other(ctx: Context) -> None:
    await ctx.reply(f"new turn: {ctx.event.text}")


@router.callback("tw:")
async def pressed(ctx: Context) -> None:
    """Never runs: a press on a question's buttons answers its wait instead. It is here so
    that presses resolve to this router, and its middleware wraps their answers too."""
    await ctx.reply(f"new turn: {ctx.event.text}")


@router.middleware
async def hold_answers(handler: NextHandler, event: Event, data: dict[str, Any]) -> Any:
    result = await handler(event, data)
    path = os.environ.get("TETHER_TEST_SOCKET")
    if path and data["route"].name == "wait:answer" and data["ctx"].attempt == 1:
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(f"answered {event.key}\n".encode())
        await writer.drain()
        await reader.read()  # held until the process dies
        writer.close()
    return result
