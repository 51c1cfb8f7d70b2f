"""MCP servers: a real stdio server process (written here with the SDK's MCPServer) whose
tools Tether lists namespaced, calls with a timeout, and restarts when it dies."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
import structlog
import yaml
from pydantic import ValidationError

from tether.config.mcp import McpConfig
from tether.config.schema import Settings
from tether.errors import ToolError
from tether.gateway.cli import main
from tether.gateway.handler.context import Context
from tether.gateway.handler.tool import Tool
from tether.gateway.tools.mcp import McpTools, tool_name

SERVER = textwrap.dedent(
    '''
    import asyncio, os, signal, sys
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    server = MCPServer("demo")
    COUNTER = sys.argv[1]

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True))
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    def bump(by: int = 1) -> str:
        """Count a side effect in a file (not idempotent)."""
        with open(COUNTER, "a") as f:
            f.write("x" * by)
        return "bumped"

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails."""
        raise ToolError(reason)

    @server.tool()
    async def hang() -> str:
        """Never answers."""
        await asyncio.sleep(3600)
        return "late"

    @server.tool(name="die")
    def die(how: str = "exit") -> str:
        """Ends the server process at once: exit code 3, or SIGKILL."""
        print("fatal: the disk is on fire", file=sys.stderr, flush=True)
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(3)

    @server.tool()
    async def unlock(ctx: Context) -> str:
        """Adds the tool `secret` and tells the client its tools changed."""
        def secret() -> str:
            """The secret."""
            return "42"
        server.add_tool(secret)
        await ctx.session.send_tool_list_changed()
        return "unlocked"

    print("demo server up", file=sys.stderr, flush=True)
    server.run()
    '''
)

CTX = cast(Context, None)  # MCP tools do not use the context


@pytest.fixture
def server_file(tmp_path: Path) -> Path:
    path = tmp_path / "server.py"
    path.write_text(SERVER)
    return path


def config(server_file: Path, tmp_path: Path, **extra: Any) -> McpConfig:
    entry = {"command": [sys.executable, str(server_file), str(tmp_path / "counter")], **extra}
    return McpConfig.model_validate({"servers": {"demo": entry}})


@pytest.fixture
async def tools(server_file: Path, tmp_path: Path) -> AsyncIterator[McpTools]:
    source = McpTools(config(server_file, tmp_path, timeout=5))
    await source.start()
    try:
        yield source
    finally:
        await source.stop()


async def listed(source: McpTools) -> dict[str, Tool]:
    return {tool.name: tool for server in source.servers.values() for tool in server.tools()}


@pytest.mark.slow
async def test_tools_are_listed_namespaced_and_called(tools: McpTools, tmp_path: Path) -> None:
    found = await listed(tools)
    assert set(found) == {
        "demo__add",
        "demo__bump",
        "demo__fail",
        "demo__hang",
        "demo__die",
        "demo__unlock",
    }
    add = found["demo__add"]
    assert add.idempotent and not found["demo__bump"].idempotent
    assert add.source == "mcp:demo"
    assert add.parameters["required"] == ["a", "b"]
    assert add.schema()["function"]["description"] == "Add two numbers."
    assert await add.run(CTX, {"a": 2, "b": 3}) == "5"
    assert await found["demo__bump"].run(CTX, {"by": 2}) == "bumped"
    assert (tmp_path / "counter").read_text() == "xx"
    assert tools.names() == list(found)


@pytest.mark.slow
async def test_a_server_that_changes_its_tools_has_them_listed_again(tools: McpTools) -> None:
    """``notifications/tools/list_changed``: the next turn offers the new list."""
    found = await listed(tools)
    assert "demo__secret" not in found
    server = tools.servers["demo"]
    with structlog.testing.capture_logs() as logs:
        assert await found["demo__unlock"].run(CTX, {}) == "unlocked"
        async with asyncio.timeout(10), server.changed:
            await server.changed.wait_for(lambda: any(t.name == "secret" for t in server.listed))
    assert await (await listed(tools))["demo__secret"].run(CTX, {}) == "42"
    (changed,) = [line for line in logs if line["event"] == "mcp.tools_changed"]
    assert changed["server"] == "demo" and changed["tools"] == len(found) + 1


@pytest.mark.slow
async def test_tool_errors_and_bad_arguments_reach_the_model_as_tool_errors(
    tools: McpTools,
) -> None:
    found = await listed(tools)
    with pytest.raises(ToolError, match="no luck"):
        await found["demo__fail"].run(CTX, {"reason": "no luck"})
    with pytest.raises(ToolError, match="validation error"):
        await found["demo__add"].run(CTX, {"a": "x"})


@pytest.mark.slow
async def test_a_call_past_the_timeout_is_a_tool_error(server_file: Path, tmp_path: Path) -> None:
    source = McpTools(config(server_file, tmp_path, timeout=1))
    await source.start()
    try:
        hang = (await listed(source))["demo__hang"]
        with pytest.raises(ToolError, match="did not finish within 1s"):
            await hang.run(CTX, {})
        assert await (await listed(source))["demo__add"].run(CTX, {"a": 1, "b": 1}) == "2"
    finally:
        await source.stop()


@pytest.mark.slow
@pytest.mark.parametrize(("how", "ended"), [("exit", "exit code 3"), ("kill", "killed by SIGKILL")])
async def test_a_dead_server_answers_unavailable_then_is_restarted(
    tools: McpTools, how: str, ended: str
) -> None:
    server = tools.servers["demo"]
    found = await listed(tools)
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(ToolError, match="unavailable"):
            await found["demo__die"].run(CTX, {"how": how})
        # Until it is back, its tools stay listed and say so.
        assert "demo__add" in await listed(tools)
        if server.session is None:
            with pytest.raises(ToolError, match="unavailable right now"):
                await found["demo__add"].run(CTX, {"a": 1, "b": 2})
        await server.wait_connected(2, 30)
    assert await found["demo__add"].run(CTX, {"a": 1, "b": 2}) == "3"
    names = [entry["event"] for entry in logs]
    assert "mcp.died" in names and "mcp.restarted" in names
    died = next(entry for entry in logs if entry["event"] == "mcp.died")
    assert died["server"] == "demo"
    # why: how the process ended and the last thing it wrote
    assert died["exit"] == ended
    assert died["stderr"][-1] == "fatal: the disk is on fire"


@pytest.mark.slow
async def test_the_servers_stderr_becomes_log_lines(server_file: Path, tmp_path: Path) -> None:
    source = McpTools(config(server_file, tmp_path))
    with structlog.testing.capture_logs() as logs:
        await source.start()
        await source.stop()  # its stderr is read to the end when it stops
    lines = [(e["server"], e["line"]) for e in logs if e["event"] == "mcp.stderr"]
    assert ("demo", "demo server up") in lines


@pytest.mark.slow
async def test_allow_and_deny_filter_the_servers_tools(server_file: Path, tmp_path: Path) -> None:
    source = McpTools(config(server_file, tmp_path, allow=["a*", "b*", "die"], deny=["die"]))
    await source.start()
    try:
        assert set(await listed(source)) == {"demo__add", "demo__bump"}
    finally:
        await source.stop()


def test_tool_names_stay_within_the_api_rule() -> None:
    assert tool_name("git", "log.search/v2") == "git__log_search_v2"
    assert len(tool_name("s" * 30, "t" * 80)) == 64


@pytest.mark.parametrize(
    ("servers", "path", "says"),
    [
        ({"x": {}}, "mcp.servers.x", "exactly one of command"),
        ({"x": {"command": ["a"], "url": "http://h"}}, "mcp.servers.x", "exactly one of command"),
        ({"x": {"command": []}}, "mcp.servers.x.command", "program"),
        ({"x": {"url": "ftp://h"}}, "mcp.servers.x.url", "http"),
        ({"x y": {"url": "http://h"}}, "mcp.servers", "server name"),
        ({"x": {"url": "http://h", "timeout": 0}}, "mcp.servers.x.timeout", "greater than 0"),
        ({"x": {"url": "http://h", "env": {"A": "b"}}}, "mcp.servers.x", "env and cwd"),
        ({"x": {"url": "http://h", "tiemout": 1}}, "mcp.servers.x.tiemout", "Extra"),
    ],
)
def test_invalid_config_names_the_key_path(servers: Any, path: str, says: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings.model_validate({"mcp": {"servers": servers}})
    locations = [".".join(str(part) for part in error["loc"]) for error in caught.value.errors()]
    assert any(location.startswith(path) for location in locations), locations
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("server", "says"),
    [
        (
            {"command": ["no-such-mcp-server-x", "--stdio"]},
            "'no-such-mcp-server-x' is not on the PATH",
        ),
        ({"command": ["./missing.py"]}, "'./missing.py' is not an executable file"),
        (
            {"command": ["python3"], "env": {"PATH": "/nonexistent"}},
            "'python3' is not on the PATH",
        ),
    ],
)
def test_tether_check_names_a_server_program_that_is_not_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: dict[str, Any], says: str
) -> None:
    """A program that is missing would only show as a server restarted over and over:
    ``tether check`` says so in one line naming the key."""
    path = tmp_path / "tether.yaml"
    path.write_text(yaml.safe_dump({"mcp": {"servers": {"git": server}}}))
    assert main(["check", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"mcp.servers.git.command: {says}" in err
    assert "Traceback" not in err


def test_tether_check_accepts_a_server_program_that_is_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "server.py"
    script.write_text("")
    script.chmod(0o755)
    servers = {
        "on_path": {"command": [Path(sys.executable).name, "-m", "x"]},
        "by_path": {"command": ["./server.py"], "cwd": str(tmp_path)},
        "http": {"url": "http://127.0.0.1:9/mcp"},
    }
    path = tmp_path / "tether.yaml"
    path.write_text(yaml.safe_dump({"mcp": {"servers": servers}}))
    assert main(["check", "-c", str(path)]) == 0, capsys.readouterr().err


def test_an_agents_mcp_tools_filter_names_its_key_path() -> None:
    with pytest.raises(ValidationError, match=r"agent\.mcp_tools\.alow|mcp_tools\.alow"):
        Settings.model_validate({"agent": {"mcp_tools": {"alow": ["x"]}}})
    spec = Settings.model_validate(
        {"agents": [{"name": "a", "handler": "echo", "mcp_tools": {"allow": ["git__*"]}}]}
    ).agents[0]
    assert spec.mcp_tools.allows("git__log") and not spec.mcp_tools.allows("web__search")


def test_header_and_env_values_are_secrets() -> None:
    settings = Settings.model_validate(
        {
            "mcp": {
                "servers": {
                    "web": {"url": "https://h/mcp", "headers": {"X-Token": "hdr-s3cret-1"}},
                    "cmd": {"command": ["srv"], "env": {"SOMETHING": "env-s3cret-2"}},
                }
            }
        }
    )
    assert {"hdr-s3cret-1", "env-s3cret-2"} <= set(settings.secrets())
    assert "s3cret" not in str(settings.masked())


# -- through the agent ------------------------------------------------------------------


@pytest.mark.slow
async def test_the_model_calls_an_mcp_tool_through_tether(
    tmp_path: Path, server_file: Path
) -> None:
    from tests.support.config import make_settings
    from tests.support.gateway import running
    from tether.testing.model import Body, FakeModel, asks_for, tool_call

    def reply(body: Body) -> str | Body:
        results = [m["content"] for m in body["messages"] if m.get("role") == "tool"]
        if results:
            return f"The sum is {results[-1]}."
        return asks_for(tool_call("demo__add", {"a": 2, "b": 3}, id="call-1"))

    fake = FakeModel(reply=reply)
    await fake.start()
    entry = {"command": [sys.executable, str(server_file), str(tmp_path / "counter")]}
    settings = make_settings(
        tmp_path,
        agent={"handler": "llm", "mcp_tools": {"deny": ["demo__die", "demo__h*"]}},
        llm=fake.section(),
        mcp={"servers": {"demo": entry}},
    )
    try:
        with structlog.testing.capture_logs() as logs:
            async with running(settings) as (gateway, loop):
                await loop.say("what is 2 + 3?")
                sent = await loop.wait_for_sent(1, timeout=60)
                await gateway.drain()
    finally:
        await fake.close()
    assert sent[0].message.text == "The sum is 5."
    offered = set(fake.requests[0].tools)
    assert {"demo__add", "demo__bump", "demo__fail"} <= offered
    assert not {"demo__die", "demo__hang"} & offered  # this agent's mcp_tools.deny
    assert fake.requests[-1].tool_results[0]["content"] == "5"
    started = [e for e in logs if e["event"] == "mcp.started"]
    assert started and started[0]["server"] == "demo" and started[0]["tools"] == 6
    done = [e for e in logs if e["event"] == "tool.done"]
    assert done and done[0]["tool"] == "demo__add"


HTTP_SERVER = textwrap.dedent(
    '''
    import sys
    from mcp.server.mcpserver import Context, MCPServer

    server = MCPServer("web")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    def token(ctx: Context) -> str:
        """The X-Token header the request carried."""
        request = ctx.request_context.request
        return request.headers.get("x-token", "none") if request is not None else "-"

    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
    '''
)


@pytest.mark.slow
async def test_a_streamable_http_server_gets_its_headers(tmp_path: Path) -> None:
    import asyncio
    import socket

    script = tmp_path / "http_server.py"
    script.write_text(HTTP_SERVER)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = await asyncio.create_subprocess_exec(
        sys.executable, str(script), str(port), stderr=asyncio.subprocess.PIPE
    )
    assert server.stderr is not None
    try:
        while b"running on" not in (line := await server.stderr.readline()).lower():
            assert line, "the server exited before it listened"
        secret = "hdr-0123456789-secret"
        config = McpConfig.model_validate(
            {
                "servers": {
                    "web": {"url": f"http://127.0.0.1:{port}/mcp", "headers": {"X-Token": secret}}
                }
            }
        )
        source = McpTools(config)
        with structlog.testing.capture_logs() as logs:
            await source.start()
            try:
                found = await listed(source)
                assert await found["web__add"].run(CTX, {"a": 1, "b": 2}) == "3"
                assert await found["web__token"].run(CTX, {}) == secret
            finally:
                await source.stop()
        assert [e["transport"] for e in logs if e["event"] == "mcp.started"] == ["http"]
        assert secret not in repr(logs)
    finally:
        server.terminate()
        await server.wait()
