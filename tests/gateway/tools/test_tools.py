"""Tool calling: the agent calls the model, runs the tools it asked for, calls again.

Through the real pipeline (loopback adapter, SQLite store) and the real ``openai``
client against the fake OpenAI-compatible server, which scripts ``tool_calls`` and
records what the model was sent (the ``tools`` offered, the ``tool`` results). The
exactly-once rules are also checked one call at a time (:func:`execute` with a context
per attempt); the SIGKILL versions are in tests/gateway/tools/test_tools_crash.py.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from tests.support.config import db_rows, events_named, make_settings, merge, write_config
from tests.support.gateway import running
from tests.support.processes import TETHER
from tether import Context, Router
from tether.adapters.loopback import LoopbackAdapter
from tether.config import load_text
from tether.errors import ConfigError, GatewayError
from tether.gateway.app import Gateway
from tether.gateway.assembly import load_router
from tether.gateway.core.transcript import transcript
from tether.gateway.handler.context import Turn
from tether.gateway.handler.python_tool import parse_docstring, python_tool
from tether.gateway.handler.tool import Tool
from tether.gateway.tools.execute import UNKNOWN, execute
from tether.gateway.tools.loop import ROUNDS_USED
from tether.memory.inmemory import MemoryStore
from tether.memory.records import Fact
from tether.testing.model import Body, FakeModel, asks_for, tool_call

calls: list[tuple[int, int]] = []
tools_router = Router("test-tools")


@tools_router.tool(idempotent=True)
async def add(a: int, b: int = 0) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number,
            zero if left out.
    """
    calls.append((a, b))
    return a + b


@tools_router.tool(name="note_to_chat")
async def note(ctx: Context, text: str) -> None:
    """Post a note in the chat."""
    await ctx.reply(f"note: {text}", quote=False)


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    calls.clear()


@pytest.fixture
def fake(model: FakeModel) -> FakeModel:
    """The shared fake (model, tests/fixtures.py), as this module uses it."""
    return model


def settings_for(tmp_path: Path, fake: FakeModel, **sections: Any) -> Any:
    llm = fake.section(timeout=5)
    agent = {"handler": "llm", **sections.pop("agent", {})}
    return make_settings(tmp_path, llm=merge(llm, sections.pop("llm", {})), agent=agent, **sections)


def router_for(settings: Any) -> Router:
    root = Router("test-root")
    root.include(tools_router)
    root.include(load_router(settings))
    return root


def scripted(*answers: str | Body) -> Any:
    """Answer the n-th request with the n-th answer (the last one repeats)."""
    seen = [0]

    def reply(body: Body) -> str | Body:
        seen[0] += 1
        return answers[min(seen[0], len(answers)) - 1]

    return reply


def step_names(tmp_path: Path) -> list[str]:
    return [name for (name,) in db_rows(tmp_path, "SELECT name FROM steps ORDER BY created")]


# -- schema --------------------------------------------------------------------------


def test_the_schema_comes_from_the_signature_and_the_docstring() -> None:
    (tool,) = [t for t in tools_router.tools() if t.name == "add"]
    assert tool.description == "Add two numbers."
    assert tool.idempotent and tool.source == "python"
    assert tool.parameters == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "a": {"type": "integer", "description": "The first number."},
            "b": {
                "type": "integer",
                "default": 0,
                "description": "The second number, zero if left out.",
            },
        },
        "required": ["a"],
    }
    (posted,) = [t for t in tools_router.tools() if t.name == "note_to_chat"]
    assert list(posted.parameters["properties"]) == ["text"]  # ctx is not the model's
    assert not posted.idempotent


def test_a_function_that_cannot_be_a_tool_is_refused_when_registered() -> None:
    def sync(a: int) -> int:
        return a

    async def untyped(a):  # type: ignore[no-untyped-def]
        return a

    with pytest.raises(TypeError, match="must be an async function"):
        python_tool(sync)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs a type annotation"):
        python_tool(untyped)
    with pytest.raises(ValueError, match="must match"):
        python_tool(add, name="has spaces")


