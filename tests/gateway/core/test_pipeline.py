"""The pipeline's promises, end to end through the real SQLite store and loopback adapter."""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from tests.support.config import db_rows, make_settings, write_config
from tests.support.gateway import running
from tests.support.processes import TETHER, subprocess_env
from tether import Context, Fatal, Retryable, Router
from tether.adapters.loopback import LoopbackAdapter
from tether.events import Event
from tether.gateway.ops.runtime import GC_YOUNG_THRESHOLD, settle_heap


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_same_key_three_times_is_handled_and_answered_once(tmp_path: Path) -> None:
    runs: list[str] = []
    router = Router()

    @router.text()
    async def handle(ctx: Context) -> None:
        runs.append(ctx.event.key)
        ctx.memory.add("user", ctx.event.text)
        await ctx.reply("answer")

    before = metric("tether_duplicates_total", platform="loopback")
    async with running(make_settings(tmp_path), router) as (gateway, loop):
        event = loop.event("hello", key="tg:1:100")
        first = await asyncio.gather(loop.deliver(event), loop.deliver(event))  # same batch
        await loop.wait_for_sent(1)
        await gateway.drain()
        again = await loop.deliver(event)  # a redelivery after it was answered
        await gateway.drain()

    assert sorted(first) == [[False], [True]]
    assert again == [False]
    assert runs == ["tg:1:100"]
    assert [d.message.text for d in loop.sent] == ["answer"]
    assert db_rows(tmp_path, "SELECT key FROM outbox") == [("tg:1:100#0",)]
    assert db_rows(tmp_path, "SELECT count(*) FROM messages") == [(1,)]
    assert metric("tether_duplicates_total", platform="loopback") - before == 2


async def test_retryable_twice_then_success_ends_done_after_three_attempts(tmp_path: Path) -> None:
    attempts: list[int] = []
    router = Router()

    @router.text()
    async def flaky(ctx: Context) -> None:
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise Retryable("upstream 503")
        await ctx.reply("finally")

    async with running(make_settings(tmp_path), router) as (gateway, loop):
        event = await loop.say("hi")
        await loop.wait_for_sent(1)
        await gateway.drain()

    assert attempts == [1, 2, 3]
    assert db_rows(tmp_path, "SELECT status, attempts FROM inbox WHERE key = ?", event.key) == [
        ("done", 3)
    ]
    assert [d.message.text for d in loop.sent] == ["finally"]


async def test_retries_stop_at_max_attempts_and_dead_letter(tmp_path: Path) -> None:
    attempts: list[int] = []
    router = Router()

    @router.text()
    async def always_failing(ctx: Context) -> None:
        attempts.append(ctx.attempt)
        raise RuntimeError("still broken")

    settings = make_settings(tmp_path, pipeline={"max_attempts": 3})
    async with running(settings, router) as (gateway, loop):
        event = await loop.say("hi")
        await gateway.drain()
        await gateway.outbox.flush(5)

    assert attempts == [1, 2, 3]
    assert db_rows(tmp_path, "SELECT status FROM inbox WHERE key = ?", event.key) == [("dead",)]
    assert [d.message.text for d in loop.sent] == [settings.pipeline.dead_notice]  # one, at the end


