"""An approval-gated tool with an external side effect (tests/fakes/counter.py at
``$TETHER_TEST_COUNTER``), for the approval crash and scale-out tests, and a handler that
holds its lane.

``charge`` is not idempotent and needs a person's approval (``approval=True``): it runs
only after an approver pressed Approve on its card, and run twice the counter says 2, so
"the approved call ran exactly once" is the counter's number. A message starting
``hold the lane`` waits on the test's Unix socket (``$TETHER_TEST_SOCKET``) until the test
says go, keeping its conversation's lane busy: a turn an approval resumes in that lane
then waits behind it, which is the moment after the press and before the tool.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import aiohttp

from tether import Context, Router
from tether.testing import asks_for, tool_call

router = Router("approval-counter")

#: What the tests' model says once the call's result (or its denial) is in, and how the
#: card begins.
FINAL = "Charged it."
CARD = "Approval needed: the agent wants to run charge"


def script(body: dict[str, Any]) -> str | dict[str, Any]:
    """The tests' model: ask for one charge, then answer once its result is in."""
    if any(m.get("role") == "tool" for m in body["messages"]):
        return FINAL
    return asks_for(tool_call("charge", {"amount": 500}, id="call-1"))


@router.tool(approval=True)
async def charge(amount: int) -> str:
    """Charge the customer's card (an external side effect a person must approve).

    Args:
        amount: How much to charge, in cents.
    """
    url = os.environ["TETHER_TEST_COUNTER"] + "/inc"
    async with aiohttp.ClientSession() as http, http.post(url) as response:
        count = (await response.json())["count"]
    return f"charged {amount}: counter is {count}"


@router.text(r"^hold the lane")
async def hold(ctx: Context) -> None:
    reader, writer = await asyncio.open_unix_connection(os.environ["TETHER_TEST_SOCKET"])
    writer.write(f"entered {ctx.attempt}\n".encode())
    await writer.drain()
    await reader.readline()  # until the test says go (or the process dies)
    writer.close()
    await ctx.reply("lane released")
