"""A tool that swallows its cancellation (gateway/tools/deadline.py): its turn ends at the
tool's timeout and at ``/stop`` all the same, the call is left running, and its outcome
is stored as ``unknown`` so that no re-run calls it again. Through the real pipeline and
the openai client against the scripted FakeModel, and one call at a time."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import structlog

from tests.support.config import db_rows, events_named, make_settings
from tests.support.gateway import running
from tether import Context, Router
from tether.adapters.loopback import LoopbackAdapter
from tether.gateway.assembly import load_router
from tether.gateway.core.stop import STOPPED_ANSWER, STOPPED_NOTICE
from tether.gateway.handler.context import Turn
from tether.gateway.handler.tool import Tool
from tether.gateway.tools import deadline
from tether.gateway.tools.execute import LEFT_RUNNING, execute
from tether.memory.inmemory import MemoryStore
from tether.testing.model import Body, FakeModel, asks_for, tool_call


class Stubborn:
    """A call that catches every cancellation and goes on until the test releases it."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.cancels = 0
        self.runs = 0

    async def __call__(self) -> str:
        self.runs += 1
        self.entered.set()
        while True:
            try:
                await self.release.wait()
                return "finished after all"
            except asyncio.CancelledError:  # the bug this is about
                self.cancels += 1


def router_for(settings: Any, stubborn: Stubborn, timeout: float | None) -> Router:
    tools = Router("stubborn")

    @tools.tool(timeout=timeout)
    async def book() -> str:
        """Book the slot (a service that never answers, and a client that will not stop)."""
        return await stubborn()

    root = Router("root")
    root.include(tools)
    root.include(load_router(settings))
    return root


def settings_for(tmp_path: Path, model: FakeModel) -> Any:
    return make_settings(tmp_path, llm=model.section(timeout=30), agent={"handler": "llm"})


async def left_behind() -> asyncio.Task[Any]:
    (task,) = deadline.abandoned()
    return task


async def test_at_its_timeout_the_turn_goes_on_without_it(tmp_path: Path, model: FakeModel) -> None:
    stubborn = Stubborn()

    def reply(body: Body) -> str | Body:
        messages = body["messages"]
        if messages[-1].get("content") == "and now?":
            return "Still here."
        if messages[-1].get("role") == "tool":
            return "The booking service is stuck; I cannot say whether it booked."
        return asks_for(tool_call("book"))

    model.reply = reply
    settings = settings_for(tmp_path, model)
    with structlog.testing.capture_logs() as logs:
        async with running(settings, router_for(settings, stubborn, 0.2)) as (gateway, loop):
            first = await loop.say("book it")
            (answer,) = await loop.wait_for_sent(1)
            task = await left_behind()
            assert not task.done() and stubborn.cancels == 1  # it goes on, the turn did not
            await loop.say("and now?")  # the lane is free: the next message is answered
            sent = await loop.wait_for_sent(2)
            assert sent[1].message.text == "Still here." and not task.done()
            stubborn.release.set()
            assert await task == "finished after all"
            await gateway.drain()
    assert answer.message.text.startswith("The booking service is stuck")
    (result,) = (m["content"] for m in model.requests[1].tool_results)
    assert result.startswith("error: book did not finish within 0.2s and did not stop when")
    assert "left running" in result
    (abandoned,) = events_named(logs, "tool.abandoned")
    assert abandoned["why"] == "timeout" and abandoned["step"] == "tool:0:0"
    (ended,) = events_named(logs, "tool.abandoned_ended")
    assert ended["outcome"] == "done"
    assert deadline.abandoned() == []
    (stored,) = db_rows(
        tmp_path, "SELECT result FROM steps WHERE event_key = ? AND name = 'tool:0:0'", first.key
    )
    assert json.loads(stored[0])["outcome"] == "unknown"


async def test_stop_ends_the_turn_and_the_outcome_is_stored_unknown(
    tmp_path: Path, model: FakeModel
) -> None:
    stubborn = Stubborn()
    model.reply = lambda body: asks_for(tool_call("book"))  # a second round never comes
    settings = settings_for(tmp_path, model)
    with structlog.testing.capture_logs() as logs:
        async with running(settings, router_for(settings, stubborn, None)) as (gateway, loop):
            first = await loop.say("book it")
            await stubborn.entered.wait()
            await loop.say("/stop")
            sent = await loop.wait_for_sent(2)
            task = await left_behind()
            assert not task.done()
            stubborn.release.set()
            await task
            await gateway.drain()
    assert sorted(d.message.text for d in sent) == sorted([STOPPED_NOTICE, STOPPED_ANSWER])
    assert model.calls == 1 and stubborn.runs == 1
    (stored,) = db_rows(
        tmp_path, "SELECT result FROM steps WHERE event_key = ? AND name = 'tool:0:0'", first.key
    )
    assert json.loads(stored[0])["outcome"] == "unknown"
    assert json.loads(stored[0])["result"] == LEFT_RUNNING
    (abandoned,) = events_named(logs, "tool.abandoned")
    assert abandoned["why"] == "turn cancelled"
    assert db_rows(tmp_path, "SELECT status FROM inbox WHERE key = ?", first.key) == [("done",)]


def context(store: MemoryStore, attempt: int) -> Context:
    event = LoopbackAdapter().event("hi", user="u1").model_copy(update={"key": "lb:fixed"})
    log = structlog.get_logger("test").bind(key=event.key)
    return Context(event, "loopback:1", attempt, log, Turn(store, {"loopback": LoopbackAdapter()}))


async def test_a_call_left_running_is_not_called_again_on_a_re_run() -> None:
    """Even an idempotent tool: it may still be at work."""
    store = MemoryStore()
    await store.open()
    stubborn = Stubborn()

    async def run(ctx: Context, arguments: dict[str, Any]) -> str:
        return await stubborn()

    tools = {"book": Tool("book", "Book.", {"type": "object"}, run, idempotent=True, timeout=0.1)}
    first = await execute(context(store, 1), tools, tool_call("book"), 0, 0)
    assert "left running" in first
    with structlog.testing.capture_logs() as logs:
        assert await execute(context(store, 2), tools, tool_call("book"), 0, 0) == first
    assert stubborn.runs == 1 and events_named(logs, "tool.cached")
    stubborn.release.set()
    await (await left_behind())


async def test_a_tool_that_stops_when_cancelled_is_a_timeout_not_abandoned() -> None:
    store = MemoryStore()
    await store.open()

    async def hang(ctx: Context, arguments: dict[str, Any]) -> str:
        await asyncio.Event().wait()
        return "never"

    tools = {"hang": Tool("hang", "Hang.", {"type": "object"}, hang, timeout=0.1)}
    with structlog.testing.capture_logs() as logs:
        result = await execute(context(store, 1), tools, tool_call("hang"), 0, 0)
    assert result.startswith("error: hang did not finish within 0.1s and was cancelled")
    assert events_named(logs, "tool.timeout") and not events_named(logs, "tool.abandoned")
    assert deadline.abandoned() == []
