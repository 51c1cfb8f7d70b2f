"""What a misbehaving MCP server may cost (gateway/tools/mcp_bounds.py, mcp_stdio.py):
real stdio and streamable-HTTP servers, written here with the SDK's MCPServer, that flood
stderr, print junk on stdout and return results far past ``max_result_bytes``."""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
import structlog

from tether.config.mcp import STDERR_BURST, McpConfig
from tether.errors import ToolError
from tether.gateway.handler.context import Context
from tether.gateway.tools.mcp import McpServer, McpTools
from tether.gateway.tools.mcp_bounds import ENDS, Wire, refusal

NOISY = textwrap.dedent(
    '''
    import sys
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("noisy")
    for n in range(int(sys.argv[1])):  # a library that prints, before the server runs
        print(f"loading part {n} of the model...", flush=True)

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    def flood(megabytes: int) -> str:
        """A debug loop: log lines of 200 bytes on stderr, one write each."""
        line = "debug: " + "x" * 192
        for _ in range(megabytes * 5000):
            print(line, file=sys.stderr)
        return "flooded"

    @server.tool()
    def huge(megabytes: int) -> str:
        """A result of that many megabytes."""
        return "x" * (megabytes * 1_000_000)

    server.run()
    '''
)

CTX = cast(Context, None)  # MCP tools do not use the context


@asynccontextmanager
async def noisy(tmp_path: Path, junk_lines: int = 0, **extra: Any) -> AsyncIterator[McpServer]:
    script = tmp_path / "noisy.py"
    script.write_text(NOISY)
    entry = {"command": [sys.executable, str(script), str(junk_lines)], "timeout": 60, **extra}
    source = McpTools(McpConfig.model_validate({"servers": {"noisy": entry}}))
    await source.start()
    try:
        yield source.servers["noisy"]
    finally:
        await source.stop()


async def call(server: McpServer, tool: str, **arguments: Any) -> str:
    (found,) = [t for t in server.tools() if t.name == f"noisy__{tool}"]
    return await found.run(CTX, arguments)


def cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def logged_bytes(logs: list[dict[str, Any]]) -> int:
    return sum(len(orjson.dumps(entry, default=str)) for entry in logs)


@contextmanager
def sdk_records(caplog: pytest.LogCaptureFixture) -> Iterator[list[logging.LogRecord]]:
    """What the SDK (stdlib logging under ``mcp``) logged while the block ran."""
    caplog.set_level(logging.DEBUG, logger="mcp")
    found: list[logging.LogRecord] = []
    yield found
    found.extend(r for r in caplog.records if r.name.startswith("mcp"))


@pytest.mark.slow
async def test_a_server_flooding_stderr_costs_a_bounded_log_and_little_cpu(
    tmp_path: Path,
) -> None:
    """100 MB of stderr, a line per write: the gateway logs a bounded number of lines,
    counts the rest, and spends less CPU reading them than the server spent writing."""
    with structlog.testing.capture_logs() as logs:
        async with noisy(tmp_path) as server:
            own, children = cpu_seconds(resource.RUSAGE_SELF), cpu_seconds(resource.RUSAGE_CHILDREN)
            assert await call(server, "flood", megabytes=100) == "flooded"
            assert await call(server, "add", a=2, b=3) == "5"  # it still answers
        # stopped: its stderr was read to the end and the process reaped
        own = cpu_seconds(resource.RUSAGE_SELF) - own
        writer = cpu_seconds(resource.RUSAGE_CHILDREN) - children
    wire = server.wire
    written = 100 * 5000 * 200
    assert wire.stderr_bytes >= written
    lines = [e for e in logs if e["event"] == "mcp.stderr"]
    assert STDERR_BURST <= len(lines) == wire.stderr_logged < 1000
    assert wire.stderr_logged + wire.stderr_dropped >= 100 * 5000
    dropped = [e for e in logs if e["event"] == "mcp.stderr_dropped"]
    assert dropped and dropped[-1]["total"] == wire.stderr_dropped
    assert sum(e["lines"] for e in dropped) == wire.stderr_dropped
    # the bound: what was logged, against what was written
    assert logged_bytes(logs) < 256 * 1024, logged_bytes(logs)
    # the CPU: reading a flood costs less than writing it did (a baseline from this run)
    print(f"cpu: gateway {own:.2f} s, server {writer:.2f} s, logged {logged_bytes(logs)} B")
    assert own < writer, (own, writer)


@pytest.mark.slow
async def test_stray_stdout_is_counted_not_traced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with sdk_records(caplog) as records, structlog.testing.capture_logs() as logs:
        async with noisy(tmp_path, junk_lines=2000) as server:
            assert await call(server, "add", a=1, b=2) == "3"
    assert server.wire.bad_stdout == 2000
    quoted = [e for e in logs if e["event"] == "mcp.bad_stdout"]
    assert quoted[0]["line"] == "loading part 0 of the model..."
    assert len(quoted) <= STDERR_BURST + 10  # the rest only counted
    assert not [r for r in records if r.levelno >= logging.WARNING or r.exc_info]
    assert not [e for e in logs if "exc_info" in e or e.get("log_level") == "error"]


