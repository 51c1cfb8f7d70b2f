"""kill -9 under a background task: it resumes from its stored steps, its side effect
happens once, its result reaches the chat once, and its chat answers while it works; a
deadline that passed while the gateway was down ends it as expired without running it
late; and a turn killed after it started a task, before its checkpoint, posts the task's
status message on its re-run (and starts no second task).

A real ``tether run`` subprocess polls the fake Telegram Bot API and runs the ``llm``
agent against the fake model, with the tools of tests/gateway/tasks/crash_plugin.py:
``look`` (no side effect) and ``bump``, whose side effect is a request to the fake
counter service, so the counter is the proof. A person in a DM (chat 42) asks for work
in the background; the chat's model calls ``start_task``; the task's model (a request
carrying the task brief, :func:`~tests.gateway.tasks.conftest.is_task`) asks for
``look``, then ``bump``, then answers. Requests are held at the fake model to kill the
process at chosen points; the fake's ``reply`` runs only for a request it answers, so
what it records is what the gateway was given, and could have stored as a step.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.counter import Counter
from tests.fakes.telegram_api import BOT_ID, FakeTelegram
from tests.gateway.tasks.conftest import is_task
from tests.gateway.tasks.crash_plugin import GOAL
from tests.support.config import db_rows, write_config
from tests.support.processes import TETHER, control_socket, spawn_run, subprocess_env
from tether.gateway.tasks.run import EXPIRED_WHILE_DOWN
from tether.testing.model import Body, FakeModel, asks_for, tool_call

#: Every test here kills a real tether process with SIGKILL.
pytestmark = [pytest.mark.crash, pytest.mark.slow]

ASKER = 42
ASK = "count the bumps in the background please"
STARTED = "Started it; the result will be posted here."
STILL_HERE = "Still here while the task works."
FINAL = "The counter service is at 1 after one bump."


def tool_ids(body: Body) -> list[str]:
    """The ids of the tool results a request carries, in order."""
    return [str(m.get("tool_call_id")) for m in body.get("messages", []) if m.get("role") == "tool"]


def stage(body: Body) -> str:
    """Which of the task's three model calls a task request is: by the results in it."""
    done = tool_ids(body)
    return "final" if "call-bump" in done else "bump" if "call-look" in done else "look"


#: What the task's model answers at each stage.
TASK = {
    "look": asks_for(tool_call("look", {"topic": "the counter"}, id="call-look")),
    "bump": asks_for(tool_call("bump", {"label": "task"}, id="call-bump")),
    "final": FINAL,
}


def last_user(body: Body) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return str(users[-1].get("content") or "") if users else ""


class Script:
    """The fake model's ``reply``: the chat starts the task, the task works in three calls.
    ``answered`` lists the task's stages in the order the fake answered them."""

    def __init__(self) -> None:
        self.answered: list[str] = []

    def __call__(self, body: Body) -> str | Body:
        if is_task(body):
            self.answered.append(stage(body))
            return TASK[stage(body)]
        if "background" not in last_user(body):
            return STILL_HERE
        if "call-start" in tool_ids(body):
            return STARTED
        return asks_for(tool_call("start_task", {"goal": GOAL}, id="call-start"))


def at(name: str) -> Callable[[Body], bool]:
    """Picks the task's request at stage ``name`` (to hold it)."""
    return lambda body: is_task(body) and stage(body) == name


class Tether:
    """The ``tether run`` subprocesses of one test, on one store, config and log."""

    def __init__(
        self,
        tmp_path: Path,
        telegram: FakeTelegram,
        model: FakeModel,
        counter: Counter,
        **tasks: Any,
    ) -> None:
        self.tmp_path = tmp_path
        self.telegram = telegram
        self.log = tmp_path / "tether.log"
        self.config = write_config(
            tmp_path,
            plugins=["tests.gateway.tasks.crash_plugin:router"],
            platforms={
                "telegram": {
                    "token": telegram.token,
                    "base_url": telegram.base_url,
                    "poll_timeout": 1,
                    "rate_limits": False,
                }
            },
            agent={"handler": "llm", "streaming": False, "tasks": tasks},
            llm=model.section(timeout=30),
        )
        self.env = subprocess_env(
            TETHER_TEST_COUNTER=counter.url, TETHER_TEST_SOCKET=str(tmp_path / "ctl.sock")
        )
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await spawn_run(self.config, self.log, self.env)

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        assert await self.proc.wait() == -signal.SIGKILL

    async def stop(self) -> None:
        """SIGTERM: the process drains and exits 0."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), 60)
        assert code == 0, self.log.read_text()[-3000:]

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()

    # -- what the store says ---------------------------------------------------------

    def task(self) -> tuple[str, str, float]:
        """(id, status, deadline) of the one task."""
        [(task_id, status, deadline)] = db_rows(
            self.tmp_path, "SELECT id, status, deadline FROM tasks"
        )
        return str(task_id), str(status), float(deadline)

    def steps(self, task_id: str) -> dict[str, Any]:
        rows = db_rows(
            self.tmp_path, "SELECT name, result FROM steps WHERE event_key = ?", f"task:{task_id}"
        )
        return {str(name): json.loads(result) for name, result in rows}


@pytest.fixture
def script(model: FakeModel) -> Script:
    found = Script()
    model.reply = found
    return found


@pytest.fixture
def tether(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel, counter: Counter, script: Script
) -> Iterator[Tether]:
    found = Tether(tmp_path, telegram, model, counter)
    try:
        yield found
    finally:
        found.cleanup()


def ask(telegram: FakeTelegram, text: str) -> str:
    """A message in the asker's DM; returns its event key."""
    update = telegram.push(message=telegram.message(ASKER, text))
    return f"tg:{BOT_ID}:{update['update_id']}"


