"""The lanes' concurrency limit (gateway/core/slots.py): at most N inside, first come first
served, and a waiter cancelled before or after being handed a slot loses no slot."""

from __future__ import annotations

import asyncio

import pytest

from tether.gateway.core.slots import Slots


async def test_at_most_n_inside_and_first_come_first_served() -> None:
    slots = Slots(2)
    inside: list[int] = []
    order: list[int] = []
    release = asyncio.Event()
    most = 0

    async def work(n: int) -> None:
        nonlocal most
        async with slots:
            order.append(n)
            inside.append(n)
            most = max(most, len(inside))
            await release.wait()
            inside.remove(n)

    tasks = [asyncio.create_task(work(n)) for n in range(6)]
    await asyncio.sleep(0)
    assert order == [0, 1]
    release.set()
    await asyncio.gather(*tasks)
    assert most == 2 and order == list(range(6))


async def test_a_cancelled_waiter_loses_no_slot() -> None:
    slots = Slots(1)
    await slots.__aenter__()  # the one slot, taken

    async def enter() -> None:
        async with slots:
            await asyncio.Event().wait()  # never released by itself

    waiting, handed = asyncio.create_task(enter()), asyncio.create_task(enter())
    await asyncio.sleep(0)  # both wait
    waiting.cancel()  # cancelled while it waits
    await slots.__aexit__(None, None, None)  # the slot goes to `handed`, not yet running
    handed.cancel()  # cancelled after the slot was handed to it
    for task in (waiting, handed):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert slots._free == 1 and not slots._waiters  # the slot came back
    async with slots:
        pass


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Slots(0)