@pytest.mark.slow
async def test_fatal_leaves_a_snapshot_and_dead_retry_runs_it_again(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    runs: list[int] = []
    router = Router()

    @router.text()
    async def picky(ctx: Context) -> None:
        runs.append(ctx.attempt)
        ctx.memory.add("user", ctx.event.text)
        await ctx.step("lookup", lambda: {"found": 42})
        if not allowed.exists():
            raise Fatal("cannot answer this")
        await ctx.reply("answered" if ctx.event.text == "question" else ctx.event.text)

    config = write_config(tmp_path)
    settings = make_settings(tmp_path)
    allowed.touch()
    async with running(settings, router) as (gateway, loop):
        await loop.say("earlier")  # history for the snapshot
        await gateway.drain()
        allowed.unlink(missing_ok=True)
        event = await loop.say("question")
        await gateway.drain()

        letter = await gateway.store.dead_letter(event.key)
        assert letter is not None
        assert letter.error == "Fatal: cannot answer this"
        assert "cannot answer this" in letter.traceback and "picky" in letter.traceback
        assert letter.event == event
        assert letter.snapshot["steps"] == {"lookup": '{"found": 42}'}
        assert letter.snapshot["attempts"] == 1
        assert letter.snapshot["conversation"] == "loopback:1"
        assert [t["text"] for t in letter.snapshot["history"]] == ["earlier"]

        listed = await asyncio.create_subprocess_exec(
            TETHER, "dead", "list", "-c", str(config), stdout=asyncio.subprocess.PIPE
        )
        out, _ = await listed.communicate()
        assert event.key in out.decode()

        allowed.touch()
        retry = await asyncio.create_subprocess_exec(
            TETHER, "dead", "retry", event.key, "-c", str(config), env=subprocess_env()
        )
        assert await retry.wait() == 0
        sent = await loop.wait_for_sent(3)  # the running gateway's sweep picks it up
        await gateway.drain()

    assert [d.message.text for d in sent] == ["earlier", settings.pipeline.dead_notice, "answered"]
    assert db_rows(tmp_path, "SELECT status FROM inbox WHERE key = ?", event.key) == [("done",)]
    assert db_rows(tmp_path, "SELECT count(*) FROM dead_letters") == [(0,)]
    assert runs == [1, 1, 1]  # attempts restart from zero after a manual retry


async def test_conversation_order_holds_while_others_progress(tmp_path: Path) -> None:
    gate = asyncio.Event()
    started: list[str] = []
    router = Router()

    @router.text()
    async def handle(ctx: Context) -> None:
        started.append(ctx.event.text)
        if ctx.event.text == "a1":
            await gate.wait()
        await ctx.reply(ctx.event.text)

    async with running(make_settings(tmp_path), router) as (gateway, loop):
        for i in (1, 2, 3):
            await loop.say(f"a{i}", chat="A")
            await loop.say(f"b{i}", chat="B")
        sent = await loop.wait_for_sent(3)
        # Chat B finished while chat A's first event is still blocked.
        assert [d.message.text for d in sent] == ["b1", "b2", "b3"]
        assert [s for s in started if s.startswith("a")] == ["a1"]
        gate.set()
        sent = await loop.wait_for_sent(6)
        await gateway.drain()

    assert [s for s in started if s.startswith("a")] == ["a1", "a2", "a3"]
    assert [d.message.text for d in sent if d.message.target.chat_id == "A"] == ["a1", "a2", "a3"]


async def test_lanes_run_in_parallel_up_to_the_concurrency_limit(tmp_path: Path) -> None:
    active = 0
    peak = 0
    both_in = asyncio.Event()
    router = Router()

    @router.text()
    async def handle(ctx: Context) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        if active == 2:
            both_in.set()
        await both_in.wait()
        await asyncio.sleep(0)
        active -= 1
        await ctx.reply("ok")

    settings = make_settings(tmp_path, pipeline={"concurrency": 2})
    async with running(settings, router) as (gateway, loop):
        for chat in "ABCD":
            await loop.say("x", chat=chat)
        await loop.wait_for_sent(4)
        await gateway.drain()
    assert peak == 2


async def test_long_reply_is_split_into_keyed_ordered_chunks(tmp_path: Path) -> None:
    text = "```python\n" + "\n".join(f"print({i})  # " + "x" * 40 for i in range(200)) + "\n```"
    router = Router()

    @router.text()
    async def long(ctx: Context) -> None:
        await ctx.reply(text)

    adapter = LoopbackAdapter(text_limit=2000)
    async with running(make_settings(tmp_path), router, adapter) as (gateway, loop):
        event = await loop.say("go")
        await gateway.drain()
        await gateway.outbox.flush(5)

    chunks = [d.message for d in loop.sent]
    assert len(chunks) == 6
    assert [c.key for c in chunks] == [f"{event.key}#{i}" for i in range(6)]
    assert all(len(c.text) <= 2000 and c.text.count("```") == 2 for c in chunks)
    assert chunks[0].reply_to == event.message_id and chunks[1].reply_to is None
    body = "".join(c.text.removeprefix("```python\n").removesuffix("\n```") + "\n" for c in chunks)
    assert body.rstrip("\n") == text.removeprefix("```python\n").removesuffix("\n```")


async def test_unroutable_events_finish_without_reply(tmp_path: Path) -> None:
    router = Router()  # no handlers at all

    async with running(make_settings(tmp_path), router) as (gateway, loop):
        event = await loop.say("anyone?")
        await gateway.drain()
    assert db_rows(tmp_path, "SELECT status FROM inbox WHERE key = ?", event.key) == [("done",)]
    assert loop.sent == []


async def test_step_result_is_reused_on_retry(tmp_path: Path) -> None:
    calls = 0
    router = Router()

    async def expensive() -> dict[str, int]:
        nonlocal calls
        calls += 1
        return {"tokens": 7}

    @router.text()
    async def handle(ctx: Context) -> None:
        result = await ctx.step("llm", expensive)
        if ctx.attempt == 1:
            raise Retryable("after the expensive part")
        await ctx.reply(json.dumps(result))

    async with running(make_settings(tmp_path), router) as (gateway, loop):
        await loop.say("hi")
        sent = await loop.wait_for_sent(1)
        await gateway.drain()
    assert calls == 1
    assert sent[0].message.text == '{"tokens": 7}'


@pytest.mark.parametrize("group_sessions, expected", [("per_user", 2), ("shared", 1)])
async def test_group_sessions_split_lanes_and_memory(
    tmp_path: Path, group_sessions: str, expected: int
) -> None:
    settings = make_settings(tmp_path, agent={"group_sessions": group_sessions})
    async with running(settings) as (gateway, loop):  # the built-in echo agent
        await loop.say("one", chat="-5", user="alice", chat_type="group")
        await loop.say("two", chat="-5", user="bob", chat_type="group")
        await loop.wait_for_sent(2)
        await gateway.drain()
    conversations = db_rows(tmp_path, "SELECT DISTINCT conversation FROM messages")
    assert len(conversations) == expected


@pytest.mark.slow
def test_settle_heap_collects_then_freezes_what_start_up_left() -> None:
    garbage: list[object] = []
    garbage.append(garbage)  # a cycle only the collector frees
    del garbage
    thresholds = gc.get_threshold()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0
        assert gc.garbage == [] and gc.collect() == 0  # nothing left for a collection
        # young collections less often; the older generations' pace is CPython's
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *thresholds[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.slow
async def test_a_finished_event_is_freed_at_once_not_left_to_the_collector(tmp_path: Path) -> None:
    """No reference cycle per event: at thousands of events a second, cycles made the
    collector's passes a quarter of the pipeline's time."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection would free is kept in gc.garbage
    try:
        async with running(make_settings(tmp_path)) as (gateway, loop):
            await loop.deliver(*(loop.event(f"hello {n}") for n in range(20)))
            await loop.wait_for_sent(20)
            await gateway.drain()
            gc.collect()
            left = [type(o).__name__ for o in gc.garbage if isinstance(o, Context | Event)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert left == []