def test_docstring_sections() -> None:
    description, args = parse_docstring(
        "Look it up.\n\nMore text.\n\nArgs:\n    q (str): The query.\n    n: How many\n"
        "        at most.\n\nReturns:\n    x: not an argument\n"
    )
    assert description == "Look it up."
    assert args == {"q": "The query.", "n": "How many at most."}


# -- the loop, end to end ------------------------------------------------------------


async def test_the_model_calls_a_tool_and_answers_with_its_result(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.reply = scripted(asks_for(tool_call("add", {"a": 2, "b": 3}, id="c1")), "It is 5.")
    settings = settings_for(tmp_path, fake)
    with structlog.testing.capture_logs() as logs:
        async with running(settings, router_for(settings)) as (gateway, loop):
            await loop.say("what is 2+3?")
            sent = await loop.wait_for_sent(1)
            await gateway.drain()
    assert sent[0].message.text == "It is 5."
    assert calls == [(2, 3)]
    first, second = fake.requests
    assert {"add", "note_to_chat", "remember", "forget"} <= set(first.tools)
    assert second.tool_results == [{"role": "tool", "tool_call_id": "c1", "content": "5"}]
    assistant = second.messages[-2]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["id"] == "c1"
    assert step_names(tmp_path) == ["llm:reply", "tool:0:0:started", "tool:0:0", "llm:reply#2"]
    (done,) = events_named(logs, "tool.done")
    assert done["tool"] == "add" and done["step"] == "tool:0:0" and "duration_ms" in done
    assert events_named(logs, "tool.started")
    # the person's words and the final answer are the turn; the transcript is in steps
    turns = db_rows(tmp_path, "SELECT role, text FROM messages ORDER BY id")
    assert turns == [("user", "what is 2+3?"), ("assistant", "It is 5.")]


slow_router = Router("test-slow-tools")
never = asyncio.Event()  # never set: the tool below hangs until it is cancelled


@slow_router.tool(timeout=0.2)
async def book(slot: str) -> str:
    """Book a slot with a service that does not answer."""
    await never.wait()
    return f"booked {slot}"


@slow_router.tool
async def own_timeout() -> str:
    """A tool whose own client gives up: its TimeoutError is its failure, not ours."""
    raise TimeoutError("the service's client gave up")


@pytest.mark.slow
async def test_a_hung_tool_is_cancelled_at_its_timeout_and_the_model_hears_why(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.reply = scripted(
        asks_for(tool_call("book", {"slot": "9:00"}, id="b"), tool_call("own_timeout", {})),
        "The booking service did not answer; I could not book 9:00.",
    )
    settings = settings_for(tmp_path, fake)
    root = Router("test-root")
    root.include(slow_router)
    root.include(load_router(settings))
    before = REGISTRY.get_sample_value(
        "tether_tool_calls_total", {"tool": "book", "outcome": "timeout"}
    )
    with structlog.testing.capture_logs() as logs:
        async with running(settings, root) as (gateway, loop):
            await loop.say("book 9:00")
            sent = await loop.wait_for_sent(1)
            await gateway.drain()
    assert sent[0].message.text.startswith("The booking service did not answer")
    booked, own = (m["content"] for m in fake.requests[1].tool_results)
    assert booked.startswith("error: book did not finish within 0.2s and was cancelled")
    assert "may or may not have done its work" in booked
    assert own == "error: the tool raised TimeoutError: the service's client gave up"
    (timeout,) = events_named(logs, "tool.timeout")
    assert timeout["tool"] == "book" and timeout["step"] == "tool:0:0"
    after = REGISTRY.get_sample_value(
        "tether_tool_calls_total", {"tool": "book", "outcome": "timeout"}
    )
    assert (after or 0) - (before or 0) == 1
    (stored,) = db_rows(tmp_path, "SELECT result FROM steps WHERE name = 'tool:0:0'")
    assert json.loads(stored[0])["outcome"] == "timeout"


async def test_invalid_arguments_go_back_to_the_model(tmp_path: Path, fake: FakeModel) -> None:
    fake.reply = scripted(
        asks_for(
            tool_call("add", {"a": "two"}, id="bad"),
            tool_call("add", "{not json", id="broken"),
            tool_call("nope", {}, id="missing"),
        ),
        "Sorry.",
    )
    settings = settings_for(tmp_path, fake)
    async with running(settings, router_for(settings)) as (gateway, loop):
        await loop.say("add two")
        sent = await loop.wait_for_sent(1)
        await gateway.drain()
    assert sent[0].message.text == "Sorry."
    assert calls == []  # the function never saw bad arguments
    results = [m["content"] for m in fake.requests[1].tool_results]
    assert results[0].startswith(
        "error: invalid arguments for add: a: Input should be a valid integer"
    )
    assert results[1].startswith("error: the arguments are not valid JSON")
    assert results[2] == "error: there is no tool named 'nope'"


async def test_rounds_stop_at_max_tool_rounds_and_the_model_answers_without_tools(
    tmp_path: Path, fake: FakeModel
) -> None:
    def reply(body: Body) -> str | Body:
        if body.get("tools"):
            return asks_for(tool_call("add", {"a": len(body["messages"])}))
        return "Here is what I found."

    fake.reply = reply
    settings = settings_for(tmp_path, fake, agent={"max_tool_rounds": 2})
    with structlog.testing.capture_logs() as logs:
        async with running(settings, router_for(settings)) as (gateway, loop):
            await loop.say("loop forever")
            sent = await loop.wait_for_sent(1)
            await gateway.drain()
    assert sent[0].message.text == "Here is what I found."
    assert len(calls) == 2 and fake.calls == 3
    last = fake.requests[-1]
    assert last.tools == [] and last.messages[-1] == {"role": "system", "content": ROUNDS_USED}
    assert events_named(logs, "tool.rounds_exhausted")[0]["rounds"] == 2


async def test_a_round_that_would_cross_the_budget_is_not_made(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.reply = scripted(asks_for(tool_call("add", {"a": 1})), "never asked")
    fake.usage = (2000, 80)  # the first round spends 2080 of 2100 (tool schemas: ~1,000)
    settings = settings_for(tmp_path, fake, memory={"task_token_budget": 2100})
    with structlog.testing.capture_logs() as logs:
        async with running(settings, router_for(settings)) as (gateway, loop):
            await loop.say("add one")
            sent = await loop.wait_for_sent(1)
            await gateway.drain()
    assert fake.calls == 1 and calls == [(1, 0)]
    assert sent[0].message.text.startswith("I stopped before the next model call")
    assert events_named(logs, "budget.exceeded")[0]["step"] == "llm:reply#2"


async def test_remember_and_forget_are_tools_and_each_can_be_switched_off(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.reply = scripted(
        asks_for(tool_call("remember", {"fact": "Ada drinks tea, no sugar."})), "Noted."
    )
    settings = settings_for(tmp_path, fake)
    async with running(settings) as (gateway, loop):
        await loop.say("remember that I drink tea without sugar")
        await loop.wait_for_sent(1)
        await gateway.drain()
    assert db_rows(tmp_path, "SELECT text FROM facts") == [("Ada drinks tea, no sugar.",)]

    fake.requests.clear()
    fake.reply = scripted("ok")
    (tmp_path / "off").mkdir()
    off = settings_for(tmp_path / "off", fake, agent={"tools": {"remember": False}})
    async with running(off) as (gateway, loop):
        await loop.say("hello")
        await loop.wait_for_sent(1)
        await gateway.drain()
    assert "remember" not in fake.requests[0].tools and "forget" in fake.requests[0].tools


async def test_remember_saves_about_the_person_writing_or_about_the_chat(
    tmp_path: Path, fake: FakeModel
) -> None:
    """In a group, a fact about the person is theirs (shown in their turns only, wherever
    they write), one about the chat is the chat's; said in a DM, it stays in DMs."""
    fake.reply = scripted(
        asks_for(tool_call("remember", {"fact": "Ada drinks tea."})),
        "Noted.",
        asks_for(tool_call("remember", {"fact": "Stand-up is at 9.", "about": "chat"})),
        "Noted.",
        asks_for(tool_call("remember", {"fact": "Ada has a cat.", "about": "person"})),
        "Noted.",
    )
    async with running(settings_for(tmp_path, fake)) as (gateway, loop):
        for n, (chat, kind) in enumerate([("g", "group"), ("g", "group"), ("d", "dm")], 1):
            await loop.say("remember this", chat=chat, user="ada", chat_type=kind)
            await loop.wait_for_sent(n)
            await gateway.drain()
    assert db_rows(tmp_path, "SELECT text, owner, in_dm FROM facts ORDER BY id") == [
        ("Ada drinks tea.", "loopback:ada", 0),
        ("Stand-up is at 9.", None, 0),
        ("Ada has a cat.", "loopback:ada", 1),
    ]


async def test_no_tools_no_tools_parameter(tmp_path: Path, fake: FakeModel) -> None:
    fake.reply = scripted("plain")
    names = ["remember", "forget", "schedule", "list_schedules", "cancel_schedule"]
    off = dict.fromkeys([*names, "start_task", "search_memory"], False)
    settings = settings_for(tmp_path, fake, agent={"tools": off})
    async with running(settings) as (gateway, loop):
        await loop.say("hi")
        await loop.wait_for_sent(1)
        await gateway.drain()
    assert "tools" not in fake.requests[0].body


def test_unknown_tool_switch_names_its_key_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"agent\.tools\.remembr"):
        load_text("agent: {tools: {remembr: false}}\n")
    with pytest.raises(ConfigError, match=r"agent\.max_tool_rounds"):
        load_text("agent: {max_tool_rounds: 0}\n")


def test_a_tool_name_offered_twice_stops_the_start(tmp_path: Path) -> None:
    clash = Router("clash")

    @clash.tool
    async def remember(fact: str) -> str:
        """Mine."""
        return fact

    settings = make_settings(tmp_path)
    root = Router("root")
    root.include(clash)
    with pytest.raises(GatewayError, match="tool name 'remember' is offered twice"):
        Gateway(settings, {"loopback": LoopbackAdapter()}, router=root)


# -- exactly once, one call at a time ------------------------------------------------


def context(store: MemoryStore, attempt: int) -> Context:
    event = LoopbackAdapter().event("hi", user="u1")
    event = event.model_copy(update={"key": "lb:fixed"})
    log = structlog.get_logger("test").bind(key=event.key)
    turn = Turn(store, {"loopback": LoopbackAdapter()})
    return Context(event, "loopback:1", attempt, log, turn)


class Blocking:
    """A tool that blocks until released: the test cancels it mid-call, as a crash would."""

    def __init__(self, idempotent: bool) -> None:
        self.runs = 0
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.tool = Tool("slow", "Slow.", {"type": "object"}, self.run, idempotent=idempotent)

    async def run(self, ctx: Context, arguments: dict[str, Any]) -> str:
        self.runs += 1
        self.entered.set()
        await self.release.wait()
        return f"ran {self.runs}"


CALL = tool_call("slow", "{}")


async def interrupted(store: MemoryStore, blocking: Blocking) -> None:
    """Attempt 1 starts the tool and dies mid-call."""
    task = asyncio.create_task(execute(context(store, 1), {"slow": blocking.tool}, CALL, 0, 0))
    await blocking.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_finished_call_is_not_run_again_and_its_effects_are_queued_again() -> None:
    store = MemoryStore()
    await store.open()
    ran: list[str] = []

    async def remembering(ctx: Context, arguments: dict[str, Any]) -> str:
        ran.append("x")
        ctx.memory.remember("kept")
        ctx.memory.remember("about ada", about="loopback:ada")
        ctx.memory.forget_facts([Fact(7, "elsewhere", "old", 1, owner="loopback:ada")])
        await ctx.reply("told you", quote=False)
        return "saved"

    tool = Tool("keep", "Keep.", {"type": "object"}, remembering)
    first = context(store, 1)
    assert await execute(first, {"keep": tool}, tool_call("keep"), 0, 0) == "saved"
    # crash before the checkpoint: the second attempt starts from the stored steps
    second = context(store, 2)
    with structlog.testing.capture_logs() as logs:
        assert await execute(second, {"keep": tool}, tool_call("keep"), 0, 0) == "saved"
    assert ran == ["x"]
    assert [m.text for m in second.outbox] == ["told you"]
    assert [text for text, _ in second.memory.changes.facts] == ["kept"]
    [(text, _, owner, _in_dm)] = second.memory.changes.person_facts
    assert (text, owner) == ("about ada", "loopback:ada")
    assert second.memory.changes.forget_owned == [(7, "loopback:ada")]
    assert events_named(logs, "tool.cached")[0]["step"] == "tool:0:0"


async def test_a_call_cut_off_mid_way_is_unknown_unless_the_tool_is_idempotent() -> None:
    store = MemoryStore()
    await store.open()
    blocking = Blocking(idempotent=False)
    await interrupted(store, blocking)
    with structlog.testing.capture_logs() as logs:
        result = await execute(context(store, 2), {"slow": blocking.tool}, CALL, 0, 0)
    assert result == UNKNOWN and blocking.runs == 1
    assert events_named(logs, "tool.unknown")[0]["step"] == "tool:0:0"
    stored = json.loads(await store.step("lb:fixed", "tool:0:0") or "{}")
    assert stored["outcome"] == "unknown"  # the event's steps (and snapshot) show it
    # and it stays unknown: a third attempt reads the stored outcome
    assert await execute(context(store, 3), {"slow": blocking.tool}, CALL, 0, 0) == UNKNOWN
    assert blocking.runs == 1

    store = MemoryStore()
    await store.open()
    again = Blocking(idempotent=True)
    await interrupted(store, again)
    again.release.set()
    assert await execute(context(store, 2), {"slow": again.tool}, CALL, 0, 0) == "ran 2"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(
    arguments=st.one_of(
        st.text(),
        json_values.map(json.dumps),
        st.dictionaries(st.sampled_from(["a", "b", "c"]), json_values, max_size=3).map(json.dumps),
        json_values,
    )
)
async def test_whatever_arguments_the_model_sends_the_turn_goes_on(arguments: Any) -> None:
    store = MemoryStore()
    await store.open()
    call = {"id": "x", "type": "function", "function": {"name": "add", "arguments": arguments}}
    tools = {tool.name: tool for tool in tools_router.tools()}
    before = len(calls)
    result = await execute(context(store, 1), tools, call, 0, 0)
    assert isinstance(result, str)
    if len(calls) > before:  # it ran: then with valid integers only
        a, b = calls[-1]
        assert isinstance(a, int) and isinstance(b, int)
        assert result == str(a + b)
    else:
        assert result.startswith("error: ")


@pytest.mark.slow
async def test_a_dead_events_snapshot_and_tether_dead_show_have_the_tool_transcript(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.reply = scripted(asks_for(tool_call("add", {"a": 4, "b": 1}, id="c1")), "never")
    fake.fail(
        400, times=None, when=lambda body: any(m.get("role") == "tool" for m in body["messages"])
    )
    settings = settings_for(tmp_path, fake, pipeline={"dead_notice": ""})
    async with running(settings, router_for(settings)) as (gateway, loop):
        event = await loop.say("add 4 and 1")
        await gateway.drain()
        letter = await gateway.store.dead_letter(event.key)
    assert letter is not None
    assert letter.snapshot["tools"] == [
        {
            "step": "tool:0:0",
            "tool": "add",
            "arguments": '{"a": 4, "b": 1}',
            "outcome": "done",
            "result": "5",
            "duration_ms": letter.snapshot["tools"][0]["duration_ms"],
        }
    ]
    config = tmp_path / "tether.yaml"
    config.write_text(f"memory: {{store: 'sqlite:///{tmp_path / 'tether.db'}'}}\n")
    shown = await asyncio.to_thread(
        subprocess.run,
        [TETHER, "dead", "show", event.key, "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["snapshot"]["tools"][0]["result"] == "5"


def test_the_transcript_marks_a_call_that_never_finished() -> None:
    steps = {
        "llm:reply": "{}",
        "tool:0:1:started": '{"attempt": 1, "tool": "b"}',
        "tool:0:0:started": '{"attempt": 1, "tool": "a"}',
        "tool:0:0": '{"tool": "a", "outcome": "done", "result": "ok", "arguments": "{}"}',
        "tool:0:2": "not json",
    }
    found = transcript(steps)
    assert [(t["step"], t["tool"], t["outcome"]) for t in found] == [
        ("tool:0:0", "a", "done"),
        ("tool:0:1", "b", "interrupted"),
        ("tool:0:2", None, None),
    ]


async def test_the_budget_counts_the_tool_schemas_sent(tmp_path: Path, fake: FakeModel) -> None:
    # ~40 tokens of messages fit in 120; with the schemas of four tools they do not
    settings = settings_for(tmp_path, fake, memory={"task_token_budget": 120})
    async with running(settings, router_for(settings)) as (gateway, loop):
        await loop.say("hi")
        sent = await loop.wait_for_sent(1)
        await gateway.drain()
    assert fake.calls == 0
    assert sent[0].message.text.startswith("I stopped before the next model call")


async def test_a_model_without_tool_calling_is_asked_without_tools(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.reply = scripted("plain answer")
    settings = settings_for(tmp_path, fake, llm={"models": {"main": {"tools": False}}})
    async with running(settings, router_for(settings)) as (gateway, loop):
        await loop.say("hi")
        sent = await loop.wait_for_sent(1)
        await gateway.drain()
    assert sent[0].message.text == "plain answer"
    assert "tools" not in fake.requests[0].body


async def test_marks_are_read_on_every_attempt_and_belong_to_one_call() -> None:
    store = MemoryStore()
    await store.open()
    tools = {tool.name: tool for tool in tools_router.tools()}
    before = REGISTRY.get_sample_value(
        "tether_tool_calls_total", {"tool": "add", "outcome": "cached"}
    )
    assert await execute(context(store, 1), tools, tool_call("add", {"a": 1}), 0, 0) == "1"
    # `tether dead retry` runs the event as attempt 1 again, its steps kept
    assert await execute(context(store, 1), tools, tool_call("add", {"a": 1}), 0, 0) == "1"
    assert calls == [(1, 0)]
    after = REGISTRY.get_sample_value(
        "tether_tool_calls_total", {"tool": "add", "outcome": "cached"}
    )
    assert (after or 0) - (before or 0) == 1
    # the model, asked again, chose another call at this place: that one runs
    assert await execute(context(store, 2), tools, tool_call("add", {"a": 7}), 0, 0) == "7"
    assert calls == [(1, 0), (7, 0)]


async def test_a_tool_that_replies_sends_with_the_turns_checkpoint(
    tmp_path: Path, fake: FakeModel
) -> None:
    fake.reply = scripted(asks_for(tool_call("note_to_chat", {"text": "lunch at 1"})), "Posted.")
    settings = settings_for(tmp_path, fake)
    async with running(settings, router_for(settings)) as (gateway, loop):
        await loop.say("post a note: lunch at 1")
        sent = await loop.wait_for_sent(2)
        await gateway.drain()
    assert [d.message.text for d in sent] == ["note: lunch at 1", "Posted."]
    assert fake.requests[1].tool_results[0]["content"] == "done"


def test_several_agents_offer_the_plugins_tools() -> None:
    from tether.gateway.agent.accounts import AgentsRouter

    settings = load_text(
        "memory: {store: 'memory://'}\nhttp: {enabled: false}\n"
        "plugins: ['tests.plugins.tools_counter:router']\n"
        "llm: {providers: {fake: {base_url: 'http://127.0.0.1:9/v1', api_key: sk-x}},"
        " models: {main: {provider: fake, model: m1}}}\n"
        "agents: [{name: alice, platforms: {telegram: {token: '1:AAAA-token'}}},"
        " {name: bob, platforms: {telegram: {token: '2:AAAA-token'}}}]\n"
    )
    router = AgentsRouter(settings, load_router)
    assert [tool.name for tool in router.tools()] == ["bump"]


async def test_a_reload_that_would_bring_a_clashing_tool_is_refused(tmp_path: Path) -> None:
    from tether.config import load

    path = write_config(tmp_path)
    gateway = Gateway(load(path), {"loopback": LoopbackAdapter()}, config_path=str(path))
    await gateway.start()
    try:
        write_config(tmp_path, plugins=["tests.plugins.tools_clash:router"])
        with structlog.testing.capture_logs() as logs:
            assert not await gateway.reloader.reload()
        (failed,) = events_named(logs, "config.reload_failed")
        assert "tool name 'remember' is offered twice" in failed["error"]
        assert gateway.router.tools() == []
    finally:
        await gateway.stop()