def chat(telegram: FakeTelegram) -> list[str]:
    """The asker's chat as the person sees it now (edits applied)."""
    return telegram.texts.in_chat(ASKER)


async def shown(telegram: FakeTelegram, predicate: Callable[[str], bool]) -> str:
    """The first message of the chat ``predicate`` picks, once there is one."""
    await telegram.wait_for(lambda: any(predicate(t) for t in chat(telegram)), 60)
    return next(t for t in chat(telegram) if predicate(t))


async def arrived(model: FakeModel, picks: Callable[[Body], bool], count: int = 1) -> None:
    """Until the fake model has had ``count`` requests ``picks`` picks (woken by each)."""
    async with asyncio.timeout(60):
        while sum(picks(r.body) for r in model.requests) < count:
            await model.wait_for_requests(len(model.requests) + 1, timeout=60)


async def delivered(tether: Tether, key: str) -> None:
    """Until every message of event ``key``'s turn is sent and marked so in the store (the
    status message's platform id is what the task's final edit needs), polled."""

    def unsent() -> int:
        rows = db_rows(tether.tmp_path, "SELECT platform_id FROM outbox WHERE event_key = ?", key)
        return 1 if not rows else sum(platform_id is None for (platform_id,) in rows)

    async with asyncio.timeout(60):
        while unsent():  # noqa: ASYNC110  (rows in another process's store)
            await asyncio.sleep(0.02)


def received(model: FakeModel) -> dict[str, int]:
    """How many requests of each of the task's stages reached the fake model."""
    counts: dict[str, int] = {}
    for request in model.requests:
        if is_task(request.body):
            counts[stage(request.body)] = counts.get(stage(request.body), 0) + 1
    return counts


async def test_a_task_killed_twice_resumes_from_its_steps_and_reports_once(
    tether: Tether, telegram: FakeTelegram, model: FakeModel, counter: Counter, script: Script
) -> None:
    # 1st run: the task's 2nd model call is held; the chat answers meanwhile; kill -9.
    model.hold(at("bump"))
    await tether.start()
    key = ask(telegram, ASK)
    await arrived(model, at("bump"))
    await shown(telegram, lambda t: t == STARTED)
    await delivered(tether, key)  # the starting turn is over: the crashes are the task's
    ask(telegram, "are you there?")  # the same conversation, while its task is held
    await shown(telegram, lambda t: t == STILL_HERE)
    task_id, status, _ = tether.task()
    assert status == "running"
    assert not any(t.startswith("✅") for t in chat(telegram))
    steps = tether.steps(task_id)  # the 1st model call and look are stored steps
    assert set(steps) == {"llm:task", "tool:0:0:started", "tool:0:0"}
    assert (steps["tool:0:0"]["tool"], steps["tool:0:0"]["outcome"]) == ("look", "done")
    await tether.kill()
    assert counter.count == 0 and script.answered == ["look"]

    # 2nd run: resumed; the 2nd call answered, bump runs; the final call held; kill -9.
    model.heal()
    model.hold(at("final"))
    await tether.start()
    await arrived(model, at("final"))
    assert counter.count == 1
    steps = tether.steps(task_id)
    assert {"llm:task#2", "tool:1:0"} <= set(steps) and "llm:task#3" not in steps
    assert steps["tool:1:0"]["outcome"] == "done"
    assert steps["tool:1:0"]["result"] == "task: counter is 1"
    await tether.kill()
    assert script.answered == ["look", "bump"]
    assert tether.task()[1] == "running"
    assert not any(t.startswith("✅") for t in chat(telegram))

    # 3rd run: everything before the final call comes from its steps; the result is sent.
    model.heal()
    await tether.start()
    result = await shown(telegram, lambda t: t.startswith(f"✅ Task {task_id} done"))
    await tether.stop()

    assert counter.count == 1  # bump's stored result was used: no second side effect
    # each answered call was answered once: a finished step is never asked again ...
    assert script.answered == ["look", "bump", "final"]
    # ... only the two held (never answered) calls were asked again, once each
    assert received(model) == {"look": 1, "bump": 2, "final": 2}
    assert result.endswith(FINAL)
    assert tether.steps(task_id)["llm:task#3"]["text"] == FINAL
    assert sum(t.startswith("✅ Task") for t in chat(telegram)) == 1
    assert chat(telegram).count(STARTED) == 1 and chat(telegram).count(STILL_HERE) == 1
    # the status message, posted once by the starting turn, ends saying it is done
    [status_message] = [t for t in chat(telegram) if t.startswith(f"Task {task_id}:")]
    assert status_message.endswith("✅ done")
    assert tether.task()[1] == "done"
    assert db_rows(
        tether.tmp_path, "SELECT status FROM inbox WHERE key = ?", f"task:{task_id}"
    ) == [("done",)]
    assert tether.log.read_text().count('"task.resumed"') == 2


