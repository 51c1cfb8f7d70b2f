"""How large a tool call's arguments and result may be (gateway/tools/bounds.py): through
the real pipeline and the openai client against the scripted FakeModel, and one call at a
time through :func:`execute`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from tests.support.config import db_rows, events_named, make_settings
from tests.support.gateway import running
from tether import Context, Router
from tether.adapters.loopback import LoopbackAdapter
from tether.config import load_text
from tether.config.tools import DEFAULT_MAX_ARGUMENT_BYTES
from tether.errors import ConfigError
from tether.gateway.assembly import load_router
from tether.gateway.handler.context import Turn
from tether.gateway.handler.tool import Tool
from tether.gateway.tools import bounds
from tether.gateway.tools.execute import execute
from tether.memory.inmemory import MemoryStore
from tether.testing.model import Body, FakeModel, asks_for, tool_call

BIG = json.dumps({"text": "a" * (10 * 2**20)})  # 10 MiB of arguments


def settings_for(tmp_path: Path, model: FakeModel, **agent: Any) -> Any:
    return make_settings(tmp_path, llm=model.section(timeout=30), agent={"handler": "llm", **agent})


def with_tools(settings: Any, tools: Router) -> Router:
    root = Router("root")
    root.include(tools)
    root.include(load_router(settings))
    return root


async def test_a_huge_argument_is_refused_unstored_and_other_chats_are_answered(
    tmp_path: Path, model: FakeModel
) -> None:
    """10 MiB of arguments: the model reads a refusal, the tool never sees them, the steps
    hold them once (the model's own answer), the next round does not carry them, and a
    second chat is answered while the first's turn is still at work."""
    saved: list[int] = []
    inside = asyncio.Event()
    release = asyncio.Event()
    tools = Router("big")

    @tools.tool
    async def save(text: str) -> str:
        """Save a text."""
        saved.append(len(text))
        return "saved"

    @tools.tool
    async def check_inbox() -> str:
        """Look for new mail (waits for the test)."""
        inside.set()
        await release.wait()
        return "no new mail"

    def reply(body: Body) -> str | Body:
        messages = body["messages"]
        if messages[-1].get("content") == "hi":
            return "hello from chat 2"
        if not any(m.get("role") == "tool" for m in messages):
            return asks_for(tool_call("save", BIG, id="s"), tool_call("check_inbox"))
        return "I could not save that much at once."

    model.reply = reply
    model.usage = (10, 10)  # the fake would count 10 MiB of tokens itself otherwise
    settings = settings_for(tmp_path, model)
    with structlog.testing.capture_logs() as logs:
        async with running(settings, with_tools(settings, tools)) as (gateway, loop):
            first = await loop.say("save my novel", chat="1")
            await inside.wait()  # chat 1's huge call was handled; its turn goes on
            await loop.say("hi", chat="2")
            (answered,) = await loop.wait_for_sent(1)
            assert answered.message.target.chat_id == "2"  # while chat 1 still runs
            release.set()
            sent = await loop.wait_for_sent(2)
            await gateway.drain()
    assert sent[1].message.text == "I could not save that much at once."
    assert saved == []  # the tool never ran
    refusal, inbox = (m["content"] for m in model.requests[-1].tool_results)
    assert refusal.startswith("error: the call to save was refused and the tool did not run")
    assert f"{len(BIG):,} bytes, over the limit of {DEFAULT_MAX_ARGUMENT_BYTES:,}" in refusal
    assert inbox == "no new mail"
    # the next round carried a stand-in, not the 10 MiB
    (round_two,) = [r for r in model.requests if r.tool_results]
    assert len(json.dumps(round_two.body)) < 64 * 1024
    (refused,) = events_named(logs, "tool.refused")
    assert refused["bytes"] == len(BIG) and refused["step"] == "tool:0:0"
    steps = dict(
        db_rows(tmp_path, "SELECT name, length(result) FROM steps WHERE event_key = ?", first.key)
    )
    assert "tool:0:0:started" not in steps  # refused before anything was stored
    assert steps["tool:0:0"] < 2048
    assert [name for name, size in steps.items() if size > 64 * 1024] == ["llm:reply"]
    (stored,) = db_rows(tmp_path, "SELECT result FROM steps WHERE name = 'tool:0:0'")
    assert json.loads(stored[0])["outcome"] == "refused"


def context(store: MemoryStore, attempt: int) -> Context:
    event = LoopbackAdapter().event("hi", user="u1").model_copy(update={"key": "lb:fixed"})
    log = structlog.get_logger("test").bind(key=event.key)
    return Context(event, "loopback:1", attempt, log, Turn(store, {"loopback": LoopbackAdapter()}))


async def test_a_refused_call_stays_refused_on_a_re_run() -> None:
    store = MemoryStore()
    await store.open()
    runs: list[str] = []

    async def keep(ctx: Context, arguments: dict[str, Any]) -> str:
        runs.append("ran")
        return "kept"

    tools = {"keep": Tool("keep", "Keep.", {"type": "object"}, keep)}
    call = tool_call("keep", {"text": "x" * (DEFAULT_MAX_ARGUMENT_BYTES + 1)})
    first = await execute(context(store, 1), tools, call, 0, 0)
    with structlog.testing.capture_logs() as logs:
        assert await execute(context(store, 2), tools, call, 0, 0) == first
    assert events_named(logs, "tool.cached") and runs == []
    assert await store.step("lb:fixed", "tool:0:0:started") is None
    stored = json.loads(await store.step("lb:fixed", "tool:0:0") or "{}")
    assert stored["arguments"].startswith("sha256:") and stored["outcome"] == "refused"
    # just under the cap it runs
    small = tool_call("keep", {"t": "x" * (DEFAULT_MAX_ARGUMENT_BYTES - 20)})
    assert await execute(context(store, 1), tools, small, 0, 1) == "kept"


async def test_a_long_result_is_cut_saying_why(tmp_path: Path, model: FakeModel) -> None:
    tools = Router("long")

    @tools.tool
    async def dump() -> str:
        """Everything."""
        return "y" * 5000

    model.reply = lambda body: (
        "Here is the start."
        if body["messages"][-1].get("role") == "tool"
        else asks_for(tool_call("dump"))
    )
    settings = settings_for(tmp_path, model, tools={"max_result_chars": 1000})
    async with running(settings, with_tools(settings, tools)) as (gateway, loop):
        await loop.say("dump it")
        await loop.wait_for_sent(1)
        await gateway.drain()
    (result,) = (m["content"] for m in model.requests[-1].tool_results)
    assert result.startswith("y" * 1000 + "\n[cut: the result was 5,000 characters;")
    assert "only the first 1,000 are shown (agent.tools.max_result_chars)" in result


@pytest.mark.parametrize(
    ("yaml", "says"),
    [
        (
            "agent: {tools: {max_argument_bytes: 10}}",
            r"agent\.tools\.max_argument_bytes: .*greater than or equal to 1024",
        ),
        (
            "agent: {tools: {max_result_chars: -1}}",
            r"agent\.tools\.max_result_chars: .*greater than or equal to 100",
        ),
    ],
)
def test_a_bad_cap_names_its_key_path(yaml: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_text(yaml + "\n")


@given(
    text=st.text(max_size=300),
    cap=st.integers(min_value=1, max_value=400),
    as_object=st.booleans(),
)
def test_the_transcripts_stand_in_is_within_the_cap_or_the_call_itself(
    text: str, cap: int, as_object: bool
) -> None:
    """Whatever the model wrote (any text, lone surrogates included; a string or an
    object), the next round carries it unchanged when it is within the cap, else a stand-in
    that is valid JSON and small."""
    raw: Any = {"text": text} if as_object else text
    call = {"id": "c", "type": "function", "function": {"name": "t", "arguments": raw}}
    carried = bounds.stand_in(call, cap)
    length = bounds.size(bounds.arguments_text(raw))
    if length <= cap:
        assert carried is call
    else:
        note = json.loads(carried["function"]["arguments"])
        assert note == {"omitted": f"{length} bytes of arguments, over the limit; refused"}
