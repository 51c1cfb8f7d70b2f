"""``tether chat`` answers every line it can store, exactly once, and always reaches EOF.

The console's ingest task used to die at the first failed accept: killing the SQLite
writer lost 2,200 of 3,000 piped lines and left the chat hanging at EOF, and one line
that was not UTF-8 failed its whole batch. These tests pipe real input into a real
``tether chat`` subprocess.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.support.config import make_settings, write_config
from tests.support.gateway import running
from tests.support.processes import TETHER, subprocess_env, writers
from tether.adapters.console import ConsoleAdapter

LINES = 3000
CHUNK = 300
#: After these chunks are written, the writer is killed once some of their answers came.
KILL_AFTER = (1, 3, 5, 7, 8)


async def spawn_chat(tmp_path: Path, **env: str) -> asyncio.subprocess.Process:
    path = write_config(
        tmp_path,
        platforms={"console": {"enabled": True}},
        logging={"format": "json", "file": str(tmp_path / "log")},
    )
    return await asyncio.create_subprocess_exec(
        TETHER, "chat", "-c", str(path),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=subprocess_env(**env),
    )  # fmt: skip


class Answers:
    """The chat's stdout, line by line, with a way to wait for a count."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.lines: list[str] = []
        self._changed = asyncio.Condition()
        self.task = asyncio.create_task(self._read(stream))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        async for line in stream:
            async with self._changed:
                self.lines.append(line.decode().rstrip("\n"))
                self._changed.notify_all()

    async def at_least(self, count: int) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.lines) >= count), 60)


@pytest.mark.crash
@pytest.mark.slow
async def test_killing_the_writer_under_piped_input_loses_and_repeats_nothing(
    tmp_path: Path,
) -> None:
    chat = await spawn_chat(tmp_path)
    assert chat.stdin is not None and chat.stdout is not None
    answers = Answers(chat.stdout)
    sent = [f"line {n:04d}" for n in range(LINES)]
    killed: list[int] = []
    try:
        for chunk in range(LINES // CHUNK):
            lines = sent[chunk * CHUNK : (chunk + 1) * CHUNK]
            chat.stdin.write("".join(line + "\n" for line in lines).encode())
            await chat.stdin.drain()
            if chunk in KILL_AFTER:
                # Some of this chunk is answered, the rest is being accepted and handled.
                await answers.at_least(chunk * CHUNK + 20)
                (pid,) = writers(tmp_path / "tether.db")
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        chat.stdin.close()
        code = await asyncio.wait_for(chat.wait(), 120)
        await answers.task
    finally:
        if chat.returncode is None:
            chat.kill()
            await chat.wait()
    assert chat.stderr is not None
    err = (await chat.stderr.read()).decode()
    assert code == 0, err[-3000:]
    assert len(set(killed)) == len(KILL_AFTER)  # each kill hit a fresh writer
    counts = Counter(answers.lines)
    assert [line for line in sent if counts[line] != 1] == []  # each answered exactly once
    assert len(answers.lines) == LINES
    assert err == ""


@pytest.mark.slow
@pytest.mark.parametrize("errors", ["strict", "surrogateescape"])
async def test_a_line_that_is_not_utf8_gets_a_notice_and_the_rest_are_answered(
    tmp_path: Path, errors: str
) -> None:
    """Whatever error handler Python's stdin has, only the bad line is turned away."""
    chat = await spawn_chat(tmp_path, PYTHONIOENCODING=f"utf-8:{errors}")
    data = b"first\nsecond has \xff in it\n\xed\xa0\x80 a lone surrogate, encoded\nfourth\n"
    try:
        out, err = await asyncio.wait_for(chat.communicate(data), 60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            chat.kill()
    assert chat.returncode == 0, err.decode(errors="replace")[-3000:]
    assert out.decode().splitlines() == ["first", "fourth"]
    assert err.decode().splitlines() == [
        "tether: line 2 was not sent: it is not valid UTF-8 (byte 0xff at position 11)",
        "tether: line 3 was not sent: it is not valid UTF-8 (byte 0xed at position 0)",
    ]
    logged = (tmp_path / "log").read_text()
    assert logged.count('"console.rejected"') == 2


async def test_at_eof_an_accepted_event_that_no_lane_knows_is_answered(tmp_path: Path) -> None:
    """What a writer killed between its commit and its answer leaves behind: the event is
    in the store, ``received``; the console's retried accept found it a duplicate, so
    nothing put it in a lane. ``tether chat`` drains with ``ingress_done`` at EOF."""
    settings = make_settings(tmp_path, pipeline={"sweep_interval": 3600})
    async with running(settings) as (gateway, loop):
        event = loop.event("committed, never answered")
        await gateway.store.accept([(event, event.session("per_user"))])
        await gateway.drain(ingress_done=True)
        assert [delivery.message.text for delivery in loop.sent] == [event.text]


async def test_a_store_that_stays_down_turns_the_lines_away_and_eof_is_reached(
    tmp_path: Path,
) -> None:
    async with running(make_settings(tmp_path)) as (gateway, _loop):
        stdout, stderr = io.StringIO(), io.StringIO()
        console = ConsoleAdapter(stdin=io.StringIO("one\n\ntwo\n"), stdout=stdout, stderr=stderr)
        console.accept_attempts, console.accept_backoff = 3, (0.001, 0.002)
        await gateway.store.close()  # every accept fails from here on
        await console.start(gateway.inbox)
        try:
            await asyncio.wait_for(console.eof.wait(), 30)
        finally:
            await console.stop()
    assert stdout.getvalue() == ""
    # One notice per batch the reader thread happened to hand over: "lines 1, 3" or two.
    notices = stderr.getvalue().splitlines()
    why = " not sent: the store failed 3 times (RuntimeError: store is closed)"
    assert notices in (
        [f"tether: lines 1, 3 were{why}"],
        [f"tether: line 1 was{why}", f"tether: line 3 was{why}"],
    )
