"""The LLM agent and its memory, against a fake OpenAI-compatible server and the real SDK.

Every test goes through the real pipeline (loopback adapter, SQLite store) and the real
``openai`` client; the fake server (tether/testing/model.py) records each request, so
the tests assert on what the model was actually sent.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest
import structlog

from tests.support.config import SECRETS, db, make_settings, write_config
from tests.support.gateway import running
from tests.support.llm import default_reply, is_summary, llm_section, llm_settings, turn
from tests.support.processes import control_socket, spawn, subprocess_env
from tether import Context, Retryable, Router
from tether.adapters.loopback import LoopbackAdapter
from tether.config import load_text
from tether.errors import ConfigError
from tether.gateway.agent.chat import converse, llm_router
from tether.gateway.app import Gateway
from tether.gateway.assembly import load_router
from tether.memory import tokens
from tether.memory.sqlite import SqliteStore
from tether.testing.model import API_KEY, FakeModel

SECRETS.add(API_KEY)


@pytest.fixture
def fake(model: FakeModel) -> FakeModel:
    """The shared fake (model, tests/fixtures.py), as this module uses it."""
    model.reply = default_reply
    return model


def chats(fake: FakeModel) -> list[Any]:
    return [r for r in fake.requests if not is_summary(r.body)]


# -- memory across restarts -------------------------------------------------------------


async def test_persona_and_facts_are_in_the_prompt_after_a_restart(
    tmp_path: Path, fake: FakeModel
) -> None:
    settings = llm_settings(tmp_path, fake)
    async with running(settings) as (_gateway, adapter):
        assert await turn(adapter, "/persona You are Captain Hook, a pirate.") == (
            "Persona set for this chat."
        )
        assert "remember" in await turn(adapter, "/remember my cat is called Mittens")
        await turn(adapter, "hello there")
    assert fake.calls == 1  # commands do not call the model

    async with running(settings) as (_gateway, adapter):
        assert await turn(adapter, "what is my cat called?") == "answer to: what is my cat called?"
    request = fake.requests[-1]
    assert "Captain Hook" in request.system and "Mittens" in request.system
    assert request.messages[1:] == [
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": "answer to: hello there"},
        {"role": "user", "content": "what is my cat called?"},
    ]
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"


# -- the history budget ------------------------------------------------------------------


@pytest.mark.slow
async def test_prompt_stays_under_the_history_budget_over_500_turns(
    tmp_path: Path, fake: FakeModel
) -> None:
    budget = 300
    settings = llm_settings(tmp_path, fake, history_tokens=budget)
    async with running(settings) as (gateway, adapter):
        for i in range(500):
            await turn(adapter, f"turn {i}: tell me something about the number {i}")
        store = gateway.store
        assert isinstance(store, SqliteStore)

    prompts = chats(fake)
    assert len(prompts) == 500
    for n, request in enumerate(prompts):
        history = request.messages[1:-1]
        assert sum(tokens.count_message(m["content"]) for m in history) <= budget
        assert len(history) >= min(2 * n, 4)  # never starved: recent turns are always there
    summaries = [r for r in fake.requests if is_summary(r.body)]
    assert summaries, "the history outgrew its budget: it must have been compacted"
    # The prompt does not grow with the conversation.
    late = [tokens.count_messages(r.messages) for r in prompts[-100:]]
    early = [tokens.count_messages(r.messages) for r in prompts[50:150]]
    assert max(late) <= max(early) + 40
    assert "SUMMARY covering" in prompts[-1].system
    with db(tmp_path) as conn:  # every turn is kept; compaction only marked rows
        assert conn.execute("SELECT count(*) FROM messages").fetchone() == (1000,)
        summarized = conn.execute("SELECT count(*) FROM messages WHERE summarized = 1")
        assert summarized.fetchone()[0] > 800


async def test_compaction_summarizes_the_oldest_turns_and_keeps_the_rows(
    tmp_path: Path, fake: FakeModel
) -> None:
    settings = llm_settings(tmp_path, fake, history_tokens=120)
    async with running(settings) as (gateway, adapter):
        for i in range(6):
            await turn(adapter, f"fact number {i} is that the sky has {i} colors")
        state = await gateway.store.conversation("loopback:1")
        marked = [t for t in await gateway.store.history("loopback:1", 100) if t.summarized]
    [first_summary, *_] = [r for r in fake.requests if is_summary(r.body)]
    assert "fact number 0" in first_summary.messages[-1]["content"]  # the oldest part
    assert first_summary.body["max_tokens"] == 64  # the summary's own cap
    assert state.summary.startswith("SUMMARY covering")
    assert marked and marked[0].text.startswith("fact number 0")
    assert state.summarized_upto == marked[-1].id
    with db(tmp_path) as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone() == (12,)
    last = chats(fake)[-1]
    assert state.summary in last.system
    assert all(m["content"] not in {t.text for t in marked} for m in last.messages[1:])


async def test_a_failing_summary_call_loses_nothing_and_is_tried_again(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.fail(500, times=None, when=is_summary)  # every summary call, on every model
    settings = llm_settings(tmp_path, fake, history_tokens=120)
    with structlog.testing.capture_logs() as logs:
        async with running(settings) as (gateway, adapter):
            for i in range(6):
                reply = await turn(adapter, f"fact number {i} is that the sky has {i} colors")
                assert reply.startswith("answer to: fact number")  # the reply still comes
            assert (await gateway.store.conversation("loopback:1")).summary == ""
            history = await gateway.store.history("loopback:1", 100)
            assert len(history) == 12 and not any(t.summarized for t in history)
            failed = [r for r in fake.requests if is_summary(r.body)]
            assert failed and all(r.status == 500 for r in failed)

            fake.heal()
            await turn(adapter, "and one more thing")
            state = await gateway.store.conversation("loopback:1")
    assert any(entry["event"] == "memory.summary_failed" for entry in logs)
    assert not any(entry["event"] == "event.retry" for entry in logs)
    retried = [r for r in fake.answered() if is_summary(r.body)]
    assert "fact number 0" in retried[0].messages[-1]["content"]  # from the very first turn
    assert state.summary.startswith("SUMMARY covering")


# -- budgets -----------------------------------------------------------------------------


async def test_a_task_that_would_cross_its_budget_stops_with_a_reply_and_no_call(
    tmp_path: Path, fake: FakeModel
) -> None:
    router = Router("budget-test")

    @router.text("^twice$")
    async def twice(ctx: Context) -> None:
        first = await ctx.llm.chat([{"role": "user", "content": "one"}])
        await ctx.reply(first.text)
        second = await ctx.llm.chat([{"role": "user", "content": "two"}])
        await ctx.reply(second.text)  # never reached

    fake.usage = (990, 5)
    settings = llm_settings(tmp_path, fake, task_token_budget=1000)
    with structlog.testing.capture_logs() as logs:
        async with running(settings, router) as (_gateway, adapter):
            await adapter.say("twice")
            sent = await adapter.wait_for_sent(2)
    assert fake.calls == 1
    assert sent[0].message.text == "answer to: one"
    assert "stopped before the next model call" in sent[1].message.text
    [exceeded] = [e for e in logs if e["event"] == "budget.exceeded"]
    assert (exceeded["budget"], exceeded["limit"], exceeded["spent"]) == ("task", 1000, 995)
    assert any(e["event"] == "event.done" for e in logs)  # ended, not retried or dead
    with db(tmp_path) as conn:  # the spend before the stop is recorded with the checkpoint
        assert conn.execute("SELECT prompt_tokens, completion_tokens FROM usage").fetchall() == [
            (990, 5)
        ]


async def test_a_prompt_larger_than_the_task_budget_is_never_sent(
    tmp_path: Path, fake: FakeModel
) -> None:
    settings = llm_settings(tmp_path, fake, task_token_budget=60)
    async with running(settings) as (_gateway, adapter):
        reply = await turn(adapter, "please summarize " + "lorem ipsum dolor " * 30)
    assert "stopped before the next model call" in reply
    assert fake.calls == 0


async def test_the_daily_budget_stops_a_conversation_until_tomorrow(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.usage = (1960, 20)  # the prompt with its tool schemas is ~1,000
    settings = llm_settings(tmp_path, fake, daily_token_budget=2000)
    async with running(settings) as (_gateway, adapter):
        assert await turn(adapter, "first") == "answer to: first"
        assert "daily token budget" in await turn(adapter, "second")
        assert (await turn(adapter, "hi", chat="2")).startswith("answer")  # another chat
        usage = await turn(adapter, "/usage")
    assert fake.calls == 2
    assert "Today" in usage and "1,980 tokens (1,960 prompt + 20 completion)" in usage
    assert "Daily budget: 1,980 of 2,000 tokens used" in usage


# -- routing, fallbacks and errors -------------------------------------------------------


async def test_a_fallback_model_answers_when_the_primary_returns_503(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.fail(503, times=None, model="main-model")
    settings = llm_settings(tmp_path, fake)
    async with running(settings) as (_gateway, adapter):
        assert await turn(adapter, "hello") == "answer to: hello"
        usage = await turn(adapter, "/usage")
    assert [(r.model, r.status) for r in fake.requests] == [
        ("main-model", 503),
        ("backup-model", 200),
    ]
    assert "backup:" in usage and "main:" not in usage


@pytest.mark.slow
async def test_a_fallback_model_answers_when_the_primary_times_out(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.hang("main-model")
    llm = llm_section(fake)
    llm["providers"]["fake"]["timeout"] = 0.3
    async with running(llm_settings(tmp_path, fake, llm)) as (_gateway, adapter):
        assert await turn(adapter, "hello") == "answer to: hello"
    assert [r.model for r in fake.requests] == ["main-model", "backup-model"]


async def test_routes_pick_the_model_by_command_and_prompt_size(
    tmp_path: Path, fake: FakeModel
) -> None:
    router = Router("routes-test")

    @router.command("ask")
    async def ask(ctx: Context) -> None:
        await ctx.reply((await ctx.llm.chat([{"role": "user", "content": ctx.event.args}])).text)

    router.include(llm_router(llm_settings(tmp_path, fake)))
    routes = [{"command": "ask", "model": "backup"}, {"min_prompt_tokens": 200, "model": "big"}]
    llm = llm_section(fake, routes=routes)
    llm["models"]["big"] = {"provider": "fake", "model": "big-model", "context_tokens": 100_000}
    async with running(llm_settings(tmp_path, fake, llm), router) as (_gateway, adapter):
        await turn(adapter, "/ask short question")
        await turn(adapter, "a short message")
        await turn(adapter, "a long message " + "word " * 300)
    assert [r.model for r in fake.requests] == ["backup-model", "main-model", "big-model"]


async def test_429_is_not_retried_by_the_sdk_and_the_fallback_answers_at_once(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.fail(429, retry_after="0")
    async with running(llm_settings(tmp_path, fake)) as (_gateway, adapter):
        assert await turn(adapter, "hello") == "answer to: hello"
    assert [(r.model, r.status) for r in fake.requests] == [
        ("main-model", 429),  # no SDK retry
        ("backup-model", 200),  # a rate-limited model passes the call on, at once
    ]
    with db(tmp_path) as conn:
        assert conn.execute("SELECT status, attempts FROM inbox").fetchall() == [("done", 1)]


@pytest.mark.parametrize("status", [400, 401, 403])
async def test_client_errors_are_fatal(tmp_path: Path, fake: FakeModel, status: int) -> None:
    fake.fail(status, times=None)
    async with running(llm_settings(tmp_path, fake)) as (gateway, adapter):
        event = await adapter.say("hello")
        await gateway.drain()
        letters = await gateway.store.dead_letters()
    # A 400 is not retried; a refused key is asked once more (a refusal can pass), then
    # taken out, and the fallback shares its provider's key: no event retry, no fallback.
    assert fake.calls == (1 if status == 400 else 2)
    assert [letter.key for letter in letters] == [event.key]
    assert f"HTTP {status}" in letters[0].error and API_KEY not in letters[0].traceback


async def test_the_llm_step_is_not_repeated_when_the_event_is_retried(
    tmp_path: Path, fake: FakeModel
) -> None:
    router = Router("retry-test")
    failed: list[int] = []

    @router.text("^flaky")
    async def flaky(ctx: Context) -> None:
        await converse(ctx)
        if not failed:
            failed.append(ctx.attempt)
            raise Retryable("something after the model call failed")

    async with running(llm_settings(tmp_path, fake), router) as (_gateway, adapter):
        assert await turn(adapter, "flaky question") == "answer to: flaky question"
    assert fake.calls == 1
    with db(tmp_path) as conn:
        assert conn.execute("SELECT calls, prompt_tokens > 0 FROM usage").fetchall() == [(1, 1)]
        assert conn.execute("SELECT count(*) FROM messages").fetchone() == (2,)


# -- commands ----------------------------------------------------------------------------


async def test_reset_starts_a_fresh_context_and_keeps_the_archive(
    tmp_path: Path, fake: FakeModel
) -> None:
    async with running(llm_settings(tmp_path, fake)) as (gateway, adapter):
        await turn(adapter, "/remember I like tea")
        await turn(adapter, "first question")
        assert "fresh context" in await turn(adapter, "/reset")
        await turn(adapter, "second question")
        archive = await gateway.store.history("loopback:1", 10)
    last = fake.requests[-1]
    assert last.messages[1:] == [{"role": "user", "content": "second question"}]
    assert "I like tea" in last.system  # facts survive a reset
    assert [t.text for t in archive] == [
        "first question",
        "answer to: first question",
        "second question",
        "answer to: second question",
    ]


async def test_remember_and_forget(tmp_path: Path, fake: FakeModel) -> None:
    async with running(llm_settings(tmp_path, fake)) as (_gateway, adapter):
        await turn(adapter, "/remember I live in Lisbon")
        await turn(adapter, "/remember my sister is Ana")
        await turn(adapter, "/remember I am vegetarian")
        listing = await turn(adapter, "/forget")
        assert "1. I live in Lisbon\n2. my sister is Ana\n3. I am vegetarian" in listing
        assert "I live in Lisbon" in await turn(adapter, "/forget 1")
        assert "my sister is Ana" in await turn(adapter, "/forget SISTER")
        assert "No saved fact matches" in await turn(adapter, "/forget nothing-like-this")
        await turn(adapter, "what do you know?")
        system = fake.requests[-1].system
        assert "vegetarian" in system and "Lisbon" not in system and "Ana" not in system
        await turn(adapter, "/forget all")
        await turn(adapter, "and now?")
    assert "vegetarian" not in fake.requests[-1].system
    assert fake.calls == 2


async def test_usage_shows_tokens_and_cost(tmp_path: Path, fake: FakeModel) -> None:
    fake.usage = (100, 10)
    async with running(llm_settings(tmp_path, fake, task_token_budget=5000)) as (_g, adapter):
        await turn(adapter, "one")
        await turn(adapter, "two")
        usage = await turn(adapter, "/usage")
    # price_prompt 1000/1M, price_completion 2000/1M: (100*1000 + 10*2000) / 1e6 = 0.12 a call
    assert "220 tokens (200 prompt + 20 completion), $0.2400, 2 calls" in usage
    assert "main: 220 tokens, $0.2400" in usage
    assert "Budget per message: 5,000 tokens" in usage


async def test_persona_command_shows_sets_and_resets(tmp_path: Path, fake: FakeModel) -> None:
    async with running(llm_settings(tmp_path, fake)) as (_gateway, adapter):
        assert "(default)" in await turn(adapter, "/persona")
        await turn(adapter, "/persona You answer in haiku.")
        assert "(custom):\nYou answer in haiku." in await turn(adapter, "/persona")
        await turn(adapter, "/persona reset")
        assert "You are a helpful assistant." in await turn(adapter, "/persona")
        assert "/remember" in await turn(adapter, "/help")
        assert "Unknown command /nope" in await turn(adapter, "/nope")
    assert fake.calls == 0


# -- config ------------------------------------------------------------------------------


def test_llm_handler_requires_an_llm_section_and_is_the_default_with_one() -> None:
    minimal = "llm: {providers: {p: {base_url: x}}, models: {m: {provider: p, model: y}}}"
    with pytest.raises(ConfigError, match=r"<config>: llm: .*required"):
        load_text("agent: {handler: llm}")
    with pytest.raises(ConfigError, match=r"llm.models: .*at least 1 item"):
        load_text("llm: {providers: {p: {base_url: x}}, models: {}}")
    with pytest.raises(ConfigError, match=r"llm.models: .*m.provider: no provider 'q'"):
        load_text("llm: {providers: {p: {base_url: x}}, models: {m: {provider: q, model: y}}}")
    with pytest.raises(ConfigError, match=r"llm.fallbacks: .*no model 'nope'"):
        load_text(minimal[:-1] + ", fallbacks: [nope]}")
    settings = load_text(minimal)
    assert settings.agent.handler == "llm"
    assert load_text("agent: {handler: echo}\n" + minimal).agent.handler == "echo"
    usage = LoopbackAdapter().event("/usage")
    assert load_router(settings).resolve(usage) is not None  # the llm agent's command
    assert load_router(load_text("{}")).resolve(usage) is not None  # echo's fallback


# -- crash recovery ----------------------------------------------------------------------


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "chat"])
async def test_sigkill_after_the_model_answered_does_not_call_it_again(
    tmp_path: Path, fake: FakeModel, command: str
) -> None:
    fake.reply = lambda body: "four"
    config = write_config(
        tmp_path,
        llm=llm_section(fake),
        plugins=["tests.plugins.llm_block:router"],
        platforms={"console": {"enabled": True}},
    )
    sock = tmp_path / "ctl.sock"
    env = subprocess_env(TETHER_TEST_SOCKET=str(sock))

    async with control_socket(sock) as handlers:
        first = await spawn(command, config, env)
        assert first.stdin is not None
        first.stdin.write(b"block what is 2+2?\n")
        await first.stdin.drain()
        line, _writer = await asyncio.wait_for(handlers.entered.get(), 30)
        assert line == "entered 1" and fake.calls == 1  # the model answered, then we block
        first.send_signal(signal.SIGKILL)
        await first.wait()
        with db(tmp_path) as conn:  # nothing of the turn is committed, the step is
            assert conn.execute("SELECT status FROM inbox").fetchall() == [("running",)]
            assert conn.execute("SELECT name FROM steps").fetchall() == [("llm:reply",)]
            assert conn.execute("SELECT count(*) FROM messages").fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM usage").fetchone() == (0,)

        second = await spawn(command, config, env)
        assert second.stdin is not None and second.stdout is not None
        if command == "chat":
            second.stdin.close()
        line, writer = await asyncio.wait_for(handlers.entered.get(), 30)
        assert line == "entered 2"
        writer.write(b"go\n")
        await writer.drain()
        assert await asyncio.wait_for(second.stdout.readline(), 30) == b"four\n"
        if command == "run":
            second.send_signal(signal.SIGTERM)
        rest, err = await asyncio.wait_for(second.communicate(), 60)
        assert second.returncode == 0, err.decode()[-2000:]
        assert rest == b""  # one reply

    assert fake.calls == 1  # not called again on restart
    assert b"step.cached" in err
    with db(tmp_path) as conn:
        assert conn.execute("SELECT status, attempts FROM inbox").fetchall() == [("done", 2)]
        assert conn.execute("SELECT role, text FROM messages ORDER BY id").fetchall() == [
            ("user", "block what is 2+2?"),
            ("assistant", "four"),
        ]
        assert conn.execute("SELECT model, calls FROM usage").fetchall() == [("main", 1)]


# -- a gateway built by hand -------------------------------------------------------------


async def test_ctx_llm_without_an_llm_section_is_a_fatal_error(tmp_path: Path) -> None:
    router = Router("no-llm")

    @router.text("^x$")
    async def handler(ctx: Context) -> None:
        await ctx.llm.chat([{"role": "user", "content": "x"}])

    adapter = LoopbackAdapter()
    gateway = Gateway(make_settings(tmp_path), {"loopback": adapter}, router=router)
    await gateway.start()
    try:
        await adapter.say("x")
        await gateway.drain()
        [letter] = await gateway.store.dead_letters()
    finally:
        await gateway.stop()
    assert "no llm section" in letter.error
