"""Reflection (issues 20 and 38): a ``reflect:`` job distils conversations into facts.

Every run is one cron event whose LLM calls are memoized steps; each conversation it
reads is committed as it finishes (its facts, cursor and spend with a step of its own),
so a run killed by SIGKILL, or one that times out until it has no attempts left, keeps
what it finished and never pays for it again; the run keeps to its token budget and
reads only conversations with new turns.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import structlog

from tests.support.config import db_rows, make_settings, write_config
from tests.support.gateway import running
from tests.support.processes import TETHER, spawn_run, subprocess_env
from tether.adapters.loopback import LoopbackAdapter
from tether.events import Conversation, Event
from tether.gateway.agent.reflection import CURSOR_PREFIX, parse
from tether.gateway.app import Gateway
from tether.gateway.cli import main
from tether.memory.records import MemoryChanges, Turn, UsageRecord
from tether.memory.sqlite import SqliteStore
from tether.memory.store import Store
from tether.scheduler.jobs import load_jobs, now_utc
from tether.testing.model import Body, FakeModel


def said(body: Body) -> list[str]:
    """The user lines of the new turns a reflection request shows the model."""
    content = body["messages"][-1]["content"]
    return re.findall(r"^user: (.*)$", content.split("New turns:", 1)[-1], re.MULTILINE)


def propose(body: Body) -> str:
    """The fake model's structured proposal: every user line becomes a fact, except
    a line asking for nonsense (an invalid answer) and a line retiring fact N."""
    lines = said(body)
    if any("nonsense" in line for line in lines):
        return "I think they like tea."  # not the JSON asked for
    retire = [int(m) for line in lines for m in re.findall(r"no longer fact (\d+)", line)]
    update = [
        {"id": int(n), "text": text}
        for line in lines
        for n, text in re.findall(r"actually fact (\d+) is (.+)", line)
    ]
    adds = [f"said: {line}" for line in lines]
    return json.dumps({"add": adds, "update": update, "retire": retire})


@pytest.fixture
def fake(model: FakeModel) -> FakeModel:
    """The shared fake (model, tests/fixtures.py), as this module uses it."""
    model.reply = propose
    return model


def llm(fake: FakeModel) -> dict[str, Any]:
    return fake.section()


def reflect_job(deliver: list[str] | None = None, **reflect: Any) -> dict[str, Any]:
    return {"id": "reflect", "cron": "0 3 * * *", "reflect": reflect, "deliver": deliver or []}


async def seed(into: Store, conversation: str, *lines: str) -> None:
    """Turns of ``conversation`` as a gateway commits them: accepted, then checkpointed."""
    chat = Conversation(platform="test", chat_id=conversation.split(":", 1)[1])
    for line in lines:
        key = f"seed:{conversation}:{line}"
        event = Event(key=key, platform="test", conversation=chat, text=line)
        await into.accept([(event, conversation)])
        await into.checkpoint(key, [], [Turn(conversation, "user", line)])


async def fire(gateway: Gateway, run: str) -> str:
    """A manual fire of the one job; its event key."""
    [job] = load_jobs(gateway.settings)
    event = job.event(now_utc(), manual=run)
    assert await gateway.inbox.accept([event]) == [True]
    return event.key


# -- the store's part -------------------------------------------------------------------


async def test_store_finds_unread_conversations_and_commits_elsewhere_with_cursors(
    store: Store,
) -> None:
    await seed(store, "t:a", "a1", "a2")
    await seed(store, "t:b", "b1")
    due = await store.ahead_of(CURSOR_PREFIX)
    assert set(due) == {"t:a", "t:b"} and due["t:a"][0] == 0
    newest_a = due["t:a"][1]
    assert [t.text for t in await store.turns_after("t:a", 0, newest_a)] == ["a1", "a2"]
    first = (await store.turns_after("t:a", 0, newest_a))[0].id
    assert [t.text for t in await store.turns_after("t:a", first, newest_a)] == ["a2"]

    job = Conversation(platform="cron", chat_id="r")
    run = Event(key="run", platform="cron", conversation=job, text="")
    await store.accept([(run, "cron:r")])
    changes = MemoryChanges("cron:r", cursors={CURSOR_PREFIX + "t:a": str(newest_a)})
    changes.elsewhere = [
        MemoryChanges("t:a", facts=[("fact a", 3)]),
        MemoryChanges("t:b", facts=[("fact b", 3), ("fact b2", 3)]),
    ]
    for _ in range(2):  # a repeated checkpoint (a re-run after a crash) adds nothing
        await store.checkpoint("run", [], [], changes)
    assert [f.text for f in await store.facts("t:a")] == ["fact a"]
    assert [f.text for f in await store.facts("t:b")] == ["fact b", "fact b2"]
    [fact_b, _] = await store.facts("t:b")
    await store.accept([(run.model_copy(update={"key": "run2"}), "cron:r")])
    retire = MemoryChanges("cron:r", elsewhere=[MemoryChanges("t:b", retire=[fact_b.id])])
    await store.checkpoint("run2", [], [], retire)
    assert [f.text for f in await store.facts("t:b")] == ["fact b2"]
    assert [f.text for f in await store.facts("t:b", budget=100)] == ["fact b2"]
    assert set(await store.ahead_of(CURSOR_PREFIX)) == {"t:b"}  # its cursor was not set
    await seed(store, "t:a", "a3")
    assert (await store.ahead_of(CURSOR_PREFIX))["t:a"][0] == newest_a


async def test_a_step_commits_its_memory_changes_with_it_apart_from_the_checkpoint(
    store: Store,
) -> None:
    """``commit_step``: the step, the facts of another conversation, a cursor and the
    call's spend, in one transaction keyed by the step, which the event's own checkpoint
    (facts and spend of the same positions and names) does not collide with."""
    await seed(store, "t:a", "a1")
    job = Conversation(platform="cron", chat_id="r")
    await store.accept([(Event(key="run", platform="cron", conversation=job, text=""), "cron:r")])
    spent = UsageRecord("llm:x", "m", "2026-12-01", 10, 5)
    changes = MemoryChanges("cron:r", cursors={CURSOR_PREFIX + "t:a": "7"}, usage=[spent])
    changes.elsewhere = [MemoryChanges("t:a", facts=[("fact a", 3)])]
    await store.commit_step("run", "reflect:done:t:a", '{"added": 1}', changes)
    assert await store.step("run", "reflect:done:t:a") == '{"added": 1}'
    assert [f.text for f in await store.facts("t:a")] == ["fact a"]
    assert await store.cursor(CURSOR_PREFIX + "t:a") == "7"
    own = MemoryChanges("cron:r", facts=[("own", 1)], usage=[spent])
    await store.checkpoint("run", [], [], own)
    assert [f.text for f in await store.facts("cron:r")] == ["own"]
    [usage] = await store.usage("cron:r")
    assert (usage.calls, usage.tokens) == (2, 30)  # the step's call and the checkpoint's


def test_a_proposal_is_checked_and_a_fenced_one_accepted() -> None:
    assert parse('```json\n{"add": ["x"]}\n```').add == ["x"]
    with pytest.raises(ValueError):
        parse('{"add": ["x"], "delete_everything": true}')
    with pytest.raises(ValueError):
        parse("They like tea.")


# -- a run in the gateway ---------------------------------------------------------------


async def test_a_run_learns_within_its_budget_says_where_it_stopped_and_people_see_it(
    tmp_path: Path, fake: FakeModel
) -> None:
    """Three conversations, a budget for one call: the first is learned, the run stops
    and says so; the next run goes on from there; a conversation read before and one
    whose answer was invalid are handled as they should be."""
    settings = make_settings(
        tmp_path,
        llm=llm(fake),
        agent={"handler": "echo"},
        jobs=[reflect_job(["loopback:ops"], budget_tokens=1500)],
    )
    fake.usage = (1400, 50)  # each call costs 1450 of the run's 1500 tokens
    adapter = LoopbackAdapter()
    async with running(settings, adapter=adapter) as (gateway, _):
        for chat, line in (("1", "I drink green tea"), ("2", "my cat is Miso"), ("3", "nonsense")):
            await adapter.say(line, chat=chat, key=f"say:{chat}")
        await adapter.wait_for_sent(3)
        await gateway.drain()
        await fire(gateway, "first")
        [*_, report] = await adapter.wait_for_sent(4)
        assert report.message.target.key == "loopback:ops"
        assert "1 conversation(s) read; facts 1 added" in report.message.text
        assert "Stopped at the token budget: 2 conversation(s) left" in report.message.text
        assert fake.calls == 1 and said(fake.requests[0].body) == ["I drink green tea"]
        asked_for = fake.requests[0].body["response_format"]
        assert asked_for["type"] == "json_schema"
        assert set(asked_for["json_schema"]["schema"]["properties"]) == {"add", "update", "retire"}

        await fire(gateway, "second")  # chat 1 has nothing new: chat 2 is next
        [*_, report] = await adapter.wait_for_sent(5)
        assert fake.calls == 2 and said(fake.requests[1].body) == ["my cat is Miso"]
        assert "Stopped at the token budget: 1 conversation(s) left" in report.message.text

        await adapter.say("/facts", chat="1", key="facts:1")
        [*_, facts] = await adapter.wait_for_sent(6)
        assert "1. said: I drink green tea" in facts.message.text

        await fire(gateway, "third")  # chat 3's answer is invalid: skipped, not advanced
        [*_, report] = await adapter.wait_for_sent(7)
        assert "1 proposal(s) were invalid and skipped" in report.message.text
        await gateway.drain()
        assert set(await gateway.store.ahead_of(CURSOR_PREFIX)) == {"loopback:3"}

        await adapter.say("no longer fact 1", chat="1", key="say:1b")
        await adapter.wait_for_sent(8)
        await gateway.drain()
        await fire(gateway, "fourth")
        await adapter.wait_for_sent(9)
        await gateway.drain()
        texts = [f.text for f in await gateway.store.facts("loopback:1")]
        assert texts == ["said: no longer fact 1"]  # fact 1 retired, history kept
        history = [t.text for t in await gateway.store.history("loopback:1", 10)]
        assert "I drink green tea" in history
    kept = db_rows(tmp_path, "SELECT text, retired IS NOT NULL FROM facts WHERE id = 1")
    assert kept == [("said: I drink green tea", 1)]  # retired: marked, not deleted


async def test_a_conversation_gets_at_most_its_cap_and_one_without_new_turns_is_not_read(
    tmp_path: Path, fake: FakeModel
) -> None:
    budget = 100_000
    settings = make_settings(
        tmp_path,
        llm=llm(fake),
        agent={"handler": "echo"},
        jobs=[reflect_job(budget_tokens=budget, per_conversation_facts=2)],
    )
    adapter = LoopbackAdapter()
    with structlog.testing.capture_logs() as logs:
        async with running(settings, adapter=adapter) as (gateway, _):
            await adapter.say("I am Rui", chat="1", key="say:1")
            await adapter.say("I am Eva", chat="2", key="say:2")
            await adapter.wait_for_sent(2)
            await gateway.drain()
            await fire(gateway, "first")
            await gateway.drain()
            [rui] = await gateway.store.facts("loopback:1")
            lines = [f"actually fact {rui.id} is Rui Costa", "I like jazz", "I like chess"]
            for n, line in enumerate(lines):
                await adapter.say(line, chat="1", key=f"say:1:{n}")
            await adapter.wait_for_sent(5)
            await gateway.drain()
            await fire(gateway, "second")
            await gateway.drain()
            facts = [f.text for f in await gateway.store.facts("loopback:1")]
            await adapter.say("/forget 1", chat="2", key="forget:2")
            [*_, forgotten] = await adapter.wait_for_sent(6)
            await gateway.drain()
            assert await gateway.store.facts("loopback:2") == []
    assert forgotten.message.text == "Forgotten:\n- said: I am Eva"
    # the update and one new fact: two of the four proposed, the rest capped
    assert facts == ["Rui Costa", f"said: actually fact {rui.id} is Rui Costa"]
    assert [said(r.body) for r in fake.requests] == [["I am Rui"], ["I am Eva"], lines]
    reflected = [entry for entry in logs if entry["event"] == "memory.reflected"]
    last = reflected[-1]
    assert (last["conversation"], last["updated"], last["added"], last["capped"]) == (
        "loopback:1",
        1,
        1,
        2,
    )
    runs = [entry for entry in logs if entry["event"] == "reflection.run"]
    assert [run["conversations"] for run in runs] == [2, 1]  # chat 2 had nothing new
    assert all(run["tokens"] <= budget and run["stopped"] is None for run in runs)


@pytest.mark.slow
async def test_a_run_that_outlasts_its_attempts_keeps_what_it_finished_and_pays_once(
    tmp_path: Path, fake: FakeModel
) -> None:
    """Conversation 3's call hangs past the handler's timeout on both attempts, so the
    run dies; conversations 1 and 2 are applied all the same, the second attempt did
    not ask for them again, and the next run asks only for conversation 3."""
    settings = make_settings(
        tmp_path,
        llm=llm(fake),
        agent={"handler": "echo"},
        jobs=[reflect_job(budget_tokens=100_000)],
        pipeline={"handler_timeout": 0.5, "max_attempts": 2, "backoff_base": 0.01},
    )
    lines = {"1": "I drink green tea", "2": "my cat is Miso", "3": "my sister is Ana"}
    fake.hold(lambda body: said(body) == [lines["3"]])
    adapter = LoopbackAdapter()
    async with running(settings, adapter=adapter) as (gateway, _):
        for chat, line in lines.items():
            await adapter.say(line, chat=chat, key=f"say:{chat}")
        await adapter.wait_for_sent(3)
        await gateway.drain()
        first = await fire(gateway, "first")
        await gateway.drain()
        row = await gateway.store.inbox_row(first)
        assert row is not None and (row.status, row.attempts) == ("dead", 2)
        kept = {
            chat: [f.text for f in await gateway.store.facts(f"loopback:{chat}")] for chat in lines
        }
        assert kept == {"1": [f"said: {lines['1']}"], "2": [f"said: {lines['2']}"], "3": []}
        asked = [said(request.body) for request in fake.requests]
        assert asked == [[lines["1"]], [lines["2"]], [lines["3"]], [lines["3"]]]

        fake.heal()
        await fire(gateway, "second")
        await gateway.drain()
        asked = [said(request.body) for request in fake.requests]
        assert asked[4:] == [[lines["3"]]]  # 1 and 2 were not paid for again
        for chat, line in lines.items():
            assert [f.text for f in await gateway.store.facts(f"loopback:{chat}")] == [
                f"said: {line}"
            ]
    calls = db_rows(
        tmp_path, "SELECT count(*) FROM usage_calls WHERE conversation = 'cron:reflect'"
    )
    assert calls == [(3,)]  # the spend of each finished call, recorded once


@pytest.mark.slow
async def test_a_conversation_the_api_refuses_is_reported_and_the_others_are_read(
    tmp_path: Path, fake: FakeModel
) -> None:
    """A 400 for one conversation (too long for the model, say) is that conversation's
    failure, not the run's: the others are learned, the report says so, and its turns
    wait unread for the next run."""
    settings = make_settings(
        tmp_path,
        llm=llm(fake),
        agent={"handler": "echo"},
        jobs=[reflect_job(["loopback:ops"], budget_tokens=100_000)],
    )
    fake.fail(400, times=None, when=lambda body: said(body) == ["my cat is Miso"])
    adapter = LoopbackAdapter()
    async with running(settings, adapter=adapter) as (gateway, _):
        for chat, line in (("1", "I drink green tea"), ("2", "my cat is Miso"), ("3", "I am Eva")):
            await adapter.say(line, chat=chat, key=f"say:{chat}")
        await adapter.wait_for_sent(3)
        await gateway.drain()
        await fire(gateway, "first")
        [*_, report] = await adapter.wait_for_sent(4)
        await gateway.drain()
        assert "2 conversation(s) read; facts 2 added" in report.message.text
        assert "1 conversation(s) could not be read" in report.message.text
        assert set(await gateway.store.ahead_of(CURSOR_PREFIX)) == {"loopback:2"}
        assert [f.text for f in await gateway.store.facts("loopback:3")] == ["said: I am Eva"]


# -- kill -9 mid-run --------------------------------------------------------------------


@pytest.mark.crash
@pytest.mark.slow
async def test_a_run_killed_mid_way_adds_every_fact_exactly_once(
    tmp_path: Path, fake: FakeModel
) -> None:
    db = SqliteStore(str(tmp_path / "tether.db"))
    await db.open()
    try:
        await seed(db, "test:1", "I live in Porto")
        await seed(db, "test:2", "I run on Sundays")
        await seed(db, "test:3", "my sister is Ana")
        await seed(db, "test:4", "old news")
        newest = (await db.ahead_of(CURSOR_PREFIX))["test:4"][1]
        await db.set_cursor(CURSOR_PREFIX + "test:4", str(newest))  # read before: no new turns
    finally:
        await db.close()
    job = reflect_job(budget_tokens=100_000, structured=False)
    config = write_config(tmp_path, llm=llm(fake), jobs=[job])
    fake.hold(lambda body: said(body) == ["I run on Sundays"])
    log = tmp_path / "run.log"
    proc = await spawn_run(config, log)
    try:
        await jobs_run(config)
        await fake.wait_for_requests(2, timeout=30)  # conversation 2's answer is held
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        # Conversation 1 was finished before the kill: applied, though the run was not.
        assert db_rows(tmp_path, "SELECT conversation, text FROM facts") == [
            ("test:1", "said: I live in Porto")
        ]
        fake.heal()
        proc = await spawn_run(config, log)
        await done(tmp_path, "cron:reflect:manual:")
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
    asked = [said(request.body) for request in fake.requests]
    assert asked == [
        ["I live in Porto"],
        ["I run on Sundays"],  # held, then killed
        ["I run on Sundays"],  # conversation 1 was done: not asked again
        ["my sister is Ana"],
    ]
    assert not any("response_format" in r.body for r in fake.requests)  # structured: false
    facts = db_rows(tmp_path, "SELECT conversation, text FROM facts ORDER BY conversation")
    assert facts == [
        ("test:1", "said: I live in Porto"),
        ("test:2", "said: I run on Sundays"),
        ("test:3", "said: my sister is Ana"),
    ]
    logged = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    reflected = [entry for entry in logged if entry.get("event") == "memory.reflected"]
    # each conversation read once: the second attempt found conversation 1 done
    conversations = [entry["conversation"] for entry in reflected]
    assert conversations == ["test:1", "test:2", "test:3"]
    assert all(entry["added"] == 1 for entry in reflected)
    assert db_rows(tmp_path, "SELECT count(*) FROM usage_calls") == [(3,)]
    [run] = [entry for entry in logged if entry.get("event") == "reflection.run"]
    assert (run["conversations"], run["reflected"], run["added"], run["stopped"]) == (3, 3, 3, None)


async def jobs_run(config: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        TETHER, "jobs", "run", "reflect", "-c", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=subprocess_env(),
    )  # fmt: skip
    _out, err = await process.communicate()
    assert process.returncode == 0, err.decode()


async def done(tmp_path: Path, prefix: str) -> None:
    """Wait (bounded) until the run's event is done in another process's store."""
    async with asyncio.timeout(30):
        while True:
            rows = db_rows(tmp_path, "SELECT status FROM inbox WHERE key LIKE ?", prefix + "%")
            if rows == [("done",)]:
                return
            await asyncio.sleep(0.05)  # another process's commit: nothing to await but it


# -- config -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sections, code, expected",
    [
        ({}, 1, "jobs[0].reflect: needs an llm section"),
        ({"model": "nope"}, 1, "jobs[0].reflect.model: no model 'nope' in llm.models (main)"),
        ({"budget_tokens": 0}, 2, "jobs[0].reflect.budget_tokens"),
    ],
)
def test_a_reflect_job_that_cannot_run_fails_check_naming_the_key(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fake: FakeModel,
    sections: dict[str, Any],
    code: int,
    expected: str,
) -> None:
    extra = {"llm": llm(fake)} if sections else {}
    config = write_config(tmp_path, jobs=[reflect_job(**sections)], **extra)
    assert main(["check", "-c", str(config)]) == code
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
