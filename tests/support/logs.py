"""The gateway's log lines as they are made, and a way to wait for one without polling."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import structlog
from structlog.typing import EventDict, WrappedLogger

from tether.gateway.ops import logs


class Lines:
    """Every entry logged while :func:`watched` runs; :meth:`wait_for` awaits one."""

    def __init__(self) -> None:
        self.entries: list[EventDict] = []
        self._new = asyncio.Event()

    def __call__(self, _logger: WrappedLogger, _method: str, entry: EventDict) -> EventDict:
        self.entries.append(entry)
        self._new.set()
        raise structlog.DropEvent

    def named(self, name: str) -> list[dict[str, Any]]:
        return [entry for entry in self.entries if entry["event"] == name]

    async def wait_for(
        self, name: str, where: Callable[[EventDict], bool] = lambda _: True, timeout: float = 10
    ) -> EventDict:
        """The first entry called ``name`` that ``where`` accepts, once it is logged."""
        async with asyncio.timeout(timeout):
            while True:
                found = [e for e in self.entries if e["event"] == name and where(e)]
                if found:
                    return found[0]
                self._new.clear()
                await self._new.wait()


@contextmanager
def watched() -> Iterator[Lines]:
    lines = Lines()
    structlog.configure(processors=[lines])
    try:
        yield lines
    finally:
        logs.configure("info", "json", stream=sys.stderr)
