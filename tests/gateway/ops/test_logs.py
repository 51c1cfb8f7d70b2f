"""The log sink: one write per loop turn, nothing lost or reordered."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import threading

import pytest
import structlog

from tether.gateway.ops import logs


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)

    def events(self) -> list[str]:
        return [json.loads(line)["event"] for line in self.getvalue().splitlines()]


async def test_a_loop_turn_is_written_once_and_in_order() -> None:
    out = CountingStream()
    logs.configure("info", "json", stream=out)
    log = structlog.get_logger("t")
    for n in range(3):
        log.info(f"line.{n}")
    assert out.getvalue() == ""  # waiting for the end of this turn
    await asyncio.sleep(0)
    assert out.events() == ["line.0", "line.1", "line.2"]
    assert out.writes == 1


async def test_warnings_and_other_threads_write_at_once_after_what_waits() -> None:
    out = CountingStream()
    logs.configure("info", "json", stream=out)
    log = structlog.get_logger("t")
    log.info("first")
    log.warning("second")
    assert out.events() == ["first", "second"]
    log.info("third")
    thread = threading.Thread(target=lambda: log.info("fourth"))
    thread.start()
    thread.join()
    assert out.events() == ["first", "second", "third", "fourth"]


async def test_a_full_buffer_is_written_without_waiting_for_the_turn() -> None:
    out = CountingStream()
    logs.configure("info", "json", stream=out)
    log = structlog.get_logger("t")
    for n in range(logs.LineSink.max_waiting):
        log.info("line", n=n)
    assert len(out.getvalue().splitlines()) == logs.LineSink.max_waiting


@pytest.mark.slow
def test_lines_still_waiting_when_the_loop_dies_are_written_at_exit() -> None:
    script = """
import asyncio, structlog
from tether.gateway.ops import logs
logs.configure("info", "json")
async def main():
    structlog.get_logger().info("last.words")
    asyncio.get_running_loop().stop()  # the turn never ends: nothing flushes it
loop = asyncio.new_event_loop()
loop.create_task(main())
loop.run_forever()
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert [json.loads(line)["event"] for line in done.stderr.splitlines()] == ["last.words"]


def test_timestamps_are_iso_utc_with_microseconds_across_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter([1_800_000_000.25, 1_800_000_000.5, 1_800_000_001.000042])
    monkeypatch.setattr(logs.time, "time", lambda: next(clock))
    stamps = [logs._timestamp(None, "info", {})["timestamp"] for _ in range(3)]
    assert stamps == [
        "2027-01-15T08:00:00.250000Z",
        "2027-01-15T08:00:00.500000Z",
        "2027-01-15T08:00:01.000042Z",
    ]
