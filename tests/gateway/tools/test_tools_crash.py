"""kill -9 around a tool call: its side effect happens once, or the model is told it
may have happened.

A real ``tether run`` subprocess (console platform) runs the ``llm`` agent against the
fake OpenAI server, with the ``bump`` tool of tests/plugins/tools_counter.py, whose side
effect is a request to a fake counter service: the counter is the proof. The process is
SIGKILLed (a) after the tool ran and before the final answer, (b) after the final answer
and before the checkpoint, (c) while the tool waits for the service; then restarted.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.counter import Counter
from tests.support.config import db_rows, write_config
from tests.support.processes import control_socket, spawn, subprocess_env
from tether.gateway.tools.execute import UNKNOWN
from tether.testing.model import Body, FakeModel, asks_for, tool_call

#: Every test here kills a real tether process with SIGKILL.
pytestmark = [pytest.mark.crash, pytest.mark.slow]

FINAL = "Bumped it."


def reply(body: Body) -> str | Body:
    """Ask for one bump, then answer once its result is in."""
    if any(m.get("role") == "tool" for m in body["messages"]):
        return FINAL
    return asks_for(tool_call("bump", {"label": "report"}, id="call-1"))


def after_the_tool(body: Body) -> bool:
    return any(m.get("role") == "tool" for m in body["messages"])


@pytest.fixture
def fake(model: FakeModel) -> FakeModel:
    """The shared fake (model, tests/fixtures.py), as this module uses it."""
    model.reply = reply
    return model


def config(tmp_path: Path, fake: FakeModel) -> Path:
    return write_config(
        tmp_path,
        plugins=["tests.plugins.tools_counter:router"],
        platforms={"console": {"enabled": True}},
        agent={"handler": "llm"},
        llm=fake.section(),
    )


async def start(tmp_path: Path, fake: FakeModel, counter: Counter, text: str) -> Any:
    env = subprocess_env(
        TETHER_TEST_COUNTER=counter.url, TETHER_TEST_SOCKET=str(tmp_path / "ctl.sock")
    )
    proc = await spawn("run", config(tmp_path, fake), env)
    assert proc.stdin is not None
    proc.stdin.write(text.encode() + b"\n")
    await proc.stdin.drain()
    return proc


async def restart(tmp_path: Path, fake: FakeModel, counter: Counter) -> Any:
    env = subprocess_env(
        TETHER_TEST_COUNTER=counter.url, TETHER_TEST_SOCKET=str(tmp_path / "ctl.sock")
    )
    return await spawn("run", config(tmp_path, fake), env)


async def finish(proc: Any) -> bytes:
    """The reply the restarted process prints, after which it is stopped gracefully."""
    line: bytes = await asyncio.wait_for(proc.stdout.readline(), 60)
    proc.send_signal(signal.SIGTERM)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert out == b""  # one reply, nothing more
    return line + b"\n" + err


def steps(tmp_path: Path) -> dict[str, str]:
    return dict(db_rows(tmp_path, "SELECT name, result FROM steps"))


async def test_killed_after_the_tool_ran_before_the_final_answer(
    tmp_path: Path, fake: FakeModel, counter: Counter
) -> None:
    fake.hold(after_the_tool)
    first = await start(tmp_path, fake, counter, "bump the counter")
    await fake.wait_for_requests(2, timeout=60)  # the tool ran; the answer is held
    first.send_signal(signal.SIGKILL)
    await first.wait()
    assert counter.count == 1
    assert '"outcome": "done"' in steps(tmp_path)["tool:0:0"]

    fake.heal()
    output = await finish(await restart(tmp_path, fake, counter))
    assert output.startswith(FINAL.encode() + b"\n")
    assert counter.count == 1  # the tool's stored result was used
    assert b'"step":"tool:0:0","outcome":"done","event":"tool.cached"' in output
    assert fake.calls == 3  # round 1 replayed from its step, only the held answer asked again
    assert db_rows(tmp_path, "SELECT status FROM inbox") == [("done",)]


async def test_killed_after_the_final_answer_before_the_checkpoint(
    tmp_path: Path, fake: FakeModel, counter: Counter
) -> None:
    async with control_socket(tmp_path / "ctl.sock") as handlers:
        first = await start(tmp_path, fake, counter, "block: bump the counter")
        line, _writer = await asyncio.wait_for(handlers.entered.get(), 60)
        assert line == "entered 1"  # converse is done: the final answer is a saved step
        first.send_signal(signal.SIGKILL)
        await first.wait()
        assert counter.count == 1
        assert db_rows(tmp_path, "SELECT count(*) FROM outbox") == [(0,)]

        second = await restart(tmp_path, fake, counter)
        line, writer = await asyncio.wait_for(handlers.entered.get(), 60)
        assert line == "entered 2"
        writer.write(b"go\n")
        await writer.drain()
        output = await finish(second)
    assert output.startswith(FINAL.encode() + b"\n")
    assert counter.count == 1
    assert fake.calls == 2  # both rounds came from their steps after the restart


async def test_a_call_cut_off_mid_way_is_not_run_again_and_the_model_is_told(
    tmp_path: Path, fake: FakeModel, counter: Counter
) -> None:
    counter.hold()  # the service takes the request and never answers
    first = await start(tmp_path, fake, counter, "bump the counter")
    await counter.wait_for(1, timeout=60)
    first.send_signal(signal.SIGKILL)
    await first.wait()
    assert "tool:0:0:started" in steps(tmp_path) and "tool:0:0" not in steps(tmp_path)

    output = await finish(await restart(tmp_path, fake, counter))
    assert output.startswith(FINAL.encode() + b"\n")
    assert counter.count == 1  # bump is not idempotent: not run blindly again
    last = fake.requests[-1]
    assert last.tool_results == [{"role": "tool", "tool_call_id": "call-1", "content": UNKNOWN}]
    assert '"outcome": "unknown"' in steps(tmp_path)["tool:0:0"]
    assert b"tool.unknown" in output
