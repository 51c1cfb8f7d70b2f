"""The operator's view of background tasks: ``tether tasks list|cancel``, ``tether
status``'s counts, and the console's tasks page with its cancel button.

A real gateway runs in the test's loop on a SQLite file, its task held at the fake
model (so it is running for as long as the test needs); the CLI runs as a subprocess on
the same file, as an operator beside a running gateway would run it. A cancel made
there is seen by the task's runner through the ledger (another process), and the chat
is told the operator cancelled it, once.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from tests.gateway.tasks.test_tasks import (
    cancel_router,
    router_for,
    script,
    settings_for,
    spawned,
    texts,
)
from tests.support.config import db_rows, make_settings, write_config
from tests.support.gateway import base_url, running
from tests.support.processes import TETHER, subprocess_env
from tests.support.web import TOKEN, client, log_in
from tether.adapters.loopback import LoopbackAdapter
from tether.testing.model import API_KEY, FakeModel

OPERATOR_SAID = "The operator cancelled it."


@dataclass(frozen=True)
class Done:
    returncode: int
    stdout: str
    stderr: str


async def tether(folder: Path, model: FakeModel, *args: str) -> Done:
    """``tether ARGS`` in a subprocess on the test's store (its config names the model's
    key, a secret no output may show)."""
    config = write_config(folder, llm=model.section())
    proc = await asyncio.create_subprocess_exec(
        TETHER,
        *args,
        "-c",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=subprocess_env(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    done = Done(proc.returncode, out.decode(), err.decode())
    assert API_KEY not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return done


async def said(loop: LoopbackAdapter, text: str, timeout: float = 10.0) -> list[str]:
    """Every sent text holding ``text``, once at least one was sent."""
    return [d.message.text for d in await loop.wait_for_text(text, timeout)]


async def test_tether_tasks_lists_and_cancels_a_running_task_from_outside(
    tmp_path: Path, model: FakeModel, gate: asyncio.Event
) -> None:
    spawned.clear()
    model.reply = script(chat=["chat"], task=["never seen"])
    settings = settings_for(tmp_path, model)
    async with running(settings, router_for(settings, cancel_router)) as (gateway, loop):
        await loop.say("/job")
        await model.wait_for_requests(1)  # the task is at work, held at the model
        (task_id,) = spawned
        listed = await tether(tmp_path, model, "tasks", "list")
        assert listed.returncode == 0
        [line] = [row for row in listed.stdout.splitlines() if row.startswith(task_id)]
        assert " running " in line and "slow job" in line and "loopback:" in line
        [one] = [
            json.loads(row)
            for row in (
                await tether(tmp_path, model, "tasks", "list", "--json")
            ).stdout.splitlines()
        ]
        assert (one["id"], one["status"], one["goal"]) == (task_id, "running", "slow job")
        status = await tether(tmp_path, model, "status", "--json")
        assert json.loads(status.stdout)["tasks"]["running"] == 1

        cancel = await tether(tmp_path, model, "tasks", "cancel", task_id)
        assert cancel.returncode == 0 and f"cancelled {task_id}" in cancel.stdout
        [notice] = await said(loop, OPERATOR_SAID)  # the runner read it in the ledger
        await gateway.drain()
        again = await tether(tmp_path, model, "tasks", "cancel", task_id)
        unknown = await tether(tmp_path, model, "tasks", "cancel", "t-nosuchtask")
        bare = await tether(tmp_path, model, "tasks", "cancel")
        running_now = await tether(tmp_path, model, "tasks", "list")
        everything = await tether(tmp_path, model, "tasks", "list", "--all")
        counted = await tether(tmp_path, model, "status")
    assert notice.startswith(f"⏹ Task {task_id} was cancelled")
    assert [t for t in texts(loop) if OPERATOR_SAID in t] == [notice]  # once
    assert db_rows(tmp_path, "SELECT status, result FROM tasks") == [
        ("cancelled", "cancelled by the operator")
    ]
    assert (f"task:{task_id}", "done") in db_rows(tmp_path, "SELECT key, status FROM inbox")
    assert again.returncode == 1 and "already ended: cancelled" in again.stderr
    assert unknown.returncode == 1 and "no task 't-nosuchtask'" in unknown.stderr
    assert bare.returncode == 2 and "a task ID is required" in bare.stderr
    assert running_now.stdout.startswith("no running tasks")
    assert re.search(rf"^{task_id}\s+cancelled\s", everything.stdout, re.M)
    assert re.search(r"^tasks\s+running 0\s+done 0\s+failed 0\s+expired 0\s+cancelled 1$",
                     counted.stdout, re.M)  # fmt: skip


async def test_a_task_the_operator_cancelled_before_it_ran_is_not_run(
    tmp_path: Path, model: FakeModel, gate: asyncio.Event
) -> None:
    """Cancelled while the gateway was down: at the next start its event comes up, the
    chat is told the operator cancelled it, and the model is never asked."""
    spawned.clear()
    model.reply = script(chat=["chat"], task=["never seen"])
    settings = settings_for(tmp_path, model)
    async with running(settings, router_for(settings, cancel_router)) as (gateway, loop):
        await loop.say("/job")
        await model.wait_for_requests(1)
        (task_id,) = spawned
        # the ledger ends it with its event still queued (the gateway's stop leaves it so)
    cancel = await tether(tmp_path, model, "tasks", "cancel", task_id)
    assert cancel.returncode == 0
    before = len(model.requests)
    async with running(settings, router_for(settings, cancel_router)) as (gateway, loop):
        [notice] = await said(loop, OPERATOR_SAID)
        await gateway.drain()
    assert task_id in notice and len(model.requests) == before
    assert db_rows(tmp_path, "SELECT status FROM tasks") == [("cancelled",)]


def rows(page: str, css: str) -> list[str]:
    found = re.findall(rf'<tr class="[^"]*{css}[^"]*"[^>]*>(.*?)</tr>', page, re.S)
    return [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in found]


async def test_the_console_lists_tasks_and_cancels_one(
    tmp_path: Path, model: FakeModel, gate: asyncio.Event
) -> None:
    spawned.clear()
    model.reply = script(chat=["chat"], task=["never seen"])
    settings = make_settings(
        tmp_path,
        llm=model.section(timeout=5),
        agent={"handler": "llm", "streaming": False},
        http={"enabled": True, "port": 0, "ui": {"enabled": True, "token": TOKEN}},
    )
    async with (
        running(settings, router_for(settings, cancel_router)) as (gateway, loop),
        client() as session,
    ):
        base = base_url(gateway)
        csrf = await log_in(session, base)
        await loop.say("/job")
        await model.wait_for_requests(1)
        (task_id,) = spawned
        async with session.get(f"{base}/ui/tasks") as response:
            page = await response.text()
        [row] = rows(page, "running")
        assert task_id in row and "slow job" in row
        assert '<a href="/ui/tasks" aria-current="page">Tasks</a>' in page
        form = {"task": task_id, "csrf": csrf}
        async with session.post(
            f"{base}/ui/tasks/cancel", data=form, allow_redirects=False
        ) as response:
            assert response.status == 302
            assert response.headers["Location"] == f"/ui/tasks?cancelled={quote(task_id)}"
        [notice] = await said(loop, OPERATOR_SAID, timeout=2)  # this process: at once
        await gateway.drain()
        async with session.post(
            f"{base}/ui/tasks/cancel", data=form, allow_redirects=False
        ) as response:
            assert response.headers["Location"] == f"/ui/tasks?missing={quote(task_id)}"
        async with session.post(
            f"{base}/ui/tasks/cancel", data={"task": task_id}, allow_redirects=False
        ) as response:
            assert response.status in (401, 403)  # no CSRF token: refused, nothing done
        async with session.get(f"{base}/ui/tasks") as response:
            after = await response.text()
    assert task_id in notice
    assert not rows(after, "running") and "No task is running." in after
    [ended] = rows(after, "status-cancelled")
    assert task_id in ended and "cancelled by the operator" in ended
