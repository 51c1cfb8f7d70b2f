"""A reload with ``llm:`` retires the running model client: it is closed once the events
that started on it are done, so reloads leave neither sockets nor memory behind, and an
event in flight is never cut off by the close."""

from __future__ import annotations

import asyncio
import gc
import os
from pathlib import Path

import pytest

from tests.support.config import write_config
from tests.support.llm import default_reply, turn
from tether.adapters.loopback import LoopbackAdapter
from tether.config import load
from tether.gateway.app import Gateway
from tether.gateway.llm.client import LLM
from tether.testing.model import FakeModel


def sockets() -> int:
    """Sockets this process holds (both ends of a connection to the in-process fake)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:  # closed while listed
            continue
    return count


def clients_alive() -> list[LLM]:
    gc.collect()
    return [o for o in gc.get_objects() if type(o) is LLM]


async def started(tmp_path: Path, model: FakeModel) -> tuple[Gateway, LoopbackAdapter]:
    config = write_config(tmp_path, llm=model.section(timeout=5))
    adapter = LoopbackAdapter()
    gateway = Gateway(load(config), {"loopback": adapter}, config_path=str(config))
    await gateway.start()
    return gateway, adapter


@pytest.mark.slow
async def test_twenty_reloads_leave_sockets_and_clients_flat(
    tmp_path: Path, model: FakeModel
) -> None:
    model.reply = default_reply
    gateway, adapter = await started(tmp_path, model)
    alive = len(clients_alive())  # this gateway's, and any another test left to the gc
    try:
        counts: list[tuple[int, int]] = []
        for n in range(25):
            assert await gateway.reloader.reload()
            assert await turn(adapter, f"after {n}") == f"answer to: after {n}"  # a socket
            await gateway.reloader.retired()  # the clients retired so far are closed
            if n in (4, 24):
                counts.append((sockets(), len(clients_alive())))
    finally:
        await gateway.stop()
    (sockets_at_5, alive_at_5), (sockets_at_25, alive_at_25) = counts
    assert sockets_at_25 - sockets_at_5 <= 2, counts  # 20 reloads: not 20+ more sockets
    assert alive_at_25 == alive_at_5 == alive, counts  # the retired ones are gone


@pytest.mark.slow
async def test_an_event_running_on_the_retired_client_finishes_on_it(
    tmp_path: Path, model: FakeModel
) -> None:
    model.reply = default_reply
    answer = asyncio.Event()
    model.hold(lambda body: "slow" in str(body["messages"][-1]), until=answer)
    gateway, adapter = await started(tmp_path, model)
    try:
        old = gateway.llm
        assert old is not None
        await adapter.say("slow one")
        await model.wait_for_requests(1)  # its call is in flight on the old client
        assert await gateway.reloader.reload()
        assert gateway.llm is not old
        assert await turn(adapter, "quick one", chat="2") == "answer to: quick one"
        assert old.clients_open()  # the slow event still uses it
        answer.set()
        sent = await adapter.wait_for_sent(2)
        await gateway.reloader.retired()
        assert not old.clients_open()
    finally:
        await gateway.stop()
    assert sorted(d.message.text for d in sent) == ["answer to: quick one", "answer to: slow one"]
