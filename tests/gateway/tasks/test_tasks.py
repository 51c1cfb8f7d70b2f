"""Background tasks through the real pipeline: started by the model's ``start_task`` or a
handler's ``ctx.spawn``, run in a lane of their own, delivered once, bounded, cancelled.

The model is the real ``openai`` client against the fake OpenAI-compatible server; a
request whose system prompt carries the task brief (:data:`~tether.gateway.tasks.run.BRIEF`)
is the task's, any other the chat's. SIGKILL versions: test_task_crash.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import structlog

from tests.gateway.tasks.conftest import is_task
from tests.support.config import db_rows, events_named, make_settings, merge
from tests.support.gateway import running
from tether import Context, Router
from tether.adapters.loopback import LoopbackAdapter
from tether.errors import TaskRefused
from tether.gateway.assembly import load_router
from tether.testing.model import Body, FakeModel, asks_for, tool_call

work_done: list[int] = []
tools = Router("test-task-tools")


@tools.tool(idempotent=True)
async def add(a: int, b: int = 0) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    work_done.append(a + b)
    return a + b


@pytest.fixture(autouse=True)
def _fresh() -> None:
    work_done.clear()


def script(chat: list[Any], task: list[Any]) -> Any:
    """Answer the chat's n-th request with ``chat[n]`` and the task's with ``task[n]``
    (the last of each repeats)."""
    seen = {"chat": 0, "task": 0}

    def reply(body: Body) -> Any:
        side, answers = ("task", task) if is_task(body) else ("chat", chat)
        seen[side] += 1
        return answers[min(seen[side], len(answers)) - 1]

    return reply


def settings_for(tmp_path: Path, model: FakeModel, **tasks: Any) -> Any:
    return make_settings(
        tmp_path,
        llm=model.section(timeout=5),
        agent=merge({"handler": "llm", "streaming": False}, {"tasks": tasks} if tasks else {}),
    )


def router_for(settings: Any, *extra: Router) -> Router:
    root = Router("test-root")
    root.include(tools)
    for router in extra:
        root.include(router)
    root.include(load_router(settings))
    return root


def texts(adapter: LoopbackAdapter) -> list[str]:
    return [d.message.text for d in adapter.sent]


async def test_a_task_started_from_chat_runs_beside_it_and_reports_once(
    tmp_path: Path, model: FakeModel
) -> None:
    model.reply = script(
        chat=[asks_for(tool_call("start_task", {"goal": "add 2 and 3"})), "Started it."],
        task=[asks_for(tool_call("add", {"a": 2, "b": 3})), "The sum is 5."],
    )
    settings = settings_for(tmp_path, model)
    adapter = LoopbackAdapter(edits=True)
    with structlog.testing.capture_logs() as logs:
        async with running(settings, router_for(settings), adapter) as (gateway, loop):
            await loop.say("please add 2 and 3 in the background")
            await loop.wait_for_sent(3)
            await gateway.drain()
    sent = texts(adapter)
    results = [t for t in sent if t.startswith("✅ Task")]
    assert len(results) == 1 and results[0].endswith("The sum is 5.")
    assert any(t.startswith("⏳ Task t-") for t in sent)  # the status message
    assert "Started it." in sent
    assert work_done == [5]  # the task's tool ran once
    ((task_id, status, result),) = db_rows(tmp_path, "SELECT id, status, result FROM tasks")
    assert status == "done" and result == "The sum is 5."
    assert (f"task:{task_id}", "done") in db_rows(tmp_path, "SELECT key, status FROM inbox")
    # the chat's memory holds the result, so the agent there knows what its task found
    history = db_rows(tmp_path, "SELECT conversation, role, text FROM messages ORDER BY id")
    assert any(c == "loopback:1" and "The sum is 5." in t for c, _, t in history)
    # the status message ends as one message, edited to say how the task ended
    assert any("✅ done" in m.text for _, m in adapter.edited)
    assert events_named(logs, "task.started") and events_named(logs, "task.done")


async def test_the_conversation_answers_while_its_task_works(
    tmp_path: Path, model: FakeModel
) -> None:
    release = asyncio.Event()
    model.reply = script(
        chat=[asks_for(tool_call("start_task", {"goal": "a long job"})), "Started.", "Hi!"],
        task=["Long job finished."],
    )
    model.hold(is_task, release)
    settings = settings_for(tmp_path, model)
    async with running(settings, router_for(settings)) as (gateway, loop):
        await loop.say("start a long job")
        await loop.wait_for_sent(2)
        await loop.say("hello?")  # answered while the task waits on its model
        sent = await loop.wait_for_sent(3)
        assert sent[-1].message.text == "Hi!"
        assert not any(t.startswith("✅") for t in texts(loop))
        release.set()
        await loop.wait_for_sent(4)
        await gateway.drain()
    (result,) = [t for t in texts(loop) if t.startswith("✅")]
    assert result.endswith("Long job finished.")


async def test_the_n_plus_first_task_is_refused_with_a_message(
    tmp_path: Path, model: FakeModel
) -> None:
    release = asyncio.Event()
    start = asks_for(tool_call("start_task", {"goal": "job"}))
    model.reply = script(chat=[start, "one started", start, "not this time"], task=["done"])
    model.hold(is_task, release)
    settings = settings_for(tmp_path, model, per_conversation=1)
    async with running(settings, router_for(settings)) as (gateway, loop):
        await loop.say("start one")
        await loop.wait_for_sent(2)
        await loop.say("start another")
        await loop.wait_for_sent(3)
        refused = [r for r in model.requests if r.tool_results][-1].tool_results[0]["content"]
        release.set()
        await gateway.drain()
    assert "not started" in refused and "already has 1 task(s) running" in refused
    assert len(db_rows(tmp_path, "SELECT id FROM tasks")) == 1


cancel_router = Router("test-spawn")
spawned: list[str] = []


@cancel_router.command("job")
async def job(ctx: Context) -> None:
    task = await ctx.spawn("slow job", deadline=float(ctx.event.args or 600))
    spawned.append(task.id)


@cancel_router.command("many")
async def many(ctx: Context) -> None:
    try:
        for n in range(5):
            await ctx.spawn(f"job {n}")
    except TaskRefused as exc:
        await ctx.reply(f"refused: {exc}")


async def test_cancel_stops_a_running_task_within_a_second_and_keeps_its_steps(
    tmp_path: Path, model: FakeModel, gate: asyncio.Event
) -> None:
    spawned.clear()
    model.reply = script(chat=["chat"], task=["never seen"])
    settings = settings_for(tmp_path, model)
    with structlog.testing.capture_logs() as logs:
        async with running(settings, router_for(settings, cancel_router)) as (gateway, loop):
            await loop.say("/job")
            await model.wait_for_requests(1)  # the task is at work
            (task_id,) = spawned
            await loop.say(f"/cancel {task_id}")
            await gateway.drain()  # returns only once the task's lane is idle
    sent = texts(loop)
    assert any(t.startswith(f"Cancelled task {task_id}") for t in sent)
    assert not any(t.startswith("✅") or t.startswith("⏹") for t in sent)
    assert db_rows(tmp_path, "SELECT status FROM tasks") == [("cancelled",)]
    assert (f"task:{task_id}", "done") in db_rows(tmp_path, "SELECT key, status FROM inbox")
    assert events_named(logs, "task.cancelled")


async def test_a_task_past_its_deadline_is_reported_expired_once(
    tmp_path: Path, model: FakeModel, gate: asyncio.Event
) -> None:
    spawned.clear()
    model.reply = script(chat=["chat"], task=["never seen"])
    settings = settings_for(tmp_path, model)
    async with running(settings, router_for(settings, cancel_router)) as (gateway, loop):
        await loop.say("/job 1")
        await gateway.drain()
    expired = [t for t in texts(loop) if t.startswith("⌛")]
    assert len(expired) == 1 and spawned[0] in expired[0]
    assert db_rows(tmp_path, "SELECT status FROM tasks") == [("expired",)]


async def test_spawn_past_the_gateway_bound_raises_task_refused(
    tmp_path: Path, model: FakeModel, gate: asyncio.Event
) -> None:
    settings = settings_for(tmp_path, model, per_conversation=10, per_gateway=2)
    async with running(settings, router_for(settings, cancel_router)) as (gateway, loop):
        await loop.say("/many")
        sent = await loop.wait_for_sent(3)
        for (task_id,) in db_rows(tmp_path, "SELECT id FROM tasks"):
            await gateway.tasks.cancel(task_id, "the test")
        await gateway.drain()
    assert any("refused: 2 tasks are running" in d.message.text for d in sent)
    assert len(db_rows(tmp_path, "SELECT id FROM tasks")) == 2


async def test_tasks_lists_the_chats_tasks(
    tmp_path: Path, model: FakeModel, gate: asyncio.Event
) -> None:
    spawned.clear()
    settings = settings_for(tmp_path, model)
    async with running(settings, router_for(settings, cancel_router)) as (gateway, loop):
        await loop.say("/job")
        await loop.wait_for_sent(1)
        await loop.say("/tasks")
        listing = (await loop.wait_for_sent(2))[-1].message.text
        await gateway.tasks.cancel(spawned[0], "the test")
        await gateway.drain()
    assert spawned[0] in listing and "running" in listing and "slow job" in listing


async def test_a_stop_cuts_a_running_task_off_at_once_and_the_next_start_resumes_it(
    tmp_path: Path, model: FakeModel
) -> None:
    """A chat's turn gets ``drain_timeout`` to finish at a stop; a task may have hours
    to go, so its lane is cancelled at once, its event left for the next start."""
    release = asyncio.Event()

    def reply(body: Body) -> Any:  # by what the request holds: a cut-off one comes again
        if not is_task(body):
            start = asks_for(tool_call("start_task", {"goal": "add 4 and 5"}))
            return "On it." if body_has_tool_result(body) else start
        return (
            "It is 9."
            if body_has_tool_result(body)
            else asks_for(tool_call("add", {"a": 4, "b": 5}))
        )

    model.reply = reply
    model.hold(lambda body: is_task(body) and not body_has_tool_result(body), release)
    settings = make_settings(
        tmp_path,
        llm=model.section(timeout=5),
        agent={"handler": "llm", "streaming": False},
        pipeline={"drain_timeout": 3600},  # a stop that waited for the task would hang
    )
    async with asyncio.timeout(60):
        async with running(settings, router_for(settings)) as (_, loop):
            await loop.say("add 4 and 5 in the background")
            await model.wait_for_requests(2)  # the chat's, then the task's, held
    ((task_id, status),) = db_rows(tmp_path, "SELECT id, status FROM tasks")
    assert status == "running"
    assert (f"task:{task_id}", "running") in db_rows(tmp_path, "SELECT key, status FROM inbox")
    assert not any(t.startswith("✅") for t in texts(loop))
    release.set()
    async with running(settings, router_for(settings)) as (gateway, loop):
        [result] = await loop.wait_for_text("✅ Task", timeout=30)
        await gateway.drain()
    assert result.message.text.endswith("It is 9.") and work_done == [9]
    assert db_rows(tmp_path, "SELECT status FROM tasks") == [("done",)]


def body_has_tool_result(body: Body) -> bool:
    return any(m.get("role") == "tool" for m in body.get("messages", []))
