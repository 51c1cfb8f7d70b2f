"""The stdio transport to an MCP server, with every line it reads bounded.

The SDK's ``stdio_client`` keeps what the server writes on stdout until a newline comes,
growing one string by each chunk (a 50 MB line is some 800 copies of up to 50 MB, then a
parse), and logs every line that is not JSON-RPC with its traceback. Neither can be set
from outside, so this is the same transport with the line reading made Tether's: the
server's process, its stdin and the session's streams as the SDK has them, and

- a line longer than ``max_result_bytes`` is read past to its newline, never kept whole
  (its first and last :data:`~.mcp_bounds.ENDS` bytes are, to name the request it
  answers, which gets a refusal: :func:`~.mcp_bounds.refusal`);
- a line that is not JSON-RPC is counted and quoted within the log's rate, not traced;
- stderr is read by :meth:`~.mcp_bounds.Diagnostics.relay`, within the same rate;
- how the process ended (exit code or signal) is noted for ``mcp.died``.

Stopping follows the MCP specification, as the SDK does: close the server's stdin, give
it :data:`EXIT_WAIT` seconds, then SIGTERM its process group (the server's children too)
and SIGKILL what is left (the SDK's :func:`terminate_posix_process_tree`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
from collections.abc import AsyncIterator

import anyio
import mcp_types
from anyio.abc import ByteReceiveStream, ByteSendStream, Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from tether.gateway.tools.mcp_bounds import ENDS, PIPE_BYTES, Diagnostics, refusal

#: Seconds a server has to exit once its stdin is closed, and again once it is signalled.
EXIT_WAIT = 2.0
#: Seconds stderr is still read after the process ended (a child may hold it open).
STDERR_WAIT = 1.0

Incoming = SessionMessage | Exception
Streams = tuple[MemoryObjectReceiveStream[Incoming], MemoryObjectSendStream[SessionMessage]]


@contextlib.asynccontextmanager
async def stdio_transport(
    params: StdioServerParameters, max_line: int, diagnostics: Diagnostics
) -> AsyncIterator[Streams]:
    """Start the server and yield the session's (read, write) streams; stop it after."""
    errors, errors_end = os.pipe()
    with contextlib.suppress(AttributeError, OSError):  # a bigger pipe: fewer reads (Linux)
        fcntl.fcntl(errors, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    try:
        process = await anyio.open_process(
            [params.command, *params.args],
            env=get_default_environment() | (params.env or {}),
            cwd=params.cwd,
            stderr=errors_end,
            start_new_session=True,  # its own process group: stopped with its children
        )
    except BaseException:
        os.close(errors)
        raise
    finally:
        os.close(errors_end)  # the server has its copy: EOF when it (and its children) end
    assert process.stdin and process.stdout
    incoming, read_stream = anyio.create_memory_object_stream[Incoming](0)
    write_stream, outgoing = anyio.create_memory_object_stream[SessionMessage](0)
    reader = _Lines(max_line, diagnostics)
    relay_done = anyio.Event()

    async def relay() -> None:
        try:
            await diagnostics.relay(errors)
        finally:
            relay_done.set()

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(reader.read, process.stdout, incoming)
            tasks.start_soon(_write, process.stdin, outgoing, incoming)
            tasks.start_soon(relay)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True):
                    read_stream.close()  # the reader drains stdout, so the server can exit
                    write_stream.close()
                    diagnostics.exit = await _stop(process)
                    with anyio.move_on_after(STDERR_WAIT):
                        await relay_done.wait()
                tasks.cancel_scope.cancel()
    finally:
        os.close(errors)


class _Lines:
    """The server's stdout as JSON-RPC messages, one line each, none kept past the cap."""

    def __init__(self, max_line: int, diagnostics: Diagnostics) -> None:
        self.max_line = max_line
        self.diagnostics = diagnostics
        self.wire = diagnostics.wire

    async def read(self, stdout: ByteReceiveStream, out: MemoryObjectSendStream[Incoming]) -> None:
        line = bytearray()
        over = 0  # while > 0: the length so far of a line being read past
        head = tail = b""
        async with out:
            try:
                async for chunk in stdout:
                    start = 0
                    while start < len(chunk):
                        end = chunk.find(b"\n", start)
                        piece = chunk[start:] if end < 0 else chunk[start:end]
                        if over:
                            over += len(piece)
                            tail = (tail + piece)[-ENDS:]
                        elif len(line) + len(piece) > self.max_line:
                            over = len(line) + len(piece)
                            head = (bytes(line[:ENDS]) + piece[:ENDS])[:ENDS]
                            tail = (bytes(line[-ENDS:]) + piece)[-ENDS:]
                            line.clear()
                        else:
                            line += piece
                        if end < 0:
                            break
                        start = end + 1
                        if over:
                            message = self._refuse(head, tail, over)
                            over = 0
                        else:
                            message = self._parse(line)
                            line.clear()
                        if message is not None:
                            await out.send(message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                await _drain(stdout)  # the session is gone; the server may still write
            except (ConnectionError, OSError):
                pass  # the pipe went with the process: the session sees the stream end

    def _parse(self, line: bytearray) -> SessionMessage | None:
        if not line.strip():
            return None
        self.wire.largest_kept = max(self.wire.largest_kept, len(line))
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_json(bytes(line), by_name=False)
        except (ValidationError, ValueError):
            self.diagnostics.stray(bytes(line[:4096]))
            return None
        return SessionMessage(message)

    def _refuse(self, head: bytes, tail: bytes, size: int) -> SessionMessage | None:
        server = self.diagnostics.server
        return refusal(head, tail, size, self.max_line, server, self.wire)


async def _write(
    stdin: ByteSendStream,
    outgoing: MemoryObjectReceiveStream[SessionMessage],
    incoming: MemoryObjectSendStream[Incoming],
) -> None:
    try:
        async with outgoing:
            async for message in outgoing:
                text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await stdin.send((text + "\n").encode())
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        # The server stopped reading: end the session's stream, so that a request
        # waiting on an answer hears the connection closed instead of hanging.
        await incoming.aclose()


async def _drain(stdout: ByteReceiveStream) -> None:
    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
        async for _ in stdout:
            pass


async def _stop(process: Process) -> str:
    """Stop the server (stdin closed, then signals); how it ended, for ``mcp.died``."""
    ended_alone = process.returncode is not None
    with contextlib.suppress(Exception):
        assert process.stdin is not None
        await process.stdin.aclose()
    signalled = False
    if not await _exited(process, EXIT_WAIT):
        signalled = True
        await terminate_posix_process_tree(process, EXIT_WAIT)
        await _exited(process, EXIT_WAIT)
    with contextlib.suppress(Exception):
        assert process.stdout is not None
        await process.stdout.aclose()
    return describe(process.returncode, signalled=signalled and not ended_alone)


async def _exited(process: Process, timeout: float) -> bool:
    """Whether the process ended within ``timeout`` (its return code polled: waiting on
    the process would also wait for pipes a child of it may hold)."""
    with anyio.move_on_after(timeout):
        while process.returncode is None:  # noqa: ASYNC110 - no event says it exited
            await anyio.sleep(0.01)
    return process.returncode is not None


def describe(returncode: int | None, *, signalled: bool = False) -> str:
    """``exit code 3``, ``killed by SIGKILL``, or that Tether had to stop it."""
    if returncode is None:
        return "still running after SIGKILL"
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"stopped by Tether ({name})" if signalled else f"killed by {name}"
