"""The dict a turn sees of one scope's handler state, and the keys it changed."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from tether.errors import Fatal

#: The longest value a key may hold, as JSON (a state row is read at every turn that
#: asks for it; a file belongs in a blob, a history in the memory).
MAX_VALUE = 64 * 1024


def chat_scope(conversation: str) -> str:
    return f"chat:{conversation}"


def user_scope(identity: str) -> str:
    return f"user:{identity}"


class ScopedData:
    """What was committed for ``scope`` when the turn first asked, and the dict the
    handler changes (:attr:`data`)."""

    def __init__(self, scope: str, committed: Mapping[str, str]) -> None:
        self.scope = scope
        self._committed = dict(committed)
        self.data: dict[str, Any] = {name: json.loads(raw) for name, raw in committed.items()}

    def changed(self) -> list[tuple[str, str, str | None]]:
        """(scope, key, JSON value, or None for a removed key) of every key whose value
        differs from the committed one. A value that is not JSON, or is too large, is a
        handler's bug: the event ends with the key named, rather than retrying it."""
        out: list[tuple[str, str, str | None]] = []
        for name, value in self.data.items():
            if not isinstance(name, str):
                raise Fatal(f"{self.scope}: state keys are strings, not {type(name).__name__}")
            try:
                raw = json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise Fatal(f"{self.scope}[{name!r}]: not a JSON value ({exc})") from None
            if len(raw) > MAX_VALUE:
                raise Fatal(f"{self.scope}[{name!r}]: {len(raw)} bytes, at most {MAX_VALUE}")
            before = self._committed.get(name)
            if before is None or _canonical(before) != raw:
                out.append((self.scope, name, raw))
        out += [(self.scope, name, None) for name in self._committed if name not in self.data]
        return out

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self.data)


def _canonical(raw: str) -> str:
    return json.dumps(json.loads(raw), ensure_ascii=False, sort_keys=True, allow_nan=False)
