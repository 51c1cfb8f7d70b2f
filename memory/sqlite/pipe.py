"""The pipe to the SQLite writer process: its replies read, its stderr relayed.

The writer (:mod:`tether.memory.sqlite.writer`) answers each batch on stdout as a
length-prefixed message, and reports its own errors on stderr as JSON objects; both are
read here, so the link (:mod:`.link`) deals in batches, not bytes.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog

# Imported as a module, not its names: ``frame`` is looked up at each send (tests record it).
import tether.memory.sqlite.writer as writer_process

log = structlog.get_logger("tether.sqlite")

#: Longest line the writer's stderr relay reads at once.
STDERR_LINE = 1 << 20


async def read_reply(writer: asyncio.subprocess.Process) -> tuple[bool, Any]:
    assert writer.stdout is not None
    header = await writer.stdout.readexactly(writer_process.HEADER.size)
    (size,) = writer_process.HEADER.unpack(header)
    reply: tuple[bool, Any] = writer_process.decode(await writer.stdout.readexactly(size))
    return reply


async def relay_stderr(writer: asyncio.subprocess.Process, label: str) -> None:
    """Log what the writer prints on stderr as this process's own log lines, so the
    stream keeps one format (JSON lines with ``logging.format: json``). The writer
    reports its errors as JSON objects (see the writer's ``report``); anything else
    it prints (the interpreter's own errors) is relayed line by line."""
    assert writer.stderr is not None
    while True:
        try:
            raw = await writer.stderr.readline()
        except ValueError:  # a line longer than the limit: relay what is there
            raw = await writer.stderr.read(STDERR_LINE)
        if not raw:
            return
        line = raw.decode(errors="replace").rstrip()
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if isinstance(entry, dict) and isinstance(entry.get("event"), str):
            log.error(entry.pop("event"), **{**entry, "path": label})
        elif line:
            log.error("store.writer_output", path=label, line=line)
