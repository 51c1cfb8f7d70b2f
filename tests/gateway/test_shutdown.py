"""SIGTERM ends ``tether run`` within ``pipeline.drain_timeout`` as a whole (issue 38,
item 11): one deadline for the handlers' drain and the outbox's flush together, not one
each, so a handler that never ends and a send that hangs do not take twice as long (and
the unit's whole ``TimeoutStopSec``).

A real ``tether run`` subprocess on the fake Bot API, with the plugin that holds every
message until the test lets it go (tests/plugins/telegram_block.py): one handler is
never let go; the other replies, and the fake Bot API never answers that send (PTB gives
up after its read timeout, ``resend_unknown`` tries again, and it hangs again). The
test's wait for the process to exit has a timeout of the drain timeout plus a little: a
stop that takes longer fails it.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.telegram_api import FakeTelegram
from tests.support.config import db_rows, write_config
from tests.support.processes import control_socket, spawn_run, subprocess_env

pytestmark = pytest.mark.slow

DRAIN = 3.0
#: What the exit may take past the drain timeout: closing the adapters, HTTP, the store.
GRACE = 2.0
HANGS = 2  # the chat whose sends the fake Bot API never answers


class Unanswered(FakeTelegram):
    """A Bot API that takes every sendMessage to chat :data:`HANGS` and never answers."""

    def __init__(self) -> None:
        super().__init__()
        self.released = asyncio.Event()

    async def _api_sendMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("chat_id") == HANGS:
            await self.released.wait()
        return await super()._api_sendMessage(params)


def sends_to(fake: FakeTelegram, chat: int) -> list[Any]:
    return [call for call in fake.calls_to("sendMessage") if call.params.get("chat_id") == chat]


async def test_sigterm_exits_within_the_drain_timeout_with_a_handler_and_a_send_stuck(
    tmp_path: Path,
) -> None:
    fake = await Unanswered().start()
    telegram = {"token": fake.token, "base_url": fake.base_url, "poll_timeout": 1,
                "rate_limits": False, "typing": False, "resend_unknown": True}  # fmt: skip
    config = write_config(
        tmp_path,
        platforms={"telegram": telegram},
        plugins=["tests.plugins.telegram_block:router"],
        pipeline={"drain_timeout": DRAIN},
    )
    sock, log = tmp_path / "ctl.sock", tmp_path / "tether.log"
    try:
        async with control_socket(sock) as handlers:
            proc = await spawn_run(config, log, subprocess_env(TETHER_TEST_SOCKET=str(sock)))
            try:
                fake.push(message=fake.message(1, "never let go"))
                await asyncio.wait_for(handlers.entered.get(), 30)  # and never answered
                fake.push(message=fake.message(HANGS, "answer me"))
                _line, reply = await asyncio.wait_for(handlers.entered.get(), 30)
                reply.write(b"go\n")  # this one replies; its send hangs
                await reply.drain()
                await fake.wait_for(lambda: bool(sends_to(fake, HANGS)), timeout=30)
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), DRAIN + GRACE)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
    finally:
        fake.released.set()
        await fake.stop()
    assert proc.returncode == 0
    events = [json.loads(line)["event"] for line in log.read_text().splitlines() if line]
    assert events[-1] == "gateway.stopped"
    assert "outbox.flush_timeout" in events
    # Nothing is lost: the cut-off handler is recovered at the next start, the reply is
    # still in the outbox.
    assert sorted(db_rows(tmp_path, "SELECT status FROM inbox")) == [("done",), ("running",)]
    assert db_rows(tmp_path, "SELECT count(*) FROM outbox WHERE status != 'sent'") == [(1,)]