@pytest.mark.slow
async def test_a_result_past_max_result_bytes_is_refused_unread(tmp_path: Path) -> None:
    """50 MB answered: the call ends at once with a refusal the model reads, nothing of the
    line was kept past the cap, and the server goes on serving (no restart)."""
    async with noisy(tmp_path) as server:
        with structlog.testing.capture_logs() as logs:
            with pytest.raises(ToolError) as refused:
                await call(server, "huge", megabytes=50)
            assert await call(server, "add", a=2, b=3) == "5"
        assert server.connects == 1
    message = str(refused.value)
    assert message.startswith("MCP server 'noisy': the answer was more than 1,048,576 bytes")
    assert "mcp.servers.noisy.max_result_bytes" in message and "ask it for less" in message
    wire = server.wire
    assert wire.refused == 1 and wire.refused_bytes > 50_000_000
    assert wire.largest_kept < 1 << 20  # what was kept whole and parsed: never the result
    (line,) = [e for e in logs if e["event"] == "mcp.refused"]
    assert line["answered"] and line["bytes"] == wire.refused_bytes


@pytest.mark.slow
async def test_max_result_bytes_is_the_servers_own(tmp_path: Path) -> None:
    async with noisy(tmp_path, max_result_bytes=4096) as server:
        with pytest.raises(ToolError, match="more than 4,096 bytes"):
            await call(server, "huge", megabytes=1)
        assert await call(server, "add", a=1, b=1) == "2"


@pytest.mark.parametrize(
    ("line", "ident"),
    [
        (b'{"jsonrpc":"2.0","id":7,"result":{"content":[' + b"x" * 5000 + b"]}}", 7),
        (b'{"result":{"id":3,"x":"' + b"y" * 5000 + b'"},"jsonrpc":"2.0","id":"a\\"b"}', 'a"b'),
        (b'{"jsonrpc":"2.0","method":"notifications/message","params":"' + b"z" * 5000, None),
        (
            b'{"jsonrpc":"2.0","id":4,"method":"sampling/createMessage","params":{"x":"'
            + b"z" * 5000
            + b'"}}',
            None,
        ),
        (
            b'{"method":"roots/list","params":{"x":"' + b"z" * 5000 + b'"},"jsonrpc":"2.0","id":9}',
            None,
        ),
        (b'{"jsonrpc":"2.0","id":8,"result":{"text":"' + b'"method": ' * 600 + b'"}}', 8),
    ],
    ids=[
        "python-sdk",
        "typescript-sdk",
        "notification",
        "request",
        "ts-request",
        "method-in-result",
    ],
)
def test_a_refusal_answers_the_request_the_line_named(line: bytes, ident: object) -> None:
    found = refusal(line[:ENDS], line[-ENDS:], len(line), 4096, "s", Wire())
    if ident is None:
        assert found is None
    else:
        assert found is not None and found.message.id == ident  # type: ignore[union-attr]


HTTP_SERVER = textwrap.dedent(
    '''
    import sys
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("web")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    def huge(kilobytes: int) -> str:
        """A result of that many kilobytes."""
        return "x" * (kilobytes * 1000)

    port, answers = int(sys.argv[1]), sys.argv[2]
    server.run("streamable-http", host="127.0.0.1", port=port, json_response=answers == "json")
    '''
)


@pytest.mark.slow
@pytest.mark.parametrize("answers", ["json", "event-stream"])
async def test_an_http_servers_answers_are_capped_too(tmp_path: Path, answers: str) -> None:
    script = tmp_path / "http_server.py"
    script.write_text(HTTP_SERVER)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(script), str(port), answers, stderr=asyncio.subprocess.PIPE
    )
    assert process.stderr is not None
    try:
        while b"running on" not in (line := await process.stderr.readline()).lower():
            assert line, "the server exited before it listened"
        entry = {"url": f"http://127.0.0.1:{port}/mcp", "max_result_bytes": 100_000}
        source = McpTools(McpConfig.model_validate({"servers": {"web": entry}}))
        await source.start()
        try:
            tools = {t.name: t for t in source.servers["web"].tools()}
            with pytest.raises(ToolError, match=r"^MCP server 'web': the answer was more than"):
                await tools["web__huge"].run(CTX, {"kilobytes": 1000})
            assert await tools["web__add"].run(CTX, {"a": 1, "b": 2}) == "3"
            assert source.servers["web"].wire.refused == 1
            assert source.servers["web"].connects == 1  # not taken for a dead server
        finally:
            await source.stop()
    finally:
        process.terminate()
        await process.wait()
