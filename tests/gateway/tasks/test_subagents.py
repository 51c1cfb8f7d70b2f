"""Sub-agents: a task that starts a task of its own, waits for it with ``task_status``
and reports what it found; a task run as another configured agent (``agents:``) with
that agent's persona; and the depth bound, which refuses a sub-agent's sub-agent.

The fake model tells the requests apart by what they carry: the chat's has no task
brief, a task's has it with its goal as the user message.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.gateway.tasks.conftest import is_task
from tests.gateway.tasks.test_tasks import router_for, settings_for, texts
from tests.support.config import db_rows, make_settings
from tests.support.gateway import running
from tether.testing.model import Body, FakeModel, asks_for, tool_call

PARENT, CHILD, GRANDCHILD = "compare two cities", "look up Lisbon", "look up Porto"


def goal(body: Body) -> str:
    return next(str(m["content"]) for m in body["messages"] if m.get("role") == "user")


def tool_results(body: Body) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m.get("role") == "tool"]


def family(body: Body) -> Any:
    """The chat starts PARENT; PARENT starts CHILD and waits for it, then answers with
    what CHILD found; CHILD tries a sub-agent of its own (refused: max_depth 2) and
    answers anyway."""
    if not is_task(body):
        return (
            "Started."
            if tool_results(body)
            else asks_for(tool_call("start_task", {"goal": PARENT}))
        )
    results = tool_results(body)
    if goal(body) == PARENT:
        if not results:
            return asks_for(tool_call("start_task", {"goal": CHILD}))
        if len(results) == 1:
            [child] = re.findall(r"started task (t-[0-9a-f]+)", results[0])
            return asks_for(tool_call("task_status", {"ids": [child], "wait_seconds": 30}))
        return f"Compared: {results[-1].splitlines()[-1]}"
    if goal(body) == CHILD:
        if not results:
            return asks_for(tool_call("start_task", {"goal": GRANDCHILD}))
        return "Lisbon has 545,000 people" + (" (alone)" if "not started" in results[0] else "")
    raise AssertionError(f"no task was to be started for {goal(body)!r}")


async def test_a_task_waits_for_its_sub_agent_and_reports_what_it_found(
    tmp_path: Path, model: FakeModel
) -> None:
    model.reply = family
    settings = settings_for(tmp_path, model)
    async with running(settings, router_for(settings)) as (gateway, loop):
        await loop.say("compare Lisbon and Porto for me")
        await loop.wait_for_text("✅ Task", timeout=30)
        await gateway.drain()
    rows = db_rows(
        tmp_path, "SELECT goal, depth, parent, parent_task, target, status, result FROM tasks"
    )
    by_goal = {row[0]: row for row in rows}
    assert sorted(by_goal) == [PARENT, CHILD]  # the grandchild was refused, never written
    parent, child = by_goal[PARENT], by_goal[CHILD]
    ((parent_id,),) = db_rows(tmp_path, "SELECT id FROM tasks WHERE depth = 1")
    assert parent[1:3] == (1, "loopback:1") and parent[5] == "done"
    assert child[1:5] == (2, f"task:{parent_id}", parent_id, "")  # its result: no chat
    assert child[5:] == ("done", "Lisbon has 545,000 people (alone)")
    # the chat heard of the parent's result once, and never of the child's
    results = [t for t in texts(loop) if t.startswith("✅ Task")]
    assert len(results) == 1 and parent_id in results[0]
    assert results[0].endswith("Compared: Lisbon has 545,000 people (alone)")
    assert not any(CHILD in t for t in texts(loop))
    # the grandchild's refusal was the child's tool result, naming the bound
    refusals = [r for body in model.requests for r in tool_results(body.body) if "not started" in r]
    assert refusals and "only 1 level(s) deep" in refusals[0]
    # the parent's own memory holds what its child reported
    history = db_rows(tmp_path, "SELECT conversation, text FROM messages")
    assert any(c == f"task:{parent_id}" and "Lisbon has 545,000" in t for c, t in history)


def agents_reply(body: Body) -> Any:
    system = str(body["messages"][0]["content"])
    if not is_task(body):
        if tool_results(body):
            return "Handed to the researcher."
        call = tool_call("start_task", {"goal": CHILD, "agent": "researcher"})
        return asks_for(call)
    return "Researched by " + ("the researcher" if "You are the researcher." in system else "?")


async def test_a_task_runs_as_another_configured_agent_with_its_persona(
    tmp_path: Path, model: FakeModel
) -> None:
    model.reply = agents_reply
    settings = make_settings(
        tmp_path,
        llm=model.section(timeout=5),
        agents=[
            {"name": "planner", "persona": "You are the planner.", "platforms": {}},
            {"name": "researcher", "persona": "You are the researcher.", "platforms": {}},
        ],
        agent={"streaming": False},
    )
    async with running(settings, router_for(settings)) as (gateway, loop):
        await loop.say("find out about Lisbon")
        [result] = [d.message.text for d in await loop.wait_for_text("✅ Task", timeout=30)]
        await gateway.drain()
    assert result.endswith("Researched by the researcher")
    ((agent, status),) = db_rows(tmp_path, "SELECT agent, status FROM tasks")
    assert (agent, status) == ("researcher", "done")
    [task_body] = [r.body for r in model.requests if is_task(r.body)]
    assert json.dumps(task_body).count("You are the planner.") == 0
