"""The in-memory store's steps: what ``ctx.step`` memoized, and the steps committed with
memory changes of their own (``commit_step``). A mixin of
:class:`~tether.memory.inmemory.store.MemoryStore`, kept apart so each module stays one
screenful of concern."""

from __future__ import annotations

import time

from tether.memory.records import MemoryChanges


class StepTables:
    """Step results by (event key, step name), over the tables :class:`MemoryStore` owns."""

    _steps: dict[tuple[str, str], str]

    def _check(self) -> None:
        raise NotImplementedError

    def _apply(self, key: str, changes: MemoryChanges, now: float) -> None:
        raise NotImplementedError

    async def step(self, key: str, name: str) -> str | None:
        self._check()
        return self._steps.get((key, name))

    async def save_step(self, key: str, name: str, result: str) -> None:
        self._check()
        self._steps[(key, name)] = result

    async def commit_step(self, key: str, name: str, result: str, changes: MemoryChanges) -> None:
        self._check()
        self._steps[(key, name)] = result  # nothing awaits in between: one transaction
        self._apply(f"{key}/{name}", changes, time.time())

    async def steps(self, key: str) -> dict[str, str]:
        self._check()
        return {name: result for (k, name), result in self._steps.items() if k == key}
