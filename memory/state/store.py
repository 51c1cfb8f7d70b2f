"""``handler_state(scope, name, value, updated)``: one row per key of a chat's or a
person's handler state, written by checkpoints
(:func:`tether.memory.sql.statements.state_statements`)."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

_READ = "SELECT name, value FROM handler_state WHERE scope = ?"

#: (scope, key, JSON value or None: removed), as :class:`~.data.ScopedData` lists them.
Change = tuple[str, str, str | None]


class StateStore(Protocol):
    @abc.abstractmethod
    async def handler_state(self, scope: str) -> dict[str, str]:
        """The committed keys of ``scope`` and their JSON values."""


class SqlState:
    """:class:`StateStore` on both SQL stores."""

    if TYPE_CHECKING:

        async def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Any]: ...

    async def handler_state(self, scope: str) -> dict[str, str]:
        return {str(name): str(value) for name, value in await self._rows(_READ, (scope,))}


class MemoryState:
    """:class:`StateStore` in memory: a dict of dicts, applied by the store's checkpoint."""

    def _state_rows(self) -> dict[str, dict[str, str]]:
        if not hasattr(self, "_handler_state"):
            self._handler_state: dict[str, dict[str, str]] = {}
        return self._handler_state

    async def handler_state(self, scope: str) -> dict[str, str]:
        return dict(self._state_rows().get(scope, {}))

    def _apply_state(self, changes: Sequence[Change]) -> None:
        rows = self._state_rows()
        for scope, name, value in changes:
            if value is None:
                rows.get(scope, {}).pop(name, None)
            else:
                rows.setdefault(scope, {})[name] = value