async def test_a_deadline_that_passes_while_the_gateway_is_down_ends_the_task_expired(
    tmp_path: Path, telegram: FakeTelegram, model: FakeModel, counter: Counter, script: Script
) -> None:
    """Killed while its first model call is held, restarted once its deadline passed:
    the chat is told once that it expired, and nothing of its work is run late."""
    tether = Tether(tmp_path, telegram, model, counter, deadline=3)
    try:
        model.hold(at("look"))
        await tether.start()
        key = ask(telegram, ASK)
        await arrived(model, at("look"))
        await delivered(tether, key)  # the starting turn is over: the crash is the task's
        await tether.kill()
        task_id, status, deadline = tether.task()
        assert status == "running", "the task ended before the kill: its deadline was too short"
        assert not any(t.startswith("⌛") for t in chat(telegram))

        async with asyncio.timeout(30):  # the wall clock, polled: the deadline passes
            while time.time() <= deadline:  # noqa: ASYNC110  (the clock, not an event)
                await asyncio.sleep(0.1)
        model.heal()
        await tether.start()
        expired = await shown(telegram, lambda t: t.startswith(f"⌛ Task {task_id} expired"))
        await tether.stop()
    finally:
        tether.cleanup()

    assert expired.endswith(EXPIRED_WHILE_DOWN)
    assert sum(t.startswith("⌛ Task") for t in chat(telegram)) == 1
    assert chat(telegram).count(STARTED) == 1
    assert not any(t.startswith("✅") for t in chat(telegram))
    [status_message] = [t for t in chat(telegram) if t.startswith(f"Task {task_id}:")]
    assert status_message.endswith("⌛ expired")
    # its work was not run after the restart: the held call was not asked again
    assert received(model) == {"look": 1}
    assert script.answered == [] and counter.count == 0
    assert "llm:task" not in tether.steps(task_id)
    assert tether.task()[1] == "expired"
    listing = await asyncio.create_subprocess_exec(
        TETHER, "tasks", "list", "--all", "-c", str(tether.config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=tether.env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(listing.communicate(), 60)
    assert listing.returncode == 0, err.decode()
    assert re.search(rf"^{task_id}\s+expired\s", out.decode(), re.M), out.decode()


async def test_a_turn_killed_after_it_started_a_task_posts_the_status_message_on_its_rerun(
    tether: Tether, telegram: FakeTelegram, model: FakeModel, counter: Counter, script: Script
) -> None:
    """``/research`` (crash_plugin.py) spawns the task and is killed before its turn is
    committed, so the status message queued in that turn was never sent; its re-run
    finds the task it started (no second one) and must queue the message again, or the
    chat never sees it, nor the task's progress and final edit on it."""
    release = asyncio.Event()
    async with control_socket(tether.tmp_path / "ctl.sock") as handlers:
        model.hold(at("look"))
        await tether.start()
        key = ask(telegram, "/research")
        line, _ = await asyncio.wait_for(handlers.entered.get(), 60)
        assert line == "entered 1"  # spawned and answered, not committed
        await arrived(model, at("look"))
        await tether.kill()
        task_id, status, _ = tether.task()
        assert status == "running" and chat(telegram) == []

        model.heal()
        model.hold(at("final"), release)  # the task ends only once the test has looked
        await tether.start()
        line, writer = await asyncio.wait_for(handlers.entered.get(), 60)
        assert line == "entered 2"
        writer.write(b"go\n")
        await writer.drain()
        started = await shown(telegram, lambda t: t.startswith(f"⏳ Task {task_id}"))
        await delivered(tether, key)
        release.set()
        result = await shown(telegram, lambda t: t.startswith(f"✅ Task {task_id} done"))
        await tether.stop()

    assert task_id in started
    assert result.endswith(FINAL) and counter.count == 1
    assert len(db_rows(tether.tmp_path, "SELECT id FROM tasks")) == 1
    assert chat(telegram).count(f"On it: {task_id}") == 1
    assert sum(t.startswith("✅ Task") for t in chat(telegram)) == 1
    [status_message] = [t for t in chat(telegram) if t.startswith(f"Task {task_id}:")]
    assert status_message.endswith("✅ done")  # the one status message, edited at the end
